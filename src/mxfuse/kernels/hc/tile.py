"""Triton building blocks of the hyper-connection kernels: the post step, the mixes product, exact sums.

Shared by the fused boundary (``mxfuse.kernels.hc.kernel``) and the unfused steps (``hc.post``, the
boundary kernel's phases launched alone), so that every kernel computes each element with the same
sequence of operations: the fused and unfused residual streams are bit-identical, and both are
bit-identical to the torch reference, which fixes the same order (``mxfuse.hc.hc_post``). The kernels
that use these run with ``enable_fp_fusion=False``: a multiply-add contracted into an FMA rounds once
instead of twice, and where the sum cancels (a result near zero from terms near 1) that alone moves the
bf16 result by many units in the last place. bf16 values travel as int32-held bit patterns
(``mxfuse.kernels.bf16``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.bf16 import bf16_bits, bits_to_bf16, bits_to_f32, load_bf16_bits

__all__ = [
    "exact_sum",
    "exact_total3",
    "load_post_coefs",
    "mix_dot",
    "mix_dot_pieces",
    "post_stream",
    "post_tile",
    "post_values",
    "store_streams",
]


@triton.jit
def post_stream(x, r0, r1, r2, r3, pk, c0k, c1k, c2k, c3k):
    """fp32 ``post[k] * x + comb[0,k] * R0 + ... + comb[3,k] * R3`` for one output stream k.

    ``x`` and ``r*`` are fp32 tiles [rows, cols]; ``pk`` and ``c*k`` the per-row coefficients [rows]. The
    order (the product with x first, then the streams in index order, each product rounded before its
    add) is the reference's, ``mxfuse.hc.hc_post``.
    """
    acc = pk[:, None] * x
    acc = acc + c0k[:, None] * r0
    acc = acc + c1k[:, None] * r1
    acc = acc + c2k[:, None] * r2
    acc = acc + c3k[:, None] * r3
    return acc


@triton.jit
def load_post_coefs(post_ptr, comb_ptr, rows64, row_ok):
    """The post step's per-row coefficients: post[t, k] (4), then comb[t, j, k] row-major (16)."""
    p0 = tl.load(post_ptr + rows64 * 4, mask=row_ok, other=0.0)
    p1 = tl.load(post_ptr + rows64 * 4 + 1, mask=row_ok, other=0.0)
    p2 = tl.load(post_ptr + rows64 * 4 + 2, mask=row_ok, other=0.0)
    p3 = tl.load(post_ptr + rows64 * 4 + 3, mask=row_ok, other=0.0)
    c = comb_ptr + rows64 * 16
    c00 = tl.load(c, mask=row_ok, other=0.0)
    c01 = tl.load(c + 1, mask=row_ok, other=0.0)
    c02 = tl.load(c + 2, mask=row_ok, other=0.0)
    c03 = tl.load(c + 3, mask=row_ok, other=0.0)
    c10 = tl.load(c + 4, mask=row_ok, other=0.0)
    c11 = tl.load(c + 5, mask=row_ok, other=0.0)
    c12 = tl.load(c + 6, mask=row_ok, other=0.0)
    c13 = tl.load(c + 7, mask=row_ok, other=0.0)
    c20 = tl.load(c + 8, mask=row_ok, other=0.0)
    c21 = tl.load(c + 9, mask=row_ok, other=0.0)
    c22 = tl.load(c + 10, mask=row_ok, other=0.0)
    c23 = tl.load(c + 11, mask=row_ok, other=0.0)
    c30 = tl.load(c + 12, mask=row_ok, other=0.0)
    c31 = tl.load(c + 13, mask=row_ok, other=0.0)
    c32 = tl.load(c + 14, mask=row_ok, other=0.0)
    c33 = tl.load(c + 15, mask=row_ok, other=0.0)
    return p0, p1, p2, p3, c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33


@triton.jit
def post_values(x_ptr, r_ptr, rows64, cols, mask, H, p0, p1, p2, p3, c00, c01, c02, c03, c10, c11, c12, c13,
                c20, c21, c22, c23, c30, c31, c32, c33, HW_CVT: tl.constexpr):  # fmt: skip
    """R' on rows x cols of all four streams, loaded and mixed (``post_stream``) and rounded, not stored:
    its four streams' int32-held bf16 patterns. x and R are read once, so their loads ask to be
    evicted first."""
    xf = bits_to_f32(load_bf16_bits(x_ptr + rows64[:, None] * H + cols[None, :], mask, False, True))
    rbase = rows64[:, None] * (4 * H) + cols[None, :]
    f0 = bits_to_f32(load_bf16_bits(r_ptr + rbase, mask, False, True))
    f1 = bits_to_f32(load_bf16_bits(r_ptr + rbase + H, mask, False, True))
    f2 = bits_to_f32(load_bf16_bits(r_ptr + rbase + 2 * H, mask, False, True))
    f3 = bits_to_f32(load_bf16_bits(r_ptr + rbase + 3 * H, mask, False, True))
    b0 = bf16_bits(post_stream(xf, f0, f1, f2, f3, p0, c00, c10, c20, c30), HW_CVT)
    b1 = bf16_bits(post_stream(xf, f0, f1, f2, f3, p1, c01, c11, c21, c31), HW_CVT)
    b2 = bf16_bits(post_stream(xf, f0, f1, f2, f3, p2, c02, c12, c22, c32), HW_CVT)
    b3 = bf16_bits(post_stream(xf, f0, f1, f2, f3, p3, c03, c13, c23, c33), HW_CVT)
    return b0, b1, b2, b3


