"""The mHC boundary in plain torch (any device), step by step, and the allocation of its outputs.

Steps and rounding points: ``mxfuse.hc``. The elementwise sums run in a fixed fp32 order (products
rounded before each add, in stream order), which the kernels follow, so they write R' and the collapse
bit for bit as this does. The long reductions (the 24 x n*H projection, the sums of squares) are
accumulated in float64 and rounded once, so the reference depends on neither BLAS summation order nor
TF32 settings.
"""

from __future__ import annotations

import torch

from mxfuse.formats import (
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    parse_scale_rounding,
    quantize_mxfp8_reference,
)
from mxfuse.kernels.hc import HcBoundaryOutputs, HcInputs, HcParams, HcWeights

__all__ = [
    "N_STREAMS",
    "empty_hc_boundary_outputs",
    "hc_collapse",
    "hc_mixes",
    "hc_post",
    "hc_pre",
    "hc_sinkhorn",
    "mhc_boundary_reference",
    "rmsnorm",
]

N_STREAMS = 4  # hc_mult in every DeepSeek-V4/V4.1 config, and the only n the kernels take


def empty_hc_boundary_outputs(
    tokens: int,
    hidden: int,
    *,
    device: torch.device | str,
    y: bool = True,
    pair: bool = True,
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
) -> HcBoundaryOutputs:
    """Allocate the outputs of a boundary over ``tokens`` x ``hidden`` (contents undefined); the pair an
    ``MxTensor`` in ``scale_layout`` for ``rounding`` scales."""
    n = N_STREAMS
    f32 = {"dtype": torch.float32, "device": device}
    return HcBoundaryOutputs(
        residual=torch.empty((tokens, n, hidden), dtype=torch.bfloat16, device=device),
        pre=torch.empty((tokens, n), **f32),
        post=torch.empty((tokens, n), **f32),
        comb=torch.empty((tokens, n, n), **f32),
        y=torch.empty((tokens, hidden), dtype=torch.bfloat16, device=device) if y else None,
        pair=MxTensor.empty(tokens, hidden, scale_layout=scale_layout, rounding=rounding, device=device)
        if pair
        else None,
    )


def hc_post(x: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """Step 1: ``R'[t,k] = bf16(post[t,k] * x[t] + sum_j comb[t,j,k] * R[t,j])``, fp32 in that order."""
    xf = x.float()[:, None, :]
    rf = residual.float()
    acc = post[:, :, None] * xf
    for j in range(residual.shape[1]):
        acc = acc + comb[:, j, :, None] * rf[:, j, None, :]
    return acc.to(torch.bfloat16)


def hc_mixes(
    residual: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, *, params: HcParams
) -> torch.Tensor:
    """Step 2: the n(n+2) scaled and biased logits of each token of ``residual`` [T, n, H], fp32
    (``params.hc_norm_eps``)."""
    tokens, n, hidden = residual.shape
    flat = residual.reshape(tokens, n * hidden).double()
    proj = (flat @ fn.double().T).float()
    sumsq = flat.square().sum(-1).float()
    m = proj * torch.rsqrt(sumsq / (n * hidden) + params.hc_norm_eps)[:, None]
    scales = torch.cat([scale[0].expand(n), scale[1].expand(n), scale[2].expand(n * n)])
    return m * scales + base


def hc_sinkhorn(mixes: torch.Tensor, *, params: HcParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 3: ``(pre, post', comb')`` from the logits [T, n(n+2)]; comb' ends on a column normalisation
    (``params``: hc_pre_eps, hc_post_scale, sinkhorn_eps, sinkhorn_iters)."""
    tokens = mixes.shape[0]
    n = N_STREAMS
    eps = params.sinkhorn_eps
    pre = torch.sigmoid(mixes[:, :n]) + params.hc_pre_eps
    post = torch.sigmoid(mixes[:, n : 2 * n]) * params.hc_post_scale
    comb = torch.softmax(mixes[:, 2 * n :].reshape(tokens, n, n), dim=-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(params.sinkhorn_iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
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
    params: HcParams = HcParams(),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 2-5 on the streams ``residual``: ``(y, pre, post', comb')``; collapses with ``prev_pre`` if given."""
    mixes = hc_mixes(residual, fn, scale, base, params=params)
    pre, post, comb = hc_sinkhorn(mixes, params=params)
    v = hc_collapse(residual, pre if prev_pre is None else prev_pre)
    return rmsnorm(v, norm_weight, eps=params.rms_eps, scale=params.rms_scale), pre, post, comb


def mhc_boundary_reference(
    inputs: HcInputs,
    weights: HcWeights,
    *,
    params: HcParams = HcParams(),
    want_y: bool = True,
    want_pair: bool = True,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
) -> HcBoundaryOutputs:
    """The whole boundary in plain torch (steps 1-5 and the pair), on any device; allocates its outputs.
    The pair is an ``MxTensor`` of ``quantize_mxfp8_reference(y)``."""
    new_residual = hc_post(inputs.x, inputs.residual, inputs.post, inputs.comb)
    y, pre, new_post, new_comb = hc_pre(
        new_residual,
        weights.fn_weight,
        weights.scale,
        weights.base,
        weights.norm_weight,
        prev_pre=inputs.prev_pre,
        params=params,
    )
    pair = None
    if want_pair:
        rounding = parse_scale_rounding(rounding)
        q, s = quantize_mxfp8_reference(y, rounding=rounding, scale_layout=scale_layout)
        pair = MxTensor(q, s, scale_layout, rounding)
    return HcBoundaryOutputs(new_residual, pre, new_post, new_comb, y if want_y else None, pair)
