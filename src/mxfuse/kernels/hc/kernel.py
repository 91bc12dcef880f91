"""The mHC boundary as one Triton kernel: post step, mixes, Sinkhorn, collapse, RMSNorm and MXFP8 output.

Math and rounding points: ``mxfuse.hc`` (the torch reference) and docs/hc.md.
This module holds the kernel's entry and its counters; the items are ``phase_a``, ``phase_f`` and
``phase_s``, the launchers ``mxfuse.kernels.hc.launch`` (``mxfuse.hc.mhc_boundary`` validates and dispatches).

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
      only for its rows' logits, so it runs beside the F items' norm. An item of one row (``S_OWN``)
      sums the row's records itself (and computes ``pre``) instead of waiting for an F item to: it
      waits for the A items only, and in one launch for the F items' arrivals before it resets.

so the residual is read once and R' written once and read back once, from L2; only one hand-off (A to
F) is on the path to y. Programs take tickets from an atomic counter in launch order, and an item of
block b waits (spinning on an acquire load) only for items with smaller tickets: those are already
running and never wait on it, so the kernel cannot deadlock whatever the GPU schedules (the "dynamic
tile index" rule of single-pass scans). A block's F and S items are issued with the A items of block
b + lag. No float atomics, and every reduction whose result another kernel must match bit for bit (the
partial sums of squares and CUDA-core mixes, the records' sum, the norm's sum of squares) goes through
``exact_sum`` (``hc.tile``): its bits do not depend on the order of the additions, which ``tl.sum`` takes
from whatever register layout the surrounding code leads Triton to pick. So reruns are bitwise
identical, the fused kernel matches the unfused steps, and a token's result does not depend on its
position or on the other tokens. The counters reset themselves (the last item of a block zeroes its
counters; the last ticket zeroes the ticket counter), so a launch needs no memset and a CUDA graph can
capture it. With ``launches=2`` the A items run as one launch and F and S as a second, programmatic
dependent launch that waits for the first with ``griddepcontrol.wait`` instead of counters.

The unfused steps (``mxfuse.kernels.hc.steps``) launch the same kernel with some items switched off.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.hc.phase_a import phase_a
from mxfuse.kernels.hc.phase_f import chunk_cols, load_w, phase_f_coef, phase_f_norm, phase_f_split
from mxfuse.kernels.hc.phase_s import phase_s
from mxfuse.kernels.hc.plan import RECORD as PLAN_RECORD

__all__ = ["hc_kernel"]

RECORD = tl.constexpr(PLAN_RECORD)  # kernels may read only constexpr globals


@triton.jit
def arrive(counter):
    """Count this item in: every thread's stores first, then one release increment; the old count."""
    tl.debug_barrier()
    return tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")


@triton.jit
def wait_for(counter, target):
    """Spin until ``counter >= target``, with acquire semantics (the producers' stores are visible)."""
    seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    while seen < target:
        seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")


@triton.jit
def reset(counters):
    """Zero a block's three counters (every item that reads them has already passed)."""
    tl.store(counters, 0)
    tl.store(counters + 1, 0)
    tl.store(counters + 2, 0)


