"""Grouped wo_a projection with an MXFP8 epilogue: ``z[t, g, :] = deq(a)[t, g*r:(g+1)*r] @ deq(w[g]).T``.

``a`` is an MXFP8 activation ``[T, G*r]`` (scales in any of the three layouts), ``w`` an E4M3 weight
``[G, R, r]`` with one E8M0 byte per row and 32 K, stored K-group-major (``[G, r/32, R]``) so that a
tile's scales load as contiguous bytes. The kernel writes bf16 ``z`` ``[T, G, R]`` and/or the MXFP8 pair
of ``z`` viewed ``[T, G*R]`` (wo_b's input), quantized from the bf16-rounded ``z`` with the
``mxfp8_tile`` building blocks, so the pair is bit for bit ``quantize_mxfp8`` of the ``z`` it writes.

One program per (K split, group, BLOCK_N columns of R, BLOCK_M rows of T). BLOCK_N is a multiple of 128
that divides R, so a program owns whole scale words and no word straddles two groups. The K loop is
``mxfp8_dot.mxfp8_mainloop``, whose tensor-core steps are the MXFP8 GEMM's. At small T the work is
streaming G*R*r weight bytes (32 MiB at G = 8, R = 1024, r = 4096) and what matters is enough programs
in flight: G * R / BLOCK_N tiles is 16 at G = 2, so K is split. Split-K is deterministic without float
atomics: each split stores its fp32 partial, takes a ticket from an integer counter, and the split that
arrives last sums the partials in split order (0, 1, ..., S-1), writes the outputs and resets the
counter to 0 for the next call (the counters belong to the prepared weight; calls sharing a weight must
be ordered on one stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from mxfuse.formats import ScaleLayout, ScaleRounding, align, scale_spec, scale_storage_view
from mxfuse.kernels.l2_prefetch import prefetch_rows_l2
from mxfuse.kernels.mxfp8_dot import DOT_CODE, mxfp8_mainloop
from mxfuse.kernels.mxfp8_fold import check_fold_options, launch_fold_activation
from mxfuse.kernels.mxfp8_fold_steps import ACT_CODE, CVT_CODE, OPERAND_CODE, WSCALE_CODE
from mxfuse.kernels.mxfp8_stream import stream_mainloop, stream_rows
from mxfuse.kernels.mxfp8_tile import (
    LAYOUT_CODE,
    mxfp8_codes,
    mxfp8_scale_bytes,
    scale_target,
    store_scale_words,
)
from mxfuse.kernels.pdl import OFF, pdl_policy
from mxfuse.kernels.splitk import split_arrive, split_for, split_release, split_sum

__all__ = ["TICKETS", "WoAConfig", "check_config", "default_config", "launch_grouped_wo_a"]

# Split-K arrival counters a prepared weight carries: one per output tile of a split launch.
TICKETS = 4096


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
    (``mxfp8_dot.mxfp8_mainloop``)."""
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc = mxfp8_mainloop(
        acc,
        a_ptr + g * K,
        as_ptr,
        w_ptr + g.to(tl.int64) * R * K,
        ws_ptr + g.to(tl.int64) * groups_k * R,
        rows,
        cols,
        T,
        R,
        split * (K_ITERS * BLOCK_K),
        g * groups_k,
        G * groups_k,
        rows4,
        n_k4,
        stride_at,
        K,
        R,
        p_ptr + g * K,
        pref_ptr + g * T,
        A_LAYOUT,
        DOT,
        SWAP_AB,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        K_ITERS,
        NUM_STAGES,
        FOLD_OP,
        FOLD_CVT,
        FOLD_ACT,
        FOLD_WSCALE,
        FOLD_W_BIAS,
    )
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


