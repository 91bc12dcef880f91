"""The boundary kernel's F items (device code): a row's records summed into its logits and ``pre``, then
the collapse, the RMSNorm, y and/or the next GEMM's MXFP8 pair; in the shifted ordering the finish is
split over items of a few scale words. See ``mxfuse.kernels.hc.kernel``."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.bf16 import bf16_bits, bits_to_bf16, bits_to_f32, load_bf16_bits
from mxfuse.kernels.hc.plan import RECORD as PLAN_RECORD
from mxfuse.kernels.hc.tile import exact_sum, exact_total3
from mxfuse.kernels.mxfp8.device import mxfp8_codes, mxfp8_scale_bytes, store_scale_words

__all__ = ["chunk_cols", "load_w", "phase_f_coef", "phase_f_norm", "phase_f_split", "row_mix"]

RECORD = tl.constexpr(PLAN_RECORD)  # kernels may read only constexpr globals


@triton.jit
def _store_scales(s_ptr, s, rows, words, T, rows_padded, n_groups, n_words, layout):
    """``store_scale_words`` with the layout a runtime value: one compiled kernel serves every layout
    (the branch is uniform across the program, and the scale stores are a sliver of its work)."""
    if layout == 0:
        store_scale_words(s_ptr, s, rows, words, T, rows_padded, n_groups, n_words, 0)
    elif layout == 1:
        store_scale_words(s_ptr, s, rows, words, T, rows_padded, n_groups, n_words, 1)
    elif layout == 2:
        store_scale_words(s_ptr, s, rows, words, T, rows_padded, n_groups, n_words, 2)
    else:
        store_scale_words(s_ptr, s, rows, words, T, rows_padded, n_groups, n_words, 3)


@triton.jit
def _pick(v, col, j):
    """Element ``j`` of the 1-D tensor ``v`` as a scalar (the others are masked to 0, so a NaN elsewhere
    does not reach it)."""
    return tl.sum(tl.where(col == j, v, 0.0), axis=0)


@triton.jit
def row_mix(t, part_ptr, mix_ptr, S_A, F_STEPS: tl.constexpr, BT: tl.constexpr, SB: tl.constexpr):
    """Row ``t``'s records summed into its 24 logits and sum(R'^2) at 24 ([32]), stored for S and returned.
    The F item and, when it does not wait for the F item, the row's S item compute the same bits. The
    F_STEPS loads of SB records are unrolled so that they are in flight together (one round trip to L2,
    not one a step); they are added in step order."""
    t64 = t.to(tl.int64)
    col = tl.arange(0, RECORD)
    b = t // BT
    lr = t % BT
    si = tl.arange(0, SB)[:, None]
    acc = tl.zeros((SB, RECORD), dtype=tl.float32)
    for i in tl.static_range(F_STEPS):
        sp = i * SB + si
        ptrs = part_ptr + ((b * S_A + sp).to(tl.int64) * BT + lr) * RECORD + col[None, :]
        acc += tl.load(ptrs, mask=sp < S_A, other=0.0, cache_modifier=".cg")
    mix = exact_sum(acc, 0)
    tl.store(mix_ptr + t64 * RECORD + col, mix)
    return mix


@triton.jit
def phase_f_coef(t, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, F_STEPS: tl.constexpr, norm_eps,
                  pre_eps, BT: tl.constexpr, SB: tl.constexpr):  # fmt: skip
    """Row ``t``'s records summed into its 24 logits and sum(R'^2) (stored for S), and ``pre`` (stored
    and returned: [32], the four values first)."""
    t64 = t.to(tl.int64)
    col = tl.arange(0, RECORD)
    # Loaded before row_mix stores the logits: a load after that store would wait for it.
    s0 = tl.load(scale_ptr)
    bv = tl.load(base_ptr + col, mask=col < 4, other=0.0)
    mix = row_mix(t, part_ptr, mix_ptr, S_A, F_STEPS, BT, SB)
    one = tl.full((1,), 1.0, dtype=tl.float32)
    sumsq = _pick(mix, col, 24) + tl.zeros((1,), dtype=tl.float32)
    rs = tl.div_rn(one, tl.sqrt_rn(tl.div_rn(sumsq, one * (4 * H)) + norm_eps))
    logit = (mix * rs) * s0 + bv
    pre = 1.0 / (1.0 + tl.exp(-logit)) + pre_eps
    tl.store(pre_ptr + t64 * 4 + col, pre, mask=col < 4)
    return pre


@triton.jit
def phase_f_norm(t, pre, w_pre, ro_ptr, pp_ptr, w_ptr, v_ptr, y_ptr, q_ptr, s_ptr, T, H, rows_padded, rms_eps,
                  rms_scale, floor, layout, PP_OWN: tl.constexpr, W_LOADED: tl.constexpr, W_BF16: tl.constexpr,
                  WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr, CW: tl.constexpr,
                  F_CHUNKS: tl.constexpr):  # fmt: skip
    """Row ``t``'s collapse, RMSNorm, y and/or the pair. The collapse weights are ``pre`` (this row's own,
    computed by this program: PP_OWN) or read from ``pp``; the same values either way. ``w_pre``: the
    one-step finish's norm weight, loaded before the wait (W_LOADED)."""
    t64 = t.to(tl.int64)
    if PP_OWN:
        col = tl.arange(0, RECORD)
        p0 = _pick(pre, col, 0)
        p1 = _pick(pre, col, 1)
        p2 = _pick(pre, col, 2)
        p3 = _pick(pre, col, 3)
    else:
        p0 = tl.load(pp_ptr + t64 * 4, cache_modifier=".cg")
        p1 = tl.load(pp_ptr + t64 * 4 + 1, cache_modifier=".cg")
        p2 = tl.load(pp_ptr + t64 * 4 + 2, cache_modifier=".cg")
        p3 = tl.load(pp_ptr + t64 * 4 + 3, cache_modifier=".cg")
    rbase = ro_ptr + t64 * (4 * H)
    if F_CHUNKS == 1:
        vb, ok, cols = _collapse_chunk(rbase, 0, p0, p1, p2, p3, H, HW_CVT, CW)
        vf = bits_to_f32(vb)
        ss = exact_total3(vf * vf)
        rf = _rms_factor(ss, H, rms_eps)
        if not W_LOADED:
            w_pre = load_w(w_ptr, cols, ok, rms_scale, W_BF16)
        _emit_chunk(vb, ok, cols, 0, rf, t, w_pre, y_ptr, q_ptr, s_ptr, T, H, rows_padded, floor, layout,
                    WRITE_Y, WRITE_PAIR, HW_CVT, CW)  # fmt: skip
    else:
        ss = 0.0
        for c in tl.static_range(F_CHUNKS):
            vb, ok, cols = _collapse_chunk(rbase, c, p0, p1, p2, p3, H, HW_CVT, CW)
            tl.store(v_ptr + t64 * H + cols, bits_to_bf16(vb), mask=ok)
            vf = bits_to_f32(vb)
            ss += exact_total3(vf * vf)
        rf = _rms_factor(ss, H, rms_eps)
        tl.debug_barrier()  # every thread's v is stored before any is read back
        for c in tl.static_range(F_CHUNKS):
            cols, ok = chunk_cols(c, H, CW)
            vb = load_bf16_bits(v_ptr + t64 * H + cols, ok, True)
            wf = load_w(w_ptr, cols, ok, rms_scale, W_BF16)
            _emit_chunk(vb, ok, cols, c, rf, t, wf, y_ptr, q_ptr, s_ptr, T, H, rows_padded, floor, layout,
                        WRITE_Y, WRITE_PAIR, HW_CVT, CW)  # fmt: skip
    if WRITE_PAIR:
        if t == T - 1:
            # Scale rows past the last token up to the layout's row alignment are 0.
            zr = tl.arange(0, 16)
            for z0 in range(T, rows_padded, 16):
                for c in tl.static_range(F_CHUNKS):
                    zero = tl.zeros((16, CW, 4), dtype=tl.int32)
                    _store_scales(s_ptr, zero, z0 + zr, c * CW + tl.arange(0, CW), T, rows_padded, H // 32,
                                  H // 128, layout)  # fmt: skip


@triton.jit
def phase_f_split(t, c, w_c, v_ptr, vp_ptr, y_ptr, q_ptr, s_ptr, T, H, rows_padded, rms_eps, floor, layout,
                   WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr, CW: tl.constexpr,
                   NPART: tl.constexpr):  # fmt: skip
    """Chunk ``c`` (CW words) of row ``t``'s finish in the shifted ordering: the row's sum of squares
    from the A items' 16-column partial sums (every chunk sums them, the same bits), then y and/or the
    pair of the chunk's collapse, which the A items wrote. ``w_c``: the chunk's norm weight."""
    t64 = t.to(tl.int64)
    k = tl.arange(0, NPART)
    # The chunk's collapse is loaded with the partial sums, not after their sum: one round trip to L2.
    cols, ok = chunk_cols(c, H, CW)
    vb = load_bf16_bits(v_ptr + t64 * H + cols, ok, True)
    parts = tl.load(vp_ptr + t64 * (H // 16) + k, mask=k < H // 16, other=0.0, cache_modifier=".cg")
    rf = _rms_factor(exact_sum(parts, 0), H, rms_eps)
    _emit_chunk(vb, ok, cols, c, rf, t, w_c, y_ptr, q_ptr, s_ptr, T, H, rows_padded, floor, layout, WRITE_Y,
                WRITE_PAIR, HW_CVT, CW)  # fmt: skip
    if WRITE_PAIR:
        if t == T - 1:
            # Scale rows past the last token up to the layout's row alignment are 0 (this chunk's words).
            zr = tl.arange(0, 16)
            for z0 in range(T, rows_padded, 16):
                zero = tl.zeros((16, CW, 4), dtype=tl.int32)
                _store_scales(s_ptr, zero, z0 + zr, c * CW + tl.arange(0, CW), T, rows_padded, H // 32, H // 128,
                              layout)  # fmt: skip


@triton.jit
def _rms_factor(ss, H, rms_eps):
    """1 / sqrt(sum(v^2) / H + eps), each step rounded as the reference rounds it."""
    one = tl.full((1,), 1.0, dtype=tl.float32)
    return tl.div_rn(one, tl.sqrt_rn(tl.div_rn(ss + tl.zeros((1,), dtype=tl.float32), one * H) + rms_eps))


@triton.jit
def chunk_cols(c, H, CW: tl.constexpr):
    """Columns [CW, 4, 32] of chunk ``c`` of a row (128-column words c * CW ...) and which are in the row."""
    words = c * CW + tl.arange(0, CW)[:, None, None]
    slot = tl.arange(0, 4)[None, :, None]
    lane = tl.arange(0, 32)[None, None, :]
    cols = words * 128 + slot * 32 + lane
    return cols, cols < H


@triton.jit
def _collapse_chunk(rbase, c, p0, p1, p2, p3, H, HW_CVT: tl.constexpr, CW: tl.constexpr):
    """v = bf16(p0 R'_0 + p1 R'_1 + p2 R'_2 + p3 R'_3) on chunk ``c`` of a row, as int32-held patterns."""
    cols, ok = chunk_cols(c, H, CW)
    v = p0 * bits_to_f32(load_bf16_bits(rbase + cols, ok, True))
    v = v + p1 * bits_to_f32(load_bf16_bits(rbase + H + cols, ok, True))
    v = v + p2 * bits_to_f32(load_bf16_bits(rbase + 2 * H + cols, ok, True))
    v = v + p3 * bits_to_f32(load_bf16_bits(rbase + 3 * H + cols, ok, True))
    return bf16_bits(v, HW_CVT), ok, cols


@triton.jit
def load_w(w_ptr, cols, ok, rms_scale, W_BF16: tl.constexpr):
    """The norm weight of a chunk's columns, fp32, times ``rms_scale``."""
    if W_BF16:
        wf = bits_to_f32(load_bf16_bits(w_ptr + cols, ok)) * rms_scale
    else:
        wf = tl.load(w_ptr + cols, mask=ok, other=0.0) * rms_scale
    return wf


@triton.jit
def _emit_chunk(vb, ok, cols, c, rf, t, wf, y_ptr, q_ptr, s_ptr, T, H, rows_padded, floor, layout,
                WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr,
                CW: tl.constexpr):  # fmt: skip
    """y = bf16(v * rf * w) on one chunk of row ``t`` (``wf``: ``load_w`` of its columns): stored,
    and/or its MXFP8 pair (whole scale words)."""
    t64 = t.to(tl.int64)
    v = bits_to_f32(vb)
    yb = tl.where(ok, bf16_bits((v * rf) * wf, HW_CVT), 0)
    if WRITE_Y:
        tl.store(y_ptr + t64 * H + cols, bits_to_bf16(yb), mask=ok)
    if WRITE_PAIR:
        ybits = yb << 16  # the fp32 bits of the bf16-rounded y: the pair is quantize(y)
        amax = tl.max(ybits & 0x7FFFFFFF, axis=2)
        sc = tl.where(floor != 0, mxfp8_scale_bytes(amax, True), mxfp8_scale_bytes(amax, False))
        tl.store(q_ptr + t64 * H + cols, mxfp8_codes(ybits, sc, HW_CVT), mask=ok)
        row1 = t + tl.zeros((1,), dtype=tl.int32)
        _store_scales(s_ptr, sc[None, :, :], row1, c * CW + tl.arange(0, CW), T, rows_padded, H // 32, H // 128,
                      layout)  # fmt: skip
