"""Triton building blocks that turn a tile of values into MXFP8: scale bytes, E4M3 codes, scale stores.

Every kernel that writes an MXFP8 tensor (the quantize kernel, the hyper-connection boundary, the
RMSNorm, the attention's combine, the grouped wo_a epilogue) calls these, so that a producer's output
is bit for bit what ``quantize_mxfp8`` writes for the same values: that identity is what makes a fused
producer a drop-in for producer + quantize.

A tile is viewed as ``[ROWS, WORDS, 4, 32]``: row, packed scale word (128 columns), byte of the word
(k-group), element of the group. The functions work on fp32 bit patterns (``int32``), so a NaN can never be
dropped by a float max and the scale never goes through a division or a log2.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["mxfp8_codes", "mxfp8_scale_bytes", "store_scale_words"]


@triton.jit
def mxfp8_scale_bytes(amax_bits, FLOOR: tl.constexpr):
    """int32 E8M0 scale bytes (0..255) from ``amax_bits``, the max of ``bits & 0x7FFFFFFF`` over a block.

    NaN and Inf sort above every finite value in that integer max, so a non-finite block gets 0xFF.
    """
    nonfinite = amax_bits >= 0x7F800000
    e = amax_bits >> 23  # biased exponent; 0 for zero and subnormal maxima
    if FLOOR:
        # floor(log2(amax)) - 8 + 127 = e - 135 + 127; subnormal maxima clamp to 0.
        s = tl.minimum(tl.maximum(e - 8, 0), 254)
    else:
        # RCEIL: s = biased_exponent(q) + (mantissa(q) != 0) with q = fp32(amax / 448), 448 = 1.75 * 2**8.
        # For normal amax = 1.f * 2**(e-127), q is a power of two only when 1.f == 1.75 exactly, and no
        # rounding of amax/448 reaches one from above (checked against the division for every finite fp32
        # amax: benchmarks/exhaustive_mxfp8.py), so s = e - 8 + (f > 0x600000), at least 1 while q > 0.
        # Subnormal amax = f * 2**-149 gives q > 0 (hence s = 1) only when f / 448 rounds above 0: f > 224.
        f = amax_bits & 0x7FFFFF
        s = tl.where(e == 0, (f > 224).to(tl.int32), tl.maximum(e - 8 + (f > 0x600000).to(tl.int32), 1))
        s = tl.minimum(s, 254)
    return tl.where(nonfinite, 255, s)


@triton.jit
def mxfp8_codes(bits, s, HW_CVT: tl.constexpr):
    """E4M3 elements of fp32 values ``bits`` (int32 patterns, ``[..., 32]``) under scale bytes ``s`` (``[...]``).

    Returns ``float8e4nv`` values when ``HW_CVT`` (sm_89+ hardware conversion), else the uint8 codes of
    the same rounding done in integer arithmetic (the path the Triton interpreter runs exactly; its own
    float8 cast rounds half-up).
    """
    x = bits.to(tl.float32, bitcast=True)
    # x / 2**(s-127) == x * 2**(127-s) exactly: 2**(127-s) is a normal float32 for s in [0, 253] (bits
    # (254 - s) << 23; finite blocks have s <= 247) and the subnormal 0x00400000 for s = 254.
    # NaN blocks multiply by NaN: every element becomes NaN, which both conversions write as 0x7F.
    nonfinite = s == 255
    inv_bits = tl.where(s == 254, 0x00400000, (254 - s) << 23)
    inv_bits = tl.where(nonfinite, 0x7FC00000, inv_bits)
    v = x * tl.expand_dims(inv_bits.to(tl.float32, bitcast=True), -1)
    if HW_CVT:
        # cvt.rn.satfinite.e4m3x2.f32 (sm_89+): nearest-even, saturating to +-448, two per instruction;
        # a NaN input (always the positive canonical NaN after the multiply) gives 0x7F.
        return v.to(tl.float8e4nv)
    else:
        mag = tl.minimum(tl.abs(v), 448.0)  # saturate before rounding, so FLOOR never makes NaN
        mag_bits = mag.to(tl.int32, bitcast=True)
        # Normal E4M3 (mag >= 2**-6): rebias the exponent 127 -> 7 and round the 23-bit mantissa to 3
        # bits, nearest-even: add 0x7FFFF plus the lowest kept bit, then drop 20 bits. mag <= 448 caps it
        # at 0x7E. This and the subnormal add below equal ml_dtypes' conversion for every fp32 in [0, 448]
        # (benchmarks/exhaustive_mxfp8.py).
        odd = (mag_bits >> 20) & 1
        normal = (mag_bits - (120 << 23) + 0x7FFFF + odd) >> 20
        # Subnormal E4M3 (steps of 2**-9): 2**14 has an ulp of 2**-9, so the fp32 add rounds mag to the
        # nearest even step, and the bits above 2**14's are the step count 0..8 (8 = 2**-6, the smallest
        # normal).
        subnormal = (mag + 16384.0).to(tl.int32, bitcast=True) - 0x46800000
        code = tl.where(mag_bits < (121 << 23), subnormal, normal) | ((bits >> 24) & 0x80)
        code = tl.where(tl.expand_dims(nonfinite, -1), 0x7F, code)
        return code.to(tl.uint8)


@triton.jit
def store_scale_words(
    s_ptr,
    s,  # int32 [ROWS, WORDS, 4] scale bytes
    rows,  # [ROWS] row indices
    words,  # [WORDS] packed-word indices (128 columns each)
    M,
    rows_padded,  # rows whose scales are written: M rounded up to the layout's ROWS_ALIGN
    n_groups,  # K / 32 scale groups per row
    n_words,  # ceil(K / 128) packed words per row
    LAYOUT: tl.constexpr,  # LAYOUT_CODE, or 3 for e8m0 rows written as whole words (K % 128 == 0)
):
    """Store scale bytes ``s`` in the layout ``s_ptr`` holds; padding rows/slots must carry ``s == 0``."""
    slot = tl.arange(0, 4)
    if LAYOUT == 0:
        groups = words[None, :, None] * 4 + slot[None, None, :]
        r3 = rows[:, None, None]
        mask = (r3 < M) & (groups < n_groups)
        tl.store(s_ptr + r3.to(tl.int64) * n_groups + groups, s.to(tl.uint8), mask=mask)
    else:
        # Byte j of word p is group 4p + j; the bytes are disjoint, so the sum is an OR.
        word = tl.sum(s << (slot * 8)[None, None, :], axis=2)  # [ROWS, WORDS]
        r2 = rows[:, None].to(tl.int64)
        w2 = words[None, :]
        if LAYOUT == 1:
            offs = r2 + w2 * rows_padded
        elif LAYOUT == 3:
            offs = r2 * n_words + w2  # row-major bytes, four groups at a time
        else:
            offs = (r2 // 128) * (n_words * 128) + w2 * 128 + (r2 % 32) * 4 + (r2 % 128) // 32
        tl.store(s_ptr + offs, word, mask=(r2 < rows_padded) & (w2 < n_words))
