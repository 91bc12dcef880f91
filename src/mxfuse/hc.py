"""Manifold-constrained hyper-connections (mHC): the torch reference and the boundary entry points.

DeepSeek-V4-family decoders keep the residual as n = 4 streams R [T, n, H] bf16. Between two sublayers
the *boundary* mixes the finished sublayer's output x [T, H] back into the streams (post step), computes
the next sublayer's coefficients from the new streams (mixes, Sinkhorn), collapses the streams into one
row per token and RMS-normalises it into the next GEMM's input y, optionally as an MXFP8 pair. Steps and
rounding points (DESIGN.md "Hyper-connection boundary"; upstream: DeepSeek-V4 ``inference/model.py`` and
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

The reference fixes the fp32 order of the elementwise sums (products rounded before each add, in
stream order), so the kernels, which follow it, write R' and the collapse bit for bit as it does. Its
long reductions (the 24 x n*H projection, the sums of squares) are accumulated in float64 and rounded
once, so it depends on neither BLAS summation order nor TF32 settings.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from mxfuse import MxfuseUnavailableError, witness
from mxfuse.formats import (
    ScaleLayout,
    ScaleRounding,
    check_mxfp8_pair,
    empty_mxfp8_pair,
    parse_scale_layout,
    parse_scale_rounding,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
)
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.hc_boundary import HcConfig, HcScalars, HcWorkspace, launch_boundary, workspace_for
from mxfuse.kernels.hc_steps import launch_mixes, launch_norm, launch_post

__all__ = [
    "N_STREAMS",
    "HcBoundaryOutputs",
    "HcConfig",
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

N_STREAMS = 4  # hc_mult in every DeepSeek-V4/V4.1 config, and the only n the kernels take
_MIN_CAPABILITY = (8, 9)  # the pair's E4M3 conversion (cvt.e4m3x2)


@dataclass(frozen=True)
class HcBoundaryOutputs:
    """What a boundary writes: R' [T, n, H] bf16, pre / post' [T, n] fp32, comb' [T, n, n] fp32, and
    y [T, H] bf16 and/or the MXFP8 pair ``(float8_e4m3fn [T, H], scales)`` (None when not wanted)."""

    residual: torch.Tensor
    pre: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    y: torch.Tensor | None = None
    pair: tuple[torch.Tensor, torch.Tensor] | None = None


def empty_hc_boundary_outputs(
    tokens: int,
    hidden: int,
    *,
    device: torch.device | str,
    y: bool = True,
    pair: bool = True,
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
) -> HcBoundaryOutputs:
    """Allocate the outputs of a boundary over ``tokens`` x ``hidden`` (contents undefined)."""
    n = N_STREAMS
    f32 = {"dtype": torch.float32, "device": device}
    return HcBoundaryOutputs(
        residual=torch.empty((tokens, n, hidden), dtype=torch.bfloat16, device=device),
        pre=torch.empty((tokens, n), **f32),
        post=torch.empty((tokens, n), **f32),
        comb=torch.empty((tokens, n, n), **f32),
        y=torch.empty((tokens, hidden), dtype=torch.bfloat16, device=device) if y else None,
        pair=empty_mxfp8_pair(tokens, hidden, scale_layout=scale_layout, device=device) if pair else None,
    )


# ---------------------------------------------------------------------------------------------
# Reference (plain torch, any device)


def hc_post(x: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """Step 1: ``R'[t,k] = bf16(post[t,k] * x[t] + sum_j comb[t,j,k] * R[t,j])``, fp32 in that order."""
    xf = x.float()[:, None, :]
    rf = residual.float()
    acc = post[:, :, None] * xf
    for j in range(residual.shape[1]):
        acc = acc + comb[:, j, :, None] * rf[:, j, None, :]
    return acc.to(torch.bfloat16)


def hc_mixes(
    residual: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, *, hc_norm_eps: float
) -> torch.Tensor:
    """Step 2: the n(n+2) scaled and biased logits of each token of ``residual`` [T, n, H], fp32."""
    tokens, n, hidden = residual.shape
    flat = residual.reshape(tokens, n * hidden).double()
    proj = (flat @ fn.double().T).float()
    sumsq = flat.square().sum(-1).float()
    m = proj * torch.rsqrt(sumsq / (n * hidden) + hc_norm_eps)[:, None]
    scales = torch.cat([scale[0].expand(n), scale[1].expand(n), scale[2].expand(n * n)])
    return m * scales + base


