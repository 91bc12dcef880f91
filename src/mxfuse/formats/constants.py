"""Plain literals of the MXFP8 format (OCP MX v1.0: E4M3 elements, E8M0 block scales).

Nothing here computes anything; ``config`` and ``reference`` build on these numbers.
"""

from __future__ import annotations

__all__ = [
    "BLOCK_SIZE",
    "E4M3_MAX",
    "E4M3_MAX_POW2",
    "E4M3_MIN_NORMAL_POW2",
    "E4M3_NAN_BYTE",
    "E8M0_EXPONENT_BIAS",
    "E8M0_MAX_FINITE",
    "E8M0_NAN",
    "E8M0_ZERO_EXPONENT_VALUE_BITS",
    "F32_EXP_MASK",
    "F32_MANTISSA_BITS",
    "F32_MANTISSA_MASK",
    "SCALE_GROUPS_PER_WORD",
    "SWIZZLE_ROW_TILE",
]

# Elements of one block share one scale; blocks run along K.
BLOCK_SIZE = 32

# E4M3 (torch.float8_e4m3fn): bias 7, no infinity; 0x7E = 1.75 * 2**8 = 448 is the largest finite value.
E4M3_MAX = 448.0
E4M3_MAX_POW2 = 8  # floor(log2(448))
E4M3_MIN_NORMAL_POW2 = -6  # 2**-6 = 0x08; below it E4M3 is subnormal in steps of 2**-9
# The one E4M3 NaN byte this library writes (S.1111.111 with S = 0). -0.0 stays 0x80.
E4M3_NAN_BYTE = 0x7F

# E8M0 scale byte s means 2**(s - 127); 0xFF is NaN. Finite scales are clamped to [0, 254].
E8M0_EXPONENT_BIAS = 127
E8M0_MAX_FINITE = 254
E8M0_NAN = 0xFF
# Scale byte 0 is 2**-127, an fp32 subnormal: its bit pattern is 0x00400000, not 0 << 23.
E8M0_ZERO_EXPONENT_VALUE_BITS = 0x00400000

# IEEE binary32 fields.
F32_MANTISSA_BITS = 23
F32_MANTISSA_MASK = 0x007FFFFF
F32_EXP_MASK = 0xFF

# Packed layouts hold four k-groups' scale bytes in one little-endian int32 word.
SCALE_GROUPS_PER_WORD = 4
# swizzled_128x4 tiles the scale matrix in 128-row x 4-group tiles of 512 bytes.
SWIZZLE_ROW_TILE = 128
