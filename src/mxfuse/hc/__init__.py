"""Manifold-constrained hyper-connections (mHC): the torch reference and the boundary entry points.

DeepSeek-V4-family decoders keep the residual as n = 4 streams R [T, n, H] bf16. Between two sublayers
the *boundary* mixes the finished sublayer's output x [T, H] back into the streams (post step), computes
the next sublayer's coefficients from the new streams (mixes, Sinkhorn), collapses the streams into one
row per token and RMS-normalises it into the next GEMM's input y, optionally as an MXFP8 pair. Steps and
rounding points (docs/hc.md; upstream: DeepSeek-V4 ``inference/model.py`` and
DeepGEMM's Mega-mHC test reference):

1. post: ``R' = bf16(post[t,k] * x[t] + sum_j comb[t,j,k] * R[t,j])``, fp32.
2. mixes: ``m = (R'.flatten(1) @ fn.T) * rsqrt(sum(R'^2) / (n*H) + hc_norm_eps)``, then
   ``m * (scale[0] x n, scale[1] x n, scale[2] x n*n) + base``.
3. ``pre = sigmoid(m[:, :n]) + hc_pre_eps``; ``post' = sigmoid(m[:, n:2n]) * hc_post_scale``;
   ``comb' = softmax(m[:, 2n:].view(n, n), -1) + sinkhorn_eps``, column-normalised, then
   ``sinkhorn_iters - 1`` times row- then column-normalised (``c / (sum + sinkhorn_eps)``).
4. collapse ``v = bf16(sum_i p[t,i] * R'[t,i])``, fp32; p = ``pre`` (normal ordering, V4) or the previous
   boundary's ``pre`` passed in as ``prev_pre`` (shifted ordering, V4.1; the new ``pre`` is an output).
5. ``y = bf16(v * rsqrt(mean(v^2) + rms_eps) * (w * rms_scale))``; the pair is ``quantize_mxfp8(y)``.

The tensors travel grouped: ``HcInputs`` (what enters a boundary), ``HcWeights`` (the next sublayer's
weights) and ``HcBoundaryOutputs`` (what it writes, the pair an ``MxTensor``). The scalars
(``hc_norm_eps`` ... ``rms_scale``) are the fields of one frozen ``HcParams`` (V4's values by default),
validated when it is made and passed whole to the entry points, the reference and the kernels.
``mxfuse.hc.reference`` holds the steps in plain torch; ``mhc_boundary`` runs the fused Triton kernel
(``mxfuse.kernels.hc``) on CUDA tensors and the reference on CPU tensors.
"""

from __future__ import annotations

import torch

from mxfuse import witness
from mxfuse.formats import MxTensor, ScaleLayout, ScaleRounding
from mxfuse.hc._checks import Call, check_call
from mxfuse.hc.reference import (
    N_STREAMS,
    empty_hc_boundary_outputs,
    hc_collapse,
    hc_mixes,
    hc_post,
    hc_pre,
    hc_sinkhorn,
    mhc_boundary_reference,
    rmsnorm,
)
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.hc import (
    HcBoundaryOutputs,
    HcConfig,
    HcInputs,
    HcParams,
    HcProjection,
    HcSideStream,
    HcWeights,
    HcWorkspace,
    choose_config,
    launch_boundary,
    launch_mixes,
    launch_norm,
    launch_post,
    sm_count,
    workspace_for,
)

__all__ = [
    "N_STREAMS",
    "HcBoundaryOutputs",
    "HcConfig",
    "HcInputs",
    "HcParams",
    "HcProjection",
    "HcSideStream",
    "HcWeights",
    "HcWorkspace",
    "empty_hc_boundary_outputs",
    "hc_collapse",
    "hc_mixes",
    "hc_post",
    "hc_pre",
    "hc_sinkhorn",
    "mhc_boundary",
    "mhc_boundary_reference",
    "rmsnorm",
]


