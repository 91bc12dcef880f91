"""The grouped wo_a kernel with its MXFP8 epilogue (device code); the launcher is
``mxfuse.kernels.grouped_wo_a``."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.mainloop import mxfp8_mainloop
from mxfuse.kernels.gemm.stream import stream_mainloop, stream_rows
from mxfuse.kernels.l2_prefetch.device import prefetch_rows_l2
from mxfuse.kernels.mxfp8.device import mxfp8_codes, mxfp8_scale_bytes, store_scale_words
from mxfuse.kernels.splitk.device import split_arrive, split_release, split_sum

__all__ = ["grouped_wo_a_kernel"]


@triton.jit
def _bf16_bits(acc, HW_CVT: tl.constexpr):
    """int32 holding the bf16 bit pattern (0..0xFFFF) of fp32 ``acc``, rounded to nearest-even."""
    if HW_CVT:
        return acc.to(tl.bfloat16).to(tl.uint16, bitcast=True).to(tl.int32)
    else:
        # The interpreter's own fp32 -> bf16 cast truncates; round by bits. NaN stays a quiet NaN.
        u = acc.to(tl.uint32, bitcast=True)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        return tl.where(nan, (u >> 16) | 0x40, rounded).to(tl.int32)


@triton.jit
def _write_outputs(
    acc,
    rows,
    col0,  # first column of the tile in the [T, G*R] view
    pid_m,
    n_m_tiles,
    T,
    GR,
    z_ptr,
    q_ptr,
    s_ptr,
    o_rows_padded,
    STORE_Z: tl.constexpr,
    STORE_PAIR: tl.constexpr,
    O_LAYOUT: tl.constexpr,
    FLOOR: tl.constexpr,
    HW_CVT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    WORDS: tl.constexpr = BLOCK_N // 128
    half = _bf16_bits(acc, HW_CVT)  # [BLOCK_M, BLOCK_N]
    row_ok = rows < T
    if STORE_Z:
        offs = rows[:, None].to(tl.int64) * GR + col0 + tl.arange(0, BLOCK_N)[None, :]
        z = half.to(tl.uint16)
        if HW_CVT:
            z = z.to(tl.bfloat16, bitcast=True)
        tl.store(z_ptr + offs, z, mask=row_ok[:, None])
    if STORE_PAIR:
        # Quantize from the bf16-rounded z, widened by bits: exactly what quantize_mxfp8 reads.
        bits = tl.reshape(half << 16, (BLOCK_M, WORDS, 4, 32))
        s = mxfp8_scale_bytes(tl.max(bits & 0x7FFFFFFF, axis=3), FLOOR)
        codes = mxfp8_codes(bits, s, HW_CVT)
        words = col0 // 128 + tl.arange(0, WORDS)
        slot = tl.arange(0, 4)
        lane = tl.arange(0, 32)
        r4 = rows[:, None, None, None].to(tl.int64)
        cols = words[None, :, None, None] * 128 + slot[None, None, :, None] * 32 + lane[None, None, None, :]
        tl.store(q_ptr + r4 * GR + cols, codes, mask=r4 < T)
        # Rows in [T, o_rows_padded) of this tile get scale 0: their accumulators are 0.
        store_scale_words(s_ptr, s, rows, words, T, o_rows_padded, GR // 32, GR // 128, O_LAYOUT)
        if O_LAYOUT == 2:
            # swizzled_128x4 pads T to a multiple of 128 rows; the last tile zeroes those past its end
            # (fewer than 128, so a fixed number of BLOCK_M chunks, masked by store_scale_words).
            if pid_m == n_m_tiles - 1:
                zeros = tl.zeros((BLOCK_M, WORDS, 4), tl.int32)
                for c in tl.static_range(1, 1 + (128 + BLOCK_M - 1) // BLOCK_M):
                    pad_rows = (pid_m + c) * BLOCK_M + tl.arange(0, BLOCK_M)
                    store_scale_words(s_ptr, zeros, pad_rows, words, T, o_rows_padded, GR // 32, GR // 128, 2)
        if O_LAYOUT == 1:
            if BLOCK_M < 4:
                # deepgemm pads T to a multiple of 4 rows, which a tile of fewer rows may not reach.
                if pid_m == n_m_tiles - 1:
                    zeros = tl.zeros((BLOCK_M, WORDS, 4), tl.int32)
                    for c in tl.static_range(1, 1 + (4 + BLOCK_M - 1) // BLOCK_M):
                        pad_rows = (pid_m + c) * BLOCK_M + tl.arange(0, BLOCK_M)
                        store_scale_words(
                            s_ptr, zeros, pad_rows, words, T, o_rows_padded, GR // 32, GR // 128, 1
                        )


@triton.jit
def _tensor_core_tile(a_ptr, as_ptr, w_ptr, ws_ptr, p_ptr, pref_ptr, g, split, rows, cols, T, R, K, G, groups_k, rows4,
                      n_k4, stride_at, A_LAYOUT: tl.constexpr, DOT: tl.constexpr, SWAP_AB: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, K_ITERS: tl.constexpr,
                      NUM_STAGES: tl.constexpr, FOLD_OP: tl.constexpr, FOLD_CVT: tl.constexpr,
                      FOLD_ACT: tl.constexpr, FOLD_WSCALE: tl.constexpr, FOLD_W_BIAS: tl.constexpr):  # fmt: skip
    """The tile [BLOCK_M, BLOCK_N] of group ``g`` and K split ``split`` on the tensor cores
    (``gemm.mainloop.mxfp8_mainloop``)."""
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    # Group g's slices of a, w and their scales, and its split's K range (in this order: the tile's code
    # is then the same as when the loop took them as it does here).
    a_base = a_ptr + g * K
    w_base = w_ptr + g.to(tl.int64) * R * K
    ws_base = ws_ptr + g.to(tl.int64) * groups_k * R
    k_start = split * (K_ITERS * BLOCK_K)
    a_group0 = g * groups_k
    a_n_groups = G * groups_k
    p_base = p_ptr + g * K
    pref = pref_ptr + g * T
    row_ok = rows < T
    col_ok = cols < R
    a_rows = a_base + rows[:, None].to(tl.int64) * stride_at
    w_rows = w_base + cols[:, None].to(tl.int64) * K
    if DOT == 3:
        # The fold loop walks the split's groups.
        g_begin = k_start // 32
        acc = mxfp8_mainloop(
            acc, a_rows, w_rows, as_ptr, ws_base, rows, cols, row_ok, col_ok, 0, K_ITERS * (BLOCK_K // 32),
            g_begin, g_begin, a_group0, a_n_groups, rows4, n_k4, R, p_base + rows[:, None].to(tl.int64) * stride_at,
            pref, A_LAYOUT, DOT, SWAP_AB, BLOCK_M, BLOCK_N, BLOCK_K // 32, NUM_STAGES, 1, 1, False, True, FOLD_OP,
            FOLD_CVT, FOLD_ACT, FOLD_WSCALE, FOLD_W_BIAS,
        )  # fmt: skip
    else:
        # K_ITERS whole steps from the split's first, nothing masked.
        step0 = k_start // BLOCK_K
        acc = mxfp8_mainloop(
            acc, a_rows, w_rows, as_ptr, ws_base, rows, cols, row_ok, col_ok, 0, K_ITERS, step0,
            (k_start // BLOCK_K + K_ITERS) * (BLOCK_K // 32), a_group0, a_n_groups, rows4, n_k4, R, a_rows, pref,
            A_LAYOUT, DOT, SWAP_AB, BLOCK_M, BLOCK_N, BLOCK_K // 32, NUM_STAGES, 1, BLOCK_K // 32, False,
        )  # fmt: skip
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


# T and the padded row counts vary per call: not specialized, one compile per configuration.
@triton.jit(do_not_specialize=["T", "rows4", "o_rows_padded", "n_m_tiles"])
def grouped_wo_a_kernel(
    a_ptr,  # [T, G*K] E4M3 (uint8 codes for DOT_F32), rows stride_at apart
    as_ptr,  # a's scale storage as bytes, layout A_LAYOUT
    w_ptr,  # [G, R, K] E4M3 (uint8 codes for DOT_F32), contiguous
    ws_ptr,  # uint8 [G, K/32, R], contiguous
    z_ptr,  # [T, G, R] bf16 (int16 view without HW_CVT), contiguous; unused unless STORE_Z
    q_ptr,  # [T, G*R] E4M3 (uint8 view without HW_CVT), contiguous; unused unless STORE_PAIR
    s_ptr,  # output scale storage: uint8 (O_LAYOUT 0) or int32 words; unused unless STORE_PAIR
    work_ptr,  # fp32 [SPLIT, T, G*R] partials; unused when SPLIT == 1
    p_ptr,  # DOT_FOLD with FOLD_ACT prefold: a's folded 16-bit copy [T, G*K]; unused otherwise
    pref_ptr,  # DOT_FOLD with FOLD_ACT prefold: int32 [G, T] reference bytes; unused otherwise
    tickets_ptr,  # int32 counters, 0 between calls; unused when SPLIT == 1
    T,
    G,
    R,
    K,
    stride_at,
    rows4,  # align(T, 4): deepgemm word stride of a's scales
    n_k4,  # align(G*K/32, 4) / 4: swizzled tile stride of a's scales
    o_rows_padded,
    n_m_tiles,
    n_n_tiles,
    A_LAYOUT: tl.constexpr,
    O_LAYOUT: tl.constexpr,
    STORE_Z: tl.constexpr,
    STORE_PAIR: tl.constexpr,
    FLOOR: tl.constexpr,
    HW_CVT: tl.constexpr,  # hardware bf16 rounding and E4M3 encoding in the epilogue
    DOT: tl.constexpr,
    SWAP_AB: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_ITERS: tl.constexpr,  # BLOCK_K steps per split: K = SPLIT * K_ITERS * BLOCK_K
    NUM_STAGES: tl.constexpr,
    FOLD_OP: tl.constexpr,
    FOLD_CVT: tl.constexpr,
    FOLD_ACT: tl.constexpr,
    FOLD_WSCALE: tl.constexpr,
    FOLD_W_BIAS: tl.constexpr,
    STREAM_SUB: tl.constexpr,  # DOT_STREAM: weight rows a thread group spans (32 * warps * 16 / BLOCK_K)
    PDL_WAIT: tl.constexpr,  # launched as a programmatic dependent: wait before reading or writing
    PDL_PREFETCH: tl.constexpr,  # DOT_STREAM: before that wait, request this program's weight rows into L2
):
    # M tiles fastest: programs that read the same weight tile run side by side.
    pid = tl.program_id(0)
    pid_m = pid % n_m_tiles
    rest = pid // n_m_tiles
    pid_n = rest % n_n_tiles
    rest = rest // n_n_tiles
    g = rest % G
    split = rest // G
    if PDL_WAIT:
        if PDL_PREFETCH and DOT == 4:
            # The weight is written by no kernel of the step: one request per row of this program's tile.
            k0 = split * K_ITERS * BLOCK_K
            prow = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            prefetch_rows_l2(w_ptr + g.to(tl.int64) * R * K + prow.to(tl.int64) * K + k0,
                             tl.minimum(K_ITERS * BLOCK_K, K - k0), prow < R)  # fmt: skip
        tl.extra.cuda.gdc_wait()
    # No explicit signal: wo_b (a dependent) launches as these programs exit. Signalling after the wait
    # put wo_b's programs on the multiprocessors while this kernel still streamed its weight, unevenly:
    # wo_b then took 3.7 us longer (H200, benchmarks/RESULTS.md).
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    groups_k = K // 32
    if DOT == 4:  # DOT_STREAM
        # CUDA cores (T <= 4): each thread one 16-byte chunk of BLOCK_N / STREAM_SUB weight rows per step.
        R_SUB: tl.constexpr = BLOCK_N // STREAM_SUB
        local = tl.arange(0, R_SUB)[None, :] * STREAM_SUB + tl.arange(0, STREAM_SUB)[:, None]  # [SUB, R_SUB]
        w_rows = w_ptr + g.to(tl.int64) * R * K + (pid_n * BLOCK_N + local)[None, :, :, None].to(tl.int64) * K
        a0, a1, a2, a3 = stream_mainloop(
            a_ptr + g * K, as_ptr, pid_m * BLOCK_M, stride_at, g * groups_k, G * groups_k, w_rows,
            ws_ptr + g.to(tl.int64) * groups_k * R, (pid_n * BLOCK_N + local)[None, :, :], local[None, :, :] >= 0,
            K // 16, R, T, rows4, n_k4, split * K_ITERS, (split + 1) * K_ITERS, BLOCK_M, R_SUB, STREAM_SUB,
            BLOCK_K // 16, A_LAYOUT, True, False, NUM_STAGES,
        )  # fmt: skip
        m_idx = tl.arange(0, BLOCK_M)[:, None]
        acc = tl.where(m_idx == 0, stream_rows(a0, STREAM_SUB, R_SUB)[None, :], 0.0)
        if BLOCK_M > 1:
            acc = tl.where(m_idx == 1, stream_rows(a1, STREAM_SUB, R_SUB)[None, :], acc)
        if BLOCK_M > 2:
            acc = tl.where(m_idx == 2, stream_rows(a2, STREAM_SUB, R_SUB)[None, :], acc)
            acc = tl.where(m_idx == 3, stream_rows(a3, STREAM_SUB, R_SUB)[None, :], acc)
    else:
        acc = _tensor_core_tile(
            a_ptr, as_ptr, w_ptr, ws_ptr, p_ptr, pref_ptr, g, split, rows, cols, T, R, K, G, groups_k, rows4,
            n_k4, stride_at, A_LAYOUT, DOT, SWAP_AB, BLOCK_M, BLOCK_N, BLOCK_K, K_ITERS, NUM_STAGES, FOLD_OP,
            FOLD_CVT, FOLD_ACT, FOLD_WSCALE, FOLD_W_BIAS,
        )  # fmt: skip
    GR = G * R
    col0 = g * R + pid_n * BLOCK_N
    if SPLIT == 1:
        _write_outputs(
            acc,
            rows,
            col0,
            pid_m,
            n_m_tiles,
            T,
            GR,
            z_ptr,
            q_ptr,
            s_ptr,
            o_rows_padded,
            STORE_Z,
            STORE_PAIR,
            O_LAYOUT,
            FLOOR,
            HW_CVT,
            BLOCK_M,
            BLOCK_N,
        )
    else:
        offs = rows[:, None].to(tl.int64) * GR + col0 + tl.arange(0, BLOCK_N)[None, :]
        row_ok = (rows < T)[:, None]
        split_stride = T.to(tl.int64) * GR
        tl.store(work_ptr + split * split_stride + offs, acc, mask=row_ok)
        tile = (g * n_n_tiles + pid_n) * n_m_tiles + pid_m
        if split_arrive(tickets_ptr, tile, SPLIT):
            # Fixed order 0..SPLIT-1 whoever arrives last: bitwise the same result every run.
            total = split_sum(work_ptr, split_stride, offs, row_ok, SPLIT)
            _write_outputs(
                total,
                rows,
                col0,
                pid_m,
                n_m_tiles,
                T,
                GR,
                z_ptr,
                q_ptr,
                s_ptr,
                o_rows_padded,
                STORE_Z,
                STORE_PAIR,
                O_LAYOUT,
                FLOOR,
                HW_CVT,
                BLOCK_M,
                BLOCK_N,
            )
            split_release(tickets_ptr, tile)
