"""Layers that consume MXFP8 pairs: ``MxLinear`` (request -> load -> process -> fact), the fused-path gate,
the forward context the gate reads, and ``copy_or_rebind_param`` for graph-safe reloads.

Imports run one way: formats -> kernels -> gemm -> layers. See ``mxfuse.layers.mx_linear`` for the
lifecycle, the paths and the witness records.
"""

from __future__ import annotations

from mxfuse.layers.context import (
    DEFAULT_CONTEXT,
    ForwardContext,
    ForwardMode,
    current_forward_context,
    forward_context,
    parse_forward_context,
    resolve_forward_context,
)
from mxfuse.layers.gating import (
    FUSED_MODES,
    MAX_FUSED_ROWS,
    RULES,
    Consumer,
    FusedDecision,
    consuming_backend,
    fused_mxfp8_rows,
    shape_support,
)
from mxfuse.layers.mx_linear import LayerNotReadyError, MxLinear, ProcessResult
from mxfuse.layers.params import ParamUpdate, can_copy_into, copy_or_rebind_param

__all__ = [
    "DEFAULT_CONTEXT",
    "FUSED_MODES",
    "MAX_FUSED_ROWS",
    "RULES",
    "Consumer",
    "ForwardContext",
    "ForwardMode",
    "FusedDecision",
    "LayerNotReadyError",
    "MxLinear",
    "ParamUpdate",
    "ProcessResult",
    "can_copy_into",
    "consuming_backend",
    "copy_or_rebind_param",
    "current_forward_context",
    "forward_context",
    "fused_mxfp8_rows",
    "parse_forward_context",
    "resolve_forward_context",
    "shape_support",
]