def hc_sinkhorn(
    mixes: torch.Tensor,
    *,
    hc_pre_eps: float,
    hc_post_scale: float,
    sinkhorn_eps: float,
    sinkhorn_iters: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 3: ``(pre, post', comb')`` from the logits [T, n(n+2)]; comb' ends on a column normalisation."""
    tokens = mixes.shape[0]
    n = N_STREAMS
    pre = torch.sigmoid(mixes[:, :n]) + hc_pre_eps
    post = torch.sigmoid(mixes[:, n : 2 * n]) * hc_post_scale
    comb = torch.softmax(mixes[:, 2 * n :].reshape(tokens, n, n), dim=-1) + sinkhorn_eps
    comb = comb / (comb.sum(-2, keepdim=True) + sinkhorn_eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + sinkhorn_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + sinkhorn_eps)
    return pre, post, comb


def hc_collapse(residual: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Step 4: ``v[t] = bf16(sum_i weights[t,i] * R[t,i])``, fp32, streams in index order."""
    acc = weights[:, 0, None] * residual[:, 0].float()
    for i in range(1, residual.shape[1]):
        acc = acc + weights[:, i, None] * residual[:, i].float()
    return acc.to(torch.bfloat16)


def rmsnorm(v: torch.Tensor, weight: torch.Tensor, *, eps: float, scale: float = 1.0) -> torch.Tensor:
    """Step 5: ``bf16(v * rsqrt(mean(v^2) + eps) * (weight * scale))``, fp32 (mean accumulated in float64)."""
    vf = v.float()
    mean_square = vf.double().square().mean(-1).float()
    return ((vf * torch.rsqrt(mean_square + eps)[:, None]) * (weight.float() * scale)).to(torch.bfloat16)


def hc_pre(
    residual: torch.Tensor,
    fn: torch.Tensor,
    scale: torch.Tensor,
    base: torch.Tensor,
    norm_weight: torch.Tensor,
    *,
    prev_pre: torch.Tensor | None = None,
    hc_norm_eps: float = 1e-6,
    hc_pre_eps: float = 1e-6,
    hc_post_scale: float = 2.0,
    sinkhorn_eps: float = 1e-6,
    sinkhorn_iters: int = 20,
    rms_eps: float = 1e-6,
    rms_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 2-5 on the streams ``residual``: ``(y, pre, post', comb')``; collapses with ``prev_pre`` if given."""
    mixes = hc_mixes(residual, fn, scale, base, hc_norm_eps=hc_norm_eps)
    pre, post, comb = hc_sinkhorn(
        mixes,
        hc_pre_eps=hc_pre_eps,
        hc_post_scale=hc_post_scale,
        sinkhorn_eps=sinkhorn_eps,
        sinkhorn_iters=sinkhorn_iters,
    )
    v = hc_collapse(residual, pre if prev_pre is None else prev_pre)
    return rmsnorm(v, norm_weight, eps=rms_eps, scale=rms_scale), pre, post, comb


def mhc_boundary_reference(
    x: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    fn: torch.Tensor,
    scale: torch.Tensor,
    base: torch.Tensor,
    norm_weight: torch.Tensor,
    *,
    prev_pre: torch.Tensor | None = None,
    hc_norm_eps: float = 1e-6,
    hc_pre_eps: float = 1e-6,
    hc_post_scale: float = 2.0,
    sinkhorn_eps: float = 1e-6,
    sinkhorn_iters: int = 20,
    rms_eps: float = 1e-6,
    rms_scale: float = 1.0,
    want_y: bool = True,
    want_pair: bool = True,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
) -> HcBoundaryOutputs:
    """The whole boundary in plain torch (steps 1-5 and the pair), on any device; allocates its outputs."""
    new_residual = hc_post(x, residual, post, comb)
    y, pre, new_post, new_comb = hc_pre(
        new_residual,
        fn,
        scale,
        base,
        norm_weight,
        prev_pre=prev_pre,
        hc_norm_eps=hc_norm_eps,
        hc_pre_eps=hc_pre_eps,
        hc_post_scale=hc_post_scale,
        sinkhorn_eps=sinkhorn_eps,
        sinkhorn_iters=sinkhorn_iters,
        rms_eps=rms_eps,
        rms_scale=rms_scale,
    )
    pair = quantize_mxfp8_reference(y, rounding=rounding, scale_layout=scale_layout) if want_pair else None
    return HcBoundaryOutputs(new_residual, pre, new_post, new_comb, y if want_y else None, pair)


# ---------------------------------------------------------------------------------------------
# Entry points


def mhc_boundary(
    x: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    fn: torch.Tensor,
    scale: torch.Tensor,
    base: torch.Tensor,
    norm_weight: torch.Tensor,
    *,
    prev_pre: torch.Tensor | None = None,
    hc_norm_eps: float = 1e-6,
    hc_pre_eps: float = 1e-6,
    hc_post_scale: float = 2.0,
    sinkhorn_eps: float = 1e-6,
    sinkhorn_iters: int = 20,
    rms_eps: float = 1e-6,
    rms_scale: float = 1.0,
    want_y: bool | None = None,
    want_pair: bool | None = None,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
    out: HcBoundaryOutputs | None = None,
    workspace: HcWorkspace | None = None,
    config: HcConfig | None = None,
    fused: bool = True,
) -> HcBoundaryOutputs:
    """The hyper-connection boundary after a sublayer: post step, then the next sublayer's pre and norm.

    Inputs (contiguous, one device): ``x`` [T, H] bf16 (the sublayer's output); ``residual`` [T, n, H]
    bf16 (n = 4; H a positive multiple of 128); ``post`` [T, n] and ``comb`` [T, n, n] fp32 (this
    sublayer's coefficients); ``fn`` [n(n+2), n*H], ``scale`` [3], ``base`` [n(n+2)] fp32 (the next
    sublayer's mixing parameters); ``norm_weight`` [H] bf16 or fp32 (its RMSNorm). ``prev_pre`` [T, n]
    fp32 selects the shifted ordering (V4.1): the collapse uses it, and the new ``pre`` is returned for
    the next boundary; None is the normal ordering (V4), which collapses with the new ``pre``. Scalars
    as in the V4 configs (``hc_eps`` = 1e-6, ``rms_norm_eps`` = 1e-6; V4.1-Flash has rms_eps 1e-20).

    Outputs (``HcBoundaryOutputs``): R', pre, post', comb', and y (bf16) and/or the MXFP8 pair of y
    (``rounding``, scales in ``scale_layout``), bit for bit ``quantize_mxfp8(y)``. With ``out`` the
    outputs are written into its tensors (validated; nothing is allocated, so the call can be captured
    in a CUDA graph) and its None fields say which of y and the pair are skipped; ``out.residual`` may
    be ``residual`` itself (an in-place update). Without ``out``, ``want_y`` and ``want_pair`` choose
    (both default True). T = 0 gives empty outputs.

    CUDA tensors run the fused Triton kernel (sm_89+, else ``MxfuseUnavailableError``; ``workspace``
    defaults to a per-device one, ``config`` to ``default_config``); CPU tensors run
    ``mhc_boundary_reference``. A ``mxfuse.witness`` record says which: ``hc.boundary.kernel.pair``,
    ``hc.boundary.kernel.bf16`` or ``hc.boundary.reference``. Bad arguments raise ValueError or TypeError
    naming the argument, before anything is written.

    ``fused=False`` runs the same boundary as a chain of separate kernels (post step, mixes + Sinkhorn,
    collapse + RMSNorm, then ``quantize_mxfp8``; witness ``hc.boundary.unfused``): the baseline the fused
    kernel is measured against, whose R' is bit-identical to the fused kernel's. It allocates a
    temporary y when ``out.y`` is None.
    """
    call = _check_call(locals())
    if call.device.type == "cpu":
        _run_reference(call)
        witness.emit(
            "hc.boundary.reference", "CPU tensors: the torch reference boundary", rows=call.tokens, **call.fields
        )
        return call.out
    if not fused:
        with torch.cuda.device(call.device):
            _run_unfused(call, workspace or workspace_for(call.device))
        reason = "separate kernels: post step, mixes + Sinkhorn, collapse + RMSNorm, quantize"
        witness.emit("hc.boundary.unfused", reason, backend="triton", rows=call.tokens, **call.fields)
        return call.out
    with torch.cuda.device(call.device):
        launch_boundary(
            call.x,
            call.residual,
            call.post,
            call.comb,
            call.prev_pre,
            call.fn,
            call.scale,
            call.base,
            call.norm_weight,
            scalars=call.scalars,
            residual_out=call.out.residual,
            pre_out=call.out.pre,
            post_out=call.out.post,
            comb_out=call.out.comb,
            y_out=call.out.y,
            pair_out=call.out.pair,
            rounding=call.rounding,
            layout=call.layout,
            workspace=workspace or workspace_for(call.device),
            config=config,
        )
    if call.out.pair is not None:
        path, reason = "hc.boundary.kernel.pair", "fused boundary kernel wrote the next GEMM's MXFP8 pair"
    else:
        path, reason = "hc.boundary.kernel.bf16", "fused boundary kernel wrote y in bf16 only"
    witness.emit(path, reason, backend="triton", rows=call.tokens, **call.fields)
    return call.out


def _run_unfused(call: _Call, workspace: HcWorkspace) -> None:
    out = call.out
    launch_post(call.x, call.residual, call.post, call.comb, residual_out=out.residual)
    launch_mixes(
        out.residual,
        call.fn,
        call.scale,
        call.base,
        scalars=call.scalars,
        pre_out=out.pre,
        post_out=out.post,
        comb_out=out.comb,
        workspace=workspace,
    )
    y = out.y if out.y is not None else torch.empty_like(call.x)
    weights = out.pre if call.prev_pre is None else call.prev_pre
    launch_norm(out.residual, weights, call.norm_weight, scalars=call.scalars, y_out=y, workspace=workspace)
    if out.pair is not None:
        quantize_mxfp8(y, rounding=call.rounding, scale_layout=call.layout, out=out.pair)


def _run_reference(call: _Call) -> None:
    s = call.scalars
    ref = mhc_boundary_reference(
        call.x,
        call.residual,
        call.post,
        call.comb,
        call.fn,
        call.scale,
        call.base,
        call.norm_weight,
        prev_pre=call.prev_pre,
        hc_norm_eps=s.hc_norm_eps,
        hc_pre_eps=s.hc_pre_eps,
        hc_post_scale=s.hc_post_scale,
        sinkhorn_eps=s.sinkhorn_eps,
        sinkhorn_iters=s.sinkhorn_iters,
        rms_eps=s.rms_eps,
        rms_scale=s.rms_scale,
        want_y=call.out.y is not None,
        want_pair=call.out.pair is not None,
        rounding=call.rounding,
        scale_layout=call.layout,
    )
    out = call.out
    for name in ("residual", "pre", "post", "comb", "y"):
        if getattr(out, name) is not None:
            getattr(out, name).copy_(getattr(ref, name))
    if out.pair is not None and ref.pair is not None:
        spec = scale_spec(call.tokens, call.hidden, scale_layout=call.layout)
        out.pair[0].copy_(ref.pair[0])
        scale_storage_view(out.pair[1], spec).copy_(scale_storage_view(ref.pair[1], spec))


# ---------------------------------------------------------------------------------------------
# Argument checks: everything is validated before anything is written.


@dataclass(frozen=True)
class _Call:
    x: torch.Tensor
    residual: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    prev_pre: torch.Tensor | None
    fn: torch.Tensor
    scale: torch.Tensor
    base: torch.Tensor
    norm_weight: torch.Tensor
    scalars: HcScalars
    rounding: ScaleRounding
    layout: ScaleLayout
    out: HcBoundaryOutputs

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def tokens(self) -> int:
        return self.x.shape[0]

    @property
    def hidden(self) -> int:
        return self.x.shape[1]

    @property
    def fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"hidden": self.hidden}
        fields["ordering"] = "normal" if self.prev_pre is None else "shifted"
        if self.out.pair is not None:
            fields["scale_layout"] = self.layout.value
            fields["rounding"] = self.rounding.value
        return fields


_BF16 = (torch.bfloat16,)
_F32 = (torch.float32,)


def _tensor(value: object, name: str, what: str, shape: tuple[int, ...], dtypes: tuple, device: torch.device):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    if value.dtype not in dtypes:
        raise ValueError(f"{name} must be {' or '.join(str(d) for d in dtypes)}; got {value.dtype}")
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must have shape {what} = {shape}; got {tuple(value.shape)}")
    if value.device != device:
        raise ValueError(f"{name} must be on {device} (where x is); got {value.device}")
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous; got strides {tuple(value.stride())}")
    return value


def _real(value: object, name: str, *, at_least: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise TypeError(f"{name} must be a finite real number; got {value!r}")
    if at_least is not None and float(value) < at_least:
        raise ValueError(f"{name} must be >= {at_least}; got {value!r}")
    return float(value)


def _flag(value: object, name: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be True, False or None; got {value!r}")
    return value


def _check_scalars(p: dict[str, object]) -> HcScalars:
    iters = p["sinkhorn_iters"]
    if isinstance(iters, bool) or not isinstance(iters, numbers.Integral):
        raise TypeError(f"sinkhorn_iters must be an int; got {iters!r}")
    if iters < 1:
        raise ValueError(f"sinkhorn_iters must be >= 1; got {iters}")
    return HcScalars(
        hc_norm_eps=_real(p["hc_norm_eps"], "hc_norm_eps", at_least=0.0),
        hc_pre_eps=_real(p["hc_pre_eps"], "hc_pre_eps", at_least=0.0),
        hc_post_scale=_real(p["hc_post_scale"], "hc_post_scale"),
        sinkhorn_eps=_real(p["sinkhorn_eps"], "sinkhorn_eps", at_least=0.0),
        sinkhorn_iters=int(iters),
        rms_eps=_real(p["rms_eps"], "rms_eps", at_least=0.0),
        rms_scale=_real(p["rms_scale"], "rms_scale"),
    )


def _check_out(p: dict[str, object], tokens: int, hidden: int, layout: ScaleLayout, device: torch.device):
    want_y, want_pair, out = _flag(p["want_y"], "want_y"), _flag(p["want_pair"], "want_pair"), p["out"]
    if out is None:
        want_y = True if want_y is None else want_y
        want_pair = True if want_pair is None else want_pair
        if not (want_y or want_pair):
            raise ValueError("want_y and want_pair: at least one of y and the MXFP8 pair must be wanted")
        return empty_hc_boundary_outputs(
            tokens, hidden, device=device, y=want_y, pair=want_pair, scale_layout=layout
        )
    if not isinstance(out, HcBoundaryOutputs):
        raise TypeError(f"out must be an HcBoundaryOutputs (see empty_hc_boundary_outputs); got {type(out).__name__}")
    n = N_STREAMS
    _tensor(out.residual, "out.residual", "[T, n, H]", (tokens, n, hidden), _BF16, device)
    _tensor(out.pre, "out.pre", "[T, n]", (tokens, n), _F32, device)
    _tensor(out.post, "out.post", "[T, n]", (tokens, n), _F32, device)
    _tensor(out.comb, "out.comb", "[T, n, n]", (tokens, n, n), _F32, device)
    if out.y is not None:
        _tensor(out.y, "out.y", "[T, H]", (tokens, hidden), _BF16, device)
    if out.pair is not None:
        check_mxfp8_pair(out.pair, m=tokens, k=hidden, scale_layout=layout, device=device, argument="out.pair")
    if out.y is None and out.pair is None:
        raise ValueError("out: at least one of out.y and out.pair must be a buffer")
    for flag, name, field in ((want_y, "want_y", "y"), (want_pair, "want_pair", "pair")):
        if flag is not None and flag != (getattr(out, field) is not None):
            raise ValueError(f"{name}={flag} disagrees with out.{field}; with out given, leave {name} None")
    return out


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory ranges two tensors address (first to last element) intersect."""
    if a.numel() == 0 or b.numel() == 0:
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _check_overlaps(inputs: dict[str, torch.Tensor | None], out: HcBoundaryOutputs, spec) -> None:
    """No output may share memory with an input or another output, but R' may update residual in place."""
    outputs = {"out.residual": out.residual, "out.pre": out.pre, "out.post": out.post, "out.comb": out.comb}
    if out.y is not None:
        outputs["out.y"] = out.y
    if out.pair is not None:
        outputs["out.pair[0]"] = out.pair[0]
        outputs["out.pair[1]"] = scale_storage_view(out.pair[1], spec)  # padding included
    seen = {name: t for name, t in inputs.items() if t is not None}
    residual = inputs["residual"]
    for name, t in outputs.items():
        for other, u in seen.items():
            in_place = name == "out.residual" and u is residual
            if in_place and (t.data_ptr(), t.stride()) == (u.data_ptr(), u.stride()):
                continue
            if _overlap(t, u):
                hint = " (it may be residual itself, for an in-place update)" if in_place else ""
                raise ValueError(f"{name} must not overlap {other}{hint}")
        seen[name] = t


def _check_call(p: dict[str, object]) -> _Call:
    x = p["x"]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [T, H]; got shape {tuple(x.shape)}")
    tokens, hidden = x.shape
    if hidden <= 0 or hidden % 128:
        raise ValueError(f"x.shape[1] (H) must be a positive multiple of 128; got {hidden}")
    device = x.device
    _tensor(x, "x", "[T, H]", (tokens, hidden), _BF16, device)
    residual = p["residual"]
    if isinstance(residual, torch.Tensor) and residual.dim() == 3 and residual.shape[1] != N_STREAMS:
        raise ValueError(f"residual.shape[1] (n, the number of streams) must be {N_STREAMS}; got {residual.shape[1]}")
    n, mix = N_STREAMS, N_STREAMS * (N_STREAMS + 2)
    inputs = {
        "x": x,
        "residual": _tensor(residual, "residual", "[T, n, H]", (tokens, n, hidden), _BF16, device),
        "post": _tensor(p["post"], "post", "[T, n]", (tokens, n), _F32, device),
        "comb": _tensor(p["comb"], "comb", "[T, n, n]", (tokens, n, n), _F32, device),
        "prev_pre": None
        if p["prev_pre"] is None
        else _tensor(p["prev_pre"], "prev_pre", "[T, n]", (tokens, n), _F32, device),
        "fn": _tensor(p["fn"], "fn", "[n(n+2), n*H]", (mix, n * hidden), _F32, device),
        "scale": _tensor(p["scale"], "scale", "[3]", (3,), _F32, device),
        "base": _tensor(p["base"], "base", "[n(n+2)]", (mix,), _F32, device),
        "norm_weight": _tensor(p["norm_weight"], "norm_weight", "[H]", (hidden,), (*_BF16, *_F32), device),
    }
    scalars = _check_scalars(p)
    rounding = parse_scale_rounding(p["rounding"])
    layout = parse_scale_layout(p["scale_layout"])
    if not isinstance(p["fused"], bool):
        raise TypeError(f"fused must be a bool; got {p['fused']!r}")
    if p["workspace"] is not None and not isinstance(p["workspace"], HcWorkspace):
        raise TypeError(f"workspace must be an HcWorkspace or None; got {type(p['workspace']).__name__}")
    if p["config"] is not None:
        if not isinstance(p["config"], HcConfig):
            raise TypeError(f"config must be an HcConfig or None; got {type(p['config']).__name__}")
        p["config"].check(hidden)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"x must be on a CUDA device or the CPU; got {device}")
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < _MIN_CAPABILITY:
        major, minor = torch.cuda.get_device_capability(device)
        raise MxfuseUnavailableError(f"mhc_boundary needs FP8 conversion (sm_89+); {device} is sm_{major}{minor}")
    out = _check_out(p, tokens, hidden, layout, device)
    _check_overlaps(inputs, out, scale_spec(tokens, hidden, scale_layout=layout))
    return _Call(**inputs, scalars=scalars, rounding=rounding, layout=layout, out=out)
