"""mxfuse: producers that write the next GEMM's MXFP8 input directly.

Imports run one way: formats -> kernels -> backends -> layers.
"""

from __future__ import annotations

__all__ = ["MxfuseError"]

__version__ = "0.1.0"


class MxfuseError(Exception):
    """Base class of every error mxfuse raises."""