# T and the padded row counts vary per call: not specialized, one compile per configuration.
@triton.jit(do_not_specialize=["T", "rows4", "o_rows_padded", "n_m_tiles"])
def _grouped_wo_a_kernel(
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


@dataclass(frozen=True)
class WoAConfig:
    """One launch configuration: tile shape, K splits, warps, pipeline stages, dot mode, operand order.

    ``dot`` is ``"stream"`` (CUDA cores, ``mxfp8_stream``'s mainloop, for ``block_m`` 1, 2 or 4 tokens: each
    thread one 16-byte chunk of ``block_n / (32 * num_warps * 16 / block_k)`` weight rows per ``block_k``
    step), ``"dq16"`` (fp16 tensor-core dots on dequantized tiles, one per ``block_k``), ``"fp8"``
    (one fp8 tensor-core dot per 32-wide group), ``"fold"`` (16-bit dots with the scales folded into the
    operands, the GEMM's ``fold`` mainloop; ``operand`` ``"f16"`` / ``"bf16"``, ``cvt`` ``"cast"`` /
    ``"bits"`` / ``"asm"``, ``act``, ``wscale`` and ``w_bias`` as in ``mxfp8_configs.GemmConfig``) or ``"fp32"`` (E4M3 decoded by bits, IEEE fp32 dot: the interpreter's
    exact path). ``swap_ab`` puts weight rows in the MMA's M slot (see ``mxfp8_dot``).
    """

    block_m: int
    block_n: int
    block_k: int
    split: int
    num_warps: int
    num_stages: int
    dot: str = "dq16"
    swap_ab: bool = False
    operand: str = "f16"
    cvt: str = "cast"
    act: str = "inloop"
    wscale: str = "operand"
    w_bias: int = 120


def default_config(t: int, groups: int, n: int, k: int, *, sm_count: int, stream: bool = True) -> WoAConfig:
    """The configuration for ``t`` tokens and ``groups`` x ``[n, k]`` weights on ``sm_count`` SMs.

    Up to 4 tokens (unless ``stream`` is False), the stream mode (CUDA cores, as the MXFP8 GEMM takes at
    M <= 4). Above, the MXFP8
    GEMM's tensor-core choices (``mxfp8_gemm.choose_config`` for M > 4, measured on an H200):
    fp16 dots on dequantized tiles, weight rows in the MMA's M slot up to 64 tokens, 128-wide K steps
    there and 64-wide above; K split until the tiles fill the SMs, keeping >= 4 steps per split. The
    columns per tile are 128 (whole scale words) where the GEMM uses 64. ``benchmarks/grouped_wo_a.py
    --sweep`` measures the alternatives for this operator.
    """
    if stream and 0 < t <= 4:
        # CUDA cores: the MXFP8 GEMM's stream kernel measured 1.9-2.1x bf16 at M = 1 on the large
        # shapes; 128 columns a program (whole scale words for the pair). The H200 sweep of 2026-12-02
        # (G = 2 and 8, r = 4096, R = 1024) was fastest with the K split to at most four waves of
        # programs (the largest power of two up to 32 that stays within), whole 128-wide K steps at one
        # token or when a split holds only one, and 64-wide steps otherwise (four rows of activations).
        tiles = groups * (n // 128)
        unit = 64 if k % 64 == 0 else 32
        split = 1
        while tiles * split * 2 <= 4 * sm_count and split < 32 and k % (split * 2 * unit) == 0:
            split *= 2
        block_k = 128 if (t == 1 or k // split <= 128) and (k // split) % 128 == 0 else unit
        return WoAConfig(triton.next_power_of_2(t), 128, block_k, split, 4, 1, "stream", False)
    if t <= 64:
        block_m, block_k, warps, stages, swap = max(16, triton.next_power_of_2(max(t, 1))), 128, 4, 3, True
    elif t <= 256:
        block_m, block_k, warps, stages, swap = 64, 64, 8, 3, False
    else:
        block_m, block_k, warps, stages, swap = 128, 64, 8, 3, False
    while k % block_k:
        block_k //= 2
    if block_k < 32:
        raise ValueError(f"k must be a multiple of 32; got {k}")
    block_n = 128
    tiles = groups * (n // block_n) * triton.cdiv(max(t, 1), block_m)
    split = split_for(tiles, k // block_k, target=sm_count)
    while k % (split * block_k):
        split //= 2
    if tiles * split > TICKETS:
        split = 1
    return WoAConfig(block_m, block_n, block_k, split, warps, stages, "dq16", swap)


def check_config(config: WoAConfig, *, t: int, groups: int, n: int, k: int) -> None:
    """ValueError naming what ``config`` breaks for this shape (tile divisibility, dot mode, tickets)."""
    if config.dot not in DOT_CODE:
        raise ValueError(f"config.dot must be one of {sorted(DOT_CODE)}; got {config.dot!r}")
    try:
        check_fold_options(operand=config.operand, cvt=config.cvt, act=config.act, wscale=config.wscale)
    except ValueError as exc:
        raise ValueError(f"config.{exc}") from None
    if config.dot == "fold" and config.wscale == "acc" and config.block_k not in (32, 64, 128):
        raise ValueError(f"config.block_k must be 32, 64 or 128 with wscale 'acc'; got {config.block_k}")
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if config.dot == "stream" and name == "block_m":
            if value not in (1, 2, 4):
                raise ValueError(f"config.block_m must be 1, 2 or 4 with dot 'stream'; got {value}")
        elif value < 16 or value & (value - 1):
            raise ValueError(f"config.{name} must be a power of two >= 16; got {value}")
    if config.dot == "stream":
        threads = 32 * config.num_warps
        chunks = config.block_k // 16
        if config.swap_ab or threads % chunks or config.block_n % (threads // chunks):
            raise ValueError(
                f"config with dot 'stream' needs swap_ab False, block_k / 16 ({chunks}) dividing 32 * num_warps "
                f"({threads}) and block_n ({config.block_n}) a multiple of their quotient"
            )
    if config.block_n % 128 or n % config.block_n:
        raise ValueError(f"config.block_n must be a multiple of 128 dividing R = {n}; got {config.block_n}")
    if config.block_k < 32 or config.split < 1 or k % (config.split * config.block_k):
        raise ValueError(
            f"config.split * config.block_k must divide r = {k} (block_k >= 32); "
            f"got split {config.split}, block_k {config.block_k}"
        )
    tiles = groups * (n // config.block_n) * triton.cdiv(t, config.block_m)
    if config.split > 1 and tiles > TICKETS:
        raise ValueError(f"a split launch has {tiles} output tiles; the weight carries {TICKETS} tickets")


def launch_grouped_wo_a(
    a_q: torch.Tensor,
    a_scale: torch.Tensor,
    a_layout: ScaleLayout,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    tickets: torch.Tensor,
    *,
    z: torch.Tensor | None,
    pair: tuple[torch.Tensor, torch.Tensor] | None,
    out_layout: ScaleLayout,
    rounding: ScaleRounding,
    hw_cvt: bool = True,
    config: WoAConfig | None = None,
) -> WoAConfig:
    """Run the kernel on validated tensors; returns the configuration it used.

    ``a_q`` fp8 ``[T, G*r]`` (contiguous rows) with ``a_scale`` in ``a_layout``; ``w_q`` fp8 ``[G, R, r]``
    and ``w_scale`` uint8 ``[G, r/32, R]``, both contiguous; ``tickets`` int32 ``>= TICKETS`` zeros.
    ``z`` bf16 ``[T, G, R]`` and/or ``pair`` (fp8 ``[T, G*R]``, scale in ``out_layout``), each written
    in full when given. ``hw_cvt=False`` rounds to bf16 and encodes E4M3 with integer arithmetic and,
    unless ``config`` says otherwise, takes the fp32 dot: all of it exact under the Triton interpreter.
    """
    t = a_q.shape[0]
    groups, n, k = w_q.shape
    if z is None and pair is None:
        raise ValueError("z or pair must be given")
    if config is None:
        sm_count = 1
        if a_q.is_cuda:
            sm_count = torch.cuda.get_device_properties(a_q.device).multi_processor_count
        config = default_config(t, groups, n, k, sm_count=sm_count, stream=hw_cvt)
        if not hw_cvt:
            config = WoAConfig(**{**config.__dict__, "dot": "fp32"})
    check_config(config, t=t, groups=groups, n=n, k=k)
    if t == 0:
        return config
    as_codes = config.dot == "fp32" or (config.dot == "fold" and config.cvt == "bits")
    codes = (lambda x: x.view(torch.uint8)) if as_codes else (lambda x: x)
    a_groups = groups * k // 32
    a_spec = scale_spec(t, groups * k, scale_layout=a_layout)
    a_s = scale_storage_view(a_scale, a_spec).view(torch.uint8)
    gr = groups * n
    dummy = w_scale  # any tensor on the device, for outputs this launch does not write
    z_arg = dummy if z is None else (z if hw_cvt else z.view(torch.int16))
    q_arg, s_arg, o_layout, o_rows = dummy, dummy, 0, t
    if pair is not None:
        q, scale = pair
        s_arg, o_layout, o_rows = scale_target(scale, m=t, k=gr, layout=out_layout)
        q_arg = q if hw_cvt else q.view(torch.uint8)
    n_m_tiles = triton.cdiv(t, config.block_m)
    n_n_tiles = n // config.block_n
    work = dummy
    if config.split > 1:
        # Scratch for the partials: from the caching allocator (the graph's pool under capture).
        work = torch.empty((config.split, t, gr), dtype=torch.float32, device=a_q.device)
    folded, refs = dummy, tickets  # read only by a prefolded fold
    if config.dot == "fold" and config.act == "prefold":
        dtype = torch.float16 if config.operand == "f16" else torch.bfloat16
        row = a_q.stride(0) if t > 1 else groups * k  # the copy is addressed like a_q
        folded = torch.empty((t, row), dtype=dtype, device=a_q.device)
        refs = torch.empty((groups, t), dtype=torch.int32, device=a_q.device)
        launch_fold_activation(a_q, a_s, LAYOUT_CODE[a_layout.value], folded, refs, slices=groups)
    grid = (config.split * groups * n_n_tiles * n_m_tiles,)
    pdl = pdl_policy(a_q.device, gemm=True) if hw_cvt else OFF
    _grouped_wo_a_kernel[grid](
        codes(a_q),
        a_s,
        codes(w_q),
        w_scale,
        z_arg,
        q_arg,
        s_arg,
        work,
        folded,
        refs,
        tickets,
        t,
        groups,
        n,
        k,
        a_q.stride(0),
        align(t, 4),
        -(-a_groups // 4),
        o_rows,
        n_m_tiles,
        n_n_tiles,
        A_LAYOUT=LAYOUT_CODE[a_layout.value],
        O_LAYOUT=o_layout,
        STORE_Z=z is not None,
        STORE_PAIR=pair is not None,
        FLOOR=rounding is ScaleRounding.FLOOR,
        HW_CVT=hw_cvt,
        DOT=DOT_CODE[config.dot],
        SWAP_AB=config.swap_ab,
        SPLIT=config.split,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        K_ITERS=k // (config.split * config.block_k),
        NUM_STAGES=config.num_stages,
        FOLD_OP=OPERAND_CODE[config.operand],
        FOLD_CVT=CVT_CODE[config.cvt],
        FOLD_ACT=ACT_CODE[config.act],
        FOLD_WSCALE=WSCALE_CODE[config.wscale],
        FOLD_W_BIAS=config.w_bias if config.operand == "f16" else 127,
        STREAM_SUB=max(1, 32 * config.num_warps // (config.block_k // 16)),
        PDL_WAIT=pdl.wait,
        PDL_PREFETCH=pdl.prefetch,
        num_warps=config.num_warps,
        **({"launch_pdl": True} if pdl.wait else {}),
    )
    return config
