"""Launching the boundary kernel (host code): the items switched on, the plan, the pointers and flags.

``launch_phases`` runs any subset of the A, F and S items (``mxfuse.kernels.hc.kernel``); the fused
boundary (``launch_boundary``) runs all three, the unfused steps (``mxfuse.kernels.hc.steps``) some.
Arguments are validated by ``mxfuse.hc``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton

from mxfuse.formats import MxTensor
from mxfuse.kernels.hc.config import HcConfig, choose_config
from mxfuse.kernels.hc.kernel import hc_kernel
from mxfuse.kernels.hc.params import HcParams
from mxfuse.kernels.hc.plan import Plan, split_chunks, split_words
from mxfuse.kernels.hc.side import HcSideStream
from mxfuse.kernels.hc.tensors import HcBoundaryOutputs, HcInputs, HcWeights
from mxfuse.kernels.hc.workspace import HcWorkspace, sm_count
from mxfuse.kernels.mxfp8 import mx_target
from mxfuse.kernels.pdl import pdl_policy

__all__ = ["FinishTensors", "HcItems", "HcLaunchTensors", "MixTensors", "launch_boundary", "launch_phases"]


@dataclass(frozen=True)
class HcItems:
    """Which items a launch runs and what they do. ``phases``: A, F and S items on (1) or off (0).
    ``a_post``: A computes R' from x and R (else reads it); ``a_mix``: A's partial mixes and sums of
    squares; ``a_collapse``: A also computes the collapse and its 16-column sums of squares (the shifted
    ordering). ``split``: a row's finish split over items of a few words. ``coef``: F's logits and pre
    (and S's post' and comb'); ``norm``: F's collapse, norm and outputs."""

    phases: tuple[int, int, int]
    a_post: bool = False
    a_mix: bool = True
    a_collapse: bool = False
    split: bool = False
    coef: bool = False
    norm: bool = False


@dataclass(frozen=True, eq=False)
class MixTensors:
    """The mixes' inputs and the coefficients they give: ``fn`` (and its bf16 ``pieces``), ``scale``,
    ``base``; ``pre``, ``post`` and ``comb`` written (None where no item writes them)."""

    fn: torch.Tensor | None = None
    pieces: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    base: torch.Tensor | None = None
    pre: torch.Tensor | None = None
    post: torch.Tensor | None = None
    comb: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class FinishTensors:
    """The finish's collapse weights (``collapse``: prev_pre, or the mixes' own ``pre``, stored first),
    its norm weight, the collapse buffer ``v`` (None: the workspace's, which only a finish of more than
    one step uses), and what it writes: bf16 ``y`` and/or the MxTensor ``pair``."""

    collapse: torch.Tensor | None = None
    norm_weight: torch.Tensor | None = None
    v: torch.Tensor | None = None
    y: torch.Tensor | None = None
    pair: MxTensor | None = None


@dataclass(frozen=True, eq=False)
class HcLaunchTensors:
    """The tensors one launch of the boundary kernel points at: R' (``residual``: written by the A items'
    post step, else read), the post step's inputs (``step``), the mixes' and the finish's. An item that
    is off never touches its tensors; those not given are a dummy pointer."""

    residual: torch.Tensor
    step: HcInputs | None = None
    mixes: MixTensors = MixTensors()
    finish: FinishTensors = FinishTensors()


@dataclass(frozen=True)
class _Pdl:
    signal: bool = False  # the launch lets its dependents start early
    wait: bool = False  # a programmatic dependent: its F and S items wait
    wait_top: bool = False  # a programmatic dependent: wait before anything


def launch_phases(
    items: HcItems,
    tensors: HcLaunchTensors,
    *,
    params: HcParams,
    workspace: HcWorkspace,
    config: HcConfig,
    hw_cvt: bool = True,
    pdl: bool = False,
    side: HcSideStream | None = None,
) -> bool:
    """Run ``items`` over ``tensors`` (validated): ``tensors.residual``'s T rows of H columns. True when
    the S items ran on ``side`` (see below), else False.

    ``config.launches == 2`` with A and F both on runs A as one launch and F and S as a second (a
    programmatic dependent launch when ``pdl``). With an enabled ``side`` stream and the split finish
    (the shifted ordering, whose finish needs no logits) the S items leave the finish's launch: they run
    as a launch of their own on ``side``, forked after the A items (two launches: after the first; one
    launch: after it), each summing its row's records (one row an item). ``hw_cvt=False``: the integer
    conversions the Triton interpreter runs exactly.
    """
    tokens, _, hidden = tensors.residual.shape
    config.check(hidden)
    phases = items.phases
    # The first launch is a programmatic dependent of the kernel before it when the policy says so.
    top = bool(pdl and phases[0] and pdl_policy(workspace.device).wait)
    on_side = bool(side is not None and side.enabled and items.split and items.coef and phases == (1, 1, 1))
    if config.launches == 2 and phases[0] and (phases[1] or phases[2]):
        one = dataclasses.replace(config, launches=1)
        a_items = HcItems((1, 0, 0), a_post=items.a_post, a_mix=items.a_mix, a_collapse=items.a_collapse)
        _launch(a_items, tensors, params, workspace, one, hw_cvt=hw_cvt, pdl=_Pdl(signal=pdl, wait_top=top))
        a_plan = Plan.make(tokens, hidden, one, phases=(1, 0, 0))
        rest = dataclasses.replace(
            items, phases=(0, phases[1], phases[2]), a_post=False, a_mix=True, a_collapse=False
        )
        if on_side:
            _sinkhorn_on_side(items, tensors, params, workspace, one, side, hw_cvt=hw_cvt)
            rest = dataclasses.replace(rest, phases=(0, phases[1], 0), coef=False)
        # The second launch does not signal: the GEMM after it (a dependent) launches as its programs
        # exit; resident early, beside this launch's items, it ran slower (H200, benchmarks/RESULTS.md).
        _launch(rest, tensors, params, workspace, one, hw_cvt=hw_cvt, pdl=_Pdl(wait=pdl), a_plan=a_plan)
        return on_side
    if on_side:
        # One launch of the A and F items (the F items wait on the A counter), then the S items.
        _launch(dataclasses.replace(items, phases=(1, 1, 0), coef=False), tensors, params, workspace, config,
                hw_cvt=hw_cvt, pdl=_Pdl(wait_top=top))  # fmt: skip
        _sinkhorn_on_side(items, tensors, params, workspace, config, side, hw_cvt=hw_cvt)
        return True
    _launch(items, tensors, params, workspace, config, hw_cvt=hw_cvt, pdl=_Pdl(wait_top=top))
    return False


def _sinkhorn_on_side(
    items: HcItems,
    tensors: HcLaunchTensors,
    params: HcParams,
    workspace: HcWorkspace,
    config: HcConfig,
    side: HcSideStream,
    *,
    hw_cvt: bool,
) -> None:
    """``items``' S items as a launch of their own on ``side``, after the work queued so far (which has
    written every A item's records): one row an item, each summing its row's records. It touches no
    counter, so it runs beside the boundary's other launches on the same workspace."""
    tokens, _, hidden = tensors.residual.shape
    one = dataclasses.replace(config, launches=1)
    sinkhorn = dataclasses.replace(
        items, phases=(0, 0, 1), a_post=False, a_mix=True, a_collapse=False, split=False, norm=False
    )
    with side.fork():
        _launch(sinkhorn, tensors, params, workspace, dataclasses.replace(one, rows_s=1), hw_cvt=hw_cvt,
                pdl=_Pdl(), a_plan=Plan.make(tokens, hidden, one, phases=(1, 0, 0)))  # fmt: skip


