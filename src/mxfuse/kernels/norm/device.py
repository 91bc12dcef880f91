"""The RMSNorm kernel (device code); the launchers are ``mxfuse.kernels.norm``."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.bf16 import bf16_bits, bits_to_bf16
from mxfuse.kernels.mxfp8.device import mxfp8_codes, mxfp8_scale_bytes, store_scale_words

__all__ = ["rms_norm_kernel"]


@triton.jit(do_not_specialize=["M", "rows_padded", "per_seq", "capacity", "M2", "N1"])
def rms_norm_kernel(
    x_ptr, w_ptr, y_ptr, q_ptr, s_ptr, lens_ptr, stride_x, M, cols, rows_padded, eps, per_seq, capacity,
    x2_ptr, w2_ptr, c2_ptr, stride_x2, M2, N1,
    HAS_WEIGHT: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, FLOOR: tl.constexpr,
    HW_CVT: tl.constexpr, LAYOUT: tl.constexpr, WORDS: tl.constexpr, TO_CACHE: tl.constexpr,
    PDL_WAIT: tl.constexpr, PDL_SIGNAL: tl.constexpr, SECOND: tl.constexpr,
):  # fmt: skip
    """One row a program. With SECOND, the programs from ``N1`` (the first set's) norm a second set of
    ``M2`` rows of the same width (``x2``, weight ``w2``) into the KV cache ``c2`` at ``lens``
    (``per_seq``, ``capacity``): the same tile and operations as a launch of their own."""
    if PDL_WAIT:  # a programmatic dependent: the previous kernel's writes first
        tl.extra.cuda.gdc_wait()
    if PDL_SIGNAL:  # then the next kernel (a programmatic dependent) may launch
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0)
    if SECOND:
        if row < N1:
            _norm_row(x_ptr, w_ptr, y_ptr, q_ptr, s_ptr, lens_ptr, stride_x, row, M, cols, rows_padded, eps,
                      per_seq, capacity, HAS_WEIGHT, WRITE_Y, WRITE_PAIR, FLOOR, HW_CVT, LAYOUT, WORDS,
                      False)  # fmt: skip
        else:
            _norm_row(x2_ptr, w2_ptr, c2_ptr, q_ptr, s_ptr, lens_ptr, stride_x2, row - N1, M2, cols, 0,
                      eps, per_seq, capacity, True, True, False, FLOOR, HW_CVT, LAYOUT, WORDS,
                      True)  # fmt: skip
    else:
        _norm_row(x_ptr, w_ptr, y_ptr, q_ptr, s_ptr, lens_ptr, stride_x, row, M, cols, rows_padded, eps, per_seq,
                  capacity, HAS_WEIGHT, WRITE_Y, WRITE_PAIR, FLOOR, HW_CVT, LAYOUT, WORDS, TO_CACHE)  # fmt: skip


@triton.jit
def _norm_row(x_ptr, w_ptr, y_ptr, q_ptr, s_ptr, lens_ptr, stride_x, row, M, cols, rows_padded, eps, per_seq,
              capacity, HAS_WEIGHT: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr,
              FLOOR: tl.constexpr, HW_CVT: tl.constexpr, LAYOUT: tl.constexpr, WORDS: tl.constexpr,
              TO_CACHE: tl.constexpr):  # fmt: skip
    """Row ``row`` of ``M``: y and/or the pair, or with TO_CACHE y into the cache."""
    words = tl.arange(0, WORDS)
    c = words[:, None, None] * 128 + tl.arange(0, 4)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    inside = (c < cols) & (row < M)  # programs past M (the pair's padding rows) read and write no data
    r64 = row.to(tl.int64)
    x = tl.load(x_ptr + r64 * stride_x + c, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(tl.sum(tl.sum(x * x, axis=2), axis=1), axis=0) / cols
    y = x * (1.0 / tl.sqrt_rn(mean + eps))
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + c, mask=c < cols, other=0.0).to(tl.float32)
    yb = tl.where(inside, bf16_bits(y, HW_CVT), 0)
    if WRITE_Y:
        if TO_CACHE:
            # Row ``row`` is new token s of sequence b (sequence-major): it goes to cache row
            # b * capacity + lens[b] + s; a position outside [0, capacity) is not written.
            seq = row // per_seq
            pos = tl.load(lens_ptr + seq).to(tl.int64) + row % per_seq
            dest = seq.to(tl.int64) * capacity + pos
            tl.store(y_ptr + dest * cols + c, bits_to_bf16(yb), mask=inside & (pos >= 0) & (pos < capacity))
        else:
            tl.store(y_ptr + r64 * cols + c, bits_to_bf16(yb), mask=inside)
    if WRITE_PAIR:
        ybits = yb << 16  # fp32 patterns of the bf16-rounded y: the pair is quantize(y)
        s = mxfp8_scale_bytes(tl.max(ybits & 0x7FFFFFFF, axis=2), FLOOR)  # [WORDS, 4]; 0 on padding
        tl.store(q_ptr + r64 * cols + c, mxfp8_codes(ybits, s, HW_CVT), mask=inside)
        n_words = (cols + 127) // 128
        store_scale_words(s_ptr, s[None, :, :], row + tl.zeros((1,), dtype=tl.int32), words, M, rows_padded,
                          cols // 32, n_words, LAYOUT)  # fmt: skip
