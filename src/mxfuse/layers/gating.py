"""The fused-path gate: whether a producer writes an MXFP8 pair for a linear and the linear consumes it.

``fused_mxfp8_rows(...)`` is one pure function of plain values (no tensors, no device probes); it
returns a frozen ``FusedDecision`` whose ``reason`` says why, naming every rule that said no. The rules,
in the order the reasons are listed:

1. ``device``: a backend on this device consumes a pre-quantized pair (``consuming_backend``). The
   ``torch`` backend (dequantize + fp32 matmul) counts on the CPU, where it is the reference and what the
   CPU wiring tests run through, and does not count on CUDA, where it is slower than the bf16 path.
2. ``alignment``: N and K are what that backend needs (its ``supports_shape``: torch and triton any N
   and K % 32; deepgemm N % 8; flashinfer N, K >= 128 and N % 32; see each adapter for the source).
3. ``mode``: the forward mode is decode or target-verify, not prefill or extend, and the rows are not
   split across ranks (sequence parallel). No mode given is a no.
4. ``rows``: ``rows <= MAX_FUSED_ROWS`` (2048).
5. ``fact``: the layer's ``takes_mxfp8_input`` is True (set by ``process_weights_after_loading``).

A producer asks the same question before writing the pair (``MxLinear.gate(rows)``), so the producer and
the layer can never disagree about which path a call takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mxfuse.gemm import BACKENDS, Availability, auto_rule
from mxfuse.layers.context import ForwardContext, ForwardMode

__all__ = [
    "FUSED_MODES",
    "MAX_FUSED_ROWS",
    "RULES",
    "Consumer",
    "FusedDecision",
    "consuming_backend",
    "fused_mxfp8_rows",
    "shape_support",
]

# Rows of a fused call: decode and target-verify batches. Above this a batch is prefill-sized, where the
# GEMM is compute-bound and the bf16 path loses nothing; the MXFP8 GEMM benchmark sweeps M up to 2048.
MAX_FUSED_ROWS = 2048

FUSED_MODES = frozenset({ForwardMode.DECODE, ForwardMode.TARGET_VERIFY})

RULES = ("device", "alignment", "mode", "rows", "fact")


@dataclass(frozen=True)
class Consumer:
    """The backend that consumes a pre-quantized pair on a device, or None; ``reason`` says why."""

    backend: str | None
    reason: str

    def __bool__(self) -> bool:
        return self.backend is not None


def consuming_backend(
    device: torch.device | str,
    status: Mapping[str, Availability],
    *,
    n: int | None = None,
    k: int | None = None,
) -> Consumer:
    """The first backend in ``status`` (``mxfuse.gemm.backend_status(device)``: AUTO_ORDER) that is
    available, that ``auto`` may take for an ``[n, k]`` weight (``mxfuse.gemm.auto_rule``: ``gluon`` only
    where its measured table names the shape) and that counts as a consumer on ``device``; None with every
    backend's reason otherwise. The same choice ``select_backend`` makes, so a layer never runs a kernel by
    name that ``auto`` would pass over.

    Pure apart from ``auto_rule``'s table: ``device`` is only read for its type, so tests pass
    ``torch.device("cuda", 0)`` without a GPU.
    """
    device = torch.device(device)
    passed_over: list[str] = []
    for name, availability in status.items():
        if availability.ok:
            availability = auto_rule(name, device, n=n, k=k)
        if not availability.ok:
            passed_over.append(f"{name}: {availability.reason}")
        elif name == "torch" and device.type != "cpu":
            passed_over.append(
                f"torch: does not count on {device.type} (dequantize + fp32 matmul is slower than the bf16 path)"
            )
        else:
            return Consumer(name, f"{name}: {status[name].reason}")
    if not passed_over:
        return Consumer(None, f"no MXFP8 GEMM backend is registered for {device}")
    return Consumer(None, f"no backend on {device} consumes an MXFP8 pair ({'; '.join(passed_over)})")


def shape_support(backend: str, *, n: int, k: int) -> Availability:
    """Whether ``backend`` runs an ``[N, K]`` weight: the backend's own ``supports_shape`` rule (one
    source of truth, documented beside each adapter in ``mxfuse.gemm``); the reason names the rule."""
    if backend not in BACKENDS:
        return Availability(False, f"no MXFP8 GEMM backend is named {backend!r}")
    return BACKENDS[backend].supports_shape(n, k)


@dataclass(frozen=True)
class FusedDecision:
    """The gate's answer for one call. ``failed`` names the rules that said no, in ``RULES`` order."""

    fused: bool
    reason: str
    backend: str | None
    failed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.fused


def _check_int(value: object, argument: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{argument} must be an int >= {minimum}; got {value!r}")
    return value


def fused_mxfp8_rows(
    *,
    rows: int,
    n: int,
    k: int,
    consumer: Consumer,
    context: ForwardContext | None,
    takes_mxfp8_input: bool,
    fact_reason: str = "",
) -> FusedDecision:
    """Whether ``rows`` rows of an ``[N, K]`` linear run fused: the producer writes the pair, the layer
    consumes it with ``consumer.backend``. Every rule is checked; a no lists each failing rule's reason.

    ``consumer`` is ``consuming_backend(...)`` for the layer's device; ``context`` the forward pass (None:
    not given); ``fact_reason`` explains a False ``takes_mxfp8_input``.
    """
    rows = _check_int(rows, "rows", minimum=0)
    n = _check_int(n, "n", minimum=1)
    k = _check_int(k, "k", minimum=1)
    if not isinstance(consumer, Consumer):
        raise TypeError(f"consumer must be a Consumer (see consuming_backend); got {type(consumer).__name__}")
    if context is not None and not isinstance(context, ForwardContext):
        raise TypeError(f"context must be a ForwardContext or None; got {type(context).__name__}")
    if not isinstance(takes_mxfp8_input, bool):
        raise TypeError(f"takes_mxfp8_input must be a bool; got {type(takes_mxfp8_input).__name__}")

    no: dict[str, str] = {}
    if consumer.backend is None:
        no["device"] = consumer.reason
    else:
        shape = shape_support(consumer.backend, n=n, k=k)
        if not shape.ok:
            # "; " separates the rules in a decision's reason: keep each rule's own text free of it.
            no["alignment"] = f"{consumer.backend}: " + shape.reason.replace("; ", ", ")
    if context is None:
        no["mode"] = "no forward mode given (pass context= to the layer or use mxfuse.layers.forward_context)"
    elif context.mode not in FUSED_MODES:
        no["mode"] = f"forward mode {context.mode.value} is not decode or target_verify"
    elif context.sequence_parallel:
        no["mode"] = "sequence parallel: the rows are split across ranks"
    if rows > MAX_FUSED_ROWS:
        no["rows"] = f"{rows} rows > {MAX_FUSED_ROWS}"
    if not takes_mxfp8_input:
        no["fact"] = "the layer's takes_mxfp8_input is False" + (f" ({fact_reason})" if fact_reason else "")

    if no:
        failed = tuple(rule for rule in RULES if rule in no)
        return FusedDecision(False, "; ".join(no[rule] for rule in failed), consumer.backend, failed)
    mode = context.mode.value if context is not None else ""  # not None here: it would be a "mode" no
    return FusedDecision(
        True,
        f"{mode}, {rows} rows <= {MAX_FUSED_ROWS}, N = {n} and K = {k} aligned for {consumer.backend}",
        consumer.backend,
    )
