"""The folded-scale MXFP8 GEMM: 16-bit tensor-core dots with no promotion inside the K loop.

``out[M, N] = deq(a) @ deq(w).T`` for E4M3 ``a [M, K]`` (scales in any of the three layouts) and a
prepared E4M3 weight ``w [N, K]`` (scales K-group-major ``[K/32, N]``). Every power-of-two scale is
folded into its operand as it becomes fp16 or bf16, relative to references fixed for a program's whole
K range; one fp32 accumulator takes every dot and is scaled once after the loop
(``fold_steps.fold_mainloop``, which also holds the exactness argument and the exact path for
scale bytes outside the window). With ``act="prefold"`` a first launch (``fold_activation_kernel``)
writes the activation's folded 16-bit copy and per-row references into a cached workspace, and the GEMM
reads it. Numerics: exact products, fp32 accumulation by the tensor core in K order within a program,
split-K partials summed in split order (``mxfuse.kernels.splitk``): bitwise repeatable, no float atomics.

Regime choices (tile, operand order, 16-bit type, conversion, where the scales go, split-K, PDL): every
one is a candidate pending measurement; ``benchmarks/mxfp8_gemm_sweep.py`` times them on the GPU and
writes the winners into the launcher's table (``configs.json``, ``configs``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.fold_steps import fold_activation_row, fold_mainloop
from mxfuse.kernels.splitk.device import finish_tile

__all__ = ["fold_activation_kernel", "mxfp8_fold_kernel"]


@triton.jit(do_not_specialize=["M", "rows4", "n_k4", "SPLIT_K"])
def mxfp8_fold_kernel(
    a_ptr,  # E4M3 [M, K] contiguous (uint8 codes with CVT_BITS)
    as_ptr,  # uint8 view of a's scale storage
    w_ptr,  # E4M3 [N, K] contiguous (uint8 codes with CVT_BITS)
    ws_ptr,  # uint8 [K/32, N]
    p_ptr,  # ACT_PREFOLD: a's folded 16-bit copy [M, K]
    pref_ptr,  # ACT_PREFOLD: int32 [M] reference bytes (-1: the row does not fold)
    out_ptr,  # bf16 [M, N]
    work_ptr,  # fp32 split-K partials
    cnt_ptr,  # int32 arrival counters, one per output tile
    path_ptr,  # PATH_LOG: int32 per (tile, split): 1 where the folded loop's result was kept, 0 exact path
    M,
    N,
    K,
    rows4,
    n_k4,
    SPLIT_K,  # a run-time value: one compiled kernel serves every split
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,
    SWAP_AB: tl.constexpr,
    OP: tl.constexpr,
    CVT: tl.constexpr,
    ACT: tl.constexpr,
    WSCALE: tl.constexpr,
    W_BIAS: tl.constexpr,
    EVEN: tl.constexpr,
    PDL: tl.constexpr,
    PATH_LOG: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    if PDL:
        # Launched before the previous kernel finished: wait until its writes (our activation, the
        # split counters it reset) are visible, then let the next launch start its own prologue.
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    n_groups = K // 32
    steps_per_split = tl.cdiv(tl.cdiv(n_groups, BLOCK_G), SPLIT_K)
    g_begin = pid_k * steps_per_split * BLOCK_G
    g_end = tl.minimum(g_begin + steps_per_split * BLOCK_G, n_groups)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc, folded = fold_mainloop(
        a_ptr + rows[:, None].to(tl.int64) * K,
        w_ptr + cols[:, None].to(tl.int64) * K,
        as_ptr,
        ws_ptr,
        p_ptr + rows[:, None].to(tl.int64) * K,
        pref_ptr,
        rows,
        cols,
        rows < M,
        cols < N,
        g_begin,
        g_end,
        0,
        n_groups,
        rows4,
        n_k4,
        N,
        A_LAYOUT,
        SWAP_AB,
        BLOCK_M,
        BLOCK_N,
        BLOCK_G,
        OP,
        CVT,
        ACT,
        WSCALE,
        W_BIAS,
        EVEN,
        NUM_STAGES,
    )
    if SWAP_AB:
        acc = tl.trans(acc)
    tile_id = pid_m * tl.num_programs(0) + pid_n
    if PATH_LOG:
        tl.store(path_ptr + tile_id * SPLIT_K + pid_k, folded.to(tl.int32))
    finish_tile(acc, out_ptr, work_ptr, cnt_ptr, rows, cols, M, N, tile_id, pid_k, BLOCK_M, BLOCK_N, SPLIT_K)


@triton.jit(do_not_specialize=["rows4", "n_k4"])
def fold_activation_kernel(
    a_ptr,  # uint8 codes [T, stride_a] (a group's slice starts at column a_group0 * 32)
    as_ptr,
    p_ptr,  # 16-bit [T, stride_a]
    pref_ptr,  # int32 [n_slices, T]
    stride_a,
    n_groups,  # groups per slice
    a_n_groups,  # groups per row of a's scale storage
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    OP: tl.constexpr,
    CHUNK_G: tl.constexpr,
):
    """One program per (row, slice): ``fold_activation_row`` on that slice of the row."""
    row = tl.program_id(0)
    sl = tl.program_id(1)
    base = row.to(tl.int64) * stride_a + sl * n_groups * 32
    ref = fold_activation_row(
        a_ptr + base, as_ptr, p_ptr + base, row, n_groups, sl * n_groups, a_n_groups, rows4, n_k4,
        A_LAYOUT, OP, CHUNK_G,
    )  # fmt: skip
    tl.store(pref_ptr + sl * tl.num_programs(0) + row, ref)