def mhc_boundary(
    inputs: HcInputs,
    weights: HcWeights,
    *,
    params: HcParams = HcParams(),
    want_y: bool | None = None,
    want_pair: bool | None = None,
    rounding: ScaleRounding | str | None = None,
    scale_layout: ScaleLayout | str | None = None,
    out: HcBoundaryOutputs | None = None,
    workspace: HcWorkspace | None = None,
    config: HcConfig | None = None,
    fused: bool = True,
    side: HcSideStream | None = None,
) -> HcBoundaryOutputs:
    """The hyper-connection boundary after a sublayer: post step, then the next sublayer's pre and norm.

    ``inputs`` (``HcInputs``, contiguous tensors on one device): ``x`` [T, H] bf16 (the sublayer's
    output); ``residual`` [T, n, H] bf16 (n = 4; H a positive multiple of 128); ``post`` [T, n] and
    ``comb`` [T, n, n] fp32 (this sublayer's coefficients); ``prev_pre`` [T, n] fp32 selects the shifted
    ordering (V4.1): the collapse uses it, and the new ``pre`` is returned for the next boundary; None
    is the normal ordering (V4), which collapses with the new ``pre``. ``weights`` (``HcWeights``, the
    next sublayer's): ``fn`` [n(n+2), n*H] fp32 or an ``HcProjection`` (prepared once: the tensor-core
    mixes read its bf16 pieces instead of splitting fn in every step, the same bits out), ``scale`` [3],
    ``base`` [n(n+2)] fp32 and ``norm_weight`` [H] bf16 or fp32 (its RMSNorm). ``params``: the scalars
    (``HcParams``; its defaults are V4's, ``hc_eps`` = ``rms_norm_eps`` = 1e-6; V4.1-Flash has
    ``rms_eps`` 1e-20).

    Outputs (``HcBoundaryOutputs``): R', pre, post', comb', and y (bf16) and/or the next GEMM's input
    as an ``MxTensor`` (``pair``: ``rounding``, scales in ``scale_layout``; defaults RCEIL and deepgemm,
    or ``out.pair``'s own), bit for bit ``quantize_mxfp8(y)``. With ``out`` the outputs are written into
    its tensors (validated; nothing is allocated, so the call can be captured in a CUDA graph; a
    ``(q, scale)`` tuple as ``out.pair`` is converted once) and its None fields say which of y and the
    pair are skipped; ``out.residual`` may be ``inputs.residual`` itself (an in-place update). Without
    ``out``, ``want_y`` and ``want_pair`` choose (both default True). T = 0 gives empty outputs.

    CUDA tensors run the fused Triton kernel (sm_89+, else ``MxfuseUnavailableError``; ``workspace``
    defaults to a per-device one, ``config`` to ``choose_config``); CPU tensors run
    ``mhc_boundary_reference``. A ``mxfuse.witness`` record says which: ``hc.boundary.kernel.pair``,
    ``hc.boundary.kernel.bf16`` or ``hc.boundary.reference``. Bad arguments raise ValueError or TypeError
    naming the argument, before anything is written.

    ``fused=False`` runs the same boundary as a chain of separate kernels (post step, mixes + Sinkhorn,
    collapse + RMSNorm, then ``quantize_mxfp8``; witness ``hc.boundary.unfused``): the baseline the fused
    kernel is measured against, whose R' is bit-identical to the fused kernel's. It allocates a
    temporary y when ``out.y`` is None.

    ``side`` (an ``HcSideStream`` of the inputs' device): the call first joins the side stream's last
    fork; then a fused boundary of the shifted ordering runs its Sinkhorn items on the side stream,
    off the path to y and the pair: ``pre``, ``post`` and ``comb`` are ready on the current stream
    after ``side.join()`` (which the next call given the same side runs). The same bits as without it.
    Elsewhere (the normal ordering, the unfused chain, the CPU) nothing is forked. The fused kernel's witness record says where the Sinkhorn items ran (``sinkhorn``).
    """
    call = check_call(
        inputs,
        weights,
        params=params,
        want_y=want_y,
        want_pair=want_pair,
        rounding=rounding,
        scale_layout=scale_layout,
        out=out,
        workspace=workspace,
        config=config,
        fused=fused,
        side=side,
    )
    if side is not None:
        side.join()  # the previous boundary's Sinkhorn launch read the workspace this call writes
    if call.device.type == "cpu":
        _run_reference(call)
        witness.emit(
            "hc.boundary.reference",
            "CPU tensors: the torch reference boundary",
            rows=call.tokens,
            **call.fields,
        )
        return call.out
    if not fused:
        with torch.cuda.device(call.device):
            _run_unfused(call, workspace or workspace_for(call.device), config)
        reason = "separate kernels: post step, mixes + Sinkhorn, collapse + RMSNorm, quantize"
        witness.emit("hc.boundary.unfused", reason, backend="triton", rows=call.tokens, **call.fields)
        return call.out
    with torch.cuda.device(call.device):
        on_side = launch_boundary(
            call.inputs,
            call.weights,
            call.out,
            params=call.params,
            workspace=workspace or workspace_for(call.device),
            config=config,
            side=side,
        )
    if call.out.pair is not None:
        path, reason = "hc.boundary.kernel.pair", "fused boundary kernel wrote the next GEMM's MXFP8 pair"
    else:
        path, reason = "hc.boundary.kernel.bf16", "fused boundary kernel wrote y in bf16 only"
    sinkhorn = "side stream" if on_side else "in the boundary's launch"
    witness.emit(path, reason, backend="triton", rows=call.tokens, sinkhorn=sinkhorn, **call.fields)
    return call.out


def _run_unfused(call: Call, workspace: HcWorkspace, config: HcConfig | None) -> None:
    out = call.out
    prev_pre = call.inputs.prev_pre
    if config is None:
        config = choose_config(
            call.tokens, call.hidden, shifted=prev_pre is not None, sms=sm_count(call.device)
        )
    launch_post(call.inputs, residual_out=out.residual)
    launch_mixes(out, call.weights, params=call.params, workspace=workspace, config=config)
    y = out.y if out.y is not None else torch.empty_like(call.inputs.x)
    launch_norm(
        out.residual,
        out.pre if prev_pre is None else prev_pre,
        call.weights.norm_weight,
        params=call.params,
        y_out=y,
        workspace=workspace,
        config=config,
        split=prev_pre is not None,
    )
    if out.pair is not None:
        quantize_mxfp8(y, out=out.pair)


def _run_reference(call: Call) -> None:
    out = call.out
    ref = mhc_boundary_reference(
        call.inputs,
        call.weights,
        params=call.params,
        want_y=out.y is not None,
        want_pair=out.pair is not None,
        rounding=call.rounding,
        scale_layout=call.layout,
    )
    for name in ("residual", "pre", "post", "comb", "y"):
        if getattr(out, name) is not None:
            getattr(out, name).copy_(getattr(ref, name))
    if out.pair is not None and ref.pair is not None:
        _copy_mx(out.pair, ref.pair)


def _copy_mx(dst: MxTensor, src: MxTensor) -> None:
    dst.data.copy_(src.data)
    dst.scale_storage().copy_(src.scale_storage())
