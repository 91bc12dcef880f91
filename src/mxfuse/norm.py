"""RMSNorm as a producer: ``y = bf16(x * rsqrt(mean(x^2) + eps) * weight)`` over the last dim, written as
bf16 y and/or as the next GEMM's MXFP8 pair of y (``rms_norm``).

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

__all__ = ["NormOutputs", "rms_norm", "rms_norm_reference"]

_MIN_CAPABILITY = (8, 9)  # cvt.rn.satfinite.e4m3x2.f32, for the pair


class NormOutputs(NamedTuple):
    """What ``rms_norm`` wrote: bf16 ``y`` (None if not asked) and the MXFP8 ``pair`` (None if not asked)."""

    y: torch.Tensor | None
    pair: tuple[torch.Tensor, torch.Tensor] | None


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
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
    out_pair: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> NormOutputs:
    """RMSNorm of the rows of ``x`` ([M, D], float; a column slice of a wider tensor is read in place) with
    an optional ``weight`` [D]: bf16 y (``want_y``) and/or its MXFP8 pair in ``scale_layout``
    (``want_pair``; D a multiple of 32), written into ``out_pair`` when given (see ``empty_mxfp8_pair``;
    capturable in a CUDA graph). Bad arguments raise ValueError or TypeError naming the argument."""
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
    layout = parse_scale_layout(scale_layout)
    rounding = parse_scale_rounding(rounding)
    pair = None
    if want_pair:
        if d % 32:
            raise ValueError(f"x's last dim must be a multiple of 32 for the MXFP8 pair; got {d}")
        if out_pair is None:
            pair = empty_mxfp8_pair(m, d, scale_layout=layout, device=x.device)
        else:
            pair = check_mxfp8_pair(
                out_pair, m=m, k=d, scale_layout=layout, device=x.device, argument="out_pair"
            )
    y = torch.empty((m, d), dtype=torch.bfloat16, device=x.device) if want_y else None
    fields = {"rows": m, "cols": d, "scale_layout": layout.value if want_pair else None}
    if x.device.type == "cpu":
        ref = rms_norm_reference(x, weight, eps=eps)
        if y is not None:
            y.copy_(ref)
        if pair is not None and m:
            ref_q, ref_s = quantize_mxfp8_reference(ref, rounding=rounding, scale_layout=layout)
            spec = scale_spec(m, d, scale_layout=layout)
            pair[0].copy_(ref_q)
            scale_storage_view(pair[1], spec).copy_(scale_storage_view(ref_s, spec))
        witness.emit("norm.reference", "CPU tensors: the torch formula and the reference quantizer", **fields)
        return NormOutputs(y, pair)
    if x.device.type != "cuda":
        raise ValueError(f"x must be on a CUDA device or the CPU; got {x.device}")
    kwargs: dict[str, object] = {}
    if pair is not None:
        capability = torch.cuda.get_device_capability(x.device)
        if capability < _MIN_CAPABILITY:
            sm = f"sm_{capability[0]}{capability[1]}"
            raise MxfuseUnavailableError(
                f"rms_norm's MXFP8 pair needs FP8 conversion (sm_89+); {x.device} is {sm}"
            )
        from mxfuse.kernels.mxfp8 import scale_target

        target = scale_target(pair[1], m=m, k=d, layout=layout)
        kwargs = {
            "q": pair[0],
            "scale_words": target.storage,
            "layout_code": target.code,
            "rows_padded": target.rows_padded,
            "floor": rounding is ScaleRounding.FLOOR,
        }
    with torch.cuda.device(x.device):
        launch_rms_norm(x, weight, eps, y=y, **kwargs)
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
