"""The mHC boundary as one Triton kernel: post step, mixes, Sinkhorn, collapse, RMSNorm and MXFP8 output.

Math and rounding points: ``mxfuse.hc`` (the torch reference) and docs/hc.md.
The launcher here assumes validated arguments; ``mxfuse.hc.mhc_boundary`` validates and dispatches.

The work has two reductions over the whole hidden dimension that later steps depend on: the mixes
(every column of R' feeds the 24 logits, and the normal ordering's collapse needs the resulting ``pre``)
and the RMSNorm's mean square (y needs it before any column is written). A token's data is therefore
cut into column chunks processed by different programs, in four phases per block of ``BT`` tokens:

  A   post step on a column chunk: R' written, partial mixes and sum of squares of R' into a record;
      shifted ordering (collapse weights known up front): the collapse v and its partial sum of squares
  R   per group of rows: sum the A records in split order, Sinkhorn, write pre, post', comb'
  N1  normal ordering only, per column chunk: collapse v = bf16(sum_i pre_i R'_i) from R', partial
      sums of squares of v
  N2  per column chunk: y = bf16(v * rsqrt(mean(v^2) + eps) * w), its MXFP8 pair and/or y itself

so the residual is read once and R' written once (and read back once, from L2, in the normal
ordering). Programs take tickets from an atomic counter in launch order, and a phase's item of block
b waits (spinning on an acquire load) only for items with smaller tickets: those are already running
and never wait on it, so the kernel cannot deadlock whatever the GPU schedules (the "dynamic tile
index" rule of single-pass scans). Phase q of block b is issued with the items of block b + q * lag,
so at large T the later phases of one block run beside the post steps of the next ones, reading R'
and v while they are still in L2. Every sum has a fixed order (records in split order, no float
atomics), so reruns are bitwise identical and a token's result does not depend on its position. The
counters reset themselves (the last item of a block zeroes them; the last ticket zeroes the ticket
counter), so a launch needs no memset and a CUDA graph can capture it.

The unfused steps (``hc_steps``) launch the same kernel with some phases switched off.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from mxfuse.formats import ScaleLayout, ScaleRounding, align, scale_spec, scale_storage_view
from mxfuse.kernels.hc_plan import (
    RECORD as _RECORD_INT,
)
from mxfuse.kernels.hc_plan import (
    HcConfig,
    HcParams,
    HcWorkspace,
    Plan,
    default_config,
    sm_count,
)
from mxfuse.kernels.hc_tile import (
    bf16_bits,
    bits_to_bf16,
    bits_to_f32,
    load_bf16_bits,
    load_post_coefs,
    mix_dot,
    post_tile,
)
from mxfuse.kernels.mxfp8_tile import (
    ROWS_ALIGN,
    mxfp8_codes,
    mxfp8_scale_bytes,
    scale_layout_code,
    store_scale_words,
)

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
    """Zero a block's four phase counters (every item that reads them has already passed)."""
    tl.store(counters + tl.arange(0, 4), tl.zeros((4,), dtype=tl.int32))


