"""The quantize kernel's launcher on validated tensors, and its block configuration."""

from __future__ import annotations

import torch
import triton

from mxfuse.formats import BLOCK_SIZE, MxTensor
from mxfuse.kernels.mxfp8 import mx_target
from mxfuse.kernels.pdl import OFF, pdl_policy
from mxfuse.kernels.quantize.device import quantize_mxfp8_kernel

__all__ = ["block_config", "launch_quantize"]

_COLS_PER_WORD = 4 * BLOCK_SIZE  # 128 elements share one packed int32 scale word


def block_config(rows: int, n_words: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_W, num_warps) for ``rows`` (padded) x ``128 * n_words`` elements.

    Chosen by sweep on an H200, K = 7168, deepgemm scales (benchmarks/NOTES-quantize.md): one scale word
    (128 columns) per program along K beat two or four at every M; large M: 16 rows, 2 warps (84.6 us at
    16384 rows against 85.3 for 16 x 2 words, 4 warps; copy ceiling 84.8); up to 128 rows: 4 rows, 1 warp
    (2.79 us at 128 rows against 2.91, 1.44 against 1.64 at 16), more programs for a latency-bound launch.
    """
    del n_words  # one word per program at every width swept (K = 32 to 7168)
    if rows <= 128:
        return min(4, triton.next_power_of_2(max(rows, 1))), 1, 1
    return 16, 1, 2


def launch_quantize(
    x: torch.Tensor, out: MxTensor, *, hw_cvt: bool, config: tuple[int, int, int] | None = None
) -> None:
    """Run the kernel over ``x`` into ``out`` (scales in its layout, chosen by its rounding), both
    already validated.

    ``hw_cvt=False`` selects the integer E4M3 rounding, the path the Triton interpreter (CPU tensors,
    TRITON_INTERPRET=1) runs bit-exactly; the GPU tests check both paths. ``config`` overrides
    ``block_config`` (benchmarks sweep it).
    """
    m, k = x.shape
    n_words = -(-k // _COLS_PER_WORD)
    codes, s_flat, layout_code, rows_padded, floor = mx_target(out, hw_cvt=hw_cvt)
    block_m, block_w, num_warps = config or block_config(rows_padded, n_words)
    n_word_blocks = triton.cdiv(n_words, block_w)
    grid = (triton.cdiv(rows_padded, block_m) * n_word_blocks,)
    pdl = pdl_policy(x.device) if hw_cvt else OFF
    quantize_mxfp8_kernel[grid](
        x,
        codes,
        s_flat,
        m,
        k,
        x.stride(0),
        rows_padded,
        n_words,
        n_word_blocks,
        FLOOR=floor,
        HW_CVT=hw_cvt,
        LAYOUT=layout_code,
        BLOCK_M=block_m,
        BLOCK_W=block_w,
        PDL_WAIT=pdl.wait,
        PDL_SIGNAL=pdl.signal,
        num_warps=num_warps,
        **({"launch_pdl": True} if pdl.wait else {}),
    )
