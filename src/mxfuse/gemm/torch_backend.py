"""The ``torch`` backend: dequantize both operands to fp32 and multiply. Any device, CPU included.

It is the oracle every other backend is tested against. NaN blocks (scale 0xFF) dequantize to NaN, so an
affected output row is NaN, never a finite number.
"""

from __future__ import annotations

import torch

from mxfuse.formats import MxTensor, ScaleLayout
from mxfuse.gemm.backend import Availability
from mxfuse.gemm.weights import MxWeight

__all__ = ["TORCH"]


class _TorchBackend:
    name = "torch"
    activation_layouts = (ScaleLayout.E8M0, ScaleLayout.DEEPGEMM, ScaleLayout.SWIZZLED_128X4)

    def available(self, device: torch.device) -> Availability:
        return Availability(True, "dequantize + fp32 matmul runs on any device")

    def supports_shape(self, n: int, k: int) -> Availability:
        if k <= 0 or k % 32:
            return Availability(False, f"K must be a positive multiple of 32 (one scale block); got K = {k}")
        return Availability(True, "any [N, K] weight with K a multiple of 32")

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor:
        return scale_e8m0

    def run(self, a: MxTensor, w: MxWeight, out: torch.Tensor) -> None:
        a = a.dequantize()
        b = w.operand.dequantize()
        # Full fp32: TF32 would round the operands to 10 mantissa bits. The flag is per process; restore it.
        allow_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            out.copy_(torch.mm(a, b.t()))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32


TORCH = _TorchBackend()
