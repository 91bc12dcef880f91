"""Launching the boundary kernel (host code): the items switched on, the plan, the pointers and flags.

``launch_phases`` runs any subset of the A, F and S items (``mxfuse.kernels.hc.kernel``); the fused
boundary (``launch_boundary``) runs all three, the unfused steps (``mxfuse.kernels.hc.steps``) some.
Arguments are validated by ``mxfuse.hc``.
"""

from __future__ import annotations

import dataclasses

import torch
import triton

from mxfuse.formats import ScaleLayout, ScaleRounding
from mxfuse.kernels.hc.config import HcConfig, choose_config
from mxfuse.kernels.hc.kernel import hc_kernel
from mxfuse.kernels.hc.params import HcParams
from mxfuse.kernels.hc.plan import Plan, split_chunks, split_words
from mxfuse.kernels.hc.workspace import HcWorkspace, sm_count
from mxfuse.kernels.mxfp8 import scale_target
from mxfuse.kernels.pdl import pdl_policy

__all__ = ["launch_boundary", "launch_phases"]


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
    hc_kernel[(plan.total,)](
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
