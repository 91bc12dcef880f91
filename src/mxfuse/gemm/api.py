"""``mxfp8_gemm`` and ``prepare_mxfp8_weight``: one call, several backends, each saying whether it can run.

``backend="auto"`` picks the first available backend in ``AUTO_ORDER``; every choice emits a witness
record (``gemm.<backend>``) with the reasons the others were passed over.
"""

from __future__ import annotations

import functools

import torch

from mxfuse.formats import ScaleLayout, ScaleRounding, check_mxfp8_pair, parse_scale_layout
from mxfuse.gemm.backend import Availability, Backend
from mxfuse.gemm.torch_backend import TORCH
from mxfuse.gemm.triton_backend import TRITON
from mxfuse.gemm.weights import MxWeight, quantize_weight
from mxfuse.witness import emit

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "backend_status",
    "infer_scale_layout",
    "mxfp8_gemm",
    "prepare_mxfp8_weight",
    "select_backend",
]

# Every backend by name. Adapters register here; the order of AUTO_ORDER is the order "auto" tries them.
BACKENDS: dict[str, Backend] = {"triton": TRITON, "torch": TORCH}
AUTO_ORDER: tuple[str, ...] = ("triton", "torch")


def _backend(name: str, *, argument: str = "backend") -> Backend:
    if name not in BACKENDS:
        choices = ", ".join(repr(b) for b in ("auto", *BACKENDS))
        raise ValueError(f"{argument} must be one of {choices}; got {name!r}")
    return BACKENDS[name]


@functools.lru_cache(maxsize=64)
def _status(name: str, device: torch.device) -> Availability:
    return BACKENDS[name].available(device)


def backend_status(device: torch.device | str) -> dict[str, Availability]:
    """Every backend's availability on ``device``, in ``AUTO_ORDER``. Cached per (backend, device)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return {name: _status(name, device) for name in AUTO_ORDER}


def select_backend(device: torch.device | str) -> tuple[str, dict[str, str]]:
    """The first available backend in ``AUTO_ORDER`` on ``device``, and why each earlier one was passed over."""
    passed_over: dict[str, str] = {}
    for name, status in backend_status(device).items():
        if status.ok:
            return name, passed_over
        passed_over[name] = status.reason
    raise AssertionError("the torch backend is always available")  # pragma: no cover


def prepare_mxfp8_weight(
    weight: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
) -> MxWeight:
    """An ``MxWeight`` for ``backend`` from a float weight or a native MXFP8 checkpoint weight.

    ``weight``: bf16/fp16/fp32 ``[N, K]`` (quantized with ``rounding``), or float8_e4m3fn ``[N, K]`` with
    ``scale`` holding E8M0 bytes (uint8 or float8_e8m0fnu) per 1x32 (``[N, K/32]``) or 32x32 block
    (``[ceil(N/32), K/32]``, expanded per row). ``backend="auto"`` picks the best available on
    ``weight.device``; naming one that is not available here is ``MxfuseUnavailableError`` with its reason.
    """
    from mxfuse import MxfuseUnavailableError

    q, s = quantize_weight(weight, scale, rounding=rounding)
    if backend == "auto":
        backend, _ = select_backend(q.device)
    impl = _backend(backend)
    status = _status(impl.name, _canonical(q.device))
    if not status.ok:
        raise MxfuseUnavailableError(f"backend {backend!r} cannot run on {q.device}: {status.reason}")
    n, k = q.shape
    return MxWeight(q, s, impl.weight_scale(s, n=n, k=k), impl.name)


def _canonical(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def infer_scale_layout(scale: torch.Tensor) -> ScaleLayout:
    """The layout a scale tensor is in, told apart by dtype and rank: int32 2-D deepgemm, uint8 2-D e8m0,
    uint8 1-D swizzled_128x4."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"a[1] (scale) must be a torch.Tensor; got {type(scale).__name__}")
    if scale.dtype == torch.int32 and scale.dim() == 2:
        return ScaleLayout.DEEPGEMM
    if scale.dtype == torch.uint8 and scale.dim() == 2:
        return ScaleLayout.E8M0
    if scale.dtype == torch.uint8 and scale.dim() == 1:
        return ScaleLayout.SWIZZLED_128X4
    raise ValueError(
        "a[1] (scale) must be int32 [M, ceil(K/128)] (deepgemm), uint8 [M, K/32] (e8m0) or 1-D uint8 "
        f"(swizzled_128x4); got {scale.dtype} {tuple(scale.shape)}"
    )


