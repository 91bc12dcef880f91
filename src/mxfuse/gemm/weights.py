"""Prepared MXFP8 weights: E4M3 ``[N, K]``, the row-major E8M0 original, and the backend's own scale layout.

A weight reaches a GEMM from one of two sources:

* a bf16/fp16/fp32 ``[N, K]`` weight, quantized here with ``mxfuse.formats`` rules (RCEIL by default);
* a native MXFP8 checkpoint: E4M3 ``[N, K]`` plus E8M0 scales per 1x32 block (``[N, K/32]``) or per 32x32
  block (``[ceil(N/32), K/32]``, the DeepSeek-V4.1 format), expanded here to one scale per row and 32 K.

Either way the result keeps the weight as an ``MxTensor`` with its row-major E8M0 scales (``operand``:
what the torch reference backend reads) and ``scale``, the same bytes laid out as the chosen backend
reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxfuse.formats import (
    BLOCK_SIZE,
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    parse_scale_rounding,
    quantize_mxfp8_reference,
)

__all__ = [
    "CHECKPOINT_BLOCKS",
    "MxWeight",
    "expand_block_scales",
    "quantize_weight",
    "tensor_versions",
    "weight_scale_bytes",
]

# Scale blocks a native checkpoint may carry: one scale per (rows x 32 K).
CHECKPOINT_BLOCKS = ((1, 32), (32, 32))


@dataclass(frozen=True)
class MxWeight:
    """An MXFP8 weight prepared for ``backend``.

    ``operand``: the weight as an ``MxTensor`` with row-major e8m0 scales: float8_e4m3fn ``[N, K]``
    (contiguous, K > 0) and uint8 ``[N, K/32]``, the original scales (what the torch reference backend
    reads). ``scale``: the scales as ``backend`` reads them (may be ``operand.scale`` itself).
    ``passed_over``: ``(backend, reason)`` for each backend ``auto`` tried before ``backend`` when the weight
    was prepared (empty when a backend was named); ``mxfp8_gemm`` repeats them in its witness record.
    The tensors are plain storage: a layer that reloads weights copies into them in place, so that CUDA
    graphs captured against them read the new values, and prepares them again (``MxLinear``).
    ``checked``: for a backend whose kernels take only some values (``gluon``: its scale window), the
    version counters (``tensor_versions``) of ``qweight`` and ``scale`` when those values were checked;
    ``mxfp8_gemm`` refuses the weight on that backend once either has been changed in place since. None:
    nothing to re-check (any values run), or tensors that keep no counter (made under inference mode).
    """

    operand: MxTensor
    scale: torch.Tensor
    backend: str
    passed_over: tuple[tuple[str, str], ...] = ()
    checked: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        mx = self.operand
        if not isinstance(mx, MxTensor):
            raise TypeError(f"MxWeight.operand must be an MxTensor; got {type(mx).__name__}")
        if mx.scale_layout is not ScaleLayout.E8M0 or mx.shape[1] == 0:
            raise ValueError(
                f"MxWeight.operand must hold a weight [N, K] with K > 0 and row-major e8m0 scales; got "
                f"{mx.shape} with {mx.scale_layout.value} scales"
            )
        if not isinstance(self.scale, torch.Tensor):
            raise TypeError(f"MxWeight.scale must be a torch.Tensor; got {type(self.scale).__name__}")
        if self.scale.device != mx.device:
            raise ValueError(
                f"MxWeight.scale must be on {mx.device} like the weight; got {self.scale.device}"
            )
        if not isinstance(self.backend, str):
            raise TypeError(f"MxWeight.backend must be a str; got {type(self.backend).__name__}")
        if not isinstance(self.passed_over, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in self.passed_over
        ):
            raise TypeError("MxWeight.passed_over must be a tuple of (backend, reason) string pairs")
        if self.checked is not None and not (
            isinstance(self.checked, tuple)
            and len(self.checked) == 2
            and all(type(v) is int for v in self.checked)
        ):
            raise TypeError(f"MxWeight.checked must be None or a pair of ints; got {self.checked!r}")

    @property
    def qweight(self) -> torch.Tensor:
        """float8_e4m3fn ``[N, K]``."""
        return self.operand.data

    @property
    def scale_e8m0(self) -> torch.Tensor:
        """uint8 ``[N, K/32]``, row-major: the original scales."""
        return self.operand.scale

    @property
    def n(self) -> int:
        return self.operand.shape[0]

    @property
    def k(self) -> int:
        return self.operand.shape[1]

    @property
    def device(self) -> torch.device:
        return self.operand.device


def tensor_versions(*tensors: torch.Tensor) -> tuple[int, ...] | None:
    """The in-place version counters of ``tensors`` (each in-place write bumps its tensor's), or None when
    one keeps none (an inference tensor)."""
    try:
        return tuple(t._version for t in tensors)
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None


def weight_scale_bytes(scale: torch.Tensor, *, argument: str = "scale") -> torch.Tensor:
    """E8M0 scales as uint8: accepts uint8 or ``torch.float8_e8m0fnu`` (the checkpoint dtype), same bytes."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor; got {type(scale).__name__}")
    e8m0fnu = getattr(torch, "float8_e8m0fnu", None)
    if e8m0fnu is not None and scale.dtype == e8m0fnu:
        return scale.view(torch.uint8)
    if scale.dtype != torch.uint8:
        raise ValueError(f"{argument} must hold E8M0 bytes (uint8 or float8_e8m0fnu); got {scale.dtype}")
    return scale