@triton.jit
def _coef(ptr, rows64, idx, row_ok, CG: tl.constexpr = False):
    if CG:
        return tl.load(ptr + rows64 * 4 + idx, mask=row_ok, other=0.0, cache_modifier=".cg")
    return tl.load(ptr + rows64 * 4 + idx, mask=row_ok, other=0.0)


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
def _phase_a(b, s, x_ptr, r_ptr, post_ptr, comb_ptr, pp_ptr, fn_ptr, ro_ptr, v_ptr, part_ptr, T, H, S_A,
             a_steps, A_POST: tl.constexpr, A_V: tl.constexpr, HW_CVT: tl.constexpr, BT: tl.constexpr,
             BH: tl.constexpr):  # fmt: skip
    """Post step (or a load of R'), partial mixes and sums of squares for BT rows x one column chunk."""
    rows = b * BT + tl.arange(0, BT)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    mask = row_ok[:, None]
    if A_POST:
        (p0, p1, p2, p3, c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32,
         c33) = load_post_coefs(post_ptr, comb_ptr, rows64, row_ok)  # fmt: skip
    if A_V:
        q0 = _coef(pp_ptr, rows64, 0, row_ok)
        q1 = _coef(pp_ptr, rows64, 1, row_ok)
        q2 = _coef(pp_ptr, rows64, 2, row_ok)
        q3 = _coef(pp_ptr, rows64, 3, row_ok)
    m = tl.arange(0, 32)
    fn_mask = (m < 24)[:, None]  # rows 24..31 of the dot's N are padding: masked loads read nothing
    fn_rows = m.to(tl.int64)[:, None] * (4 * H)
    acc = tl.zeros((BT, 32), dtype=tl.float32)
    sumsq = tl.zeros((BT,), dtype=tl.float32)
    sumv2 = tl.zeros((BT,), dtype=tl.float32)
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
        sq = g0 * g0
        sq = sq + g1 * g1
        sq = sq + g2 * g2
        sq = sq + g3 * g3
        sumsq += tl.sum(sq, axis=1)
        fcols = fn_ptr + fn_rows + cols[None, :]
        acc = mix_dot(acc, b0, fcols, fn_mask, HW_CVT)
        acc = mix_dot(acc, b1, fcols + H, fn_mask, HW_CVT)
        acc = mix_dot(acc, b2, fcols + 2 * H, fn_mask, HW_CVT)
        acc = mix_dot(acc, b3, fcols + 3 * H, fn_mask, HW_CVT)
        if A_V:
            v = q0[:, None] * g0
            v = v + q1[:, None] * g1
            v = v + q2[:, None] * g2
            v = v + q3[:, None] * g3
            vb = bf16_bits(v, HW_CVT)
            tl.store(v_ptr + rows64[:, None] * H + cols[None, :], bits_to_bf16(vb), mask=mask)
            vf = bits_to_f32(vb)
            sumv2 += tl.sum(vf * vf, axis=1)
    col = tl.arange(0, _RECORD)[None, :]
    record = tl.where(col == 24, sumsq[:, None], tl.where(col == 25, sumv2[:, None], acc))
    slot = (b * S_A + s).to(tl.int64) * BT + tl.arange(0, BT)[:, None]
    tl.store(part_ptr + slot * _RECORD + col, record)


@triton.jit
def _phase_r(b, g, part_ptr, stat_ptr, pre_ptr, posto_ptr, combo_ptr, scale_ptr, base_ptr, T, H, S_A,
             r_steps, norm_eps, pre_eps, post_scale, sk_eps, sk_iters, A_V: tl.constexpr, BT: tl.constexpr,
             RB: tl.constexpr, SB: tl.constexpr):  # fmt: skip
    """Coefficients of RB rows: A records summed in split order, normalised, sigmoids, Sinkhorn.

    A row's 32 record values are held as [8 groups, 4]: group 0 pre, 1 post, 2..5 the rows j of comb,
    6 the two sums of squares.
    """
    lr = g * RB + tl.arange(0, RB)
    rows = b * BT + lr
    row_ok = rows < T
    grp = tl.arange(0, 8)[None, :, None]
    lane = tl.arange(0, 4)[None, None, :]
    col = grp * 4 + lane
    si = tl.arange(0, SB)[:, None, None, None]
    t = tl.zeros((RB, 8, 4), dtype=tl.float32)
    for i in range(r_steps):
        sp = i * SB + si
        ptrs = part_ptr + ((b * S_A + sp).to(tl.int64) * BT + lr[None, :, None, None]) * _RECORD + col[None]
        t += tl.sum(tl.load(ptrs, mask=sp < S_A, other=0.0, cache_modifier=".cg"), axis=0)
    sumsq = tl.sum(tl.sum(tl.where(col == 24, t, 0.0), axis=2), axis=1)
    sumv2 = tl.sum(tl.sum(tl.where(col == 25, t, 0.0), axis=2), axis=1)
    ones = tl.full((RB,), 1.0, dtype=tl.float32)
    rs = tl.div_rn(ones, tl.sqrt_rn(tl.div_rn(sumsq, ones * (4 * H)) + norm_eps))
    sv = tl.load(scale_ptr + tl.where(grp == 0, 0, tl.where(grp == 1, 1, 2)))
    bv = tl.load(base_ptr + col, mask=col < N_MIX, other=0.0)
    logit = tl.where(col < N_MIX, (t * rs[:, None, None]) * sv + bv, 0.0)
    sig = 1.0 / (1.0 + tl.exp(-logit))
    rows3 = rows.to(tl.int64)[:, None, None]
    ok3 = row_ok[:, None, None]
    at = rows3 * 4 + lane + grp * 0  # the full [RB, 8, 4] shape: stores do not broadcast their pointers
    tl.store(pre_ptr + at, sig + pre_eps, mask=ok3 & (grp == 0))
    tl.store(posto_ptr + at, sig * post_scale, mask=ok3 & (grp == 1))
    # Sinkhorn on groups 2..5: softmax along each row, then column / row normalisations, ending on a
    # column step; the other groups are held at 0 so they never enter a column sum.
    is_comb = (grp >= 2) & (grp < 6)
    e = tl.exp(logit - tl.max(logit, axis=2)[:, :, None])
    c = tl.where(is_comb, e / tl.sum(e, axis=2)[:, :, None] + sk_eps, 0.0)
    c = tl.where(is_comb, c / (tl.sum(c, axis=1)[:, None, :] + sk_eps), 0.0)
    it = 1
    while it < sk_iters:
        c = tl.where(is_comb, c / (tl.sum(c, axis=2)[:, :, None] + sk_eps), 0.0)
        c = tl.where(is_comb, c / (tl.sum(c, axis=1)[:, None, :] + sk_eps), 0.0)
        it += 1
    tl.store(combo_ptr + rows3 * 16 + (grp - 2) * 4 + lane, c, mask=ok3 & is_comb)
    if A_V:
        tl.store(stat_ptr + rows, sumv2, mask=row_ok)


