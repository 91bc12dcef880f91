"""The mHC boundary as one Triton kernel: post step, mixes, Sinkhorn, collapse, RMSNorm and MXFP8 output.

Math and rounding points: ``mxfuse.hc`` (the torch reference) and docs/hc.md.
The launcher here assumes validated arguments; ``mxfuse.hc.mhc_boundary`` validates and dispatches.

The work has two reductions over the whole hidden dimension that later steps depend on: the mixes
(every column of R' feeds the 24 logits, and the normal ordering's collapse needs the resulting ``pre``)
and the RMSNorm's mean square (y needs it before any column is written). Three kinds of item share one
grid, per block of ``BT`` tokens:

  A   post step on a column chunk of the block's rows: R' written, partial mixes and the partial sum
      of squares of R' into a record (the projection weight is spread over every A item)
  F   one row's finish: its records summed into the 24 logits and sum(R'^2) (kept for S), ``pre``;
      then (S may start now) the collapse v = bf16(sum_i p_i R'_i) over the whole row from R' (p = this
      ``pre``, kept in registers, or ``prev_pre`` in the shifted ordering), its sum of squares, then y
      and/or the MXFP8 pair
  S   Sinkhorn of ``rows_s`` rows from their logits: post' and comb' (nothing waits on it); it waits
      only for its rows' logits, so it runs beside the F items' norm (in a launch without A items, an
      item of one row sums the row's records itself instead of waiting for them: ``S_OWN``)

so the residual is read once and R' written once and read back once, from L2; only one hand-off (A to
F) is on the path to y. Programs take tickets from an atomic counter in launch order, and an item of
block b waits (spinning on an acquire load) only for items with smaller tickets: those are already
running and never wait on it, so the kernel cannot deadlock whatever the GPU schedules (the "dynamic
tile index" rule of single-pass scans). A block's F and S items are issued with the A items of block
b + lag. No float atomics, and every reduction whose result another kernel must match bit for bit (the
partial sums of squares and CUDA-core mixes, the records' sum, the norm's sum of squares) goes through
``exact_sum`` (hc_tile): its bits do not depend on the order of the additions, which ``tl.sum`` takes
from whatever register layout the surrounding code leads Triton to pick. So reruns are bitwise
identical, the fused kernel matches the unfused steps, and a token's result does not depend on its
position or on the other tokens. The counters reset themselves (the last item of a block zeroes its
counters; the last ticket zeroes the ticket counter), so a launch needs no memset and a CUDA graph can
capture it. With ``launches=2`` the A items run as one launch and F and S as a second, programmatic
dependent launch that waits for the first with ``griddepcontrol.wait`` instead of counters.

The unfused steps (``hc_steps``) launch the same kernel with some items switched off.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from mxfuse.formats import ScaleLayout, ScaleRounding
from mxfuse.kernels.hc_plan import (
    RECORD as _RECORD_INT,
)
from mxfuse.kernels.hc_plan import (
    HcConfig,
    HcParams,
    HcWorkspace,
    Plan,
    choose_config,
    sm_count,
    split_chunks,
    split_words,
)
from mxfuse.kernels.hc_tile import (
    bf16_bits,
    bits_to_bf16,
    bits_to_f32,
    exact_sum,
    exact_total3,
    load_bf16_bits,
    load_post_coefs,
    mix_dot,
    mix_dot_pieces,
    post_tile,
)
from mxfuse.kernels.mxfp8_tile import (
    mxfp8_codes,
    mxfp8_scale_bytes,
    scale_target,
    store_scale_words,
)
from mxfuse.kernels.pdl import pdl_policy

__all__ = ["launch_boundary", "launch_phases"]

_RECORD = tl.constexpr(_RECORD_INT)  # kernels may read only constexpr globals
N_MIX = tl.constexpr(24)  # logits per token: pre n | post n | comb n*n, n = 4


# ---------------------------------------------------------------------------------------------
# The kernel


@triton.jit
def _arrive(counter):
    """Count this item in: every thread's stores first, then one release increment; the old count."""
    tl.debug_barrier()
    return tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _wait(counter, target):
    """Spin until ``counter >= target``, with acquire semantics (the producers' stores are visible)."""
    seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    while seen < target:
        seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")