def _launch(
    items: HcItems,
    tensors: HcLaunchTensors,
    params: HcParams,
    workspace: HcWorkspace,
    config: HcConfig,
    *,
    hw_cvt: bool,
    pdl: _Pdl,
    a_plan: Plan | None = None,
) -> None:
    phases = items.phases
    tokens, _, hidden = tensors.residual.shape
    split = items.split and bool(phases[1])
    a_collapse = items.a_collapse and bool(phases[0])
    coef, norm = items.coef, items.norm
    plan = Plan.make(tokens, hidden, config, phases=phases, split=split)
    if plan.total == 0:
        return
    splits_a = (a_plan or plan).splits_a  # F reads the records of the A items, launched here or before
    cw = split_words(config) if split else config.words_f
    f_chunks = split_chunks(hidden, config) if split else -(-(hidden // 128) // config.words_f)
    step, mixes, finish = tensors.step, tensors.mixes, tensors.finish
    need_v = (a_collapse or (norm and (split or f_chunks > 1))) and finish.v is None
    counters, scratch, v_ws = workspace.buffers(
        plan.n_counters, plan.n_scratch, tokens * hidden if need_v else 0
    )
    q, s, layout_code, rows_padded, floor = (None, None, 1, 0, False)
    if finish.pair is not None:
        q, s, layout_code, rows_padded, floor = mx_target(finish.pair, hw_cvt=hw_cvt)
        if not norm:  # the scalars of a launch without the finish's outputs
            layout_code, rows_padded, floor = 1, 0, False
    vp = workspace.partials(tokens * (hidden // 16)) if a_collapse or (norm and split) else None
    v = v_ws if need_v else finish.v
    pointers = (
        *((None,) * 4 if step is None else (step.x, step.residual, step.post, step.comb)),
        finish.collapse, mixes.fn, mixes.pieces, mixes.scale, mixes.base, finish.norm_weight,
        tensors.residual, mixes.pre, mixes.post, mixes.comb, v, finish.y, q, s, vp,
    )  # fmt: skip
    w = finish.norm_weight
    sb = min(64, triton.next_power_of_2(splits_a))
    # A launch without A items runs on warps_f; its one-step finish then loads the norm weight before
    # it waits (on 8 or more warps the extra registers fit; on 4 they would spill).
    warps = config.warps_f if config.warps_f and not phases[0] else config.num_warps
    # Tickets and counters where an item waits for another of the same launch: A before F or S, F
    # before S (unless S sums its records itself). A launch of F items alone, or of S items alone,
    # touches no counter, so it may run beside another launch on the same workspace.
    s_own = bool(coef and phases[2] and config.rows_s == 1 and (phases[1] or not phases[0]))
    tickets = bool(phases[0] and (phases[1] or phases[2])) or bool(phases[1] and phases[2])
    if phases[2] and not phases[1] and not (phases[0] or s_own):
        raise ValueError(
            "a launch of Sinkhorn items alone needs coef and rows_s == 1 (they sum their records)"
        )
    hc_kernel[(plan.total,)](
        *(counters if t is None else t for t in pointers),
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
        params.hc_norm_eps,
        params.hc_pre_eps,
        params.hc_post_scale,
        params.sinkhorn_eps,
        params.sinkhorn_iters,
        params.rms_eps,
        params.rms_scale,
        int(floor),
        layout_code,
        HAS_A=bool(phases[0]),
        A_POST=items.a_post,
        MIX_FMA=config.mix == "fma",
        FN_PIECES=config.mix == "dot" and mixes.pieces is not None,
        HAS_F=bool(phases[1]),
        COEF=coef,
        NORM=norm,
        PP_OWN=bool(coef and norm and finish.collapse is not None and finish.collapse is mixes.pre),
        HAS_S=bool(phases[2]),
        TICKETS=tickets,
        PDL_SIGNAL=pdl.signal,
        PDL_WAIT=pdl.wait,
        W_BF16=w is not None and w.dtype == torch.bfloat16,
        WRITE_Y=norm and finish.y is not None,
        WRITE_PAIR=norm and finish.pair is not None,
        HW_CVT=hw_cvt,
        BT=config.block_t,
        BH=config.block_h,
        RS=config.rows_s,
        SB=sb,
        CW=cw,
        F_CHUNKS=f_chunks,
        W_LOADED=bool(norm and not split and f_chunks == 1 and warps >= 8),
        A_MIX=items.a_mix,
        A_COLLAPSE=a_collapse,
        SPLIT=split,
        NPART=triton.next_power_of_2(hidden // 16),
        # Sinkhorn items of one row sum their records themselves (and compute pre) instead of waiting
        # for an F item's logits.
        S_OWN=s_own,
        PDL_WAIT_TOP=pdl.wait_top,
        F_STEPS=-(-splits_a // sb),
        # A launch of A items alone (no tickets), each one step of CUDA-core mixes: the projection weights
        # are loaded before the programmatic-launch wait (phase_a).
        A_PREFETCH=bool(phases == (1, 0, 0) and items.a_mix and config.mix == "fma" and config.steps_a == 1),
        num_warps=warps,
        num_stages=config.stages,
        enable_fp_fusion=False,
        **({"launch_pdl": True} if pdl.wait or pdl.wait_top else {}),
    )


def launch_boundary(
    inputs: HcInputs,
    weights: HcWeights,
    out: HcBoundaryOutputs,
    *,
    params: HcParams,
    workspace: HcWorkspace,
    config: HcConfig | None = None,
    hw_cvt: bool = True,
    side: HcSideStream | None = None,
) -> bool:
    """The fused boundary of ``inputs`` and the next sublayer's ``weights`` into ``out`` (all validated by
    the caller): one launch, or two when the configuration says so (in the shifted ordering with an
    enabled ``side`` stream, the Sinkhorn items as a third launch on it, ``HcSideStream``: then it
    returns True). An ``HcProjection`` as ``weights.fn`` lets the tensor-core mixes read its pieces
    instead of splitting fn in every step; the pair, when ``out`` has one, is written in its layout with
    its rounding.

    Shifted ordering when ``inputs.prev_pre`` is given (the collapse takes it), normal otherwise (the
    collapse takes the pre each row's finish computes). In the shifted ordering the A items compute the
    collapse and the sums of squares of its 16-column slices, and a row's finish is split over items of
    ``words_n`` words (``split_words``), each summing the row's slices; in the normal ordering one item
    finishes a row. A finish of more than one step, and the split finish, keep the collapse v in
    ``out.y`` when y is wanted (each value is then overwritten with y), else in the workspace.
    """
    tokens, hidden = inputs.x.shape
    if tokens == 0:
        return False
    shifted = inputs.prev_pre is not None
    tensors = HcLaunchTensors(
        out.residual,
        step=inputs,
        mixes=MixTensors(
            weights.fn_weight, weights.fn_pieces, weights.scale, weights.base, out.pre, out.post, out.comb
        ),
        finish=FinishTensors(
            inputs.prev_pre if shifted else out.pre, weights.norm_weight, out.y, out.y, out.pair
        ),
    )
    items = HcItems((1, 1, 1), a_post=True, a_collapse=shifted, split=shifted, coef=True, norm=True)
    config = config or choose_config(tokens, hidden, shifted=shifted, sms=sm_count(inputs.x.device))
    return launch_phases(
        items,
        tensors,
        params=params,
        workspace=workspace,
        config=config,
        hw_cvt=hw_cvt,
        pdl=hw_cvt,
        side=side,
    )
