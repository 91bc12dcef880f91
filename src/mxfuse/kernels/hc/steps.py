"""The mHC boundary as separate kernels: post step, mixes + Sinkhorn, collapse + RMSNorm.

The unfused chain the fused boundary (``mxfuse.kernels.hc.launch``) is measured against and held to: its post step
writes R' bit for bit as the fused kernel does (both use ``hc.tile.post_tile``), and the other steps
are the fused kernel's phases launched on their own. With ``quantize_mxfp8`` after the last step, the
chain produces every output of the boundary. Launchers assume validated arguments (``mxfuse.hc``).
"""

from __future__ import annotations

import torch
import triton

from mxfuse.kernels.hc.config import HcConfig, choose_config
from mxfuse.kernels.hc.launch import FinishTensors, HcItems, HcLaunchTensors, MixTensors, launch_phases
from mxfuse.kernels.hc.params import HcParams
from mxfuse.kernels.hc.post import hc_post_kernel
from mxfuse.kernels.hc.tensors import HcBoundaryOutputs, HcInputs, HcWeights
from mxfuse.kernels.hc.workspace import HcWorkspace

__all__ = ["launch_mixes", "launch_norm", "launch_post"]


def launch_post(inputs: HcInputs, *, residual_out: torch.Tensor, hw_cvt: bool = True) -> None:
    """R' = post step of ``inputs`` (``x`` [T, H], ``residual`` [T, 4, H], ``post`` [T, 4], ``comb``
    [T, 4, 4]) into ``residual_out``."""
    x, residual, post, comb = inputs.x, inputs.residual, inputs.post, inputs.comb
    tokens, hidden = x.shape
    if tokens == 0:
        return
    # 16 x 128 tiles: the same tile as one quantize word row-block; a copy-like kernel.
    block_t, block_h = 16, 128
    grid = (triton.cdiv(tokens, block_t) * (hidden // block_h),)
    hc_post_kernel[grid](
        x, residual, post, comb, residual_out, tokens, hidden, HW_CVT=hw_cvt, BT=block_t, BH=block_h,
        num_warps=4, enable_fp_fusion=False,
    )  # fmt: skip


def launch_mixes(
    out: HcBoundaryOutputs,
    weights: HcWeights,
    *,
    params: HcParams,
    workspace: HcWorkspace,
    config: HcConfig | None = None,
    hw_cvt: bool = True,
) -> None:
    """pre, post' and comb' of the streams ``out.residual`` [T, 4, H] (R', already written) into
    ``out.pre``, ``out.post`` and ``out.comb``, with the next sublayer's ``weights`` (the boundary's A
    items on R', the F items' logits and pre, the S items). ``config`` must be the fused boundary's for
    its reductions to run in the same order (``choose_config`` of the same ordering)."""
    tokens, _, hidden = out.residual.shape
    if tokens == 0:
        return
    mixes = MixTensors(
        weights.fn_weight, weights.fn_pieces, weights.scale, weights.base, out.pre, out.post, out.comb
    )
    launch_phases(
        HcItems((1, 1, 1), coef=True),
        HcLaunchTensors(out.residual, mixes=mixes),
        params=params,
        workspace=workspace,
        config=config or choose_config(tokens, hidden, shifted=False),
        hw_cvt=hw_cvt,
    )


def launch_norm(
    residual: torch.Tensor,
    weights: torch.Tensor,
    norm_weight: torch.Tensor,
    *,
    params: HcParams,
    y_out: torch.Tensor,
    workspace: HcWorkspace,
    config: HcConfig | None = None,
    hw_cvt: bool = True,
    split: bool = False,
) -> None:
    """y = RMSNorm(collapse(``residual``, ``weights`` [T, 4])) in bf16 (the boundary's F items, finishing
    only: collapse, norm, y). ``split``: as the fused boundary computes it in the shifted ordering (the
    collapse and its 16-column sums of squares by A items, then the finish split over items), which
    ``weights`` = ``prev_pre`` asks for; else as in the normal ordering (one item a row)."""
    tokens, _, hidden = residual.shape
    if tokens == 0:
        return
    launch_phases(
        HcItems((1, 1, 0) if split else (0, 1, 0), a_mix=False, a_collapse=split, split=split, norm=True),
        HcLaunchTensors(residual, finish=FinishTensors(weights, norm_weight, y_out, y_out)),
        params=params,
        workspace=workspace,
        config=config or choose_config(tokens, hidden, shifted=split),
        hw_cvt=hw_cvt,
        pdl=split and hw_cvt,
    )
