"""Triton decodes shared by every MXFP8 product: E8M0 scale bytes and E4M3 codes to floats, the exact
product of two scale factors, and where an activation's scale byte sits in each layout.

Operands, as everywhere in the GEMM family: ``a`` rows (activations), E4M3 with one E8M0 byte per row and
32 K in any of the three layouts (``act_scale_offsets``), possibly a column slice of wider rows
(``a_group0`` / ``a_n_groups``); ``w`` rows (a prepared weight), E4M3 with one E8M0 byte per row and 32 K,
stored K-group-major (``[K/32, n_ws]``, N contiguous).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["act_scale_offsets", "e4m3_bits_to_f32", "e4m3_moved_bits_to_f32", "e8m0_to_f32", "pow2_product"]


@triton.jit
def e8m0_to_f32(s):
    """2**(s-127) as fp32 for int32 bytes s: 0 -> 2**-127 (subnormal), 0xFF -> NaN."""
    bits = tl.where(s == 0, 0x00400000, s << 23)
    bits = tl.where(s == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def act_scale_offsets(rows, groups, n_groups, rows4, n_k4, A_LAYOUT: tl.constexpr):
    """Byte offset of the scale of (row, group) of ``a`` in its layout (deepgemm words read as bytes)."""
    if A_LAYOUT == 0:
        return rows * n_groups + groups
    elif A_LAYOUT == 1:
        # int32 word (row, group // 4) at row + (group // 4) * align(M, 4); byte group % 4, little-endian.
        return (rows + (groups // 4) * rows4) * 4 + groups % 4
    else:
        return (
            (rows // 128) * (n_k4 * 512)
            + (groups // 4) * 512
            + (rows % 32) * 16
            + ((rows % 128) // 32) * 4
            + groups % 4
        )


@triton.jit
def pow2_product(s_rows, s_cols):
    """``2**(s_rows[:, None] - 127) * 2**(s_cols[None, :] - 127)`` as two fp32 factors whose product is
    exact: one alone would overflow for (254, 1), whose product 2 is finite. NaN where a byte is 0xFF."""
    e = s_rows[:, None] + s_cols[None, :] - 254
    c = tl.minimum(tl.maximum(e, -126), 127)
    r = e - c  # in [-128, 127]
    f1 = ((c + 127) << 23).to(tl.float32, bitcast=True)
    f2 = tl.where(r >= -126, (r + 127) << 23, 1 << tl.maximum(r + 149, 0)).to(tl.float32, bitcast=True)
    nan = (s_rows[:, None] == 255) | (s_cols[None, :] == 255)
    return tl.where(nan, float("nan"), f1), f2


@triton.jit
def e4m3_bits_to_f32(code):
    """float32 values of E4M3 codes (uint8), decoded with integer arithmetic (exact in the interpreter).

    Normal codes rebias the exponent 7 -> 127; subnormal codes are ``m * 2**-9``; 0x7F / 0xFF are NaN.
    """
    c = code.to(tl.int32) & 0xFF
    mag = c & 0x7F
    sign = (c & 0x80) << 24
    normal = (mag + (120 << 3)) << 20  # (exponent + 120) << 23 | mantissa << 20
    subnormal = ((mag & 7).to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True)
    bits = tl.where(mag < 8, subnormal, normal) | sign
    bits = tl.where(mag == 0x7F, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e4m3_moved_bits_to_f32(q):
    """E4M3 values ``q`` as fp32 times 2**-120, by moving their bits (no conversion instruction, which
    runs at a quarter of the FMA rate on sm_90): exponent and mantissa shift into place; E4M3
    subnormals land on fp32 subnormals, which are linear too. NaN bytes are not mapped (a NaN block's
    scale byte 0xFF makes its factor NaN)."""
    b = q.to(tl.uint8, bitcast=True).to(tl.int32)
    return (((b & 0x7F) << 20) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)
