"""``mxfp8_gemm`` and ``prepare_mxfp8_weight``: one call, several backends, each saying whether it can run.

``backend="auto"`` takes the first backend in ``AUTO_ORDER`` that runs on the device and accepts the weight's
shape: DeepGEMM (sm_100/sm_103), FlashInfer (sm_100+/sm_120), the Gluon decode kernel (sm_90, only where
its measured table says it wins: ``auto_rule``), the Triton kernel (sm_89+), and the torch reference,
which runs anywhere. The choice is made once, when the weight is prepared (its scales are laid
out for that backend); every ``mxfp8_gemm`` call emits a witness record ``gemm.<backend>`` with the reason
and the backends passed over with theirs.
"""

from __future__ import annotations

import functools

import torch

from mxfuse.formats import MxTensor, ScaleLayout, ScaleRounding, as_mxtensor
from mxfuse.gemm.backend import Availability, Backend
from mxfuse.gemm.deepgemm_backend import DEEPGEMM
from mxfuse.gemm.flashinfer_backend import FLASHINFER
from mxfuse.gemm.gluon_backend import GLUON
from mxfuse.gemm.torch_backend import TORCH
from mxfuse.gemm.triton_backend import TRITON
from mxfuse.gemm.weights import MxWeight, quantize_weight, tensor_versions
from mxfuse.witness import emit

# Backends whose kernels take only some weight values: checked when a weight is prepared for them, and
# refused by ``mxfp8_gemm`` once written in place after that (``MxWeight.checked``).
VALUE_RULES = ("gluon",)
# Backends whose kernels read NaN codes through their blocks' scale bytes: ``prepare_mxfp8_weight`` gives
# them the weight's bytes with every block that holds an E4M3 NaN code at 0xFF (the same outputs: NaN
# in that weight row's column for every token), ``MxWeight.operand`` keeps the original bytes.
FOLDS_NAN_CODES = ("gluon",)

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "VALUE_RULES",
    "auto_backend",
    "auto_rule",
    "backend_status",
    "mxfp8_gemm",
    "prepare_mxfp8_weight",
    "select_backend",
]

# Every backend by name. AUTO_ORDER is the order "auto" tries them: the vendor libraries first (hardware
# block-scaled MMA), then our Gluon kernel (only where measured faster: auto_rule), our Triton kernel,
# and the torch reference, which always runs.
BACKENDS: dict[str, Backend] = {
    "deepgemm": DEEPGEMM,
    "flashinfer": FLASHINFER,
    "gluon": GLUON,
    "triton": TRITON,
    "torch": TORCH,
}
AUTO_ORDER: tuple[str, ...] = ("deepgemm", "flashinfer", "gluon", "triton", "torch")
# Backends that read a weight prepared for another one (the same scale layout, K-group-major): auto
# hands a call from the first to the second where the first has no measured win at the call's M.
_HANDOFF = {"gluon": "triton"}


def _backend(name: object, *, argument: str = "backend") -> Backend:
    if not isinstance(name, str) or name not in BACKENDS:
        choices = ", ".join(repr(b) for b in ("auto", *BACKENDS))
        raise ValueError(f"{argument} must be one of {choices}; got {name!r}")
    return BACKENDS[name]


@functools.lru_cache(maxsize=64)
def _status(name: str, device: torch.device) -> Availability:
    return BACKENDS[name].available(device)


