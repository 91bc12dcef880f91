"""The fused-path gate: whether a producer writes an MXFP8 pair for a linear and the linear consumes it.

``fused_mxfp8_rows(...)`` is one pure function of plain values (no tensors, no device probes); it
returns a frozen ``FusedDecision`` whose ``reason`` says why, naming every rule that said no. The rules,
in the order the reasons are listed:

1. ``device``: a backend on this device consumes a pre-quantized pair (``consuming_backend``). The
   ``torch`` backend (dequantize + fp32 matmul) counts on the CPU, where it is the reference and what the
   CPU wiring tests run through, and does not count on CUDA, where it is slower than the bf16 path.
2. ``alignment``: N and K are multiples of what that backend needs (``ALIGNMENT``, below).
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

from mxfuse.gemm import Availability
from mxfuse.layers.context import ForwardContext, ForwardMode

__all__ = [
    "ALIGNMENT",
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

# (N multiple, K multiple) each backend needs, keyed by backend name; one place to change when a backend
# reports its own shape support. K is always a multiple of 32 (one MXFP8 scale block).
#   torch:      any N; K % 32 (dequantize + matmul has no tile constraint).
#   triton:     any N (the kernel masks its N tail); K % 32.
#   deepgemm:   N % 64 and K % 128: the rule vLLM and SGLang gate DeepGEMM FP8 linears with.
#   flashinfer: N % 8 (16-byte aligned bf16 output rows for TMA); K % 128 (the CUTLASS MXFP8 K tile).
# A backend missing here fails the rule (closed), with a reason that says to add it.
ALIGNMENT: dict[str, tuple[int, int]] = {
    "torch": (1, 32),
    "triton": (1, 32),
    "deepgemm": (64, 128),
    "flashinfer": (8, 128),
}


@dataclass(frozen=True)
class Consumer:
    """The backend that consumes a pre-quantized pair on a device, or None; ``reason`` says why."""

    backend: str | None
    reason: str

    def __bool__(self) -> bool:
        return self.backend is not None


def consuming_backend(device: torch.device | str, status: Mapping[str, Availability]) -> Consumer:
    """The first backend in ``status`` (``mxfuse.gemm.backend_status(device)``: AUTO_ORDER) that is
    available and counts as a consumer on ``device``; None with every backend's reason otherwise.

    Pure: ``device`` is only read for its type, so tests pass ``torch.device("cuda", 0)`` without a GPU.
    """
    device = torch.device(device)
    passed_over: list[str] = []
    for name, availability in status.items():
        if not availability.ok:
            passed_over.append(f"{name}: {availability.reason}")
        elif name == "torch" and device.type != "cpu":
            passed_over.append(
                f"torch: does not count on {device.type} (dequantize + fp32 matmul is slower than the bf16 path)"
            )
        else:
            return Consumer(name, f"{name}: {availability.reason}")
    if not passed_over:
        return Consumer(None, f"no MXFP8 GEMM backend is registered for {device}")
    return Consumer(None, f"no backend on {device} consumes an MXFP8 pair ({'; '.join(passed_over)})")


def shape_support(backend: str, *, n: int, k: int) -> Availability:
    """Whether ``backend`` runs an ``[N, K]`` weight, by ``ALIGNMENT``; the reason names the rule."""
    if backend not in ALIGNMENT:
        return Availability(
            False, f"no alignment rule is known for backend {backend!r} (add it to ALIGNMENT)"
        )
    n_multiple, k_multiple = ALIGNMENT[backend]
    problems = [
        f"{name} = {value} is not a multiple of {multiple}"
        for name, value, multiple in (("N", n, n_multiple), ("K", k, k_multiple))
        if value % multiple
    ]
    if problems:
        return Availability(
            False,
            f"{backend} needs N % {n_multiple} == 0 and K % {k_multiple} == 0: " + ("; ".join(problems)),
        )
    return Availability(True, f"N = {n} and K = {k} are aligned for {backend}")


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
            no["alignment"] = shape.reason
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
