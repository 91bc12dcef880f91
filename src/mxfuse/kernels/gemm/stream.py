"""The MXFP8 GEMM's weight-streaming kernel for a few tokens (``kind="stream"``): CUDA cores, no MMA.

``out[M, N] = deq(a) @ deq(w).T`` for M <= 4 (operands as in ``mxfuse.kernels.gemm``). A program
owns ``BLOCK_N`` weight rows and a K range (split-K, ``mxfuse.kernels.splitk``); each thread holds one 16-byte chunk of
``BLOCK_N / SUB_N`` rows per step, all at the same K position, so the activation's chunk is loaded and
converted once per thread and serves every row it holds (the older ``gemv`` kernel converts it once per
row: two E4M3 conversions per weight byte instead of about one). Per chunk of 16 the products sum in fp32
in the thread (E4M3 x E4M3 products are exact in fp32), the sum is scaled once by the two blocks' scales
(``fw * fa``: a power of two, exact down to 2**-149), and the chunks' scaled sums are added in K order;
after the loop a program sums its chunk columns in a fixed tree, and the splits are summed in split order
by the last to arrive. No float atomics: the same bits on every run. A NaN scale byte makes its factor
NaN, which reaches exactly the outputs of its row (of ``a``) or column (of ``w``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.decode import act_scale_offsets, e8m0_to_f32
from mxfuse.kernels.l2_prefetch.device import prefetch_rows_l2
from mxfuse.kernels.splitk.device import split_arrive, split_release, split_sum

__all__ = ["mxfp8_stream_kernel", "stream_mainloop", "stream_rows"]


@triton.jit
def _stream_weights(
    w_rows,
    ws_ptr,
    step,
    rows3,
    row_ok3,
    n_chunks,
    N,
    CHUNKS: tl.constexpr,
    EVEN: tl.constexpr,
    WS_ROWS: tl.constexpr,
):
    """One step's weight chunks [C, SUB_N, R, 16] (E4M3) and their scale bytes [C, SUB_N, R].

    The chunk dimension comes first so that Triton's layout puts threads along it and R (the rows a thread
    holds) in registers: dimensions of equal contiguity are ordered by index."""
    kc = step * CHUNKS + tl.arange(0, CHUNKS)[:, None, None]  # [C, 1, 1] chunk indices
    woff = kc[:, :, :, None] * 16 + tl.arange(0, 16)[None, None, None, :]  # [C, 1, 1, 16]
    if WS_ROWS:  # row-major [N, K/32]: a row's groups are adjacent bytes
        ws_off = rows3.to(tl.int64) * (n_chunks // 2) + kc // 2  # [C, SUB_N, R]
    else:  # K-group-major [K/32, N]
        ws_off = (kc // 2).to(tl.int64) * N + rows3
    if EVEN:
        w = tl.load(w_rows + woff)
        sw = tl.load(ws_ptr + ws_off)
    else:
        kc_ok = kc < n_chunks
        w = tl.load(w_rows + woff, mask=row_ok3[:, :, :, None] & kc_ok[:, :, :, None], other=0.0)
        sw = tl.load(ws_ptr + ws_off, mask=row_ok3 & kc_ok, other=0)
    return w, sw


@triton.jit
def _stream_act(a_ptr, as_ptr, m, step, M, a_stride, s_group0, s_groups, n_chunks, rows4, n_k4,
                SUB_N: tl.constexpr, CHUNKS: tl.constexpr, A_LAYOUT: tl.constexpr, EVEN: tl.constexpr):  # fmt: skip
    """Activation row ``m``'s chunks of one step as [C, SUB_N, 1, 16] (stride 0 along SUB_N: the weight
    tile's layout, so the product needs no layout conversion; the repeated bytes are L1 broadcasts) and
    their scale bytes [C, 1, 1]. Rows are ``a_stride`` apart; the K range is the scale groups from
    ``s_group0`` of rows holding ``s_groups`` (a column slice of wider rows, as the grouped wo_a reads)."""
    kc = step * CHUNKS + tl.arange(0, CHUNKS)[:, None, None]
    koff = (
        tl.zeros([1, SUB_N, 1, 1], tl.int32) + kc[:, :, :, None] * 16 + tl.arange(0, 16)[None, None, None, :]
    )
    s_off = act_scale_offsets(m, s_group0 + kc // 2, s_groups, rows4, n_k4, A_LAYOUT)
    ok = m < M
    row = a_ptr + m * a_stride  # a few rows: no 32-bit overflow
    if EVEN:
        a = tl.load(row + koff, mask=ok)
        sa = tl.load(as_ptr + s_off, mask=ok)
    else:
        kc_ok = kc < n_chunks
        a = tl.load(row + koff, mask=kc_ok[:, :, :, None] & ok, other=0.0)
        sa = tl.load(as_ptr + s_off, mask=kc_ok & ok, other=0)
    return a, sa


@triton.jit
def _stream_row(acc, wf, sw_f, a, sa):
    """acc [C, SUB_N, R] += the scaled 16-wide partial dots of one activation row's chunks ``a`` with the
    weight chunks ``wf`` [C, SUB_N, R, 16] (fp32): the activation is converted once for all R rows."""
    part = tl.sum(wf * a.to(tl.float32), axis=3)  # in-thread: each thread holds the chunk's 16 elements
    return acc + part * (sw_f * e8m0_to_f32(sa.to(tl.int32)))


@triton.jit
def stream_mainloop(a_ptr, as_ptr, m0, a_stride, s_group0, s_groups, w_rows, ws_ptr, rows3, row_ok3, n_chunks, N, M,
                    rows4, n_k4, s_begin, s_end, BLOCK_M: tl.constexpr, R: tl.constexpr, SUB_N: tl.constexpr,
                    CHUNKS: tl.constexpr, A_LAYOUT: tl.constexpr, EVEN: tl.constexpr, WS_ROWS: tl.constexpr,
                    NUM_STAGES: tl.constexpr):  # fmt: skip
    """Steps ``[s_begin, s_end)`` (``CHUNKS`` 16-byte chunks of a row each) of the rows at ``w_rows``
    ([1, SUB_N, R, 1] pointers) against activation rows m0 .. m0 + BLOCK_M - 1: four [C, SUB_N, R] fp32
    accumulators (those past BLOCK_M stay zero); ``tl.sum(acc, axis=0)`` is then each row's dot in a fixed
    order. The activation arguments are ``_stream_act``'s, the weight's ``_stream_weights``'."""
    acc0 = tl.zeros([CHUNKS, SUB_N, R], tl.float32)
    acc1 = tl.zeros([CHUNKS, SUB_N, R], tl.float32)
    acc2 = tl.zeros([CHUNKS, SUB_N, R], tl.float32)
    acc3 = tl.zeros([CHUNKS, SUB_N, R], tl.float32)
    for step in tl.range(s_begin, s_end, num_stages=NUM_STAGES):
        w, sw = _stream_weights(w_rows, ws_ptr, step, rows3, row_ok3, n_chunks, N, CHUNKS, EVEN, WS_ROWS)
        wf = w.to(tl.float32)
        sw_f = e8m0_to_f32(sw.to(tl.int32))
        a, sa = _stream_act(a_ptr, as_ptr, m0 + 0, step, M, a_stride, s_group0, s_groups, n_chunks, rows4, n_k4,
                            SUB_N, CHUNKS, A_LAYOUT, EVEN)  # fmt: skip
        acc0 = _stream_row(acc0, wf, sw_f, a, sa)
        if BLOCK_M > 1:
            a, sa = _stream_act(a_ptr, as_ptr, m0 + 1, step, M, a_stride, s_group0, s_groups, n_chunks, rows4, n_k4,
                                SUB_N, CHUNKS, A_LAYOUT, EVEN)  # fmt: skip
            acc1 = _stream_row(acc1, wf, sw_f, a, sa)
        if BLOCK_M > 2:
            a, sa = _stream_act(a_ptr, as_ptr, m0 + 2, step, M, a_stride, s_group0, s_groups, n_chunks, rows4, n_k4,
                                SUB_N, CHUNKS, A_LAYOUT, EVEN)  # fmt: skip
            acc2 = _stream_row(acc2, wf, sw_f, a, sa)
            a, sa = _stream_act(a_ptr, as_ptr, m0 + 3, step, M, a_stride, s_group0, s_groups, n_chunks, rows4, n_k4,
                                SUB_N, CHUNKS, A_LAYOUT, EVEN)  # fmt: skip
            acc3 = _stream_row(acc3, wf, sw_f, a, sa)
    return acc0, acc1, acc2, acc3


