"""Operands for the grouped wo_a tests, and an independent float64 formulation of the projection.

``exact_case`` draws operands whose every product and partial sum is exact in fp32 (and float64), so two
correct implementations agree bit for bit whatever their summation order: E4M3 elements in [1, 4) (and
0), multiples of 2**-3, under scales 2**-2..2**1 (activations) and 2**-3..2**0 (weights). A product is a
multiple of 2**-11 below 2**5, so up to r = 128 products sum below 2**12: 23 bits. With
``subnormals=True`` the activations also take E4M3 subnormal codes (m * 2**-9) and every scale is 2**0:
products are multiples of 2**-12 below 2**4, 22 bits for r = 128.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from mxfuse.einsum import WoAWeight, prepare_wo_a_weight
from mxfuse.formats import quantize_mxfp8_reference, scale_to_layout

__all__ = ["Case", "exact_case", "gaussian_case", "numpy_wo_a", "to_bf16_bits"]

# E4M3 codes of 0 and +-1.mmm * 2**e for e in {0, 1}: exponent fields 7 and 8.
_EXACT_CODES = np.array(
    [0x00] + [(e << 3) | m | sign for e in (7, 8) for m in range(8) for sign in (0, 0x80)], dtype=np.uint8
)
_SUBNORMAL_CODES = np.array([m | sign for m in range(1, 8) for sign in (0, 0x80)], dtype=np.uint8)


class Case:
    """Operands as raw bytes (``a_codes`` [T, G*r], ``a_scale`` [T, G*r/32], ``w_codes`` [G, R, r],
    ``w_scale`` [G, R, r/32], all uint8 numpy) and as mxfuse objects (``pair(layout)``, ``weight``)."""

    def __init__(self, a_codes: np.ndarray, a_scale: np.ndarray, w_codes: np.ndarray, w_scale: np.ndarray):
        self.a_codes, self.a_scale, self.w_codes, self.w_scale = a_codes, a_scale, w_codes, w_scale
        self.weight: WoAWeight = prepare_wo_a_weight(
            torch.from_numpy(w_codes.copy()).view(torch.float8_e4m3fn), torch.from_numpy(w_scale.copy())
        )

    def pair(self, layout: str, *, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The activation pair, its scales laid out on ``device`` (moving a padded layout with ``.to``
        would not keep its strides)."""
        q = torch.from_numpy(self.a_codes.copy()).view(torch.float8_e4m3fn).to(device)
        return q, scale_to_layout(torch.from_numpy(self.a_scale.copy()).to(device), scale_layout=layout)


def exact_case(t: int, groups: int, k: int, n: int, *, seed: int, subnormals: bool = False) -> Case:
    """Operands whose projection is exact in fp32 (see the module docstring); needs k <= 128."""
    if k > 128:
        raise ValueError(f"exact operands need r <= 128; got {k}")
    rng = np.random.default_rng(seed)
    codes = np.concatenate([_EXACT_CODES, _SUBNORMAL_CODES]) if subnormals else _EXACT_CODES
    a_codes = rng.choice(codes, size=(t, groups * k))
    a_scale = rng.integers(125, 129, size=(t, groups * k // 32), dtype=np.uint8)
    w_codes = rng.choice(_EXACT_CODES, size=(groups, n, k))
    w_scale = rng.integers(124, 128, size=(groups, n, k // 32), dtype=np.uint8)
    if subnormals:
        a_scale[:] = 127
        w_scale[:] = 127
    return Case(a_codes, a_scale, w_codes, w_scale)


def gaussian_case(t: int, groups: int, k: int, n: int, *, seed: int, exps: tuple[int, int] = (-8, 8)) -> Case:
    """Gaussian operands, each 32-block at its own power-of-two magnitude, quantized by the reference."""
    g = torch.Generator().manual_seed(seed)

    def draw(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        mag = torch.exp2(torch.randint(*exps, (rows, cols // 32, 1), generator=g).float())
        x = (torch.randn(rows, cols // 32, 32, generator=g) * mag).reshape(rows, cols).bfloat16()
        q, s = quantize_mxfp8_reference(x, scale_layout="e8m0")
        return q.view(torch.uint8).numpy(), s.numpy()

    a_codes, a_scale = draw(t, groups * k)
    w_codes, w_scale = draw(groups * n, k)
    return Case(a_codes, a_scale, w_codes.reshape(groups, n, k), w_scale.reshape(groups, n, k // 32))


def _decode(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float64 values of E4M3 codes under row-major E8M0 bytes (0xFF: NaN), one byte per 32 elements."""
    values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    factors = np.where(scale == 0xFF, np.nan, np.ldexp(1.0, scale.astype(np.int64) - 127))
    return values * np.repeat(factors, 32, axis=-1)


def numpy_wo_a(case: Case) -> np.ndarray:
    """float64 ``z`` [T, G, R]: ``z[t, g, d] = sum_k a[t, g*r + k] * w[g, d, k]``, one product at a time."""
    groups, n, k = case.w_codes.shape
    t = case.a_codes.shape[0]
    a = _decode(case.a_codes, case.a_scale).reshape(t, groups, k)
    w = _decode(case.w_codes, case.w_scale)
    z = np.zeros((t, groups, n))
    for j in range(k):  # explicit loop: no BLAS, no reassociation beyond float64's own rounding
        z += a[:, :, None, j] * w[None, :, :, j]
    return z


def to_bf16_bits(z: np.ndarray) -> torch.Tensor:
    """bf16 (round to nearest even, straight from float64) of ``z``, as a torch bf16 tensor."""
    return torch.from_numpy(z.astype(ml_dtypes.bfloat16).view(np.int16)).view(torch.bfloat16)