def expand_block_scales(scale: torch.Tensor, *, n: int, k: int, argument: str = "scale") -> torch.Tensor:
    """E8M0 scales of an ``[n, k]`` weight per 1x32 or 32x32 block -> uint8 ``[n, k/32]``, one per row.

    ``[n, k/32]`` is already per row (returned contiguous); ``[ceil(n/32), k/32]`` repeats each block row
    32 times and drops the rows past ``n``. Any other shape is a ValueError naming ``argument``.
    """
    scale = weight_scale_bytes(scale, argument=argument)
    groups = k // BLOCK_SIZE
    blocks_n = -(-n // 32)
    if scale.dim() == 2 and tuple(scale.shape) == (n, groups):
        return scale.contiguous()
    if scale.dim() == 2 and tuple(scale.shape) == (blocks_n, groups):
        return scale.repeat_interleave(32, dim=0)[:n].contiguous()
    raise ValueError(
        f"{argument} must hold one E8M0 scale per 1x32 block {(n, groups)} or per 32x32 block "
        f"{(blocks_n, groups)} of the [{n}, {k}] weight; got shape {tuple(scale.shape)}"
    )


def quantize_weight(
    weight: torch.Tensor, scale: torch.Tensor | None = None, *, rounding: ScaleRounding | str = "rceil"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(float8_e4m3fn [N, K] contiguous, uint8 [N, K/32])`` from a float weight or a native MXFP8 one.

    A float weight (bf16/fp16/fp32, ``scale`` None) is quantized with ``quantize_mxfp8_reference``; an
    E4M3 weight needs ``scale`` (E8M0 per 1x32 or 32x32 block). Errors name ``weight`` or ``scale``.
    """
    rounding = parse_scale_rounding(rounding)
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor; got {type(weight).__name__}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [N, K]; got shape {tuple(weight.shape)}")
    n, k = weight.shape
    if k % BLOCK_SIZE or k == 0:
        raise ValueError(f"weight.shape[1] (K) must be a positive multiple of {BLOCK_SIZE}; got {k}")
    if weight.dtype == torch.float8_e4m3fn:
        if scale is None:
            raise ValueError("scale is required with an E4M3 weight (E8M0 per 1x32 or 32x32 block)")
        scale = weight_scale_bytes(scale)
        if scale.device != weight.device:
            raise ValueError(f"scale must be on {weight.device} like weight; got {scale.device}")
        return weight.contiguous(), expand_block_scales(scale, n=n, k=k)
    if weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"weight must be float8_e4m3fn, bfloat16, float16 or float32; got {weight.dtype}")
    if scale is not None:
        raise ValueError("scale must be None with a float weight (it is quantized here)")
    q, s = quantize_mxfp8_reference(weight, rounding=rounding, scale_layout="e8m0")
    return q.contiguous(), s.contiguous()