@triton.jit
def store_streams(ro_ptr, rows64, cols, mask, H, b0, b1, b2, b3):
    """The four streams' bf16 patterns ``b*`` stored to R' on rows x cols."""
    rbase = rows64[:, None] * (4 * H) + cols[None, :]
    tl.store(ro_ptr + rbase, bits_to_bf16(b0), mask=mask)
    tl.store(ro_ptr + rbase + H, bits_to_bf16(b1), mask=mask)
    tl.store(ro_ptr + rbase + 2 * H, bits_to_bf16(b2), mask=mask)
    tl.store(ro_ptr + rbase + 3 * H, bits_to_bf16(b3), mask=mask)


@triton.jit
def post_tile(x_ptr, r_ptr, ro_ptr, rows64, cols, mask, H, p0, p1, p2, p3, c00, c01, c02, c03, c10, c11,
              c12, c13, c20, c21, c22, c23, c30, c31, c32, c33, HW_CVT: tl.constexpr):  # fmt: skip
    """R' on rows x cols of all four streams: ``post_values``, then stored (``store_streams``)."""
    b0, b1, b2, b3 = post_values(x_ptr, r_ptr, rows64, cols, mask, H, p0, p1, p2, p3, c00, c01, c02, c03, c10,
                                 c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33, HW_CVT)  # fmt: skip
    store_streams(ro_ptr, rows64, cols, mask, H, b0, b1, b2, b3)


@triton.jit
def mix_dot(acc, a_bits, fn_ptrs, fn_mask, HW_CVT: tl.constexpr):
    """``acc += R'_k @ fn_k^T`` for one stream's bf16 tile ``a_bits`` [BT, BH] and fn rows [32, BH].

    R' is exactly bf16, and an fp32 fn value is exactly the sum of three bf16 values (8 + 8 + 8
    significant bits; ``hi`` rounds to nearest, so each remainder is exact; for |fn| >= 2^-110, where
    no piece is subnormal), so three bf16 tensor-core
    products with fp32 accumulation give the fp32 projection with exact products: the only error is the
    fp32 accumulation's, as with fp32 FMA. The smallest pieces go first (``lo``, ``mid``, then ``hi``),
    so the small products are not added to an already large sum; callers start each step from zero and
    add the steps with compensation (``_phase_a``), so the error does not grow with the row length.
    Done on the CUDA cores instead, the 24 x 4H multiply-adds per token (1.4 G at T = 2048, H = 7168)
    would take some 40 us of an H200's fp32 FMA rate, as long as the boundary's whole memory floor. Without ``HW_CVT`` (the interpreter, whose bf16 dot multiplies
    the raw bit patterns) the same three products run as fp32 dots.
    """
    f = tl.load(fn_ptrs, mask=fn_mask, other=0.0, eviction_policy="evict_last")
    if HW_CVT:
        hi = f.to(tl.bfloat16)
        rest = f - hi.to(tl.float32)
        mid = rest.to(tl.bfloat16)
        lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
        a = bits_to_bf16(a_bits)
        acc = tl.dot(a, tl.trans(lo), acc)
        acc = tl.dot(a, tl.trans(mid), acc)
        acc = tl.dot(a, tl.trans(hi), acc)
    else:
        hi = bf16_bits(f, False)
        rest = f - bits_to_f32(hi)
        mid = bf16_bits(rest, False)
        lo = bf16_bits(rest - bits_to_f32(mid), False)
        a = bits_to_f32(a_bits)
        acc = tl.dot(a, tl.trans(bits_to_f32(lo)), acc, input_precision="ieee")
        acc = tl.dot(a, tl.trans(bits_to_f32(mid)), acc, input_precision="ieee")
        acc = tl.dot(a, tl.trans(bits_to_f32(hi)), acc, input_precision="ieee")
    return acc


