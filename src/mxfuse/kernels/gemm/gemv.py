"""The MXFP8 GEMM's decode GEMV kernel (``kind="gemv"``; device code): each thread streams 16 weight bytes
of one row per chunk and converts the activation once per row. Kept for configurations that name it;
the stream kernel (``mxfuse.kernels.gemm.stream``) converts the activation once for several rows."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.decode import act_scale_offsets, e4m3_moved_bits_to_f32, e8m0_to_f32
from mxfuse.kernels.splitk.device import split_arrive, split_release, split_sum

__all__ = ["mxfp8_gemv_kernel"]


@triton.jit
def _gemv_row(
    acc,
    w3,
    a_ptr,
    as_ptr,
    row,
    koff3,
    k_ok3,
    k_ok,
    grp,
    fw,
    M,
    n_groups,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BITS: tl.constexpr,
):
    """acc [BN, C] += the 16-wide partial dots of activation row ``row`` with the weight tile ``w3``."""
    ok = row < M
    # The activation is read through a [BN, C, 16] pointer (stride 0 along N): the same layout as the
    # weight tile, so the product needs no layout conversion; the repeated bytes are L1 broadcasts.
    a3 = tl.load(a_ptr + row * n_groups * 32 + koff3, mask=k_ok3 & ok, other=0.0)
    sa = tl.load(
        as_ptr + act_scale_offsets(row, grp, n_groups, rows4, n_k4, A_LAYOUT), mask=k_ok & ok, other=0
    )
    if BITS:
        # w3 holds weights * 2**-120; the activation side is exact fp32, so products stay exact (E4M3
        # products are multiples of 2**-138 here) and the group sum is scaled back by 2**120.
        a3 = e4m3_moved_bits_to_f32(a3) * 1.329227995784916e36  # 2**120
        part = tl.sum(w3 * a3, axis=2) * 1.329227995784916e36
    else:
        part = tl.sum(w3 * a3.to(tl.float32), axis=2)  # in-thread: each thread holds 16 consecutive elements
    return acc + part * (fw * e8m0_to_f32(sa.to(tl.int32))[None, :])


@triton.jit
def _store_row(acc, out_ptr, ws_row_ptr, row, cols, M, N, SPLIT_K: tl.constexpr):
    total = tl.sum(acc, axis=1)  # [BN]: the one cross-thread reduction, after the K loop
    if SPLIT_K == 1:
        tl.store(out_ptr + row * N + cols, total.to(tl.bfloat16), mask=(cols < N) & (row < M))
    else:
        tl.store(ws_row_ptr, total)


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def mxfp8_gemv_kernel(
    a_ptr,  # E4M3 [M, K] contiguous
    as_ptr,  # uint8 view of a's scale storage
    w_ptr,  # E4M3 [N, K] contiguous
    ws_ptr,  # uint8 [K/32, N] contiguous
    out_ptr,  # bf16 [M, N] contiguous
    work_ptr,  # fp32 split-K partials
    cnt_ptr,  # int32 arrival counters, one per output tile
    M,
    N,
    K,
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(K/32, 4) / 4: swizzled tile stride
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 (>= M)
    BLOCK_N: tl.constexpr,
    CHUNKS: tl.constexpr,  # 16-element chunks of K per step
    SPLIT_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    BITS: tl.constexpr,  # convert E4M3 by moving bits (integer pipe) instead of cvt instructions
):
    """Decode GEMV: each thread streams 16 weight bytes of one row per chunk and keeps elementwise partial
    sums; the only cross-thread reduction is after the K loop."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_groups = K // 32
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    chunk = tl.arange(0, CHUNKS)
    elem = tl.arange(0, 16)
    n_chunks = n_groups * 2
    steps_per_split = ((n_chunks + CHUNKS - 1) // CHUNKS + SPLIT_K - 1) // SPLIT_K
    s_begin = pid_k * steps_per_split
    col_ok = cols < N
    w_rows = w_ptr + cols[:, None, None].to(tl.int64) * K
    zero_n = tl.zeros([BLOCK_N, 1, 1], tl.int32)

    acc0 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc1 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc2 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc3 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    for step in tl.range(s_begin, s_begin + steps_per_split, num_stages=NUM_STAGES):
        kc = step * CHUNKS + chunk  # [C] chunk indices
        k_ok = kc < n_chunks
        koff3 = zero_n + kc[None, :, None] * 16 + elem[None, None, :]  # [BN, C, 16]
        k_ok3 = (zero_n == 0) & k_ok[None, :, None]
        w3 = tl.load(w_rows + koff3, mask=col_ok[:, None, None] & k_ok3, other=0.0)
        if BITS:
            w3 = e4m3_moved_bits_to_f32(w3)
        else:
            w3 = w3.to(tl.float32)
        grp = kc // 2
        sw = tl.load(
            ws_ptr + grp[None, :].to(tl.int64) * N + cols[:, None],
            mask=col_ok[:, None] & k_ok[None, :],
            other=0,
        )
        fw = e8m0_to_f32(sw.to(tl.int32))  # [BN, C]
        acc0 = _gemv_row(
            acc0, w3, a_ptr, as_ptr, 0, koff3, k_ok3, k_ok, grp, fw, M, n_groups, rows4, n_k4, A_LAYOUT, BITS
        )
        if BLOCK_M > 1:
            acc1 = _gemv_row(
                acc1,
                w3,
                a_ptr,
                as_ptr,
                1,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )
        if BLOCK_M > 2:
            acc2 = _gemv_row(
                acc2,
                w3,
                a_ptr,
                as_ptr,
                2,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )
            acc3 = _gemv_row(
                acc3,
                w3,
                a_ptr,
                as_ptr,
                3,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )

    base = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N) + pid_k * (BLOCK_M * BLOCK_N)
    _store_row(acc0, out_ptr, base + cols % BLOCK_N, 0, cols, M, N, SPLIT_K)
    if BLOCK_M > 1:
        _store_row(acc1, out_ptr, base + BLOCK_N + cols % BLOCK_N, 1, cols, M, N, SPLIT_K)
    if BLOCK_M > 2:
        _store_row(acc2, out_ptr, base + 2 * BLOCK_N + cols % BLOCK_N, 2, cols, M, N, SPLIT_K)
        _store_row(acc3, out_ptr, base + 3 * BLOCK_N + cols % BLOCK_N, 3, cols, M, N, SPLIT_K)
    if SPLIT_K > 1:
        tile_base = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
        if split_arrive(cnt_ptr, pid_n, SPLIT_K):
            local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            total = split_sum(tile_base, BLOCK_M * BLOCK_N, local, local >= 0, SPLIT_K)
            rows = tl.arange(0, BLOCK_M)
            mask = (rows[:, None] < M) & (cols[None, :] < N)
            tl.store(
                out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], total.to(tl.bfloat16), mask=mask
            )
            split_release(cnt_ptr, pid_n)
