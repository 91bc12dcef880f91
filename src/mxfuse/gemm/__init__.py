"""MXFP8 GEMM consumers: ``mxfp8_gemm(a, w)`` over prepared weights, routed to the best backend here.

Backends, in ``AUTO_ORDER`` (the order ``auto`` tries them); each says whether it runs on a device
(``available``) and takes an ``[N, K]`` weight (``supports_shape``), with a reason either way:

==============  ========================  ==================  =========================================
backend         devices                   activation scales   weight shape
==============  ========================  ==================  =========================================
``deepgemm``    sm_100, sm_103            ``deepgemm``        N % 8 == 0
``flashinfer``  sm_100/103/107/110/12x    ``swizzled_128x4``  N, K >= 128, N % 32 == 0
``gluon``       sm_90                     all three           any (weight scale bytes in [10, 246])
``triton``      sm_89+                    all three           any
``torch``       any, CPU included         all three           any
==============  ========================  ==================  =========================================

K is always a multiple of 32. ``auto`` takes ``gluon`` only where its measured table names the device and
shape (``auto_rule``; the table is empty until a GPU sweep fills it), and hands a call on a weight
prepared for it to ``triton`` (same weight layout) at an M the table does not name. ``deepgemm`` needs DeepGEMM >= 2 (built from source) and ``flashinfer``
needs ``flashinfer-python`` (``pip install 'mxfuse[blackwell]'``); both are imported only when a device
qualifies. ``torch`` (dequantize + fp32 matmul) is the oracle every other backend is tested against.
See ``mxfuse.gemm.api`` and each ``*_backend`` module for the rules and their sources.
"""

from __future__ import annotations

from mxfuse.gemm.api import (
    AUTO_ORDER,
    BACKENDS,
    VALUE_RULES,
    auto_backend,
    auto_rule,
    backend_status,
    mxfp8_gemm,
    prepare_mxfp8_weight,
    select_backend,
)
from mxfuse.gemm.backend import Availability
from mxfuse.gemm.weights import MxWeight, expand_block_scales, tensor_versions

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "VALUE_RULES",
    "Availability",
    "auto_backend",
    "auto_rule",
    "MxWeight",
    "backend_status",
    "expand_block_scales",
    "mxfp8_gemm",
    "prepare_mxfp8_weight",
    "select_backend",
    "tensor_versions",
]