def _canonical(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _check_shape_args(n: object, k: object) -> None:
    if (n is None) != (k is None):
        raise ValueError(f"n and k must be given together (the weight's [N, K]); got n={n!r}, k={k!r}")
    for name, value in (("n", n), ("k", k)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be an int >= 0; got {value!r}")


def backend_status(
    device: torch.device | str, *, n: int | None = None, k: int | None = None
) -> dict[str, Availability]:
    """Every backend's availability on ``device``, in ``AUTO_ORDER``.

    With ``n`` and ``k`` it also says whether each backend that runs here accepts an ``[n, k]`` weight
    (``supports_shape``); one that does not is reported unavailable with the shape rule it needs. Device
    availability is cached per (backend, device).
    """
    _check_shape_args(n, k)
    device = _canonical(device)
    status = {name: _status(name, device) for name in AUTO_ORDER}
    if n is None or k is None:
        return status
    for name, here in status.items():
        if here.ok:
            shape = BACKENDS[name].supports_shape(n, k)
            if not shape.ok:
                status[name] = Availability(False, f"[N, K] = [{n}, {k}]: {shape.reason}")
    return status


def auto_rule(name: str, device: torch.device | str, *, n: int | None, k: int | None) -> Availability:
    """Whether ``auto`` may take backend ``name`` (already known to run here) for an ``[n, k]`` weight.

    The rule: ``gluon`` is taken automatically only where its checked-in table
    (``mxfuse/kernels/gemm/gluon_configs.json``, written by a GPU sweep) names the device and ``[n, k]``:
    until it has been measured faster there, it runs only when asked for by name. Every other backend
    that runs here may be taken.
    """
    if name != "gluon":
        return Availability(True, "")
    if n is None or k is None:
        return Availability(
            False, "not chosen automatically without the weight's [N, K] (its table is per shape)"
        )
    return GLUON.measured_win(_canonical(device), n, k)


def select_backend(
    device: torch.device | str, *, n: int | None = None, k: int | None = None
) -> tuple[str, dict[str, str]]:
    """The first backend in ``AUTO_ORDER`` that runs on ``device`` (and accepts an ``[n, k]`` weight, when
    given) and that ``auto_rule`` lets ``auto`` take, and why each earlier one was passed over."""
    passed_over: dict[str, str] = {}
    for name, status in backend_status(device, n=n, k=k).items():
        if status.ok:
            status = auto_rule(name, device, n=n, k=k)
        if status.ok:
            return name, passed_over
        passed_over[name] = status.reason
    raise AssertionError("the torch backend runs on every device and shape")  # pragma: no cover


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
    (``[ceil(N/32), K/32]``, expanded per row). ``backend="auto"`` takes the first backend in ``AUTO_ORDER``
    that runs on ``weight.device`` and accepts ``[N, K]`` (the ones passed over are kept, with their
    reasons, in ``MxWeight.passed_over``). Naming a backend that cannot run here raises
    ``MxfuseUnavailableError`` with its reason; one that cannot take this shape, or these values (the
    ``gluon`` backend's scale window), ``ValueError``.
    """
    from mxfuse import MxfuseUnavailableError

    if backend != "auto":
        _backend(backend)
    q, s = quantize_weight(weight, scale, rounding=rounding)
    n, k = q.shape
    passed_over: dict[str, str] = {}
    if backend == "auto":
        backend, passed_over = select_backend(q.device, n=n, k=k)
        values = _supports_weight(backend, q, s)
        if not values.ok:  # only gluon checks values; the next one in AUTO_ORDER reads the same weight
            passed_over[backend] = values.reason
            backend = _HANDOFF[backend]
    impl = _backend(backend)
    status = _status(impl.name, _canonical(q.device))
    if not status.ok:
        raise MxfuseUnavailableError(f"backend {impl.name!r} cannot run on {q.device}: {status.reason}")
    shape = impl.supports_shape(n, k)
    if not shape.ok:
        raise ValueError(
            f"weight of shape [N, K] = [{n}, {k}] cannot be used by backend {impl.name!r}: {shape.reason}"
        )
    values = _supports_weight(impl.name, q, s)
    if not values.ok:
        raise ValueError(f"weight (its scale bytes) cannot be used by backend {impl.name!r}: {values.reason}")
    operand = MxTensor(q, s, ScaleLayout.E8M0, None if weight.dtype == torch.float8_e4m3fn else rounding)
    packed = impl.weight_scale(_fold_nan_codes(q, s) if impl.name in FOLDS_NAN_CODES else s, n=n, k=k)
    checked = tensor_versions(q, packed) if impl.name in VALUE_RULES else None
    return MxWeight(operand, packed, impl.name, tuple(passed_over.items()), checked)


def _fold_nan_codes(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    from mxfuse.kernels.gemm.gluon_launch import fold_nan_codes

    return fold_nan_codes(q, s)


def _supports_weight(name: str, q: torch.Tensor, s: torch.Tensor) -> Availability:
    """The value rule of a backend that has one (``gluon``: its scale window); every other takes any."""
    if name == "gluon":
        return GLUON.supports_weight(q, s)
    return Availability(True, "")


def _check_unchanged(name: str, w: MxWeight) -> None:
    """ValueError when backend ``name`` checks weight values and ``w``'s were written in place after the
    check (``MxWeight.checked``): its kernel would read unchecked values. Host-only: no device read."""
    if name not in VALUE_RULES or w.checked is None:
        return
    now = tensor_versions(w.qweight, w.scale)
    if now is not None and now != w.checked:
        raise ValueError(
            f"w: its tensors were written in place after its values were checked for backend {name!r} "
            f"(version counters {w.checked} then, {now} now); prepare the weight again "
            "(prepare_mxfp8_weight), which checks the new values"
        )


def mxfp8_gemm(
    a: MxTensor | tuple[torch.Tensor, torch.Tensor],
    w: MxWeight,
    *,
    out: torch.Tensor | None = None,
    backend: str = "auto",
    scale_layout: ScaleLayout | str | None = None,
    site: str | None = None,
) -> torch.Tensor:
    """bf16 ``[M, N] = dequant(a) @ dequant(w).T`` with fp32 accumulation.

    ``a`` is an ``MxTensor`` ``[M, K]`` (a producer's output, or ``quantize_mxfp8``'s), or a plain
    ``(float8_e4m3fn [M, K], scale)`` tuple, converted once (``as_mxtensor``: its layout is
    ``scale_layout``, or told from the scale's dtype and rank; E8M0 bytes may come as uint8 or
    float8_e8m0fnu). ``scale_layout``, when given, is the layout ``a`` must be in. ``w`` is an
    ``MxWeight``. ``out`` (bf16 ``[M, N]``, contiguous, on ``w``'s device) is written without allocating,
    for CUDA-graph capture; on a bad argument nothing is written to it. M (and N) may be 0.

    ``backend="auto"`` uses ``w.backend`` when it can run here and reads ``a``'s scale layout, and the
    ``torch`` backend otherwise; a weight prepared for ``gluon`` runs on ``triton`` (which reads the same
    weight) at an M where the Gluon table has no measured win (``auto_backend`` says which). Naming
    ``"torch"`` always works; any other name must be ``w.backend`` and read ``a``'s layout (else
    ValueError). The choice is emitted on the host as a witness record
    ``gemm.<backend>`` with ``reason``, ``passed_over`` (backend -> reason) and ``site`` (the caller).
    """
    if not isinstance(w, MxWeight):
        raise TypeError(f"w must be an MxWeight (see prepare_mxfp8_weight); got {type(w).__name__}")
    a = as_mxtensor(a, scale_layout=scale_layout, device=w.device, argument="a")
    m, k = a.shape
    if k != w.k:
        raise ValueError(f"a.shape[1] (K) must equal the weight's K = {w.k}; got {k}")
    if out is None:
        out = torch.empty((m, w.n), dtype=torch.bfloat16, device=w.device)
    else:
        _check_out(out, m=m, n=w.n, device=w.device)

    name, reason, passed_over = _choose(backend, w, a.scale_layout, m=m)
    _check_unchanged(name, w)
    if out.numel():  # M or N may be 0: nothing to compute, and some libraries refuse empty launches
        BACKENDS[name].run(a, w, out)
    # After the launch (a refused call leaves no record), on the host: once per capture under CUDA graphs.
    emit(f"gemm.{name}", reason, backend=name, site=site, rows=m, n=w.n, k=k, passed_over=passed_over)
    return out


def auto_backend(w: MxWeight, scale_layout: ScaleLayout, m: int) -> str:
    """The backend ``mxfp8_gemm(a, w, backend="auto")`` runs for an ``[m, K]`` ``a`` in ``scale_layout``."""
    return _choose("auto", w, scale_layout, m=m)[0]


def _choose(backend: str, w: MxWeight, layout: ScaleLayout, *, m: int) -> tuple[str, str, dict[str, str]]:
    """(backend name, reason, passed over) for one call; ValueError for an impossible explicit choice."""
    if backend == "auto":
        passed_over = dict(w.passed_over)
        prepared = _backend(w.backend, argument="w.backend")
        if prepared.name in _HANDOFF:
            why = _handoff_reason(prepared.name, w, m)
            if why:
                prepared = _backend(_HANDOFF[prepared.name])
                passed_over[w.backend] = why
        status = _status(prepared.name, _canonical(w.device))
        why = ""
        if not status.ok:
            why = f"{prepared.name} cannot run here ({status.reason})"
        elif layout not in prepared.activation_layouts:
            accepted = ", ".join(s.value for s in prepared.activation_layouts)
            why = f"{prepared.name} reads {accepted} activation scales, not {layout.value}"
        if why:
            return "torch", f"auto: {why}", {**passed_over, prepared.name: why}
        return prepared.name, f"auto: the weight was prepared for {prepared.name}", passed_over
    impl = _backend(backend)
    if impl.name != "torch" and impl.name != w.backend:
        raise ValueError(f"backend {backend!r} cannot use a weight prepared for {w.backend!r}")
    if layout not in impl.activation_layouts:
        accepted = ", ".join(s.value for s in impl.activation_layouts)
        raise ValueError(f"a holds {layout.value} scales; backend {impl.name!r} reads {accepted}")
    status = _status(impl.name, _canonical(w.device))
    if not status.ok:
        from mxfuse import MxfuseUnavailableError

        raise MxfuseUnavailableError(f"backend {impl.name!r} cannot run on {w.device}: {status.reason}")
    return impl.name, f"backend={impl.name!r} was asked for", {}


def _handoff_reason(name: str, w: MxWeight, m: int) -> str:
    """Why ``auto`` hands a call on a weight prepared for ``name`` to ``_HANDOFF[name]`` ("" to keep it):
    the Gluon kernel runs automatically only at the M its table measured it faster."""
    from mxfuse.kernels.gemm.gluon_launch import GLUON_TABLE_FILE, measured_gluon_win
    from mxfuse.kernels.gemm.launch import device_facts

    device_name, _ = device_facts(w.device)
    if measured_gluon_win(device_name, w.n, w.k, m) is None:
        return f"{GLUON_TABLE_FILE} has no measured win at M = {m} for [{w.n}, {w.k}] on {device_name or w.device.type}"
    return ""


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
