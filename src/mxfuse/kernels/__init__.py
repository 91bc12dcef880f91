"""Triton kernels: one file per op, each a private ``@triton.jit`` kernel and a typed launcher."""

from __future__ import annotations

from mxfuse.kernels.quantize_mxfp8 import quantize_mxfp8

__all__ = ["quantize_mxfp8"]
