"""MXFP8 GEMM consumers: ``mxfp8_gemm(a, w)`` over prepared weights, routed to the best backend here.

Backends (``AUTO_ORDER`` is the order ``auto`` tries them): ``torch`` (dequantize + fp32 matmul, any
device; the oracle). See ``mxfuse.gemm.api``.
"""

from __future__ import annotations

from mxfuse.gemm.api import (
    AUTO_ORDER,
    BACKENDS,
    backend_status,
    infer_scale_layout,
    mxfp8_gemm,
    prepare_mxfp8_weight,
    select_backend,
)
from mxfuse.gemm.backend import Availability
from mxfuse.gemm.weights import MxWeight, expand_block_scales

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "Availability",
    "MxWeight",
    "backend_status",
    "expand_block_scales",
    "infer_scale_layout",
    "mxfp8_gemm",
    "prepare_mxfp8_weight",
    "select_backend",
]
