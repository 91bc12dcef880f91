"""How a kernel writes an MXFP8 tensor's scales: the layout constants and the storage it stores into.

The device side (scale bytes, E4M3 codes, scale-word stores) is ``mxfuse.kernels.mxfp8.device``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mxfuse.formats import ScaleLayout, align, scale_spec, scale_storage_view

__all__ = ["LAYOUT_CODE", "ROWS_ALIGN", "ScaleTarget", "scale_layout_code", "scale_target"]

# Scale layouts as kernel constants: 0 e8m0 bytes, 1 deepgemm, 2 swizzled_128x4, 3 e8m0 whole words.
LAYOUT_CODE = {"e8m0": 0, "deepgemm": 1, "swizzled_128x4": 2}

# Rows of scales a producer writes: M rounded up to the layout's row alignment (padding rows are 0).
ROWS_ALIGN = {"e8m0": 1, "deepgemm": 4, "swizzled_128x4": 128}


def scale_layout_code(layout: str, *, k: int, scale_ptr: int) -> int:
    """The ``LAYOUT`` constant for ``layout`` ('e8m0' | 'deepgemm' | 'swizzled_128x4').

    Row-major e8m0 rows of a whole number of words are written a word (4 scales) at a time, like the
    packed layouts: at 16384 x 7168 on an H200 (16 x 256 tiles), 87.6 us against 93.1 with byte stores.
    """
    code = LAYOUT_CODE[layout]
    if code == 0 and k % 128 == 0 and scale_ptr % 4 == 0:
        return 3
    return code


class ScaleTarget(NamedTuple):
    """How a kernel is launched to write a pair's scales: ``storage`` (the scale storage as the kernel
    stores into it: uint8 bytes for layout code 0, int32 words otherwise), ``code`` (the ``LAYOUT``
    constant, ``scale_layout_code``) and ``rows_padded`` (the scale rows to write, padding included)."""

    storage: torch.Tensor
    code: int
    rows_padded: int


def scale_target(scale: torch.Tensor, *, m: int, k: int, layout: ScaleLayout) -> ScaleTarget:
    """The ``ScaleTarget`` of an ``[m, k]`` pair's (validated) scale tensor in ``layout``."""
    flat = scale_storage_view(scale, scale_spec(m, k, scale_layout=layout))
    code = scale_layout_code(layout.value, k=k, scale_ptr=flat.data_ptr())
    return ScaleTarget(
        flat if code == 0 else flat.view(torch.int32), code, align(m, ROWS_ALIGN[layout.value])
    )
