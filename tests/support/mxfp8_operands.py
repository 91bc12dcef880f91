"""MXFP8 operands that expose flushed subnormals and misapplied scales (CPU, interpreter and GPU tests).

Random E4M3 codes hold almost no subnormals (43 in 458,752 in the GEMM tests), and the ones they hold sit
under a block maximum 2**15 times larger, so a kernel that flushes every subnormal passes any check.
These operands put subnormal products where they decide outputs:

* ``checkpoint_weight``: a native 32x32-block weight (the DeepSeek-V4.1 format: one scale per 32 rows
  x 32 K) whose rows differ in magnitude inside a block (log-uniform over 2**-14..1, as rows of a real
  weight do). Quantized with the block's one RCEIL scale, the small rows are E4M3 subnormal codes (about
  one code in eight) and their output columns are made of subnormal products alone.
* ``activation_rows``: rows of kinds ``ROW_KINDS``: gaussian (blocks at their own magnitudes, RCEIL),
  ``subnormal`` (every code subnormal, under scales that make them weigh like the gaussian rows),
  ``zero`` (codes 0 under scale byte 0) and ``tiny`` (gaussian at 2**-60: scale bytes near 60, products
  with the smallest weight rows still far above fp32's subnormals). Extreme scale bytes (0, 1, 253, 254) need a weight paired with them to keep
  products finite and normal; the GEMM tests pair them so (``test_extreme_scale_bytes_...``).

Codes and scale bytes are made with plain torch arithmetic from the documented rules, not ``mxfuse``.
"""

from __future__ import annotations

import torch

__all__ = [
    "ROW_KINDS",
    "SUBNORMAL_CODES",
    "activation_rows",
    "checkpoint_weight",
    "expand_32x32",
    "is_subnormal",
    "with_subnormals_flushed",
]

ROW_KINDS = ("gaussian", "subnormal", "zero", "tiny")
# E4M3 codes with exponent field 0 and a non-zero mantissa: +-m * 2**-9, m = 1..7.
SUBNORMAL_CODES = tuple(m | sign for m in range(1, 8) for sign in (0, 0x80))


def is_subnormal(codes: torch.Tensor) -> torch.Tensor:
    bits = codes.view(torch.uint8)
    return ((bits & 0x78) == 0) & ((bits & 0x07) != 0)


def with_subnormals_flushed(codes: torch.Tensor) -> torch.Tensor:
    """The codes a kernel that flushes E4M3 subnormals to zero would read (sign kept: -0 stays -0)."""
    bits = codes.view(torch.uint8)
    return torch.where(is_subnormal(codes), bits & 0x80, bits).view(torch.float8_e4m3fn)


def _rceil_bytes(amax: torch.Tensor) -> torch.Tensor:
    """int32 E8M0 bytes by the RCEIL rule: the exponent of fp32(amax / 448), plus one if it has a mantissa."""
    bits = (amax / torch.full_like(amax, 448.0)).view(torch.int32)
    s = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.where(amax == 0, 0, s.clamp(0, 254))


def _codes_under(values: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """E4M3 codes of ``values`` under per-element scale bytes (a cast rounds to nearest even)."""
    return (values / torch.exp2(scale_bytes.float() - 127.0)).clamp(-448, 448).to(torch.float8_e4m3fn)


def checkpoint_weight(n: int, k: int, *, seed: int, device: str | torch.device = "cpu"):
    """``(float8_e4m3fn [n, k], uint8 scales [ceil(n/32), k/32])``: one RCEIL scale per 32x32 block."""
    g = torch.Generator().manual_seed(seed)
    row_magnitude = torch.exp2(-14.0 * torch.rand(n, 1, generator=g))
    values = torch.randn(n, k, generator=g) * row_magnitude
    blocks_n = -(-n // 32)
    padded = torch.zeros(blocks_n * 32, k)
    padded[:n] = values
    amax = padded.abs().view(blocks_n, 32, k // 32, 32).amax(dim=(1, 3))
    scale = _rceil_bytes(amax)
    q = _codes_under(values, expand_32x32(scale, n))
    return q.to(device), scale.to(torch.uint8).to(device)


def expand_32x32(scale: torch.Tensor, n: int) -> torch.Tensor:
    """Per-block scales ``[ceil(n/32), G]`` -> one per row and 32 K ``[n, G]``, then per element ``[n, 32G]``."""
    return scale.repeat_interleave(32, dim=0)[:n].repeat_interleave(32, dim=1)


def activation_rows(kinds: list[str], k: int, *, seed: int, device: str | torch.device = "cpu"):
    """``(float8_e4m3fn [len(kinds), k], uint8 scales [len(kinds), k/32])``, one row per kind."""
    g = torch.Generator().manual_seed(seed)
    groups = k // 32
    codes = torch.zeros(len(kinds), k, dtype=torch.uint8)
    scale = torch.zeros(len(kinds), groups, dtype=torch.int32)
    for row, kind in enumerate(kinds):
        if kind in ("gaussian", "tiny"):
            magnitude = torch.exp2(torch.randint(-4, 5, (groups, 1), generator=g).float())
            if kind == "tiny":
                magnitude = magnitude * 2.0**-60
            values = (torch.randn(groups, 32, generator=g) * magnitude).reshape(k)
            s = _rceil_bytes(values.view(groups, 32).abs().amax(-1))
            scale[row] = s
            codes[row] = _codes_under(values, s.repeat_interleave(32)).view(torch.uint8)
        elif kind == "subnormal":
            pick = torch.randint(0, len(SUBNORMAL_CODES), (k,), generator=g)
            codes[row] = torch.tensor(SUBNORMAL_CODES, dtype=torch.uint8)[pick]
            scale[row] = torch.randint(132, 140, (groups,), generator=g)  # m * 2**-9 * 2**5..12
        elif kind != "zero":
            raise ValueError(f"kind must be one of {ROW_KINDS}; got {kind!r}")
    return codes.view(torch.float8_e4m3fn).to(device), scale.to(torch.uint8).to(device)
