"""What every MXFP8 GEMM backend adapter provides, and the checks they share.

A backend is a small module-level object with:

* ``name``: ``"torch" | "triton" | "deepgemm" | "flashinfer"``;
* ``activation_layouts``: the scale layouts of ``a`` it reads (``ScaleLayout`` values);
* ``available(device) -> Availability``: whether it can run on ``device`` here, and why not;
* ``weight_scale(scale_e8m0, *, n, k) -> Tensor``: the weight scales laid out as it reads them;
* ``run(a_q, a_scale, a_layout, w, out) -> None``: ``out[M, N] = dequant(a) @ dequant(w).T`` (bf16), all
  arguments already validated by ``mxfuse.gemm.mxfp8_gemm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from mxfuse.formats import ScaleLayout
from mxfuse.gemm.weights import MxWeight

__all__ = ["Availability", "Backend", "cuda_capability"]


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on a device; ``reason`` says why (or why not) in words a person can act on."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


class Backend(Protocol):
    name: str
    activation_layouts: tuple[ScaleLayout, ...]

    def available(self, device: torch.device) -> Availability: ...

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor: ...

    def run(
        self,
        a_q: torch.Tensor,
        a_scale: torch.Tensor,
        a_layout: ScaleLayout,
        w: MxWeight,
        out: torch.Tensor,
    ) -> None: ...


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """``(major, minor)`` of a CUDA device, or None for any other device."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(device)