@triton.jit
def _reset(counters):
    """Zero a block's three counters (every item that reads them has already passed)."""
    tl.store(counters, 0)
    tl.store(counters + 1, 0)
    tl.store(counters + 2, 0)


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
def _phase_a(b, s, x_ptr, r_ptr, post_ptr, comb_ptr, fn_ptr, fnp_ptr, ro_ptr, part_ptr, pp_ptr, v_ptr, vp_ptr,
             T, H, S_A, a_steps, A_POST: tl.constexpr, A_MIX: tl.constexpr, A_COLLAPSE: tl.constexpr,
             MIX_FMA: tl.constexpr, FN_PIECES: tl.constexpr, HW_CVT: tl.constexpr, BT: tl.constexpr,
             BH: tl.constexpr):  # fmt: skip
    """Post step (or a load of R'), partial mixes and sum of squares for BT rows x one column chunk
    (A_MIX); with A_COLLAPSE also the collapse v = bf16(sum_i pp_i R'_i) of the chunk, stored, and the
    exactly rounded sum of squares of every 16 columns of v (the shifted ordering, whose collapse
    weights ``pp`` are inputs)."""
    rows = b * BT + tl.arange(0, BT)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    mask = row_ok[:, None]
    if A_COLLAPSE:
        q0 = tl.load(pp_ptr + rows64 * 4, mask=row_ok, other=0.0)[:, None]
        q1 = tl.load(pp_ptr + rows64 * 4 + 1, mask=row_ok, other=0.0)[:, None]
        q2 = tl.load(pp_ptr + rows64 * 4 + 2, mask=row_ok, other=0.0)[:, None]
        q3 = tl.load(pp_ptr + rows64 * 4 + 3, mask=row_ok, other=0.0)[:, None]
    if A_POST:
        (p0, p1, p2, p3, c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32,
         c33) = load_post_coefs(post_ptr, comb_ptr, rows64, row_ok)  # fmt: skip
    m = tl.arange(0, 32)
    fn_mask = (m < 24)[:, None]  # rows 24..31 of the dot's N are padding: masked loads read nothing
    fn_rows = m.to(tl.int64)[:, None] * (4 * H)
    # Each step's sums start from zero and are added to the running ones with Kahan's compensation
    # (the kernel runs without FMA contraction, so the correction terms are kept): the error of a record
    # stays that of one step's sums, however many steps an item takes (224 at T = 2048, H = 7168).
    acc = tl.zeros((BT, 32), dtype=tl.float32)
    acc_c = tl.zeros((BT, 32), dtype=tl.float32)
    sumsq = tl.zeros((BT,), dtype=tl.float32)
    sumsq_c = tl.zeros((BT,), dtype=tl.float32)
    for i in range(a_steps):
        cols = (s * a_steps + i) * BH + tl.arange(0, BH)
        rbase = rows64[:, None] * (4 * H) + cols[None, :]
        if A_POST:
            b0, b1, b2, b3 = post_tile(x_ptr, r_ptr, ro_ptr, rows64, cols, mask, H, p0, p1, p2, p3, c00, c01,
                                       c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33,
                                       HW_CVT)  # fmt: skip
        else:
            b0 = load_bf16_bits(ro_ptr + rbase, mask)
            b1 = load_bf16_bits(ro_ptr + rbase + H, mask)
            b2 = load_bf16_bits(ro_ptr + rbase + 2 * H, mask)
            b3 = load_bf16_bits(ro_ptr + rbase + 3 * H, mask)
        g0 = bits_to_f32(b0)
        g1 = bits_to_f32(b1)
        g2 = bits_to_f32(b2)
        g3 = bits_to_f32(b3)
        if A_COLLAPSE:
            # The same products and order as the finish's collapse (_collapse_chunk): the same bits.
            v = q0 * g0
            v = v + q1 * g1
            v = v + q2 * g2
            v = v + q3 * g3
            vb = bf16_bits(v, HW_CVT)
            tl.store(v_ptr + rows64[:, None] * H + cols[None, :], bits_to_bf16(vb), mask=mask)
            vf = bits_to_f32(vb)
            part16 = exact_sum(tl.reshape(vf * vf, (BT, BH // 16, 16)), 2)
            pcols = (s * a_steps + i) * (BH // 16) + tl.arange(0, BH // 16)
            tl.store(vp_ptr + rows64[:, None] * (H // 16) + pcols[None, :], part16, mask=mask)
        if A_MIX:
            sq = g0 * g0
            sq = sq + g1 * g1
            sq = sq + g2 * g2
            sq = sq + g3 * g3
            sumsq, sumsq_c = _kahan(sumsq, sumsq_c, exact_sum(sq, 1))
            acc, acc_c = _mix_step(acc, acc_c, b0, b1, b2, b3, g0, g1, g2, g3, fn_ptr, fnp_ptr, fn_rows, fn_mask,
                                   cols, H, MIX_FMA, FN_PIECES, HW_CVT)  # fmt: skip
    if A_MIX:
        col = tl.arange(0, _RECORD)[None, :]
        record = tl.where(col == 24, sumsq[:, None], acc)
        slot = (b * S_A + s).to(tl.int64) * BT + tl.arange(0, BT)[:, None]
        tl.store(part_ptr + slot * _RECORD + col, record)


@triton.jit
def _mix_step(acc, acc_c, b0, b1, b2, b3, g0, g1, g2, g3, fn_ptr, fnp_ptr, fn_rows, fn_mask, cols, H,
              MIX_FMA: tl.constexpr, FN_PIECES: tl.constexpr, HW_CVT: tl.constexpr):  # fmt: skip
    """One step's partial logits of R' (bits b, values g) added to the running ones (Kahan)."""
    fcols = fn_ptr + fn_rows + cols[None, :]
    if MIX_FMA:
        # [BT, 32, BH] products of the four streams, summed over the columns in one reduction.
        f0 = tl.load(fcols, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        f1 = tl.load(fcols + H, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        f2 = tl.load(fcols + 2 * H, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        f3 = tl.load(fcols + 3 * H, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        part = g0[:, None, :] * f0[None, :, :]
        part = part + g1[:, None, :] * f1[None, :, :]
        part = part + g2[:, None, :] * f2[None, :, :]
        part = part + g3[:, None, :] * f3[None, :, :]
        step = exact_sum(part, 2)
    elif FN_PIECES:
        pcols = fnp_ptr + fn_rows + cols[None, :]
        piece = 24 * 4 * H  # one piece: [24, 4H]
        step = mix_dot_pieces(tl.zeros_like(acc), b0, pcols, piece, fn_mask, HW_CVT)
        step = mix_dot_pieces(step, b1, pcols + H, piece, fn_mask, HW_CVT)
        step = mix_dot_pieces(step, b2, pcols + 2 * H, piece, fn_mask, HW_CVT)
        step = mix_dot_pieces(step, b3, pcols + 3 * H, piece, fn_mask, HW_CVT)
    else:
        step = mix_dot(tl.zeros_like(acc), b0, fcols, fn_mask, HW_CVT)
        step = mix_dot(step, b1, fcols + H, fn_mask, HW_CVT)
        step = mix_dot(step, b2, fcols + 2 * H, fn_mask, HW_CVT)
        step = mix_dot(step, b3, fcols + 3 * H, fn_mask, HW_CVT)
    return _kahan(acc, acc_c, step)


@triton.jit
def _kahan(total, comp, x):
    """Kahan's compensated ``total + x``: the new total and compensation (elementwise, order-free)."""
    y = x - comp
    t = total + y
    return t, (t - total) - y


@triton.jit
def _pick(v, col, j):
    """Element ``j`` of the 1-D tensor ``v`` as a scalar (the others are masked to 0, so a NaN elsewhere
    does not reach it)."""
    return tl.sum(tl.where(col == j, v, 0.0), axis=0)


@triton.jit
def _row_mix(t, part_ptr, mix_ptr, S_A, f_steps, BT: tl.constexpr, SB: tl.constexpr):
    """Row ``t``'s records summed into its 24 logits and sum(R'^2) at 24 ([32]), stored for S and returned.
    The F item and, when it does not wait for the F item, the row's S item compute the same bits."""
    t64 = t.to(tl.int64)
    col = tl.arange(0, _RECORD)
    b = t // BT
    lr = t % BT
    si = tl.arange(0, SB)[:, None]
    acc = tl.zeros((SB, _RECORD), dtype=tl.float32)
    for i in range(f_steps):
        sp = i * SB + si
        ptrs = part_ptr + ((b * S_A + sp).to(tl.int64) * BT + lr) * _RECORD + col[None, :]
        acc += tl.load(ptrs, mask=sp < S_A, other=0.0, cache_modifier=".cg")
    mix = exact_sum(acc, 0)
    tl.store(mix_ptr + t64 * _RECORD + col, mix)
    return mix


@triton.jit
def _phase_f_coef(t, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, f_steps, norm_eps, pre_eps,
                  BT: tl.constexpr, SB: tl.constexpr):  # fmt: skip
    """Row ``t``'s records summed into its 24 logits and sum(R'^2) (stored for S), and ``pre`` (stored
    and returned: [32], the four values first)."""
    t64 = t.to(tl.int64)
    col = tl.arange(0, _RECORD)
    mix = _row_mix(t, part_ptr, mix_ptr, S_A, f_steps, BT, SB)
    one = tl.full((1,), 1.0, dtype=tl.float32)
    sumsq = _pick(mix, col, 24) + tl.zeros((1,), dtype=tl.float32)
    rs = tl.div_rn(one, tl.sqrt_rn(tl.div_rn(sumsq, one * (4 * H)) + norm_eps))
    s0 = tl.load(scale_ptr)
    bv = tl.load(base_ptr + col, mask=col < 4, other=0.0)
    logit = (mix * rs) * s0 + bv
    pre = 1.0 / (1.0 + tl.exp(-logit)) + pre_eps
    tl.store(pre_ptr + t64 * 4 + col, pre, mask=col < 4)
    return pre


@triton.jit
def _phase_f_norm(t, pre, w_pre, ro_ptr, pp_ptr, w_ptr, v_ptr, y_ptr, q_ptr, s_ptr, T, H, rows_padded, rms_eps,
                  rms_scale, floor, layout, PP_OWN: tl.constexpr, W_LOADED: tl.constexpr, W_BF16: tl.constexpr,
                  WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr, CW: tl.constexpr,
                  F_CHUNKS: tl.constexpr):  # fmt: skip
    """Row ``t``'s collapse, RMSNorm, y and/or the pair. The collapse weights are ``pre`` (this row's own,
    computed by this program: PP_OWN) or read from ``pp``; the same values either way. ``w_pre``: the
    one-step finish's norm weight, loaded before the wait (W_LOADED)."""
    t64 = t.to(tl.int64)
    if PP_OWN:
        col = tl.arange(0, _RECORD)
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
            w_pre = _load_w(w_ptr, cols, ok, rms_scale, W_BF16)
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
            cols, ok = _chunk_cols(c, H, CW)
            vb = load_bf16_bits(v_ptr + t64 * H + cols, ok, True)
            wf = _load_w(w_ptr, cols, ok, rms_scale, W_BF16)
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
def _phase_f_split(t, c, w_c, v_ptr, vp_ptr, y_ptr, q_ptr, s_ptr, T, H, rows_padded, rms_eps, floor, layout,
                   WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr, CW: tl.constexpr,
                   NPART: tl.constexpr):  # fmt: skip
    """Chunk ``c`` (CW words) of row ``t``'s finish in the shifted ordering: the row's sum of squares
    from the A items' 16-column partial sums (every chunk sums them, the same bits), then y and/or the
    pair of the chunk's collapse, which the A items wrote. ``w_c``: the chunk's norm weight."""
    t64 = t.to(tl.int64)
    k = tl.arange(0, NPART)
    parts = tl.load(vp_ptr + t64 * (H // 16) + k, mask=k < H // 16, other=0.0, cache_modifier=".cg")
    rf = _rms_factor(exact_sum(parts, 0), H, rms_eps)
    cols, ok = _chunk_cols(c, H, CW)
    vb = load_bf16_bits(v_ptr + t64 * H + cols, ok, True)
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
def _chunk_cols(c, H, CW: tl.constexpr):
    """Columns [CW, 4, 32] of chunk ``c`` of a row (128-column words c * CW ...) and which are in the row."""
    words = c * CW + tl.arange(0, CW)[:, None, None]
    slot = tl.arange(0, 4)[None, :, None]
    lane = tl.arange(0, 32)[None, None, :]
    cols = words * 128 + slot * 32 + lane
    return cols, cols < H


@triton.jit
def _collapse_chunk(rbase, c, p0, p1, p2, p3, H, HW_CVT: tl.constexpr, CW: tl.constexpr):
    """v = bf16(p0 R'_0 + p1 R'_1 + p2 R'_2 + p3 R'_3) on chunk ``c`` of a row, as int32-held patterns."""
    cols, ok = _chunk_cols(c, H, CW)
    v = p0 * bits_to_f32(load_bf16_bits(rbase + cols, ok, True))
    v = v + p1 * bits_to_f32(load_bf16_bits(rbase + H + cols, ok, True))
    v = v + p2 * bits_to_f32(load_bf16_bits(rbase + 2 * H + cols, ok, True))
    v = v + p3 * bits_to_f32(load_bf16_bits(rbase + 3 * H + cols, ok, True))
    return bf16_bits(v, HW_CVT), ok, cols


@triton.jit
def _load_w(w_ptr, cols, ok, rms_scale, W_BF16: tl.constexpr):
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
    """y = bf16(v * rf * w) on one chunk of row ``t`` (``wf``: ``_load_w`` of its columns): stored,
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


@triton.jit
def _mix(mix_ptr, rows64, j, ok):
    return tl.load(mix_ptr + rows64 * _RECORD + j, mask=ok, other=0.0, cache_modifier=".cg")


@triton.jit
def _softmax4(mix_ptr, rows64, ok, j: tl.constexpr, rs, s2, base_ptr, sk_eps):
    """Row j of comb from its four logits: softmax + eps (the reference's first Sinkhorn step)."""
    l0 = (_mix(mix_ptr, rows64, 8 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 8 + 4 * j)
    l1 = (_mix(mix_ptr, rows64, 9 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 9 + 4 * j)
    l2 = (_mix(mix_ptr, rows64, 10 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 10 + 4 * j)
    l3 = (_mix(mix_ptr, rows64, 11 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 11 + 4 * j)
    mx = tl.maximum(tl.maximum(l0, l1), tl.maximum(l2, l3))
    e0 = tl.exp(l0 - mx)
    e1 = tl.exp(l1 - mx)
    e2 = tl.exp(l2 - mx)
    e3 = tl.exp(l3 - mx)
    r = 1.0 / (((e0 + e1) + e2) + e3)
    return e0 * r + sk_eps, e1 * r + sk_eps, e2 * r + sk_eps, e3 * r + sk_eps


@triton.jit
def _norm4(a, b, c, d, eps):
    r = 1.0 / ((((a + b) + c) + d) + eps)
    return a * r, b * r, c * r, d * r


@triton.jit
def _phase_s(b, g, mix_ptr, posto_ptr, combo_ptr, scale_ptr, base_ptr, T, H, norm_eps, post_scale, sk_eps,
             sk_iters, BT: tl.constexpr, RS: tl.constexpr):  # fmt: skip
    """post' and comb' of RS rows from their logits. Each of the 16 entries of comb is a [RS] tensor, so
    the row and column sums of Sinkhorn are adds between tensors: no reduction across threads."""
    rows = b * BT + g * RS + tl.arange(0, RS)
    ok = rows < T
    r64 = rows.to(tl.int64)
    ones = tl.full((RS,), 1.0, dtype=tl.float32)
    rs = tl.div_rn(ones, tl.sqrt_rn(tl.div_rn(_mix(mix_ptr, r64, 24, ok), ones * (4 * H)) + norm_eps))
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    for k in tl.static_range(4):
        lg = (_mix(mix_ptr, r64, 4 + k, ok) * rs) * s1 + tl.load(base_ptr + 4 + k)
        tl.store(posto_ptr + r64 * 4 + k, (1.0 / (1.0 + tl.exp(-lg))) * post_scale, mask=ok)
    c00, c01, c02, c03 = _softmax4(mix_ptr, r64, ok, 0, rs, s2, base_ptr, sk_eps)
    c10, c11, c12, c13 = _softmax4(mix_ptr, r64, ok, 1, rs, s2, base_ptr, sk_eps)
    c20, c21, c22, c23 = _softmax4(mix_ptr, r64, ok, 2, rs, s2, base_ptr, sk_eps)
    c30, c31, c32, c33 = _softmax4(mix_ptr, r64, ok, 3, rs, s2, base_ptr, sk_eps)
    c00, c10, c20, c30 = _norm4(c00, c10, c20, c30, sk_eps)
    c01, c11, c21, c31 = _norm4(c01, c11, c21, c31, sk_eps)
    c02, c12, c22, c32 = _norm4(c02, c12, c22, c32, sk_eps)
    c03, c13, c23, c33 = _norm4(c03, c13, c23, c33, sk_eps)
    it = 1
    while it < sk_iters:
        c00, c01, c02, c03 = _norm4(c00, c01, c02, c03, sk_eps)
        c10, c11, c12, c13 = _norm4(c10, c11, c12, c13, sk_eps)
        c20, c21, c22, c23 = _norm4(c20, c21, c22, c23, sk_eps)
        c30, c31, c32, c33 = _norm4(c30, c31, c32, c33, sk_eps)
        c00, c10, c20, c30 = _norm4(c00, c10, c20, c30, sk_eps)
        c01, c11, c21, c31 = _norm4(c01, c11, c21, c31, sk_eps)
        c02, c12, c22, c32 = _norm4(c02, c12, c22, c32, sk_eps)
        c03, c13, c23, c33 = _norm4(c03, c13, c23, c33, sk_eps)
        it += 1
    o = combo_ptr + r64 * 16
    tl.store(o, c00, mask=ok)
    tl.store(o + 1, c01, mask=ok)
    tl.store(o + 2, c02, mask=ok)
    tl.store(o + 3, c03, mask=ok)
    tl.store(o + 4, c10, mask=ok)
    tl.store(o + 5, c11, mask=ok)
    tl.store(o + 6, c12, mask=ok)
    tl.store(o + 7, c13, mask=ok)
    tl.store(o + 8, c20, mask=ok)
    tl.store(o + 9, c21, mask=ok)
    tl.store(o + 10, c22, mask=ok)
    tl.store(o + 11, c23, mask=ok)
    tl.store(o + 12, c30, mask=ok)
    tl.store(o + 13, c31, mask=ok)
    tl.store(o + 14, c32, mask=ok)
    tl.store(o + 15, c33, mask=ok)


@triton.jit(
    do_not_specialize=[
        "T", "NB", "S_A", "rows_padded", "total", "round_size", "off_f", "off_s", "lag", "a_steps", "f_steps",
        "sk_iters", "floor", "layout",
    ]
)  # fmt: skip
def _hc_kernel(
    x_ptr, r_ptr, post_ptr, comb_ptr, pp_ptr, fn_ptr, fnp_ptr, scale_ptr, base_ptr, w_ptr,
    ro_ptr, pre_ptr, posto_ptr, combo_ptr, v_ptr, y_ptr, q_ptr, s_ptr, vp_ptr,
    cnt_ptr, part_ptr, mix_ptr,
    T, H, NB, S_A, rows_padded, total, round_size, off_f, off_s, lag, a_steps, f_steps,
    norm_eps, pre_eps, post_scale, sk_eps, sk_iters, rms_eps, rms_scale, floor, layout,
    HAS_A: tl.constexpr, A_POST: tl.constexpr, MIX_FMA: tl.constexpr, FN_PIECES: tl.constexpr, HAS_F: tl.constexpr, COEF: tl.constexpr, NORM: tl.constexpr, PP_OWN: tl.constexpr,
    HAS_S: tl.constexpr, TICKETS: tl.constexpr, PDL_SIGNAL: tl.constexpr,
    PDL_WAIT: tl.constexpr, W_BF16: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr,
    HW_CVT: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr, RS: tl.constexpr, SB: tl.constexpr,
    CW: tl.constexpr, F_CHUNKS: tl.constexpr, W_LOADED: tl.constexpr, A_MIX: tl.constexpr,
    A_COLLAPSE: tl.constexpr, SPLIT: tl.constexpr, NPART: tl.constexpr, S_OWN: tl.constexpr,
    PDL_WAIT_TOP: tl.constexpr,
):  # fmt: skip
    if PDL_WAIT_TOP:
        # A programmatic dependent of the previous kernel (whose output may be x): wait before anything,
        # and signal only after, so that the second launch's work before its own wait (which reads x)
        # never runs ahead of that kernel.
        tl.extra.cuda.gdc_wait()
    if PDL_SIGNAL:
        tl.extra.cuda.gdc_launch_dependents()
    # A launch that waits on the A launch (PDL_WAIT) has no A items: its F and S items wait below, after
    # taking their ticket and loading what the A launch does not write (the previous launch of this
    # kernel, which last touched the counters, finished before the A launch began).
    if TICKETS:
        ticket = tl.atomic_add(cnt_ptr, 1, sem="relaxed", scope="gpu")
        if ticket == total - 1:
            tl.atomic_xchg(
                cnt_ptr, 0, sem="relaxed", scope="gpu"
            )  # every ticket taken: ready for the next launch
    else:
        ticket = tl.program_id(0)
    rnd = ticket // round_size
    pos = ticket % round_size
    blocks = cnt_ptr + 2  # three counters per block: A, F and S arrivals
    if pos < off_f:
        if HAS_A:
            b = rnd
            if b < NB:
                _phase_a(b, pos, x_ptr, r_ptr, post_ptr, comb_ptr, fn_ptr, fnp_ptr, ro_ptr, part_ptr, pp_ptr, v_ptr,
                         vp_ptr, T, H, S_A, a_steps, A_POST, A_MIX, A_COLLAPSE, MIX_FMA, FN_PIECES, HW_CVT, BT,
                         BH)  # fmt: skip
                if TICKETS:
                    _arrive(blocks + b * 3)
    elif pos < off_s:
        if HAS_F and SPLIT:
            # The shifted ordering's finish, F_CHUNKS items a row: chunk 0 also computes the row's
            # logits and pre. Every item arrives once, after its wait (chunk 0 after the logits), so S,
            # which resets the counters, runs after every item has read them.
            b = rnd - lag
            lr = (pos - off_f) // F_CHUNKS
            c = (pos - off_f) % F_CHUNKS
            t = b * BT + lr
            if (b >= 0) & (t < T):
                n_items = tl.minimum(T - b * BT, BT) * F_CHUNKS
                cols_c, ok_c = _chunk_cols(c, H, CW)
                w_c = tl.zeros((CW, 4, 32), dtype=tl.float32)
                if NORM:
                    w_c = _load_w(w_ptr, cols_c, ok_c, rms_scale, W_BF16)
                if PDL_WAIT:
                    tl.extra.cuda.gdc_wait()
                if HAS_A:
                    _wait(blocks + b * 3, S_A)
                if COEF:
                    if c == 0:
                        _phase_f_coef(t, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, f_steps,
                                      norm_eps, pre_eps, BT, SB)  # fmt: skip
                if not S_OWN:
                    old = _arrive(blocks + b * 3 + 1)
                    if not HAS_S:
                        if old == n_items - 1:
                            _reset(blocks + b * 3)
                if NORM:
                    _phase_f_split(t, c, w_c, v_ptr, vp_ptr, y_ptr, q_ptr, s_ptr, T, H, rows_padded, rms_eps, floor,
                                   layout, WRITE_Y, WRITE_PAIR, HW_CVT, CW, NPART)  # fmt: skip
        elif HAS_F:
            b = rnd - lag
            t = b * BT + (pos - off_f)
            if (b >= 0) & (t < T):
                w_pre = tl.zeros((CW, 4, 32), dtype=tl.float32)
                if W_LOADED:
                    cols0, ok0 = _chunk_cols(0, H, CW)
                    w_pre = _load_w(w_ptr, cols0, ok0, rms_scale, W_BF16)
                if PDL_WAIT:
                    tl.extra.cuda.gdc_wait()
                if HAS_A:
                    _wait(blocks + b * 3, S_A)
                pre = tl.zeros((_RECORD,), dtype=tl.float32)
                if COEF:
                    pre = _phase_f_coef(t, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, f_steps,
                                        norm_eps, pre_eps, BT, SB)  # fmt: skip
                    if HAS_S:
                        if not S_OWN:
                            _arrive(blocks + b * 3 + 1)  # S needs only the logits: it runs beside the norm
                if NORM:
                    _phase_f_norm(t, pre, w_pre, ro_ptr, pp_ptr, w_ptr, v_ptr, y_ptr, q_ptr, s_ptr, T, H,
                                  rows_padded, rms_eps, rms_scale, floor, layout, PP_OWN, W_LOADED, W_BF16,
                                  WRITE_Y, WRITE_PAIR, HW_CVT, CW, F_CHUNKS)  # fmt: skip
                if not (COEF and HAS_S):
                    old = _arrive(blocks + b * 3 + 1)
                    if not HAS_S:
                        if old == tl.minimum(T - b * BT, BT) - 1:
                            _reset(blocks + b * 3)
    else:
        if HAS_S:
            b = rnd - lag
            g = pos - off_s
            n_rows = tl.minimum(T - b * BT, BT)
            if (b >= 0) & (g * RS < n_rows):
                if PDL_WAIT:
                    tl.extra.cuda.gdc_wait()
                if S_OWN:
                    # One row an item, no A items in this launch: the item sums its row's records itself
                    # (the F item's bits) instead of waiting for the F item's logits; nothing waits on
                    # the F items, so they do not arrive.
                    _row_mix(b * BT + g, part_ptr, mix_ptr, S_A, f_steps, BT, SB)
                    tl.debug_barrier()  # the row's logits stored by every thread before any reads them
                elif HAS_F:
                    target = n_rows
                    if SPLIT:
                        target = n_rows * F_CHUNKS
                    _wait(blocks + b * 3 + 1, target)
                elif HAS_A:
                    _wait(blocks + b * 3, S_A)
                _phase_s(b, g, mix_ptr, posto_ptr, combo_ptr, scale_ptr, base_ptr, T, H, norm_eps, post_scale,
                         sk_eps, sk_iters, BT, RS)  # fmt: skip
                old = _arrive(blocks + b * 3 + 2)
                if old == (n_rows + RS - 1) // RS - 1:
                    _reset(blocks + b * 3)


# ---------------------------------------------------------------------------------------------
# Launch


def launch_phases(
    *,
    phases: tuple[int, int, int],
    tokens: int,
    hidden: int,
    config: HcConfig,
    pdl: bool = False,
    **options: object,
) -> None:
    """Run the items switched on in ``phases`` (A, F, S) over ``tokens`` rows of ``hidden`` columns.

    ``options`` are ``_launch``'s: ``tensors`` maps the kernel's pointer names (``x``, ``r``, ``post``,
    ``comb``, ``pp``, ``fn``, ``scale``, ``base``, ``w``, ``ro``, ``pre``, ``posto``, ``combo``, ``v``,
    ``y``, ``q``, ``s``) to validated tensors (an item that is off never touches its pointers; missing
    ones get a dummy; ``v`` None: the workspace's collapse buffer, which only a finish of more than one
    step uses); ``scalars`` and ``workspace``; ``a_post`` (A computes R' from x and R, else reads it);
    ``coef``/``norm``: what an F item does (logits and pre; collapse, norm and outputs, the collapse
    weights being ``pp``, which may be ``pre`` itself: the row's own, stored first); ``write_y``,
    ``write_pair``, ``floor``, ``layout_code``, ``rows_padded`` and ``hw_cvt``. ``config.launches == 2``
    with A and F both on runs A as one launch and F and S as a second (a programmatic dependent launch
    when ``pdl``).
    """
    config.check(hidden)
    # The first launch is a programmatic dependent of the kernel before it when the policy says so.
    top = pdl and phases[0] and pdl_policy(options["workspace"].device).wait
    if config.launches == 2 and phases[0] and (phases[1] or phases[2]):
        one = dataclasses.replace(config, launches=1)
        keys = ("tensors", "scalars", "workspace", "a_post", "a_mix", "a_collapse", "hw_cvt")
        a_options = {k: options[k] for k in keys if k in options}
        _launch(phases=(1, 0, 0), tokens=tokens, hidden=hidden, config=one, pdl_signal=pdl, pdl_wait_top=top,
                **a_options)  # fmt: skip
        a_plan = Plan.make(tokens, hidden, one, phases=(1, 0, 0))
        rest = {k: v for k, v in options.items() if k not in ("a_post", "a_mix", "a_collapse")}
        # The second launch does not signal: the GEMM after it (a dependent) launches as its programs
        # exit; resident early, beside this launch's items, it ran slower (H200, benchmarks/RESULTS.md).
        _launch(phases=(0, phases[1], phases[2]), tokens=tokens, hidden=hidden, config=one, pdl_wait=pdl,
                a_plan=a_plan, **rest)  # fmt: skip
        return
    _launch(phases=phases, tokens=tokens, hidden=hidden, config=config, pdl_wait_top=top, **options)


def _launch(
    *,
    phases: tuple[int, int, int],
    tokens: int,
    hidden: int,
    tensors: dict[str, torch.Tensor | None],
    scalars: HcParams,
    workspace: HcWorkspace,
    config: HcConfig,
    a_post: bool = False,
    a_mix: bool = True,
    a_collapse: bool = False,
    split: bool = False,
    coef: bool = False,
    norm: bool = False,
    write_y: bool = False,
    write_pair: bool = False,
    floor: bool = False,
    layout_code: int = 1,
    rows_padded: int = 0,
    hw_cvt: bool = True,
    pdl_signal: bool = False,
    pdl_wait: bool = False,
    pdl_wait_top: bool = False,
    a_plan: Plan | None = None,
) -> None:
    split = split and bool(phases[1])
    a_collapse = a_collapse and bool(phases[0])
    plan = Plan.make(tokens, hidden, config, phases=phases, split=split)
    if plan.total == 0:
        return
    splits_a = (a_plan or plan).splits_a  # F reads the records of the A items, launched here or before
    cw = split_words(config) if split else config.words_f
    f_chunks = split_chunks(hidden, config) if split else -(-(hidden // 128) // config.words_f)
    need_v = (a_collapse or (norm and (split or f_chunks > 1))) and tensors.get("v") is None
    counters, scratch, v_ws = workspace.buffers(
        plan.n_counters, plan.n_scratch, tokens * hidden if need_v else 0
    )
    dummy = counters
    ptrs = {name: (dummy if tensors.get(name) is None else tensors[name]) for name in _POINTERS}
    if need_v:
        ptrs["v"] = v_ws
    if a_collapse or (norm and split):
        ptrs["vp"] = workspace.partials(tokens * (hidden // 16))
    w = tensors.get("w")
    sb = min(64, triton.next_power_of_2(splits_a))
    # A launch without A items runs on warps_f; its one-step finish then loads the norm weight before
    # it waits (on 8 or more warps the extra registers fit; on 4 they would spill).
    warps = config.warps_f if config.warps_f and not phases[0] else config.num_warps
    tickets = bool(phases[1] or phases[2])
    _hc_kernel[(plan.total,)](
        *(ptrs[name] for name in _POINTERS),
        counters,
        scratch,
        scratch[plan.mix_offset :],
        tokens,
        hidden,
        plan.blocks,
        splits_a,
        rows_padded,
        plan.total,
        plan.round_size,
        *plan.offsets,
        plan.lag,
        config.steps_a,
        -(-splits_a // sb),
        scalars.hc_norm_eps,
        scalars.hc_pre_eps,
        scalars.hc_post_scale,
        scalars.sinkhorn_eps,
        scalars.sinkhorn_iters,
        scalars.rms_eps,
        scalars.rms_scale,
        int(floor),
        layout_code,
        HAS_A=bool(phases[0]),
        A_POST=a_post,
        MIX_FMA=config.mix == "fma",
        FN_PIECES=config.mix == "dot" and tensors.get("fnp") is not None,
        HAS_F=bool(phases[1]),
        COEF=coef,
        NORM=norm,
        PP_OWN=bool(
            coef and norm and tensors.get("pp") is not None and tensors.get("pp") is tensors.get("pre")
        ),
        HAS_S=bool(phases[2]),
        TICKETS=tickets,
        PDL_SIGNAL=pdl_signal,
        PDL_WAIT=pdl_wait,
        W_BF16=w is not None and w.dtype == torch.bfloat16,
        WRITE_Y=write_y,
        WRITE_PAIR=write_pair,
        HW_CVT=hw_cvt,
        BT=config.block_t,
        BH=config.block_h,
        RS=config.rows_s,
        SB=sb,
        CW=cw,
        F_CHUNKS=f_chunks,
        W_LOADED=bool(norm and not split and f_chunks == 1 and warps >= 8),
        A_MIX=a_mix,
        A_COLLAPSE=a_collapse,
        SPLIT=split,
        NPART=triton.next_power_of_2(hidden // 16),
        # The Sinkhorn item of one row sums its records itself when this launch has no A items to wait on.
        S_OWN=bool(coef and phases[1] and phases[2] and not phases[0] and config.rows_s == 1),
        PDL_WAIT_TOP=pdl_wait_top,
        num_warps=warps,
        num_stages=config.stages,
        enable_fp_fusion=False,
        **({"launch_pdl": True} if pdl_wait or pdl_wait_top else {}),
    )


_POINTERS = ("x", "r", "post", "comb", "pp", "fn", "fnp", "scale", "base", "w",
             "ro", "pre", "posto", "combo", "v", "y", "q", "s", "vp")  # fmt: skip


def launch_boundary(
    x: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    prev_pre: torch.Tensor | None,
    fn: torch.Tensor,
    scale: torch.Tensor,
    base: torch.Tensor,
    norm_weight: torch.Tensor,
    *,
    scalars: HcParams,
    residual_out: torch.Tensor,
    pre_out: torch.Tensor,
    post_out: torch.Tensor,
    comb_out: torch.Tensor,
    y_out: torch.Tensor | None,
    pair_out: tuple[torch.Tensor, torch.Tensor] | None,
    rounding: ScaleRounding,
    layout: ScaleLayout,
    workspace: HcWorkspace,
    config: HcConfig | None = None,
    hw_cvt: bool = True,
    fn_pieces: torch.Tensor | None = None,
) -> None:
    """The fused boundary into the given outputs (validated by the caller): one launch, or two when the
    configuration says so. ``fn_pieces``: ``HcProjection.pieces`` of ``fn``, which the tensor-core mixes
    then read instead of splitting fn in every step.

    Shifted ordering when ``prev_pre`` is given (the collapse takes it), normal otherwise (the collapse
    takes the pre each row's finish computes). In the shifted ordering the A items compute the collapse
    and the sums of squares of its 16-column slices, and a row's finish is split over items of
    ``words_n`` words (``split_words``), each summing the row's slices; in the normal ordering one item
    finishes a row. A finish of more than one step, and the split finish, keep the collapse v in
    ``y_out`` when y is wanted (each value is then overwritten with y), else in the workspace.
    """
    tokens, hidden = x.shape
    if tokens == 0:
        return
    shifted = prev_pre is not None
    tensors = {
        "x": x, "r": residual, "post": post, "comb": comb, "pp": prev_pre if shifted else pre_out, "fn": fn, "fnp": fn_pieces,
        "scale": scale, "base": base, "w": norm_weight, "ro": residual_out, "pre": pre_out, "posto": post_out,
        "combo": comb_out, "v": y_out, "y": y_out,
    }  # fmt: skip
    layout_code, rows_padded = 1, 0
    if pair_out is not None:
        q, scales = pair_out
        target = scale_target(scales, m=tokens, k=hidden, layout=layout)
        tensors["q"] = q if hw_cvt else q.view(torch.uint8)
        tensors["s"], layout_code, rows_padded = target
    launch_phases(
        phases=(1, 1, 1),
        tokens=tokens,
        hidden=hidden,
        tensors=tensors,
        scalars=scalars,
        workspace=workspace,
        config=config or choose_config(tokens, hidden, shifted=shifted, sms=sm_count(x.device)),
        a_post=True,
        a_collapse=shifted,
        split=shifted,
        coef=True,
        norm=True,
        write_y=y_out is not None,
        write_pair=pair_out is not None,
        floor=rounding is ScaleRounding.FLOOR,
        layout_code=layout_code,
        rows_padded=rows_padded,
        hw_cvt=hw_cvt,
        pdl=hw_cvt,
    )