def mxfp8_gemm(
    a: tuple[torch.Tensor, torch.Tensor],
    w: MxWeight,
    *,
    out: torch.Tensor | None = None,
    backend: str = "auto",
    scale_layout: ScaleLayout | str | None = None,
    site: str | None = None,
) -> torch.Tensor:
    """bf16 ``[M, N] = dequant(a) @ dequant(w).T`` with fp32 accumulation.

    ``a`` is an activation pair ``(float8_e4m3fn [M, K], scale)``; ``scale_layout`` declares its layout
    (None: told from the scale's dtype and rank). ``w`` is an ``MxWeight``. ``out`` (bf16 ``[M, N]``,
    contiguous, on ``a``'s device) is written without allocating, for CUDA-graph capture. M may be 0.
    ``backend="auto"`` uses ``w.backend`` when it can run here and the ``torch`` backend otherwise; naming
    ``"torch"`` always works; any other name must be ``w.backend``. The choice is emitted as a witness
    record ``gemm.<backend>`` (``site`` names the caller in it).
    """
    if not isinstance(w, MxWeight):
        raise TypeError(f"w must be an MxWeight (see prepare_mxfp8_weight); got {type(w).__name__}")
    if not isinstance(a, tuple | list) or len(a) != 2:
        raise TypeError(f"a must be a pair (fp8 [M, K], scale); got {type(a).__name__}")
    a_q, a_scale = a
    if not isinstance(a_q, torch.Tensor):
        raise TypeError(f"a[0] must be a torch.Tensor; got {type(a_q).__name__}")
    if a_q.dtype != torch.float8_e4m3fn or a_q.dim() != 2:
        raise ValueError(
            f"a[0] must be a 2-D float8_e4m3fn tensor [M, K]; got {a_q.dtype} {tuple(a_q.shape)}"
        )
    m, k = a_q.shape
    if k != w.k:
        raise ValueError(f"a[0].shape[1] (K) must equal the weight's K = {w.k}; got {k}")
    if a_q.device != w.device:
        raise ValueError(f"a must be on the weight's device {w.device}; got {a_q.device}")
    layout = infer_scale_layout(a_scale) if scale_layout is None else parse_scale_layout(scale_layout)
    check_mxfp8_pair((a_q, a_scale), m=m, k=k, scale_layout=layout, device=w.device, argument="a")
    if out is None:
        out = torch.empty((m, w.n), dtype=torch.bfloat16, device=w.device)
    else:
        _check_out(out, m=m, n=w.n, device=w.device)

    name, reason, passed_over = _choose(backend, w, layout)
    impl = BACKENDS[name]
    emit(f"gemm.{name}", reason, backend=name, site=site, rows=m, n=w.n, k=k, passed_over=passed_over)
    if m > 0:
        impl.run(a_q, a_scale, layout, w, out)
    return out


def _choose(backend: str, w: MxWeight, layout: ScaleLayout) -> tuple[str, str, dict[str, str]]:
    """(backend name, reason, passed over) for one call; ValueError for an impossible explicit choice."""
    if backend == "auto":
        status = _status(w.backend, _canonical(w.device))
        if w.backend != "torch" and not status.ok:
            return "torch", f"auto: {w.backend} cannot run here ({status.reason})", {w.backend: status.reason}
        if layout not in BACKENDS[w.backend].activation_layouts:
            why = f"{w.backend} does not read {layout.value} activation scales"
            return "torch", f"auto: {why}", {w.backend: why}
        return w.backend, f"auto: the weight was prepared for {w.backend}", {}
    impl = _backend(backend)
    if impl.name != "torch" and impl.name != w.backend:
        raise ValueError(f"backend {backend!r} cannot use a weight prepared for {w.backend!r}")
    if layout not in impl.activation_layouts:
        accepted = ", ".join(s.value for s in impl.activation_layouts)
        raise ValueError(f"a[1] is in {layout.value} layout; backend {impl.name!r} reads {accepted}")
    status = _status(impl.name, _canonical(w.device))
    if not status.ok:
        from mxfuse import MxfuseUnavailableError

        raise MxfuseUnavailableError(f"backend {impl.name!r} cannot run on {w.device}: {status.reason}")
    return impl.name, f"backend={impl.name!r} was asked for", {}


def _check_out(out: object, *, m: int, n: int, device: torch.device) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor; got {type(out).__name__}")
    if out.dtype != torch.bfloat16 or tuple(out.shape) != (m, n):
        raise ValueError(
            f"out must be a bfloat16 tensor of shape {(m, n)}; got {out.dtype} {tuple(out.shape)}"
        )
    if out.device != device:
        raise ValueError(f"out must be on {device}; got {out.device}")
    if out.numel() and not out.is_contiguous():
        raise ValueError(f"out must be contiguous; got strides {tuple(out.stride())}")