@triton.jit
def _phase_n1(b, s, ro_ptr, p_ptr, v_ptr, partn_ptr, T, H, S_N, n_steps, HW_CVT: tl.constexpr,
              BT: tl.constexpr, BR: tl.constexpr, W: tl.constexpr):  # fmt: skip
    """Collapse v = bf16(sum_i p_i R'_i) on one column chunk of BT rows; partial sums of v^2 per row."""
    rl = tl.arange(0, BR)
    for ri in range(BT // BR):
        r0 = b * BT + ri * BR
        if r0 < T:
            rows = r0 + rl
            row_ok = rows < T
            rows64 = rows.to(tl.int64)
            mask = row_ok[:, None]
            p0 = _coef(p_ptr, rows64, 0, row_ok, True)
            p1 = _coef(p_ptr, rows64, 1, row_ok, True)
            p2 = _coef(p_ptr, rows64, 2, row_ok, True)
            p3 = _coef(p_ptr, rows64, 3, row_ok, True)
            ss = tl.zeros((BR,), dtype=tl.float32)
            for i in range(n_steps):
                cols = (s * n_steps + i) * (W * 128) + tl.arange(0, W * 128)
                rbase = rows64[:, None] * (4 * H) + cols[None, :]
                v = p0[:, None] * bits_to_f32(load_bf16_bits(ro_ptr + rbase, mask, True))
                v = v + p1[:, None] * bits_to_f32(load_bf16_bits(ro_ptr + rbase + H, mask, True))
                v = v + p2[:, None] * bits_to_f32(load_bf16_bits(ro_ptr + rbase + 2 * H, mask, True))
                v = v + p3[:, None] * bits_to_f32(load_bf16_bits(ro_ptr + rbase + 3 * H, mask, True))
                vb = bf16_bits(v, HW_CVT)
                tl.store(v_ptr + rows64[:, None] * H + cols[None, :], bits_to_bf16(vb), mask=mask)
                vf = bits_to_f32(vb)
                ss += tl.sum(vf * vf, axis=1)
            tl.store(partn_ptr + (b * S_N + s).to(tl.int64) * BT + ri * BR + rl, ss)


@triton.jit
def _phase_n2(b, s, v_ptr, w_ptr, y_ptr, q_ptr, s_ptr, partn_ptr, stat_ptr, T, H, NB, S_N, n_steps,
              rows_padded, rms_eps, rms_scale, floor, layout, HAS_N1: tl.constexpr, W_BF16: tl.constexpr,
              WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr,
              BT: tl.constexpr, BR: tl.constexpr, W: tl.constexpr, SN_PAD: tl.constexpr,
              Z_STEPS: tl.constexpr):  # fmt: skip
    """RMSNorm of v on one column chunk of BT rows, then y and/or its MXFP8 pair (whole scale words)."""
    rl = tl.arange(0, BR)
    wi = tl.arange(0, W)
    slot = tl.arange(0, 4)[None, None, :, None]
    lane = tl.arange(0, 32)[None, None, None, :]
    n_words = H // 128
    n_groups = H // 32
    for ri in range(BT // BR):
        r0 = b * BT + ri * BR
        if r0 < T:
            rows = r0 + rl
            row_ok = rows < T
            if HAS_N1:
                sj = tl.arange(0, SN_PAD)[:, None]
                ptrs = partn_ptr + (b * S_N + sj).to(tl.int64) * BT + ri * BR + rl[None, :]
                sumv2 = tl.sum(tl.load(ptrs, mask=sj < S_N, other=0.0, cache_modifier=".cg"), axis=0)
            else:
                sumv2 = tl.load(stat_ptr + rows, mask=row_ok, other=0.0, cache_modifier=".cg")
            ones = tl.full((BR,), 1.0, dtype=tl.float32)
            rf = tl.div_rn(ones, tl.sqrt_rn(tl.div_rn(sumv2, ones * H) + rms_eps))[:, None, None, None]
            r4 = rows.to(tl.int64)[:, None, None, None]
            ok4 = row_ok[:, None, None, None]
            for i in range(n_steps):
                words = (s * n_steps + i) * W + wi
                cols = words[None, :, None, None] * 128 + slot * 32 + lane
                v = bits_to_f32(load_bf16_bits(v_ptr + r4 * H + cols, ok4, True))
                if W_BF16:
                    wf = bits_to_f32(load_bf16_bits(w_ptr + cols, cols < H)) * rms_scale
                else:
                    wf = tl.load(w_ptr + cols) * rms_scale
                yb = tl.where(ok4, bf16_bits((v * rf) * wf, HW_CVT), 0)  # padding rows: y = 0, scale 0
                if WRITE_Y:
                    tl.store(y_ptr + r4 * H + cols, bits_to_bf16(yb), mask=ok4)
                if WRITE_PAIR:
                    ybits = yb << 16  # the fp32 bits of the bf16-rounded y: the pair is quantize(y)
                    amax = tl.max(ybits & 0x7FFFFFFF, axis=3)
                    sc = tl.where(floor != 0, mxfp8_scale_bytes(amax, True), mxfp8_scale_bytes(amax, False))
                    tl.store(q_ptr + r4 * H + cols, mxfp8_codes(ybits, sc, HW_CVT), mask=ok4)
                    _store_scales(s_ptr, sc, rows, words, T, rows_padded, n_groups, n_words, layout)
    if WRITE_PAIR:
        if b == NB - 1:
            # Scale rows past the last token up to the layout's row alignment are 0.
            end = b * BT + ((T - b * BT + BR - 1) // BR) * BR
            for zi in range(Z_STEPS):
                z0 = end + zi * BR
                if z0 < rows_padded:
                    for i in range(n_steps):
                        words = (s * n_steps + i) * W + wi
                        zero = tl.zeros((BR, W, 4), dtype=tl.int32)
                        _store_scales(s_ptr, zero, z0 + rl, words, T, rows_padded, n_groups, n_words, layout)


@triton.jit(
    do_not_specialize=[
        "T", "NB", "S_A", "S_N", "n_R", "rows_padded", "total", "round_size", "off_r", "off_n1", "off_n2",
        "lag_r", "lag_n1", "lag_n2", "a_steps", "r_steps", "n_steps", "sk_iters", "floor", "layout",
    ]
)  # fmt: skip
def _hc_kernel(
    x_ptr, r_ptr, post_ptr, comb_ptr, pp_ptr, fn_ptr, scale_ptr, base_ptr, w_ptr,
    ro_ptr, pre_ptr, posto_ptr, combo_ptr, v_ptr, y_ptr, q_ptr, s_ptr,
    cnt_ptr, part_ptr, partn_ptr, stat_ptr,
    T, H, NB, S_A, S_N, n_R, rows_padded, total, round_size, off_r, off_n1, off_n2, lag_r, lag_n1, lag_n2,
    a_steps, r_steps, n_steps, norm_eps, pre_eps, post_scale, sk_eps, sk_iters, rms_eps, rms_scale, floor, layout,
    HAS_A: tl.constexpr, A_POST: tl.constexpr, A_V: tl.constexpr, HAS_R: tl.constexpr,
    HAS_N1: tl.constexpr, HAS_N2: tl.constexpr, W_BF16: tl.constexpr, WRITE_Y: tl.constexpr,
    WRITE_PAIR: tl.constexpr, HW_CVT: tl.constexpr,
    BT: tl.constexpr, BH: tl.constexpr, RB: tl.constexpr, SB: tl.constexpr, BR: tl.constexpr,
    W: tl.constexpr, SN_PAD: tl.constexpr, Z_STEPS: tl.constexpr,
):  # fmt: skip
    ticket = tl.atomic_add(cnt_ptr, 1, sem="relaxed", scope="gpu")
    if ticket == total - 1:
        tl.atomic_xchg(
            cnt_ptr, 0, sem="relaxed", scope="gpu"
        )  # every ticket is taken: ready for the next launch
    rnd = ticket // round_size
    pos = ticket % round_size
    phase = tl.where(pos < off_r, 0, tl.where(pos < off_n1, 1, tl.where(pos < off_n2, 2, 3)))
    blocks = cnt_ptr + 1  # four counters per block: A, R, N1, N2 arrivals
    if phase == 0:
        if HAS_A:
            b = rnd
            if b < NB:
                _phase_a(b, pos, x_ptr, r_ptr, post_ptr, comb_ptr, pp_ptr, fn_ptr, ro_ptr, v_ptr, part_ptr,
                         T, H, S_A, a_steps, A_POST, A_V, HW_CVT, BT, BH)  # fmt: skip
                _arrive(blocks + b * 4)
    if phase == 1:
        if HAS_R:
            b = rnd - lag_r
            if (b >= 0) & (b < NB):
                if HAS_A:
                    _wait(blocks + b * 4, S_A)
                _phase_r(b, pos - off_r, part_ptr, stat_ptr, pre_ptr, posto_ptr, combo_ptr, scale_ptr,
                         base_ptr, T, H, S_A, r_steps, norm_eps, pre_eps, post_scale, sk_eps, sk_iters, A_V,
                         BT, RB, SB)  # fmt: skip
                old = _arrive(blocks + b * 4 + 1)
                if not HAS_N2:
                    if old == n_R - 1:
                        _reset(blocks + b * 4)
    if phase == 2:
        if HAS_N1:
            b = rnd - lag_n1
            if (b >= 0) & (b < NB):
                if HAS_R:
                    _wait(blocks + b * 4 + 1, n_R)
                _phase_n1(b, pos - off_n1, ro_ptr, pp_ptr, v_ptr, partn_ptr, T, H, S_N, n_steps, HW_CVT, BT,
                          BR, W)  # fmt: skip
                _arrive(blocks + b * 4 + 2)
    if phase == 3:
        if HAS_N2:
            b = rnd - lag_n2
            if (b >= 0) & (b < NB):
                if HAS_N1:
                    _wait(blocks + b * 4 + 2, S_N)
                elif HAS_R:
                    _wait(blocks + b * 4 + 1, n_R)
                _phase_n2(b, pos - off_n2, v_ptr, w_ptr, y_ptr, q_ptr, s_ptr, partn_ptr, stat_ptr, T, H, NB,
                          S_N, n_steps, rows_padded, rms_eps, rms_scale, floor, layout, HAS_N1, W_BF16,
                          WRITE_Y, WRITE_PAIR, HW_CVT, BT, BR, W, SN_PAD, Z_STEPS)  # fmt: skip
                old = _arrive(blocks + b * 4 + 3)
                if old == S_N - 1:
                    _reset(blocks + b * 4)


# ---------------------------------------------------------------------------------------------
# Launch


def launch_phases(
    *,
    phases: tuple[int, int, int, int],
    tokens: int,
    hidden: int,
    tensors: dict[str, torch.Tensor | None],
    scalars: HcParams,
    workspace: HcWorkspace,
    config: HcConfig,
    a_post: bool = False,
    a_v: bool = False,
    write_y: bool = False,
    write_pair: bool = False,
    floor: bool = False,
    layout_code: int = 1,
    rows_padded: int = 0,
    hw_cvt: bool = True,
) -> None:
    """Run the phases switched on in ``phases`` (A, R, N1, N2) over ``tokens`` rows of ``hidden`` columns.

    ``tensors`` maps the kernel's pointer names (``x``, ``r``, ``post``, ``comb``, ``pp``, ``fn``,
    ``scale``, ``base``, ``w``, ``ro``, ``pre``, ``posto``, ``combo``, ``v``, ``y``, ``q``, ``s``) to
    validated tensors; a phase that is off never touches its pointers, and missing ones get a dummy.
    ``v`` None means: the workspace's collapse buffer.
    """
    config.check(hidden)
    plan = Plan.make(tokens, hidden, config, phases=phases)
    if plan.total == 0:
        return
    need_v = (phases[2] or a_v) and tensors.get("v") is None
    counters, scratch, v_ws = workspace.buffers(
        plan.n_counters, plan.n_scratch, tokens * hidden if need_v else 0
    )
    dummy = counters
    ptrs = {name: (dummy if tensors.get(name) is None else tensors[name]) for name in _POINTERS}
    if need_v:
        ptrs["v"] = v_ws
    w = tensors.get("w")
    bt = config.block_t
    _hc_kernel[(plan.total,)](
        *(ptrs[name] for name in _POINTERS),
        counters,
        scratch,
        scratch[plan.part_n_offset :],
        scratch[plan.stat_offset :],
        tokens,
        hidden,
        plan.blocks,
        plan.splits_a,
        plan.splits_n,
        plan.items_r,
        rows_padded,
        plan.total,
        plan.round_size,
        *plan.offsets,
        *plan.lags,
        config.steps_a,
        -(-plan.splits_a // config.splits_r),
        config.steps_n,
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
        A_V=a_v,
        HAS_R=bool(phases[1]),
        HAS_N1=bool(phases[2]),
        HAS_N2=bool(phases[3]),
        W_BF16=w is not None and w.dtype == torch.bfloat16,
        WRITE_Y=write_y,
        WRITE_PAIR=write_pair,
        HW_CVT=hw_cvt,
        BT=bt,
        BH=config.block_h,
        RB=config.rows_r,
        SB=config.splits_r,
        BR=config.rows_n,
        W=config.words_n,
        SN_PAD=max(16, triton.next_power_of_2(plan.splits_n)),
        Z_STEPS=math.ceil(127 / config.rows_n),
        num_warps=config.num_warps,
        enable_fp_fusion=False,
    )


_POINTERS = ("x", "r", "post", "comb", "pp", "fn", "scale", "base", "w",
             "ro", "pre", "posto", "combo", "v", "y", "q", "s")  # fmt: skip


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
) -> None:
    """The fused boundary into the given outputs (validated by the caller): one launch.

    Shifted ordering when ``prev_pre`` is given (phases A, R, N2; the collapse is computed in A), normal
    otherwise (A, R, N1, N2). The collapse v goes through ``y_out`` when y is wanted (N2 overwrites
    each value with y), else through the workspace.
    """
    tokens, hidden = x.shape
    if tokens == 0:
        return
    shifted = prev_pre is not None
    tensors = {
        "x": x, "r": residual, "post": post, "comb": comb, "pp": prev_pre if shifted else pre_out, "fn": fn,
        "scale": scale, "base": base, "w": norm_weight, "ro": residual_out, "pre": pre_out, "posto": post_out,
        "combo": comb_out, "v": y_out, "y": y_out,
    }  # fmt: skip
    layout_code, rows_padded = 1, 0
    if pair_out is not None:
        q, scales = pair_out
        flat = scale_storage_view(scales, scale_spec(tokens, hidden, scale_layout=layout))
        layout_code = scale_layout_code(layout.value, k=hidden, scale_ptr=flat.data_ptr())
        tensors["q"] = q if hw_cvt else q.view(torch.uint8)
        tensors["s"] = flat if layout_code == 0 else flat.view(torch.int32)
        rows_padded = align(tokens, ROWS_ALIGN[layout.value])
    launch_phases(
        phases=(1, 1, 0, 1) if shifted else (1, 1, 1, 1),
        tokens=tokens,
        hidden=hidden,
        tensors=tensors,
        scalars=scalars,
        workspace=workspace,
        config=config or default_config(tokens, hidden, sms=sm_count(x.device)),
        a_post=True,
        a_v=shifted,
        write_y=y_out is not None,
        write_pair=pair_out is not None,
        floor=rounding is ScaleRounding.FLOOR,
        layout_code=layout_code,
        rows_padded=rows_padded,
        hw_cvt=hw_cvt,
    )
