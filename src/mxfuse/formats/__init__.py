"""MXFP8 formats: constants, modes, the reference quantizer and the scale layouts consumers read.

Imports run one way: constants -> config -> layouts -> reference -> mxtensor. Nothing here imports triton.
``MxTensor`` is the MXFP8 operand every producer returns and every consumer takes.
"""

from __future__ import annotations

from mxfuse.formats.config import ScaleLayout, ScaleRounding, parse_scale_layout, parse_scale_rounding
from mxfuse.formats.constants import BLOCK_SIZE, E4M3_MAX, E4M3_NAN_BYTE, E8M0_EXPONENT_BIAS, E8M0_NAN
from mxfuse.formats.layouts import (
    ScaleSpec,
    align,
    check_mxfp8_pair,
    check_mxfp8_parts,
    empty_mxfp8_pair,
    pack_ue8m0_deepgemm,
    scale_from_layout,
    scale_spec,
    scale_storage_view,
    scale_to_layout,
    swizzle_128x4,
    unpack_ue8m0_deepgemm,
    unswizzle_128x4,
)
from mxfuse.formats.mxtensor import MxTensor, as_mxtensor, mxtensor_out
from mxfuse.formats.reference import (
    INPUT_DTYPES,
    check_quantize_input,
    dequantize_mxfp8,
    e8m0_to_float,
    float_to_e8m0,
    quantize_mxfp8_reference,
)

__all__ = [
    "BLOCK_SIZE",
    "E4M3_MAX",
    "E4M3_NAN_BYTE",
    "E8M0_EXPONENT_BIAS",
    "E8M0_NAN",
    "INPUT_DTYPES",
    "MxTensor",
    "ScaleLayout",
    "ScaleRounding",
    "ScaleSpec",
    "align",
    "as_mxtensor",
    "check_mxfp8_pair",
    "check_mxfp8_parts",
    "check_quantize_input",
    "dequantize_mxfp8",
    "e8m0_to_float",
    "empty_mxfp8_pair",
    "float_to_e8m0",
    "mxtensor_out",
    "pack_ue8m0_deepgemm",
    "parse_scale_layout",
    "parse_scale_rounding",
    "quantize_mxfp8_reference",
    "scale_from_layout",
    "scale_spec",
    "scale_storage_view",
    "scale_to_layout",
    "swizzle_128x4",
    "unpack_ue8m0_deepgemm",
    "unswizzle_128x4",
]
