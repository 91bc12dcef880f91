"""mxfuse: producers that write the next GEMM's MXFP8 input directly.

Imports run one way: formats -> kernels -> backends -> layers.
"""

from __future__ import annotations

__all__ = ["MxfuseError", "MxfuseUnavailableError"]

__version__ = "0.1.0"


class MxfuseError(Exception):
    """Base class of every error mxfuse raises."""


class MxfuseUnavailableError(MxfuseError):
    """The hardware or software an operation needs is missing; the message names the capability."""
