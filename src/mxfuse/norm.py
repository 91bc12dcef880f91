"""RMSNorm as a producer: ``y = bf16(x * rsqrt(mean(x^2) + eps) * weight)`` over the last dim, written as
bf16 y and/or as the next GEMM's input, the ``MxTensor`` of y (``rms_norm``).

The pair is bit for bit ``quantize_mxfp8(y, rounding, scale_layout)`` of the y the same call writes (or
would write), so a consumer fed the pair computes exactly what it computes from y after quantizing it
itself: the decode step's q_norm feeds wq_b this way. CUDA tensors run one Triton launch
(``mxfuse.kernels.norm``, sm_89+ for the pair's FP8 conversion); CPU tensors the torch formula
(``rms_norm_reference``) and the reference quantizer. A ``mxfuse.witness`` record says which ran:
``norm.kernel.pair`` (the pair written, y too if asked), ``norm.kernel.bf16`` or ``norm.reference``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mxfuse import MxfuseUnavailableError, witness
from mxfuse.formats import (
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    mxtensor_out,
    quantize_mxfp8_reference,
    scale_storage_view,
)

__all__ = ["NormOutputs", "rms_norm", "rms_norm_reference"]

_MIN_CAPABILITY = (8, 9)  # cvt.rn.satfinite.e4m3x2.f32, for the pair


class NormOutputs(NamedTuple):
    """What ``rms_norm`` wrote: bf16 ``y`` (None if not asked) and its ``MxTensor`` ``pair`` (None if not
    asked)."""

    y: torch.Tensor | None
    pair: MxTensor | None


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> torch.Tensor:
    """The torch formula, fp32 math, any device: ``bf16(x * rsqrt(mean(x^2) + eps) * weight)``."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(torch.bfloat16)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    eps: float,
    want_y: bool = True,
    want_pair: bool = False,
    scale_layout: ScaleLayout | str | None = None,
    rounding: ScaleRounding | str | None = None,
    out_pair: MxTensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> NormOutputs:
    """RMSNorm of the rows of ``x`` ([M, D], float; a column slice of a wider tensor is read in place) with
    an optional ``weight`` [D]: bf16 y (``want_y``) and/or its ``MxTensor`` (``want_pair``; D a multiple
    of 32; scales in ``scale_layout``, default deepgemm, chosen by ``rounding``, default RCEIL, or those
    of ``out_pair``), written into ``out_pair`` when given (``MxTensor.empty``, or a ``(q, scale)`` tuple
    converted once; capturable in a CUDA graph). Bad arguments raise ValueError or TypeError naming the
    argument."""
    from mxfuse.kernels.norm import MAX_ROW, check_norm_eps, check_norm_weight, launch_rms_norm

    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        raise TypeError(f"x must be a 2-D floating-point torch.Tensor; got {_describe(x)}")
    m, d = x.shape
    if not 0 < d <= MAX_ROW:
        raise ValueError(f"x's last dim must be in 1..{MAX_ROW}; got {d}")
    if d > 1 and x.stride(1) != 1 or m > 1 and x.stride(0) < d:
        raise ValueError(f"x must have contiguous, non-overlapping rows; got strides {tuple(x.stride())}")
    check_norm_weight(weight, x)
    check_norm_eps(eps)
    for name, flag in (("want_y", want_y), ("want_pair", want_pair)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool; got {flag!r}")
    if not (want_y or want_pair):
        raise ValueError("want_y and want_pair are both False: nothing to write")
    if out_pair is not None and not want_pair:
        raise ValueError("out_pair was given with want_pair=False")
    pair = None
    if want_pair:
        if d % 32:
            raise ValueError(f"x's last dim must be a multiple of 32 for the MXFP8 pair; got {d}")
        pair = mxtensor_out(
            out_pair,
            m=m,
            k=d,
            device=x.device,
            scale_layout=scale_layout,
            rounding=rounding,
            argument="out_pair",
        )
    y = torch.empty((m, d), dtype=torch.bfloat16, device=x.device) if want_y else None
    fields = {"rows": m, "cols": d, "scale_layout": pair.scale_layout.value if pair is not None else None}
    if x.device.type == "cpu":
        ref = rms_norm_reference(x, weight, eps=eps)
        if y is not None:
            y.copy_(ref)
        if pair is not None and m:
            ref_q, ref_s = quantize_mxfp8_reference(
                ref, rounding=pair.rounding, scale_layout=pair.scale_layout
            )
            pair.data.copy_(ref_q)
            pair.scale_storage().copy_(scale_storage_view(ref_s, pair.spec))
        witness.emit("norm.reference", "CPU tensors: the torch formula and the reference quantizer", **fields)
        return NormOutputs(y, pair)
    if x.device.type != "cuda":
        raise ValueError(f"x must be on a CUDA device or the CPU; got {x.device}")
    if pair is not None:
        capability = torch.cuda.get_device_capability(x.device)
        if capability < _MIN_CAPABILITY:
            sm = f"sm_{capability[0]}{capability[1]}"
            raise MxfuseUnavailableError(
                f"rms_norm's MXFP8 pair needs FP8 conversion (sm_89+); {x.device} is {sm}"
            )
    with torch.cuda.device(x.device):
        launch_rms_norm(x, weight, eps, y=y, pair=pair)
    if pair is not None:
        witness.emit(
            "norm.kernel.pair", "the norm kernel wrote the next GEMM's MXFP8 pair", backend="triton", **fields
        )
    else:
        witness.emit("norm.kernel.bf16", "the norm kernel wrote y in bf16 only", backend="triton", **fields)
    return NormOutputs(y, pair)


def _describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)}"
    return type(x).__name__
