"""What every MXFP8 GEMM backend adapter provides, and the checks they share.

A backend is a small module-level object with:

* ``name``: ``"torch" | "triton" | "gluon" | "deepgemm" | "flashinfer"``;
* ``activation_layouts``: the scale layouts of ``a`` it reads (``ScaleLayout`` values). The first one is
  the layout a producer should write for it;
* ``available(device) -> Availability``: whether it can run on ``device`` here, and why not. It decides from
  the device first and imports an optional library only when the device qualifies;
* ``supports_shape(n, k) -> Availability``: whether it can multiply by an ``[n, k]`` weight (the K/N
  alignment and minimum sizes it needs, each with its source in the adapter);
* ``weight_scale(scale_e8m0, *, n, k) -> Tensor``: the weight scales laid out as it reads them;
* ``run(a, w, out) -> None``: ``out[M, N] = dequant(a) @ dequant(w).T`` (bf16) for an ``MxTensor`` ``a``, M, N >= 1,
  every argument already validated by ``mxfuse.gemm.mxfp8_gemm``. A library-specific rule the generic
  checks cannot know (pointer alignment, say) is checked here, before anything is written to ``out``.

``cuda_capability`` is the one place adapters read the device's compute capability: they call it as
``mxfuse.gemm.backend.cuda_capability`` (an attribute looked up per call), so tests stand in for any GPU by
replacing it there.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

import torch

from mxfuse.formats import MxTensor, ScaleLayout
from mxfuse.gemm.weights import MxWeight

__all__ = [
    "Availability",
    "Backend",
    "check_aligned",
    "check_operands_aligned",
    "cuda_capability",
    "import_optional",
    "require_optional",
    "sm",
]


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

    def supports_shape(self, n: int, k: int) -> Availability: ...

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor: ...

    def run(self, a: MxTensor, w: MxWeight, out: torch.Tensor) -> None: ...


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """``(major, minor)`` of a CUDA device, or None for any other device."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(device)


def sm(capability: tuple[int, int]) -> str:
    """``(9, 0)`` -> ``"sm_90"``."""
    return f"sm_{capability[0]}{capability[1]}"


def import_optional(module: str, attribute: str, *, install: str) -> tuple[ModuleType | None, str]:
    """``(module, "")`` when ``module`` imports and has ``attribute``; ``(None, why not)`` otherwise.

    Any exception from the import counts as "not usable here" (a CUDA library that fails to load raises
    OSError or RuntimeError, not ImportError); the reason carries it and how to install the package.
    """
    try:
        mod = importlib.import_module(module)
    except Exception as error:  # any failure to load means the backend cannot run here
        return None, f"{module} is not importable ({type(error).__name__}: {error}); {install}"
    if not hasattr(mod, attribute):
        version = getattr(mod, "__version__", "unknown version")
        return None, f"{module} ({version}) has no {attribute}, the function this adapter calls; {install}"
    return mod, ""


def check_aligned(t: torch.Tensor, argument: str, *, alignment: int, why: str) -> None:
    """ValueError naming ``argument`` unless its first element sits on an ``alignment``-byte boundary."""
    if t.data_ptr() % alignment:
        raise ValueError(
            f"{argument} must start on a {alignment}-byte boundary ({why}); got address {t.data_ptr():#x}"
        )


def check_operands_aligned(a: MxTensor, w: MxWeight, out: torch.Tensor, *, alignment: int, why: str) -> None:
    """``check_aligned`` for every operand a library kernel reads or writes, each named as the caller
    knows it (``a.data``, ``a.scale``, ``w.qweight``, ``w.scale``, ``out``)."""
    operands = (
        (a.data, "a.data"),
        (a.scale, "a.scale"),
        (w.qweight, "w.qweight"),
        (w.scale, "w.scale"),
        (out, "out"),
    )
    for tensor, argument in operands:
        check_aligned(tensor, argument, alignment=alignment, why=why)


def require_optional(module: str, attribute: str, *, install: str, backend: str) -> ModuleType:
    """``module`` (see ``import_optional``), or ``MxfuseUnavailableError`` naming ``backend`` and why not."""
    mod, reason = import_optional(module, attribute, install=install)
    if mod is None:
        from mxfuse import MxfuseUnavailableError

        raise MxfuseUnavailableError(f"backend {backend!r}: {reason}")
    return mod
