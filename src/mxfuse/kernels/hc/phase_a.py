"""The boundary kernel's A items (device code): the post step (or a load of R') on a column chunk of a
block of rows, the partial mixes and sums of squares into a record, and in the shifted ordering the
collapse of the chunk. See ``mxfuse.kernels.hc.kernel`` for how items share the grid."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.bf16 import bf16_bits, bits_to_bf16, bits_to_f32, load_bf16_bits
from mxfuse.kernels.hc.plan import RECORD as PLAN_RECORD
from mxfuse.kernels.hc.tile import (
    exact_sum,
    load_post_coefs,
    mix_dot,
    mix_dot_pieces,
    post_values,
    store_streams,
)

__all__ = ["phase_a"]

RECORD = tl.constexpr(PLAN_RECORD)  # kernels may read only constexpr globals


@triton.jit
def phase_a(b, s, x_ptr, r_ptr, post_ptr, comb_ptr, fn_ptr, fnp_ptr, ro_ptr, part_ptr, pp_ptr, v_ptr, vp_ptr,
             T, H, S_A, a_steps, A_POST: tl.constexpr, A_MIX: tl.constexpr, A_COLLAPSE: tl.constexpr,
             MIX_FMA: tl.constexpr, FN_PIECES: tl.constexpr, HW_CVT: tl.constexpr, BT: tl.constexpr,
             BH: tl.constexpr, PREFETCH: tl.constexpr = False, PDL_WAIT: tl.constexpr = False,
             PDL_SIGNAL: tl.constexpr = False):  # fmt: skip
    """Post step (or a load of R'), partial mixes and sum of squares for BT rows x one column chunk
    (A_MIX); with A_COLLAPSE also the collapse v = bf16(sum_i pp_i R'_i) of the chunk, stored, and the
    exactly rounded sum of squares of every 16 columns of v (the shifted ordering, whose collapse
    weights ``pp`` are inputs).

    PREFETCH (an item of one step of CUDA-core mixes, ``a_steps == 1``): the projection weights are
    loaded first, then the programmatic-launch wait and signal (PDL_WAIT, PDL_SIGNAL; the kernel did
    not wait at its top): they are weights, written by no kernel, so they may be read while the previous
    kernel still runs; everything else after the wait."""
    m = tl.arange(0, 32)
    fn_mask = (m < 24)[:, None]  # rows 24..31 of the dot's N are padding: masked loads read nothing
    fn_rows = m.to(tl.int64)[:, None] * (4 * H)
    pf0 = tl.zeros((32, BH), dtype=tl.float32)
    pf1 = pf0
    pf2 = pf0
    pf3 = pf0
    if PREFETCH:
        first = fn_ptr + fn_rows + (s * BH + tl.arange(0, BH))[None, :]
        pf0 = tl.load(first, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        pf1 = tl.load(first + H, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        pf2 = tl.load(first + 2 * H, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        pf3 = tl.load(first + 3 * H, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        if PDL_WAIT:
            tl.extra.cuda.gdc_wait()
        if PDL_SIGNAL:
            tl.extra.cuda.gdc_launch_dependents()
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
            # R' is stored after the mixes have loaded their projection weights: a load after a store
            # to memory it may alias is not moved above it, and would wait a round trip of its own.
            b0, b1, b2, b3 = post_values(x_ptr, r_ptr, rows64, cols, mask, H, p0, p1, p2, p3, c00, c01, c02,
                                         c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33,
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
        if A_MIX:
            # The projection weights are loaded first, before any reduction's barrier or store.
            acc, acc_c = _mix_step(acc, acc_c, b0, b1, b2, b3, g0, g1, g2, g3, fn_ptr, fnp_ptr, fn_rows, fn_mask,
                                   cols, H, pf0, pf1, pf2, pf3, MIX_FMA, FN_PIECES, HW_CVT, PREFETCH)  # fmt: skip
            sq = g0 * g0
            sq = sq + g1 * g1
            sq = sq + g2 * g2
            sq = sq + g3 * g3
            sumsq, sumsq_c = _kahan(sumsq, sumsq_c, exact_sum(sq, 1))
        if A_POST:
            store_streams(ro_ptr, rows64, cols, mask, H, b0, b1, b2, b3)
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
        col = tl.arange(0, RECORD)[None, :]
        record = tl.where(col == 24, sumsq[:, None], acc)
        slot = (b * S_A + s).to(tl.int64) * BT + tl.arange(0, BT)[:, None]
        tl.store(part_ptr + slot * RECORD + col, record)


@triton.jit
def _mix_step(acc, acc_c, b0, b1, b2, b3, g0, g1, g2, g3, fn_ptr, fnp_ptr, fn_rows, fn_mask, cols, H, pf0, pf1,
              pf2, pf3, MIX_FMA: tl.constexpr, FN_PIECES: tl.constexpr, HW_CVT: tl.constexpr,
              PREFETCHED: tl.constexpr):  # fmt: skip
    """One step's partial logits of R' (bits b, values g) added to the running ones (Kahan). PREFETCHED:
    the CUDA-core mixes take the step's projection weights ``pf*``, loaded earlier, instead of loading."""
    fcols = fn_ptr + fn_rows + cols[None, :]
    if MIX_FMA:
        # [BT, 32, BH] products of the four streams, summed over the columns in one reduction.
        if PREFETCHED:
            f0, f1, f2, f3 = pf0, pf1, pf2, pf3
        else:
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
