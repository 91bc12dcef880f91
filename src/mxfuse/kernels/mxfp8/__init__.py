"""How a kernel writes an ``MxTensor``: the layout constants and the storage it stores into.

The device side (scale bytes, E4M3 codes, scale-word stores) is ``mxfuse.kernels.mxfp8.device``. Every
producer launches its kernel with ``mx_target(out)``: the codes, the scale storage as the kernel stores
into it, the layout constant, the scale rows to write (padding included) and the rounding, all read
from the ``MxTensor`` the producer writes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mxfuse.formats import MxTensor, ScaleRounding

__all__ = ["LAYOUT_CODE", "MxTarget", "mx_target", "scale_layout_code"]

# Scale layouts as kernel constants: 0 e8m0 bytes, 1 deepgemm, 2 swizzled_128x4, 3 e8m0 whole words.
LAYOUT_CODE = {"e8m0": 0, "deepgemm": 1, "swizzled_128x4": 2}


def scale_layout_code(layout: str, *, k: int, scale_ptr: int) -> int:
    """The ``LAYOUT`` constant for ``layout`` ('e8m0' | 'deepgemm' | 'swizzled_128x4').

    Row-major e8m0 rows of a whole number of words are written a word (4 scales) at a time, like the
    packed layouts: at 16384 x 7168 on an H200 (16 x 256 tiles), 87.6 us against 93.1 with byte stores.
    """
    code = LAYOUT_CODE[layout]
    if code == 0 and k % 128 == 0 and scale_ptr % 4 == 0:
        return 3
    return code


class MxTarget(NamedTuple):
    """How a kernel is launched to write an ``MxTensor``: ``codes`` (its data: float8e4nv, or the uint8
    view a kernel without the hardware conversion stores), ``scales`` (the scale storage as the kernel
    stores into it: uint8 bytes for layout code 0, int32 words otherwise), ``layout_code`` (the ``LAYOUT``
    constant, ``scale_layout_code``), ``rows_padded`` (the scale rows to write, padding included) and
    ``floor`` (FLOOR scales, else RCEIL)."""

    codes: torch.Tensor
    scales: torch.Tensor
    layout_code: int
    rows_padded: int
    floor: bool


def mx_target(out: MxTensor, *, hw_cvt: bool = True) -> MxTarget:
    """The ``MxTarget`` of ``out``; ValueError when ``out.rounding`` does not say which scales to write."""
    if out.rounding is None:
        raise ValueError("out.rounding must name the scales to write (rceil or floor); got None")
    m, k = out.shape
    flat = out.scale_storage()
    code = scale_layout_code(out.scale_layout.value, k=k, scale_ptr=flat.data_ptr())
    return MxTarget(
        out.data if hw_cvt else out.data.view(torch.uint8),
        flat if code == 0 else flat.view(torch.int32),
        code,
        out.rows_padded,
        out.rounding is ScaleRounding.FLOOR,
    )
