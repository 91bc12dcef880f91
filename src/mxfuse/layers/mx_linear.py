"""``MxLinear``: a bf16-output linear that can take its input as a pre-quantized MXFP8 pair.

Lifecycle, a small state machine (``layer.state``)::

    requested --load_weights()--> loaded --process_weights_after_loading()--> ready
    ready     --load_weights()--> loaded (reload pending) --process_weights_after_loading()--> ready

* Construction is the *request*: ``mxfp8_input=True`` asks for pairs. Nothing is decided yet.
* ``load_weights(weight, scale=None, *, bias=None)`` takes a bf16/fp16/fp32 weight ``[N, K]``, or a
  native MXFP8 checkpoint weight: float8_e4m3fn ``[N, K]`` plus E8M0 scales (uint8 or float8_e8m0fnu) per
  1x32 block ``[N, K/32]`` or per 32x32 block ``[ceil(N/32), K/32]``.
* ``process_weights_after_loading()`` prepares whatever was loaded and only then sets the *fact*
  ``layer.takes_mxfp8_input``: True when the request was made, a backend on this device consumes a pair
  (``gating.consuming_backend``; the ``torch`` reference counts on the CPU only) and N, K are aligned
  for it (the backend's ``supports_shape``). Then the weight is MXFP8 prepared for that backend, whether a bf16 weight
  (quantized here) or a native checkpoint (both block shapes) was loaded. When the fact is False, a
  native weight is prepared for the ``torch`` reference and a float weight stays bf16.
  Reading the fact, ``input_scale_layout`` or calling ``forward`` in any other state than ``ready``
  raises ``LayerNotReadyError``: there is no default to read by mistake.

Forward, ``layer(x, context=None)``: ``x`` is bf16 ``[rows, K]`` or an ``MxTensor`` (a producer's
output) with its scales in ``layer.input_scale_layout``; a plain ``(float8_e4m3fn [rows, K], scale)``
tuple is converted once (``as_mxtensor``). Inputs are 2-D: a 3-D input is a
ValueError (flatten the leading dimensions yourself, ``x.reshape(-1, K)``, so that ``rows`` is what the
gate sees). ``context`` is the forward mode; without it the ambient ``forward_context`` applies, and
without that, decode (see ``mxfuse.layers.context``). The gate
(``gating.fused_mxfp8_rows``, also ``layer.gate(rows)`` for producers) decides the path:

* ``linear.pair_consumed``: a pair, gate yes: ``mxfp8_gemm`` on the prepared weight (``backend="auto"``:
  the backend it was prepared for, or the one that backend hands an M outside its measured wins to).
* ``linear.self_quantized``: bf16 ``x``, gate yes: ``quantize_mxfp8(x)`` with the layer's rounding and
  ``input_scale_layout`` (the call a producer's pair is bit-identical to), then the same GEMM. So
  ``layer(quantize_mxfp8(x, ...))`` and ``layer(x)`` are bit-identical.
* ``linear.bf16``: bf16 ``x``, gate no: ``F.linear`` on the bf16 weight, or on the MXFP8 weight
  dequantized to bf16 each call (exact: an E4M3 value times a power of two fits bf16's 8-bit
  significand, short of bf16's subnormal range). This is the fallback, not a fast path.
* ``linear.pair_fallback``: a pair, gate no: the pair is dequantized to bf16 and runs the bf16 path.
  Never an error, never a silent wrong answer. On a layer whose fact is False any scale layout is
  accepted; on one whose fact is True it must be ``input_scale_layout``.

Witness: every call emits one ``mxfuse.witness`` record, on the host when the path is chosen (under
CUDA-graph capture: once, at capture; replays emit nothing). Keys: ``path``, ``reason`` (the gate's,
naming every rule that said no), ``backend`` (the MXFP8 GEMM backend that ran; None on the bf16 paths),
``site`` (the layer's name), ``rows``, ``n``, ``k``, ``mode``, ``mode_from`` (``"argument"``,
``"forward_context"`` or ``"default"``: see ``mxfuse.layers.context``), ``layout`` (the scale
layout of the pair consumed, dequantized or self-quantized into; None on ``linear.bf16``) and ``failed``
(the gate rules that said no, in ``gating.RULES`` order). Example::

    {"path": "linear.pair_consumed",
     "reason": "decode, 16 rows <= 2048, N = 1792 and K = 5120 aligned for triton",
     "backend": "triton", "site": "layers.0.attn.wqkv_a", "rows": 16, "n": 1792, "k": 5120,
     "mode": "decode", "mode_from": "forward_context", "layout": "deepgemm", "failed": []}

MXFP8 GEMM calls add their own ``gemm.<backend>`` record just before it. A reload that has to replace a
tensor (shape, dtype or device changed) emits ``linear.rebind`` (see ``copy_or_rebind_param``).

Reload: ``load_weights`` again, then ``process_weights_after_loading()``: every prepared tensor whose
shape, dtype and device are unchanged is overwritten in place, so CUDA graphs captured before read the
new weights. The returned ``ProcessResult`` lists what was copied and what was rebound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from mxfuse import MxfuseError
from mxfuse.formats import (
    BLOCK_SIZE,
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    as_mxtensor,
    dequantize_mxfp8,
    parse_scale_layout,
    parse_scale_rounding,
)
from mxfuse.gemm import (
    BACKENDS,
    VALUE_RULES,
    Availability,
    MxWeight,
    auto_backend,
    backend_status,
    expand_block_scales,
    mxfp8_gemm,
    prepare_mxfp8_weight,
    tensor_versions,
)
from mxfuse.kernels import quantize_mxfp8
from mxfuse.layers.context import ForwardContext, resolve_forward_context
from mxfuse.layers.gating import Consumer, FusedDecision, consuming_backend, fused_mxfp8_rows, shape_support
from mxfuse.layers.params import ParamUpdate, can_copy_into, copy_or_rebind_param
from mxfuse.witness import emit

__all__ = ["LayerNotReadyError", "MxLinear", "ProcessResult"]

State = Literal["requested", "loaded", "ready"]
_FLOAT_WEIGHTS = (torch.bfloat16, torch.float16, torch.float32)
_PREPARED = ("weight", "weight_scale", "weight_scale_packed", "bias")


class LayerNotReadyError(MxfuseError, RuntimeError):
    """A layer was used before ``process_weights_after_loading()`` settled what it is."""


@dataclass(frozen=True)
class ProcessResult:
    """What ``process_weights_after_loading()`` decided and did.

    ``takes_mxfp8_input`` is the fact, ``reason`` why. ``backend``: the backend that consumes pairs (None
    when the fact is False). ``weight_format``: ``"mxfp8"`` or ``"bf16"``; ``weight_backend``: the backend
    the MXFP8 weight is prepared for. ``updates``: one entry per prepared tensor (new, copied, rebound).
    """

    takes_mxfp8_input: bool
    reason: str
    backend: str | None
    weight_format: Literal["mxfp8", "bf16"]
    weight_backend: str | None
    input_scale_layout: ScaleLayout | None
    updates: tuple[ParamUpdate, ...]

    @property
    def rebound(self) -> tuple[str, ...]:
        """Names of the tensors replaced by this processing: graphs captured before must be re-captured."""
        return tuple(u.name for u in self.updates if not u.graph_safe)

    @property
    def graph_safe(self) -> bool:
        return not self.rebound


@dataclass(frozen=True)
class _Loaded:
    weight: torch.Tensor  # float [N, K] or float8_e4m3fn [N, K]
    scale: torch.Tensor | None  # uint8 [N, K/32] (expanded per row) with a native weight, else None
    bias: torch.Tensor | None  # bf16 [N]


StatusFn = Callable[[torch.device], Mapping[str, Availability]]


class MxLinear(nn.Module):
    """``y = x @ W.T (+ bias)`` in bf16, taking ``x`` as bf16 or as an MXFP8 pair (see the module docstring).

    ``rounding``: the MXFP8 scale rule for quantizing bf16 weights and the layer's own input.
    ``input_scale_layout``: the layout pairs must use; None: the consuming backend's first choice.
    ``name``: the ``site`` in witness records. ``device``: where the weights live (None: where the first
    loaded weight is); it is fixed at the first load, so move tensors, not the layer (``.to()`` after
    processing is not supported: inputs are checked against this device). ``backend_status``: availability of every backend on a device
    (default ``mxfuse.gemm.backend_status``); tests pass a fake to model a device they do not have.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = False,
        mxfp8_input: bool = False,
        rounding: ScaleRounding | str = ScaleRounding.RCEIL,
        input_scale_layout: ScaleLayout | str | None = None,
        name: str | None = None,
        device: torch.device | str | None = None,
        backend_status: StatusFn | None = None,
    ) -> None:
        super().__init__()
        for argument, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{argument} must be an int >= 1; got {value!r}")
        for argument, value in (("bias", bias), ("mxfp8_input", mxfp8_input)):
            if not isinstance(value, bool):
                raise TypeError(f"{argument} must be a bool; got {type(value).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None; got {type(name).__name__}")
        if backend_status is not None and not callable(backend_status):
            raise TypeError(f"backend_status must be callable; got {type(backend_status).__name__}")
        self.in_features = in_features
        self.out_features = out_features
        self.has_bias = bias
        self.mxfp8_input = mxfp8_input
        self.rounding = parse_scale_rounding(rounding)
        self._layout_request = None if input_scale_layout is None else parse_scale_layout(input_scale_layout)
        self.site = name if name is not None else f"MxLinear[{out_features}x{in_features}]"
        self._device = None if device is None else torch.device(device)
        self._status_fn: StatusFn = backend_status or backend_status_of
        self._state: State = "requested"
        self._loaded: _Loaded | None = None
        self._result: ProcessResult | None = None
        self._consumer = Consumer(None, "not processed")
        self._weight_backend: str | None = None
        self._mx_weight: MxWeight | None = None  # the MXFP8 weight's view for mxfp8_gemm, made at processing
        for slot in _PREPARED:
            self.register_parameter(slot, None)

    # ---- state -------------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def _ready(self, what: str) -> ProcessResult:
        if self._state == "ready" and self._result is not None:
            return self._result
        if self._state == "requested":
            todo = "call load_weights(...) and then process_weights_after_loading()"
        else:
            todo = "weights were loaded but not processed: call process_weights_after_loading()"
        raise LayerNotReadyError(
            f"{what} of {self.site} is not known before process_weights_after_loading(); {todo}"
        )

    @property
    def processed(self) -> ProcessResult:
        """The last ``ProcessResult``; LayerNotReadyError unless the layer is ready."""
        return self._ready("the processing result")

    @property
    def takes_mxfp8_input(self) -> bool:
        """The fact: whether this layer consumes a pre-quantized MXFP8 pair (see ``processed.reason``)."""
        return self._ready("takes_mxfp8_input").takes_mxfp8_input

    @property
    def input_scale_layout(self) -> ScaleLayout | None:
        """The scale layout a producer writes for this layer; None when the layer takes no pairs."""
        return self._ready("input_scale_layout").input_scale_layout

    @property
    def device(self) -> torch.device | None:
        return self._device

    # ---- load ----------------------------------------------------------------------------------------

    def load_weights(
        self, weight: torch.Tensor, scale: torch.Tensor | None = None, *, bias: torch.Tensor | None = None
    ) -> None:
        """Stage ``weight`` (and ``scale``, ``bias``) for ``process_weights_after_loading()``.

        Checked here, so a bad checkpoint fails at load with the argument named. Tensors on another
        device than the layer's are copied to it. Nothing the layer computes with changes until processing.
        """
        n, k = self.out_features, self.in_features
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"weight must be a torch.Tensor; got {type(weight).__name__}")
        if tuple(weight.shape) != (n, k):
            raise ValueError(
                f"weight must have shape [out_features, in_features] = {[n, k]}; got {list(weight.shape)}"
            )
        # "cuda" and "cuda:0" must compare equal when inputs are checked: keep the device with its index.
        device = _canonical(self._device if self._device is not None else weight.device)
        if weight.dtype == torch.float8_e4m3fn:
            if k % BLOCK_SIZE:
                raise ValueError(f"weight: an MXFP8 weight needs K % {BLOCK_SIZE} == 0; in_features is {k}")
            if scale is None:
                raise ValueError(
                    "scale is required with a float8_e4m3fn weight (E8M0 per 1x32 or 32x32 block)"
                )
            scale = expand_block_scales(scale, n=n, k=k, argument="scale").to(device)
        elif weight.dtype in _FLOAT_WEIGHTS:
            if scale is not None:
                raise ValueError(f"scale must be None with a {weight.dtype} weight (it is quantized here)")
        else:
            raise ValueError(
                f"weight must be float8_e4m3fn, bfloat16, float16 or float32; got {weight.dtype}"
            )
        if self.has_bias:
            if not isinstance(bias, torch.Tensor):
                raise TypeError(
                    f"bias must be a torch.Tensor [{n}] (the layer has bias=True); got {type(bias).__name__}"
                )
            if tuple(bias.shape) != (n,) or bias.dtype not in _FLOAT_WEIGHTS:
                raise ValueError(
                    f"bias must be a float tensor of shape [{n}]; got {bias.dtype} {list(bias.shape)}"
                )
            bias = bias.to(device=device, dtype=torch.bfloat16)
        elif bias is not None:
            raise ValueError("bias must be None: the layer was built with bias=False")
        self._device = device
        self._loaded = _Loaded(weight.to(device), scale, bias)
        self._state = "loaded"

    # ---- process -------------------------------------------------------------------------------------

    def process_weights_after_loading(self) -> ProcessResult:
        """Prepare the loaded weights, set the fact, and return what was decided (see ``ProcessResult``).

        A second call without a new ``load_weights`` returns the same result.
        """
        if self._state == "ready" and self._result is not None:
            return self._result
        loaded = self._loaded
        if loaded is None or self._device is None:
            raise LayerNotReadyError(f"{self.site}: nothing to process; call load_weights(...) first")
        device = self._device
        n, k = self.out_features, self.in_features
        consumer = consuming_backend(device, self._status_fn(device), n=n, k=k)
        fact, reason, layout = self._decide(consumer, n=n, k=k)

        native = loaded.scale is not None
        if fact or native:
            weight_backend = consumer.backend if fact and consumer.backend is not None else "torch"
            mx = prepare_mxfp8_weight(
                loaded.weight, loaded.scale, backend=weight_backend, rounding=self.rounding
            )
            packed = None if _same_tensor(mx.scale, mx.scale_e8m0) else mx.scale
            tensors = {"weight": mx.qweight, "weight_scale": mx.scale_e8m0, "weight_scale_packed": packed}
            weight_format: Literal["mxfp8", "bf16"] = "mxfp8"
        else:
            weight_backend = None
            tensors = {
                "weight": loaded.weight.to(torch.bfloat16),
                "weight_scale": None,
                "weight_scale_packed": None,
            }
            weight_format = "bf16"
        tensors["bias"] = loaded.bias

        inputs = [t for t in (loaded.weight, loaded.scale, loaded.bias) if t is not None]
        updates = tuple(
            self._commit(slot, value, inputs)
            for slot, value in tensors.items()
            if value is not None or getattr(self, slot) is not None
        )
        self._consumer = consumer
        self._weight_backend = weight_backend
        self._mx_weight = self._make_mx_weight() if weight_format == "mxfp8" else None
        self._result = ProcessResult(
            fact, reason, consumer.backend if fact else None, weight_format, weight_backend, layout, updates
        )
        self._loaded = None
        self._state = "ready"
        return self._result

    def _decide(self, consumer: Consumer, *, n: int, k: int) -> tuple[bool, str, ScaleLayout | None]:
        """(fact, reason, input scale layout) from the request, the device's consumer and the shape."""
        if not self.mxfp8_input:
            return False, "mxfp8_input=False: the layer was not asked to take MXFP8 input", None
        if consumer.backend is None:
            return False, consumer.reason, None
        if consumer.backend not in BACKENDS:
            return False, f"backend {consumer.backend!r} is not registered in mxfuse.gemm.BACKENDS", None
        shape = shape_support(consumer.backend, n=n, k=k)
        if not shape.ok:
            return False, shape.reason, None
        readable = BACKENDS[consumer.backend].activation_layouts
        layout = self._layout_request or readable[0]
        if layout not in readable:
            accepted = ", ".join(s.value for s in readable)
            return (
                False,
                f"input_scale_layout={layout.value!r}, but {consumer.backend} reads {accepted}",
                None,
            )
        return True, f"{consumer.reason}; {shape.reason}; pairs in {layout.value} layout", layout

    def _commit(self, slot: str, value: torch.Tensor | None, inputs: list[torch.Tensor]) -> ParamUpdate:
        old = getattr(self, slot)
        if value is None:
            self.register_parameter(slot, None)
            reason = f"{slot}: removed (the new weights do not use it); re-capture CUDA graphs"
            emit("linear.rebind", reason, site=self.site, param=slot, old=_describe(old), new=None)
            return ParamUpdate(slot, "removed", reason)
        if not (old is not None and can_copy_into(old, value)) and _aliases(value, inputs):
            # The caller's checkpoint tensor must not become the parameter: a later in-place reload would
            # overwrite the caller's data.
            value = value.clone()
        return copy_or_rebind_param(self, slot, value, site=self.site)

    # ---- forward ----------------------------------------------------------------------------------

    def gate(self, rows: int, *, context: ForwardContext | str | None = None) -> FusedDecision:
        """The gate's decision for ``rows`` rows in ``context`` (else the ambient ``forward_context``, else
        decode: see ``mxfuse.layers.context``). Producers call this to decide whether to write the pair;
        ``forward`` calls it too, so both agree."""
        result = self._ready("gate")
        ctx, _ = resolve_forward_context(context)
        return self._gate(rows, ctx, result)

    def _gate(self, rows: int, ctx: ForwardContext, result: ProcessResult) -> FusedDecision:
        return fused_mxfp8_rows(
            rows=rows,
            n=self.out_features,
            k=self.in_features,
            consumer=self._consumer,
            context=ctx,
            takes_mxfp8_input=result.takes_mxfp8_input,
            fact_reason=result.reason,
        )

    def forward(
        self,
        x: torch.Tensor | MxTensor | tuple[torch.Tensor, torch.Tensor],
        *,
        context: ForwardContext | str | None = None,
    ) -> torch.Tensor:
        result = self._ready("forward")
        ctx = resolve_forward_context(context)
        if isinstance(x, torch.Tensor):
            return self._forward_bf16(x, ctx, result)
        if isinstance(x, MxTensor | tuple | list):
            return self._forward_pair(x, ctx, result)
        raise TypeError(
            f"x must be a bf16 tensor [rows, K], an MxTensor or a pair (fp8 [rows, K], scale); got {type(x).__name__}"
        )

    def _forward_bf16(
        self, x: torch.Tensor, ctx: tuple[ForwardContext, str], result: ProcessResult
    ) -> torch.Tensor:
        self._check_rows_tensor(x, "x", torch.bfloat16)
        decision = self._gate(x.shape[0], ctx[0], result)
        if decision.fused:
            layout = self._layout()
            if x.shape[1] > 1 and x.stride(1) != 1:
                x = x.contiguous()
            y = self._mxfp8(quantize_mxfp8(x, rounding=self.rounding, scale_layout=layout))
            self._witness("linear.self_quantized", decision, x.shape[0], ctx, layout)
            return y
        y = self._bf16(x)
        self._witness("linear.bf16", decision, x.shape[0], ctx, None)
        return y

    def _forward_pair(
        self, x: MxTensor | tuple | list, ctx: tuple[ForwardContext, str], result: ProcessResult
    ) -> torch.Tensor:
        if not isinstance(x, MxTensor):
            if len(x) != 2:
                raise ValueError(
                    f"x must be a pair (fp8 [rows, K], scale); got a {type(x).__name__} of {len(x)}"
                )
            if not isinstance(x[0], torch.Tensor):
                raise TypeError(f"x[0] must be a torch.Tensor; got {type(x[0]).__name__}")
            self._check_rows_tensor(x[0], "x[0]", torch.float8_e4m3fn)
        mx = as_mxtensor(x, argument="x")
        rows, k = mx.shape
        if k != self.in_features:
            raise ValueError(f"x.shape[1] (K) must equal in_features = {self.in_features}; got {k}")
        if mx.device != self._device:
            raise ValueError(f"x must be on the layer's device {self._device}; got {mx.device}")
        wanted = result.input_scale_layout
        if wanted is not None and mx.scale_layout is not wanted:
            raise ValueError(
                f"x holds {mx.scale_layout.value} scales ({mx.scale.dtype} {list(mx.scale.shape)}); this layer "
                f"reads {wanted.value} (layer.input_scale_layout)"
            )
        decision = self._gate(rows, ctx[0], result)
        if decision.fused:
            y = self._mxfp8(mx)
            self._witness("linear.pair_consumed", decision, rows, ctx, mx.scale_layout)
            return y
        y = self._bf16(mx.dequantize().to(torch.bfloat16))
        self._witness("linear.pair_fallback", decision, rows, ctx, mx.scale_layout)
        return y

    def _check_rows_tensor(self, t: torch.Tensor, argument: str, dtype: torch.dtype) -> None:
        if t.dtype != dtype:
            raise ValueError(f"{argument} must have dtype {dtype}; got {t.dtype}")
        if t.dim() != 2:
            raise ValueError(
                f"{argument} must be 2-D [rows, K = {self.in_features}]; got shape {list(t.shape)} (flatten the "
                "leading dimensions first, x.reshape(-1, K): the gate counts rows)"
            )
        if t.shape[1] != self.in_features:
            raise ValueError(
                f"{argument}.shape[1] (K) must equal in_features = {self.in_features}; got {t.shape[1]}"
            )
        if t.device != self._device:
            raise ValueError(f"{argument} must be on the layer's device {self._device}; got {t.device}")

    def _layout(self) -> ScaleLayout:
        layout = self._ready("input_scale_layout").input_scale_layout
        if layout is None:  # the gate says yes only when the fact is True, which sets a layout
            raise LayerNotReadyError(f"{self.site}: no input scale layout although the gate said yes")
        return layout

    def _make_mx_weight(self) -> MxWeight:
        """The prepared parameters as one ``MxWeight``; reloads copy into the same tensors, so it stays
        valid until the next processing."""
        packed = self.weight_scale_packed if self.weight_scale_packed is not None else self.weight_scale
        operand = MxTensor(self.weight, self.weight_scale, ScaleLayout.E8M0)
        # The values were checked when prepared, just before they were committed here.
        checked = tensor_versions(self.weight, packed) if self._weight_backend in VALUE_RULES else None
        return MxWeight(operand, packed, self._weight_backend, checked=checked)

    def _mxfp8(self, x: MxTensor) -> torch.Tensor:
        if self._mx_weight is None:  # the gate says yes only when the fact is True, which prepares MXFP8
            raise LayerNotReadyError(f"{self.site}: no MXFP8 weight although the gate said yes")
        y = mxfp8_gemm(x, self._mx_weight, backend="auto", site=self.site)
        if self.bias is not None:
            y.add_(self.bias)
        return y

    def _bf16(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if weight.dtype == torch.float8_e4m3fn:
            weight = dequantize_mxfp8(weight, self.weight_scale, scale_layout=ScaleLayout.E8M0).to(
                torch.bfloat16
            )
        return F.linear(x, weight, self.bias)

    def _witness(
        self,
        path: str,
        decision: FusedDecision,
        rows: int,
        ctx: tuple[ForwardContext, str],
        layout: ScaleLayout | None,
    ) -> None:
        fused = path in ("linear.pair_consumed", "linear.self_quantized")
        fields: dict[str, Any] = {
            "backend": auto_backend(self._mx_weight, layout, rows) if fused else None,
            "site": self.site,
            "rows": rows,
            "n": self.out_features,
            "k": self.in_features,
            "mode": ctx[0].mode.value,
            "mode_from": ctx[1],
            "layout": None if layout is None else layout.value,
            "failed": list(decision.failed),
        }
        emit(path, decision.reason, **fields)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.has_bias}, "
            f"mxfp8_input={self.mxfp8_input}, state={self._state}"
        )


def backend_status_of(device: torch.device) -> Mapping[str, Availability]:
    """The default ``backend_status`` hook: ``mxfuse.gemm.backend_status``."""
    return backend_status(device)


def _canonical(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (
        a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
    )


def _aliases(value: torch.Tensor, inputs: list[torch.Tensor]) -> bool:
    storage = value.untyped_storage().data_ptr()
    return any(t.untyped_storage().data_ptr() == storage for t in inputs)


def _describe(t: torch.Tensor | None) -> str | None:
    return None if t is None else f"{t.dtype} {tuple(t.shape)} on {t.device}"
