"""The MXFP8 quantize kernel (device code); the launcher is ``mxfuse.kernels.quantize.launch``."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.mxfp8.device import mxfp8_codes, mxfp8_scale_bytes, store_scale_words

__all__ = ["quantize_mxfp8_kernel"]


# Shape-dependent integers are not specialized (no "== 1" or divisibility variants): one compile per
# dtype, layout, rounding and block shape. K and the row stride keep their divisibility, which the
# 16-byte loads need.
@triton.jit(do_not_specialize=["M", "rows_padded", "n_words", "n_word_blocks"])
def quantize_mxfp8_kernel(
    x_ptr,  # [M, K] bf16/fp16/fp32, unit stride along K
    q_ptr,  # [M, K] contiguous: float8e4nv (HW_CVT) or the uint8 view of it
    s_ptr,  # uint8 [M, K/32] (LAYOUT 0), or int32 words: 1 deepgemm, 2 swizzled_128x4, 3 e8m0, K % 128 == 0
    M,
    K,
    stride_xm,
    rows_padded,  # rows whose scales are written: M rounded up to the layout's row alignment
    n_words,  # ceil(K / 128): packed words per row
    n_word_blocks,  # cdiv(n_words, BLOCK_W): programs along K
    FLOOR: tl.constexpr,
    HW_CVT: tl.constexpr,  # hardware fp8 conversion; False: integer rounding (interpreter; also GPU-tested)
    LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_W: tl.constexpr,
    PDL_WAIT: tl.constexpr,  # a programmatic dependent: wait for the previous kernel first
    PDL_SIGNAL: tl.constexpr,  # then let the next kernel (a programmatic dependent) launch
):
    if PDL_WAIT:
        tl.extra.cuda.gdc_wait()
    if PDL_SIGNAL:
        tl.extra.cuda.gdc_launch_dependents()
    # 1-D grid, K-blocks fastest: neighbouring programs read neighbouring bytes of the same rows.
    pid = tl.program_id(0)
    pid_m = pid // n_word_blocks
    pid_w = pid % n_word_blocks
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    words = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    slot = tl.arange(0, 4)
    lane = tl.arange(0, 32)

    # [BLOCK_M, BLOCK_W, 4, 32]: row, scale word, byte of the word (k-group), element of the group.
    r4 = rows[:, None, None, None]
    cols = words[None, :, None, None] * 128 + slot[None, None, :, None] * 32 + lane[None, None, None, :]
    in_bounds = (r4 < M) & (cols < K)
    # Out-of-bounds elements read 0: padding rows and k-slots get amax 0, hence scale byte 0.
    raw = tl.load(x_ptr + r4.to(tl.int64) * stride_xm + cols, mask=in_bounds, other=0.0)
    if raw.dtype == tl.bfloat16:
        # bf16 is the top half of an fp32: widen by bits (the interpreter's bf16 cast loses subnormals).
        bits = raw.to(tl.uint16, bitcast=True).to(tl.int32) << 16
    else:
        bits = raw.to(tl.float32).to(tl.int32, bitcast=True)

    s = mxfp8_scale_bytes(tl.max(bits & 0x7FFFFFFF, axis=3), FLOOR)  # [BLOCK_M, BLOCK_W, 4]
    codes = mxfp8_codes(bits, s, HW_CVT)
    q_offs = r4.to(tl.int64) * K + cols
    tl.store(q_ptr + q_offs, codes, mask=in_bounds)
    store_scale_words(s_ptr, s, rows, words, M, rows_padded, K // 32, n_words, LAYOUT)