@triton.jit
def mix_dot_pieces(acc, a_bits, pieces_ptrs, piece_stride, fn_mask, HW_CVT: tl.constexpr):
    """``mix_dot`` with fn already split into its three bf16 pieces (``HcProjection``): ``pieces_ptrs``
    point at ``hi``'s [32, BH] tile, ``mid`` and ``lo`` are ``piece_stride`` and twice that further. The
    same products in the same order (``lo``, ``mid``, ``hi``), so the same sums; no split in the loop."""
    if HW_CVT:
        lo = tl.load(pieces_ptrs + 2 * piece_stride, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        mid = tl.load(pieces_ptrs + piece_stride, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        hi = tl.load(pieces_ptrs, mask=fn_mask, other=0.0, eviction_policy="evict_last")
        a = bits_to_bf16(a_bits)
        acc = tl.dot(a, tl.trans(lo), acc)
        acc = tl.dot(a, tl.trans(mid), acc)
        acc = tl.dot(a, tl.trans(hi), acc)
    else:
        lo = bits_to_f32(load_bf16_bits(pieces_ptrs + 2 * piece_stride, fn_mask))
        mid = bits_to_f32(load_bf16_bits(pieces_ptrs + piece_stride, fn_mask))
        hi = bits_to_f32(load_bf16_bits(pieces_ptrs, fn_mask))
        a = bits_to_f32(a_bits)
        acc = tl.dot(a, tl.trans(lo), acc, input_precision="ieee")
        acc = tl.dot(a, tl.trans(mid), acc, input_precision="ieee")
        acc = tl.dot(a, tl.trans(hi), acc, input_precision="ieee")
    return acc


@triton.jit
def _fixed_point_terms(x, big):
    """fp32 ``x`` as 64-bit integers in units of 2^(big - 174), ``big`` the largest biased exponent
    they are aligned to (broadcastable to ``x``): mantissa << 24, shifted right by the exponent gap
    (toward zero), signed. A term loses only bits below 2^-47 of the largest term's magnitude."""
    bits = x.to(tl.int32, bitcast=True)
    e = (bits >> 23) & 0xFF
    mant = (bits & 0x7FFFFF) | tl.where(e > 0, 0x800000, 0)
    shift = tl.minimum(tl.maximum(big, 1) - tl.maximum(e, 1), 63)
    mag = (mant.to(tl.int64) << 24) >> shift.to(tl.int64)
    return tl.where(bits < 0, -mag, mag)


@triton.jit
def _pow2(k):
    """2^k as fp32 for integer ``k`` in [-126, 127] (built from its bits: exact)."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _fixed_point_value(total, big):
    """The fp32 value of a fixed-point ``total`` in units of 2^(big - 174), rounded once."""
    k = tl.maximum(big, 1) - 174
    k_hi = tl.maximum(k, -126)
    # total * 2^(k - k_hi) is exact (k - k_hi >= -48 keeps it normal); the second product rounds once.
    return (total.to(tl.float32) * _pow2(k - k_hi)) * _pow2(k_hi)


@triton.jit
def exact_sum(x, AXIS: tl.constexpr):
    """Sum of fp32 ``x`` along ``AXIS`` whose bits do not depend on the order of the additions.

    ``tl.sum`` adds in an order set by the register layout Triton picks for ``x``, and the layout
    follows the surrounding code: the same row summed in two kernels (the fused boundary and the
    unfused step) can differ in the last bit. Here every term is aligned to the largest exponent along
    the axis as a 64-bit integer, the integers are added (exact, so any order gives the same total) and
    the total is rounded to fp32 once. At most 2^15 terms. Non-finite terms: the plain sum of the
    infinities and NaNs (also order-free: NaN if any is NaN or both infinities appear)."""
    tl.static_assert(x.shape[AXIS] <= 32768, "exact_sum: at most 2^15 terms")
    e = (x.to(tl.int32, bitcast=True) >> 23) & 0xFF
    big = tl.max(e, axis=AXIS)
    total = tl.sum(_fixed_point_terms(x, tl.max(e, axis=AXIS, keep_dims=True)), axis=AXIS)
    special = tl.sum(tl.where(e == 255, x, 0.0), axis=AXIS)
    return tl.where(big == 255, special, _fixed_point_value(total, big))


@triton.jit
def exact_total3(x):
    """``exact_sum`` of every element of a 3-D fp32 tensor: one scalar, the same bits in any layout."""
    tl.static_assert(x.shape[0] * x.shape[1] * x.shape[2] <= 32768, "exact_total3: at most 2^15 terms")
    e = (x.to(tl.int32, bitcast=True) >> 23) & 0xFF
    big = tl.max(tl.max(tl.max(e, axis=2), axis=1), axis=0)
    total = tl.sum(tl.sum(tl.sum(_fixed_point_terms(x, big), axis=2), axis=1), axis=0)
    special = tl.sum(tl.sum(tl.sum(tl.where(e == 255, x, 0.0), axis=2), axis=1), axis=0)
    return tl.where(big == 255, special, _fixed_point_value(total, big))
