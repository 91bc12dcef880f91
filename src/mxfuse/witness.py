"""Witnesses: plain records of which code path a layer or producer took, and why.

When a producer, a GEMM or a layer chooses between paths, it emits one record, a plain ``dict`` of
JSON-friendly values::

    {"path": "linear.pair_consumed", "reason": "producer pair consumed by the triton backend",
     "backend": "triton", "site": "wqkv_a", "rows": 16}

``path`` is a dotted name from ``PATHS`` below; ``reason`` is a sentence a person can act on; every other
key is optional detail (``backend``, ``site``: the layer or kernel call site, ``rows``, ...).

Records are emitted on the host when the decision is made, never by a device sync: under CUDA-graph
capture that is once, at capture time, and replays emit nothing (the captured path is fixed). The cost on
the hot path is one dict and one call per subscriber (none in production unless someone subscribes).

Collect them with ``capture()``::

    with witness.capture() as records:
        y = layer(x)
    assert records[-1]["path"] == "linear.pair_consumed"

or with ``subscribe(callback)`` (the test suite's conftest forwards them to ``gpumatrix``'s path coverage,
which never imports ``mxfuse``: it only sees these dicts). This module imports nothing from mxfuse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PATHS", "Record", "capture", "emit", "subscribe"]

Record = dict[str, Any]

# Every path a record may name, with what it means. ci/paths.yaml declares where each must be exercised.
PATHS: dict[str, str] = {
    # Hyper-connection boundary (mxfuse.hc)
    "hc.boundary.kernel.pair": "the fused boundary kernel wrote the next GEMM's MXFP8 pair",
    "hc.boundary.kernel.bf16": "the fused boundary kernel wrote y in bf16 only",
    "hc.boundary.reference": "the torch reference boundary ran (CPU tensors or no kernel here)",
    "hc.boundary.unfused": "the boundary ran as separate kernels (post, mixes, collapse + norm, quantize)",
    # MXFP8 GEMM backends (mxfuse.gemm): a pair was consumed by this backend
    "gemm.torch": "dequantize + fp32 matmul (the reference backend)",
    "gemm.triton": "the Triton MXFP8 GEMM",
    "gemm.gluon": "the Gluon decode MXFP8 GEMM (sm_90: weights to bf16 in registers, swap-AB wgmma)",
    "gemm.deepgemm": "DeepGEMM fp8_gemm_nt, packed UE8M0, gran_k 32",
    "gemm.flashinfer": "FlashInfer mm_mxfp8, 128x4 swizzled scales",
    # The MXFP8-input linear (mxfuse.layers)
    "linear.pair_consumed": "the layer consumed a producer's pre-quantized pair",
    "linear.self_quantized": "the layer quantized its own bf16 input",
    "linear.bf16": "the layer ran its bf16 path",
    "linear.pair_fallback": "a pair reached a layer that cannot consume it: dequantized, fallback path",
    "linear.rebind": "a reload replaced a tensor captured CUDA graphs read (its shape, dtype or device changed)",
    # Grouped wo_a projection (mxfuse.einsum)
    "einsum.wo_a.kernel.pair": "the grouped wo_a kernel's epilogue wrote wo_b's MXFP8 pair",
    "einsum.wo_a.kernel.bf16": "the grouped wo_a kernel wrote bf16 z",
    "einsum.wo_a.reference": "the torch reference grouped projection ran",
    # Multi-query decode attention (mxfuse.attention)
    "attention.kernel": "the split-KV Triton decode-attention kernel ran",
    "attention.reference": "the float32 torch reference decode attention ran (CPU tensors or no kernel here)",
    # RMSNorm as a producer (mxfuse.norm)
    "norm.kernel.pair": "the norm kernel wrote the next GEMM's MXFP8 pair",
    "norm.kernel.bf16": "the norm kernel wrote y in bf16 only",
    "norm.reference": "the torch RMSNorm formula ran (CPU tensors)",
    # Tensor parallelism (mxfuse.models)
    "tp.all_reduce": "a row-parallel layer's partial sums were all-reduced over the tensor-parallel group",
}

_lock = threading.Lock()
_subscribers: list[Callable[[Record], None]] = []


def subscribe(callback: Callable[[Record], None]) -> Callable[[], None]:
    """Call ``callback(record)`` for every record from now on; returns the function that unsubscribes."""
    if not callable(callback):
        raise TypeError(f"callback must be callable; got {type(callback).__name__}")
    with _lock:
        _subscribers.append(callback)

    def unsubscribe() -> None:
        with _lock:
            if callback in _subscribers:
                _subscribers.remove(callback)

    return unsubscribe


@contextmanager
def capture() -> Iterator[list[Record]]:
    """Collect every record emitted inside the ``with`` block, in order."""
    records: list[Record] = []
    unsubscribe = subscribe(records.append)
    try:
        yield records
    finally:
        unsubscribe()


def emit(path: str, reason: str, **fields: Any) -> Record:
    """Emit one record for ``path`` (a key of ``PATHS``) with ``reason``; returns it.

    An unknown path is a ValueError: a misspelt name would otherwise be a path no coverage ever sees.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of the names in mxfuse.witness.PATHS; got {path!r}")
    record: Record = {"path": path, "reason": reason, **fields}
    with _lock:
        subscribers = tuple(_subscribers)
    for callback in subscribers:
        callback(record)
    return record