@triton.jit(
    do_not_specialize=[
        "T", "NB", "S_A", "rows_padded", "total", "round_size", "off_f", "off_s", "lag", "a_steps",
        "sk_iters", "floor", "layout",
    ]
)  # fmt: skip
def hc_kernel(
    x_ptr, r_ptr, post_ptr, comb_ptr, pp_ptr, fn_ptr, fnp_ptr, scale_ptr, base_ptr, w_ptr,
    ro_ptr, pre_ptr, posto_ptr, combo_ptr, v_ptr, y_ptr, q_ptr, s_ptr, vp_ptr,
    cnt_ptr, part_ptr, mix_ptr,
    T, H, NB, S_A, rows_padded, total, round_size, off_f, off_s, lag, a_steps,
    norm_eps, pre_eps, post_scale, sk_eps, sk_iters, rms_eps, rms_scale, floor, layout,
    HAS_A: tl.constexpr, A_POST: tl.constexpr, MIX_FMA: tl.constexpr, FN_PIECES: tl.constexpr, HAS_F: tl.constexpr, COEF: tl.constexpr, NORM: tl.constexpr, PP_OWN: tl.constexpr,
    HAS_S: tl.constexpr, TICKETS: tl.constexpr, PDL_SIGNAL: tl.constexpr,
    PDL_WAIT: tl.constexpr, W_BF16: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr,
    HW_CVT: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr, RS: tl.constexpr, SB: tl.constexpr,
    CW: tl.constexpr, F_CHUNKS: tl.constexpr, W_LOADED: tl.constexpr, A_MIX: tl.constexpr,
    A_COLLAPSE: tl.constexpr, SPLIT: tl.constexpr, NPART: tl.constexpr, S_OWN: tl.constexpr,
    PDL_WAIT_TOP: tl.constexpr, F_STEPS: tl.constexpr, A_PREFETCH: tl.constexpr,
):  # fmt: skip
    if PDL_WAIT_TOP and not A_PREFETCH:
        # A programmatic dependent of the previous kernel (whose output may be x): wait before anything,
        # and signal only after, so that the second launch's work before its own wait (which reads x)
        # never runs ahead of that kernel. A launch of A items of one CUDA-core step (A_PREFETCH) loads
        # its projection weights first and waits in phase_a.
        tl.extra.cuda.gdc_wait()
    if PDL_SIGNAL and not A_PREFETCH:
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
                phase_a(b, pos, x_ptr, r_ptr, post_ptr, comb_ptr, fn_ptr, fnp_ptr, ro_ptr, part_ptr, pp_ptr, v_ptr,
                         vp_ptr, T, H, S_A, a_steps, A_POST, A_MIX, A_COLLAPSE, MIX_FMA, FN_PIECES, HW_CVT, BT,
                         BH, A_PREFETCH, PDL_WAIT_TOP, PDL_SIGNAL)  # fmt: skip
                if TICKETS:
                    arrive(blocks + b * 3)
    elif pos < off_s:
        if HAS_F and SPLIT:
            # The shifted ordering's finish, F_CHUNKS items a row: chunk 0 also computes the row's
            # logits and pre, unless the row's Sinkhorn item does (S_OWN). Every item arrives once,
            # after its wait (chunk 0 after the logits), so S, which resets the counters, runs after
            # every item has read them; in a launch without A items S_OWN needs no arrivals.
            b = rnd - lag
            lr = (pos - off_f) // F_CHUNKS
            c = (pos - off_f) % F_CHUNKS
            t = b * BT + lr
            if (b >= 0) & (t < T):
                n_items = tl.minimum(T - b * BT, BT) * F_CHUNKS
                cols_c, ok_c = chunk_cols(c, H, CW)
                w_c = tl.zeros((CW, 4, 32), dtype=tl.float32)
                if NORM:
                    w_c = load_w(w_ptr, cols_c, ok_c, rms_scale, W_BF16)
                if PDL_WAIT:
                    tl.extra.cuda.gdc_wait()
                if HAS_A:
                    wait_for(blocks + b * 3, S_A)
                if COEF and not S_OWN:
                    if c == 0:
                        phase_f_coef(t, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, F_STEPS,
                                      norm_eps, pre_eps, BT, SB)  # fmt: skip
                if TICKETS and (HAS_A or not S_OWN):
                    old = arrive(blocks + b * 3 + 1)
                    if not HAS_S:
                        if old == n_items - 1:
                            reset(blocks + b * 3)
                if NORM:
                    phase_f_split(t, c, w_c, v_ptr, vp_ptr, y_ptr, q_ptr, s_ptr, T, H, rows_padded, rms_eps, floor,
                                   layout, WRITE_Y, WRITE_PAIR, HW_CVT, CW, NPART)  # fmt: skip
        elif HAS_F:
            b = rnd - lag
            t = b * BT + (pos - off_f)
            if (b >= 0) & (t < T):
                w_pre = tl.zeros((CW, 4, 32), dtype=tl.float32)
                if W_LOADED:
                    cols0, ok0 = chunk_cols(0, H, CW)
                    w_pre = load_w(w_ptr, cols0, ok0, rms_scale, W_BF16)
                if PDL_WAIT:
                    tl.extra.cuda.gdc_wait()
                if HAS_A:
                    wait_for(blocks + b * 3, S_A)
                pre = tl.zeros((RECORD,), dtype=tl.float32)
                if COEF:
                    pre = phase_f_coef(t, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, F_STEPS,
                                        norm_eps, pre_eps, BT, SB)  # fmt: skip
                    if HAS_S:
                        if HAS_A or not S_OWN:
                            arrive(blocks + b * 3 + 1)  # S needs only the logits: it runs beside the norm
                if NORM:
                    phase_f_norm(t, pre, w_pre, ro_ptr, pp_ptr, w_ptr, v_ptr, y_ptr, q_ptr, s_ptr, T, H,
                                  rows_padded, rms_eps, rms_scale, floor, layout, PP_OWN, W_LOADED, W_BF16,
                                  WRITE_Y, WRITE_PAIR, HW_CVT, CW, F_CHUNKS)  # fmt: skip
                if TICKETS and not (COEF and HAS_S):
                    old = arrive(blocks + b * 3 + 1)
                    if not HAS_S:
                        if old == tl.minimum(T - b * BT, BT) - 1:
                            reset(blocks + b * 3)
    else:
        if HAS_S:
            b = rnd - lag
            g = pos - off_s
            n_rows = tl.minimum(T - b * BT, BT)
            if (b >= 0) & (g * RS < n_rows):
                if PDL_WAIT:
                    tl.extra.cuda.gdc_wait()
                target = n_rows
                if SPLIT:
                    target = n_rows * F_CHUNKS
                if S_OWN:
                    # One row an item: the item sums its row's records itself into the logits and pre
                    # (the F item's bits, by the same function) instead of waiting for an F item to.
                    if HAS_A:
                        wait_for(blocks + b * 3, S_A)
                    phase_f_coef(b * BT + g, part_ptr, mix_ptr, pre_ptr, scale_ptr, base_ptr, H, S_A, F_STEPS,
                                  norm_eps, pre_eps, BT, SB)  # fmt: skip
                    tl.debug_barrier()  # the row's logits stored by every thread before any reads them
                elif HAS_F:
                    wait_for(blocks + b * 3 + 1, target)
                elif HAS_A:
                    wait_for(blocks + b * 3, S_A)
                phase_s(b, g, mix_ptr, posto_ptr, combo_ptr, scale_ptr, base_ptr, T, H, norm_eps, post_scale,
                         sk_eps, sk_iters, BT, RS)  # fmt: skip
                if S_OWN and HAS_A and HAS_F:
                    # Nothing here waited for the F items: every one of them must have passed its wait
                    # on the A counter before the counters are reset.
                    wait_for(blocks + b * 3 + 1, target)
                if TICKETS:
                    old = arrive(blocks + b * 3 + 2)
                    if old == (n_rows + RS - 1) // RS - 1:
                        reset(blocks + b * 3)
