"""The ``triton`` backend: our MXFP8 GEMM (``mxfuse.kernels.gemm``) on CUDA GPUs with FP8, sm_89+.

It reads ``a``'s scales in any of the three layouts and keeps the weight's scales K-group-major, uint8
``[K/32, N]`` (one coalesced load per 32-wide group for a tile of weight rows); the stream kernel (M <= 4)
reads the original row-major ones (``MxWeight.scale_e8m0``).
"""

from __future__ import annotations

import torch

from mxfuse.formats import BLOCK_SIZE, MxTensor, ScaleLayout
from mxfuse.gemm import backend as gemm_backend
from mxfuse.gemm.backend import Availability
from mxfuse.gemm.weights import MxWeight

__all__ = ["TRITON"]

_MIN_CAPABILITY = (8, 9)  # E4M3 conversion and FP8 tensor-core dots


class _TritonBackend:
    name = "triton"
    activation_layouts = (ScaleLayout.DEEPGEMM, ScaleLayout.E8M0, ScaleLayout.SWIZZLED_128X4)

    def available(self, device: torch.device) -> Availability:
        if device.type != "cuda":
            return Availability(False, f"the Triton MXFP8 GEMM runs on CUDA devices; this is {device.type}")
        capability = gemm_backend.cuda_capability(device)
        if capability is None:
            return Availability(False, "CUDA is not available in this process")
        sm = f"sm_{capability[0]}{capability[1]}"
        if capability < _MIN_CAPABILITY:
            return Availability(False, f"needs FP8 (sm_89+); {device} is {sm}")
        return Availability(True, f"FP8 tensor cores and E4M3 conversion on {sm}")

    def supports_shape(self, n: int, k: int) -> Availability:
        # Rows and columns are masked in every kernel; K is walked in whole 32-wide groups.
        if k <= 0 or k % BLOCK_SIZE:
            return Availability(False, f"K must be a positive multiple of {BLOCK_SIZE}; got {k}")
        return Availability(True, f"any N; K % {BLOCK_SIZE} == 0")

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor:
        from mxfuse.kernels.gemm import weight_scale_kgroup_major

        return weight_scale_kgroup_major(scale_e8m0)

    def run(self, a: MxTensor, w: MxWeight, out: torch.Tensor) -> None:
        from mxfuse.kernels.gemm import launch_mxfp8_gemm

        with torch.cuda.device(a.device):
            launch_mxfp8_gemm(a, w.qweight, w.scale, out, w_scale_rows=w.scale_e8m0)


TRITON = _TritonBackend()