@triton.jit
def stream_rows(acc, SUB_N: tl.constexpr, R: tl.constexpr):
    """A [C, SUB_N, R] accumulator's row dots as one vector [R * SUB_N], row r * SUB_N + sub at its index
    (the order ``_stream_weights``'s rows take in a program)."""
    return tl.reshape(tl.trans(tl.sum(acc, axis=0)), [R * SUB_N])


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def mxfp8_stream_kernel(
    a_ptr,  # E4M3 [M, K] contiguous
    as_ptr,  # uint8 view of a's scale storage
    w_ptr,  # E4M3 [N, K] contiguous
    ws_ptr,  # uint8 [N, K/32] (WS_ROWS) or [K/32, N], contiguous
    out_ptr,  # bf16 [M, N] contiguous
    work_ptr,  # fp32 split-K partials [tiles, SPLIT_K, BLOCK_M, BLOCK_N]
    cnt_ptr,  # int32 arrival counters, one per program column
    M,
    N,
    K,
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(K/32, 4) / 4: swizzled tile stride
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 (>= M)
    R: tl.constexpr,  # sub-tiles (rows per thread)
    SUB_N: tl.constexpr,  # rows per sub-tile
    CHUNKS: tl.constexpr,  # 16-byte chunks of each row per step
    SPLIT_K: tl.constexpr,
    EVEN: tl.constexpr,  # N % (R * SUB_N) == 0 and every split holds whole steps: no masks
    NUM_STAGES: tl.constexpr,
    WS_ROWS: tl.constexpr,  # the weight's scales row-major (one row's groups adjacent) instead of K-group-major
    PDL_WAIT: tl.constexpr,  # launched as a programmatic dependent: wait before reading the activation
    PDL_PREFETCH: tl.constexpr,  # before that wait, request this program's weight rows into L2
):
    BLOCK_N: tl.constexpr = R * SUB_N
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_groups = K // 32
    n_chunks = n_groups * 2
    steps = tl.cdiv(n_chunks, CHUNKS)
    per_split = tl.cdiv(steps, SPLIT_K)
    s_begin = pid_k * per_split
    s_end = tl.minimum(s_begin + per_split, steps)
    if PDL_WAIT:
        if PDL_PREFETCH:
            # The weight is written by no kernel of the step: its bytes may be requested while the
            # previous kernel runs. One request per row, this split's K range.
            k0 = s_begin * CHUNKS * 16
            span = tl.minimum(s_end * CHUNKS * 16, K) - k0
            prow = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            prefetch_rows_l2(w_ptr + prow.to(tl.int64) * K + k0, span, prow < N)
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel (a norm, the boundary) may launch now

    rr = tl.arange(0, R)[None, :]
    sub = tl.arange(0, SUB_N)[:, None]
    local = rr * SUB_N + sub  # [SUB_N, R]: row within the program
    rows = pid_n * BLOCK_N + local
    row_ok = rows < N
    rows3 = rows[None, :, :]  # [1, SUB_N, R]
    row_ok3 = row_ok[None, :, :]
    w_rows = w_ptr + rows3[:, :, :, None].to(tl.int64) * K

    acc0, acc1, acc2, acc3 = stream_mainloop(
        a_ptr, as_ptr, 0, K, 0, n_groups, w_rows, ws_ptr, rows3, row_ok3, n_chunks, N, M, rows4, n_k4,
        s_begin, s_end, BLOCK_M, R, SUB_N, CHUNKS, A_LAYOUT, EVEN, WS_ROWS, NUM_STAGES,
    )  # fmt: skip

    # One cross-thread reduction per row, after the loop; then the output or this split's partial.
    tile = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
    part = tile + pid_k * (BLOCK_M * BLOCK_N) + local
    out_rows = out_ptr + rows
    _stream_store(tl.sum(acc0, axis=0), out_rows, part, 0, row_ok, M, N, SPLIT_K)
    if BLOCK_M > 1:
        _stream_store(tl.sum(acc1, axis=0), out_rows, part + BLOCK_N, 1, row_ok, M, N, SPLIT_K)
    if BLOCK_M > 2:
        _stream_store(tl.sum(acc2, axis=0), out_rows, part + 2 * BLOCK_N, 2, row_ok, M, N, SPLIT_K)
        _stream_store(tl.sum(acc3, axis=0), out_rows, part + 3 * BLOCK_N, 3, row_ok, M, N, SPLIT_K)
    if SPLIT_K > 1:
        if split_arrive(cnt_ptr, pid_n, SPLIT_K):
            m_idx = tl.arange(0, BLOCK_M)[:, None]
            n_idx = tl.arange(0, BLOCK_N)[None, :]
            offs = m_idx * BLOCK_N + n_idx
            total = split_sum(tile, BLOCK_M * BLOCK_N, offs, offs >= 0, SPLIT_K)
            cols = pid_n * BLOCK_N + n_idx
            mask = (m_idx < M) & (cols < N)
            tl.store(out_ptr + m_idx.to(tl.int64) * N + cols, total.to(tl.bfloat16), mask=mask)
            split_release(cnt_ptr, pid_n)


@triton.jit
def _stream_store(total, out_rows, part_ptr, m, row_ok, M, N, SPLIT_K: tl.constexpr):
    if SPLIT_K == 1:
        tl.store(out_rows + m * N, total.to(tl.bfloat16), mask=row_ok & (m < M))
    else:
        tl.store(part_ptr, total)
