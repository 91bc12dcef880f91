"""The boundary's parameters that are not tensors of the step: its scalars (``HcParams``) and the mixes'
projection prepared once for the tensor cores (``HcProjection``); public as ``mxfuse.hc.HcParams`` and
``mxfuse.hc.HcProjection``."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

__all__ = ["HcParams", "HcProjection"]


@dataclass(frozen=True)
class HcParams:
    """The boundary's scalar parameters, validated once here (the defaults are DeepSeek-V4's).

    hc_norm_eps: added to the mean square of R' before the mixes' rsqrt (step 2). hc_pre_eps: added to
    ``sigmoid`` of the pre logits (step 3). hc_post_scale: multiplies ``sigmoid`` of the post logits
    (2.0 in every V4/V4.1 config). sinkhorn_eps: added to the softmax and to every row/column sum of
    the Sinkhorn normalisation. sinkhorn_iters: Sinkhorn iterations (the first is a column step alone).
    rms_eps, rms_scale: the RMSNorm's eps and the factor on its weight (step 5). V4's configs set
    ``hc_eps`` = 1e-6 and ``rms_norm_eps`` = 1e-6 (V4.1-Flash: 1e-20). Fields hold Python ``float``
    and ``int`` (other real numbers are converted); eps values must be finite and >= 0, the scales
    finite, sinkhorn_iters an int >= 1. Bad values raise TypeError or ValueError naming the field.
    """

    hc_norm_eps: float = 1e-6
    hc_pre_eps: float = 1e-6
    hc_post_scale: float = 2.0
    sinkhorn_eps: float = 1e-6
    sinkhorn_iters: int = 20
    rms_eps: float = 1e-6
    rms_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("hc_norm_eps", "hc_pre_eps", "sinkhorn_eps", "rms_eps"):
            object.__setattr__(self, name, _finite_real(self, name, non_negative=True))
        for name in ("hc_post_scale", "rms_scale"):
            object.__setattr__(self, name, _finite_real(self, name, non_negative=False))
        iters = self.sinkhorn_iters
        if isinstance(iters, bool) or not isinstance(iters, numbers.Integral):
            raise TypeError(f"HcParams.sinkhorn_iters must be an int; got {iters!r}")
        if iters < 1:
            raise ValueError(f"HcParams.sinkhorn_iters must be >= 1; got {iters!r}")
        object.__setattr__(self, "sinkhorn_iters", int(iters))


def _finite_real(params: HcParams, name: str, *, non_negative: bool) -> float:
    value = getattr(params, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"HcParams.{name} must be a finite real number; got {value!r}")
    if non_negative and value < 0:
        raise ValueError(f"HcParams.{name} must be >= 0; got {value!r}")
    return float(value)


@dataclass(frozen=True)
class HcProjection:
    """The mixes' projection weight ``fn`` prepared once (at model load) for the tensor-core mixes.

    ``weight``: fp32 [n(n+2), n*H], as given. ``pieces``: bf16 [3, n(n+2), n*H], the weight split into
    three bf16 values (``hi`` the nearest, then the nearest of each remainder: 8 + 8 + 8 significant
    bits, exact for |w| >= 2^-110, where every piece is a normal bf16), the split the kernel otherwise
    cuts from fp32 again in every step of every block of tokens.
    Both give the same products, so the same bits out. Make one with ``HcProjection.prepare(fn)`` and pass
    it as ``fn`` to ``mhc_boundary``; the torch reference and the CUDA-core mixes read ``weight``.
    """

    weight: torch.Tensor
    pieces: torch.Tensor

    def __post_init__(self) -> None:
        w, p = self.weight, self.pieces
        if not isinstance(w, torch.Tensor) or not isinstance(p, torch.Tensor):
            raise TypeError("HcProjection.weight and .pieces must be torch.Tensors; make it with prepare(fn)")
        if w.dtype != torch.float32 or w.dim() != 2:
            raise ValueError(f"HcProjection.weight must be 2-D float32; got {w.dtype} {tuple(w.shape)}")
        if (
            p.dtype != torch.bfloat16
            or tuple(p.shape) != (3, *w.shape)
            or p.device != w.device
            or not p.is_contiguous()
        ):
            raise ValueError(
                f"HcProjection.pieces must be contiguous bfloat16 [3, {w.shape[0]}, {w.shape[1]}] on {w.device}; "
                f"got {p.dtype} {tuple(p.shape)} on {p.device} (make it with HcProjection.prepare(fn))"
            )

    @classmethod
    def prepare(cls, fn: torch.Tensor) -> HcProjection:
        """The projection of ``fn`` (fp32, 2-D; kept, not copied) with its three bf16 pieces."""
        if not isinstance(fn, torch.Tensor):
            raise TypeError(f"fn must be a torch.Tensor; got {type(fn).__name__}")
        if fn.dtype != torch.float32 or fn.dim() != 2 or not fn.is_contiguous():
            raise ValueError(f"fn must be a contiguous 2-D float32 tensor; got {fn.dtype} {tuple(fn.shape)}")
        hi = fn.to(torch.bfloat16)
        rest = fn - hi.float()
        mid = rest.to(torch.bfloat16)
        lo = (rest - mid.float()).to(torch.bfloat16)
        return cls(fn, torch.stack([hi, mid, lo]).contiguous())
