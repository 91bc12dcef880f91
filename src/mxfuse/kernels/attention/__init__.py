"""Split-KV multi-query decode attention where one cached vector is both key and value (K = V).

``q`` [T, H, D] bf16 (T = B * S: S new tokens of each of B sequences, sequence-major), the cache ``kv``
[B, capacity, D] bf16 and ``lens`` [B] (tokens each sequence held before its S new ones, which are already
in the cache at ``lens[b] .. lens[b] + S - 1``). Row ``s * H + h`` of sequence b (new token s, head h)
attends to cache positions ``0 .. lens[b] + s``. Output [T, H * D] bf16.

Two launches:
  * ``_mqa_split_kernel``, grid (B, SPLITS, row blocks x D parts): program (b, j) owns keys
    ``[j * chunk, (j + 1) * chunk)`` of sequence b, where ``chunk`` is ``lens[b] + S`` split SPLITS ways,
    rounded up to whole BLOCK_N tiles and at least MIN_TILES of them, so the work follows each sequence's
    length, not the capacity (splits past the end write nothing). Every head of the S new tokens sits in the MMA's M
    dimension (up to BLOCK_M rows a program), so a KV tile is loaded once and feeds both dots:
    ``scores = q @ kv^T`` and ``acc += p @ kv``. With D_PARTS = 2 a program accumulates half of the output
    dims (it still scores with the whole vector; the half it multiplies is re-read from L1), halving the
    accumulator's registers. Online softmax in base 2 with fp32 state; partials (max, sum, acc) in fp32.
  * ``_mqa_combine_kernel``: per row, the partials of the splits are merged in split order, in fp32, and
    divided once: a fixed order, so the result is the same bits on every run.
Masked keys are never read (masked loads), so whatever the cache holds past a sequence's tokens, NaN
included, reaches no output; a NaN inside a sequence's visible tokens reaches that sequence's rows only.

Lengths are clamped in the kernels to [0, capacity - S], so a bad length cannot read outside the cache;
the entry point (``mxfuse.attention``) checks them where that needs no device synchronisation.
"""

from __future__ import annotations

import torch
import triton

from mxfuse.formats import MxTensor
from mxfuse.kernels.attention.configs import MqaConfig, choose_mqa_config
from mxfuse.kernels.attention.device import mqa_combine_kernel, mqa_split_kernel
from mxfuse.kernels.mxfp8 import mx_target
from mxfuse.kernels.pdl import OFF, pdl_policy

__all__ = ["MqaConfig", "choose_mqa_config", "launch_mqa_decode", "mqa_partials_numel"]

_LOG2E = 1.4426950408889634


def mqa_partials_numel(sequences: int, rows: int, head_dim: int, splits: int) -> tuple[int, int]:
    """fp32 elements of the accumulator partials and of the (max, sum) partials."""
    return sequences * splits * rows * head_dim, sequences * splits * 2 * rows


def launch_mqa_decode(
    q: torch.Tensor,
    kv: torch.Tensor,
    lens: torch.Tensor,
    *,
    partials: tuple[torch.Tensor, torch.Tensor],
    scale: float,
    config: MqaConfig,
    out: torch.Tensor | None = None,
    pair: MxTensor | None = None,
    fp32_dots: bool = False,
    hw_cvt: bool = True,
) -> None:
    """Run both kernels into bf16 ``out`` [T, H * D] and/or ``pair``, a ``[T, H * D]`` MxTensor the
    combine writes (its layout, padding rows and rounding say how; its codes are stored as uint8
    without ``hw_cvt``; it needs ``config.splits > 1`` and D a multiple of 128). Arguments are validated
    by ``mxfuse.attention``; ``partials`` ``(acc, ml)`` hold at least ``mqa_partials_numel`` fp32
    elements. ``config.pdl`` launches the combine as a programmatic dependent of the split kernel
    (sm_90+), which lets it launch once every split program has finished its loop. ``fp32_dots``: both
    dots on fp32 copies of the same bf16 operands (P still rounded to bf16), for the Triton interpreter,
    whose bf16 dot does not compute bf16 products."""
    if out is None and pair is None:
        raise ValueError("out or pair must be given")
    acc, ml = partials
    codes, scales, layout_code, rows_padded, floor = (None, None, 1, 0, False)
    if pair is not None:
        codes, scales, layout_code, rows_padded, floor = mx_target(pair, hw_cvt=hw_cvt)
    write_y = out is not None
    if out is None:
        out = pair.data.view(torch.uint8)  # the kernels' out argument, neither read nor written as bf16
    tokens, heads, dim = q.shape
    sequences, capacity, _ = kv.shape
    new = tokens // sequences
    rows = new * heads
    cfg = config
    policy = OFF if fp32_dots else pdl_policy(q.device)
    combine_signal = not fp32_dots and pdl_policy(q.device, kernel="attention.combine").signal
    use_pdl = (cfg.pdl or policy.wait) and not fp32_dots
    block_d = triton.next_power_of_2(dim)
    mqa_split_kernel[(sequences, cfg.splits, triton.cdiv(rows, cfg.block_m) * cfg.d_parts)](
        q,
        kv,
        lens,
        acc,
        ml,
        out,
        new,
        heads,
        capacity,
        cfg.splits,
        float(scale) * _LOG2E,
        out.stride(0),
        q.stride(0),
        q.stride(1),
        kv.stride(0),
        kv.stride(1),
        D=dim,
        BLOCK_D=block_d,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        D_PARTS=cfg.d_parts,
        MIN_TILES=cfg.min_tiles,
        DIRECT=cfg.splits == 1,
        USE_PDL=use_pdl,
        FP32_DOTS=fp32_dots,
        PDL_WAIT=policy.wait,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **({"launch_pdl": True} if policy.wait else {}),
    )
    if cfg.splits == 1:
        if pair is not None:
            raise ValueError("a pair is written by the combine: config.splits must be > 1")
        return
    if pair is not None and dim % 128:
        raise ValueError(f"the pair needs head_dim a multiple of 128; got {dim}")
    # One combine program per (row, 128 output dims): 256 programs at T = 1, each with every split's
    # partial of its slice in flight at once (a loop over splits one load at a time took 20 us there).
    block_dc = min(block_d, 128)
    split_chunk = min(64, triton.next_power_of_2(cfg.splits))
    mqa_combine_kernel[(sequences, rows, triton.cdiv(dim, block_dc))](
        acc,
        ml,
        lens,
        out,
        out if pair is None else codes,
        out if pair is None else scales,
        new,
        heads,
        capacity,
        cfg.splits,
        out.stride(0),
        tokens,
        rows_padded,
        D=dim,
        BLOCK_DC=block_dc,
        SPLIT_CHUNK=split_chunk,
        BLOCK_N=cfg.block_n,
        MIN_TILES=cfg.min_tiles,
        USE_PDL=use_pdl,
        ONE_PASS=cfg.splits <= split_chunk,
        WRITE_Y=write_y or pair is None,
        WRITE_PAIR=pair is not None,
        FLOOR=floor,
        LAYOUT=layout_code,
        HW_CVT=hw_cvt,
        PDL_SIGNAL=combine_signal,
        num_warps=4,
        **({"launch_pdl": True} if use_pdl else {}),
    )
