"""bf16 values as int32-held bit patterns, in Triton: loads, widening, rounding, stores.

Shared by the kernels that must compute each element with one fixed sequence of operations (the
hyper-connection boundary and its unfused steps, the RMSNorm, the attention's combine): bf16 values
travel as int32 tensors holding the 16-bit pattern (0..65535), so widening to fp32 is a shift, which the
Triton interpreter runs exactly (its bf16 casts round half-up and lose subnormals), and rounding to bf16
is either the hardware conversion or integer arithmetic that agrees with it.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["bf16_bits", "bits_to_bf16", "bits_to_f32", "load_bf16_bits"]


@triton.jit
def load_bf16_bits(ptrs, mask, CG: tl.constexpr = False, EVICT_FIRST: tl.constexpr = False):
    """int32 bit patterns of bf16 values at ``ptrs`` (0 where masked off). ``CG``: read through L2 only
    (data another program wrote in this launch); ``EVICT_FIRST``: a stream read once. (Flags, not the
    modifier strings: Triton 3.6 does not compile a string passed to a nested jit function.)"""
    if CG:
        raw = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    elif EVICT_FIRST:
        raw = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        raw = tl.load(ptrs, mask=mask, other=0.0)
    return raw.to(tl.uint16, bitcast=True).to(tl.int32)


@triton.jit
def bits_to_f32(bits):
    """fp32 values of int32-held bf16 patterns (exact)."""
    return (bits << 16).to(tl.float32, bitcast=True)


@triton.jit
def bits_to_bf16(bits):
    """bf16 tensor of int32-held bf16 patterns, for stores and tensor-core operands."""
    return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def bf16_bits(x, HW_CVT: tl.constexpr):
    """fp32 ``x`` rounded to bf16, nearest-even, as int32-held patterns.

    ``HW_CVT``: the hardware conversion (``cvt.rn.bf16.f32``; a NaN becomes 0x7FFF). Otherwise integer
    arithmetic the interpreter runs exactly (a NaN becomes 0x7FC0); both agree on every other value
    (checked against torch over random fp32 patterns, Inf and the rounding ties included).
    """
    if HW_CVT:
        return x.to(tl.bfloat16).to(tl.uint16, bitcast=True).to(tl.int32)
    else:
        bits = x.to(tl.int32, bitcast=True)
        # Add just under half an ulp plus the kept lowest bit, then drop 16 bits: nearest, ties to even.
        # The carry runs into the exponent as it should (up to +-Inf); two's complement makes the
        # negative half the same operation on the magnitude bits.
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        return tl.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, rounded)
