"""The split-KV decode attention's two kernels (device code); the launcher is ``mxfuse.kernels.attention``."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.bf16 import bf16_bits, bits_to_bf16
from mxfuse.kernels.mxfp8.device import mxfp8_codes, mxfp8_scale_bytes, store_scale_words

__all__ = ["mqa_combine_kernel", "mqa_split_kernel"]


@triton.jit
def _split_bounds(lens_ptr, b, S, capacity, n_splits, BLOCK_N: tl.constexpr, MIN_TILES: tl.constexpr):
    """(clamped length before the new tokens, keys of the sequence, keys per split): the keys split
    ``n_splits`` ways in whole tiles, at least MIN_TILES tiles a split, so a short sequence uses fewer
    splits (the rest exit at once) and the partials the combine reads follow the length too."""
    held = tl.load(lens_ptr + b).to(tl.int32)
    held = tl.minimum(tl.maximum(held, 0), capacity - S)
    n_keys = held + S
    chunk = tl.maximum(tl.cdiv(tl.cdiv(n_keys, n_splits), BLOCK_N), MIN_TILES) * BLOCK_N
    return held, n_keys, chunk


@triton.jit(do_not_specialize=["S", "H", "capacity", "n_splits", "scale_log2e", "out_stride"])
def mqa_split_kernel(
    q_ptr,  # [T, H, D] bf16, unit stride along D
    kv_ptr,  # [B, capacity, D] bf16, unit stride along D
    lens_ptr,  # [B] int32/int64
    acc_ptr,  # [B, SPLITS, rows, D] fp32
    ml_ptr,  # [B, SPLITS, 2, rows] fp32: running max (base 2), running sum
    out_ptr,  # [T, H * D] bf16, written here when DIRECT (one split)
    S,
    H,
    capacity,
    n_splits,
    scale_log2e,
    out_stride,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kn,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_PARTS: tl.constexpr,
    MIN_TILES: tl.constexpr,
    DIRECT: tl.constexpr,
    USE_PDL: tl.constexpr,
    FP32_DOTS: tl.constexpr,
    PDL_WAIT: tl.constexpr = False,  # a programmatic dependent of the previous kernel (the KV cache write)
):
    if PDL_WAIT:
        tl.extra.cuda.gdc_wait()
    b = tl.program_id(0)
    split = tl.program_id(1)
    mblk = tl.program_id(2) // D_PARTS
    part = tl.program_id(2) % D_PARTS
    rows = S * H
    PART_D: tl.constexpr = BLOCK_D // D_PARTS

    held, n_keys, chunk = _split_bounds(lens_ptr, b, S, capacity, n_splits, BLOCK_N, MIN_TILES)
    start = split * chunk
    if start >= n_keys:
        # A split past the sequence's end: nothing to read or write (the combine reads the used splits
        # only). Leaving before q is loaded frees the multiprocessor at once.
        return
    end = tl.minimum(start + chunk, n_keys)

    r = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = r < rows
    s = r // H
    h = r % H
    last_visible = held + s  # inclusive
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(
        q_ptr + (b * S + s)[:, None] * stride_qt + h[:, None] * stride_qh + d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    if FP32_DOTS:
        q = q.to(tl.float32)
    dv = part * PART_D + tl.arange(0, PART_D)
    dv_ok = dv < D

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, PART_D], tl.float32)
    kv_base = kv_ptr + b.to(tl.int64) * stride_kb
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_ok = n < end
        k = tl.load(
            kv_base + n[:, None] * stride_kn + d[None, :], mask=n_ok[:, None] & d_ok[None, :], other=0.0
        )
        if FP32_DOTS:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k)) * scale_log2e
        scores = tl.where(n[None, :] <= last_visible[:, None], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        alpha = tl.exp2(m_i - m_ref)
        p = tl.exp2(scores - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        # Rescale the accumulator only when some row's max grew: otherwise every alpha is 1 and the
        # multiply would leave the same bits (after the first tiles the maxima rarely move).
        if tl.max((m_new > m_i).to(tl.int32), 0) > 0:
            acc = acc * alpha[:, None]
        p = p.to(tl.bfloat16)
        if D_PARTS == 1:
            v = k
        else:
            v = tl.load(
                kv_base + n[:, None] * stride_kn + dv[None, :], mask=n_ok[:, None] & dv_ok[None, :], other=0.0
            )
        if FP32_DOTS:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc)
        m_i = m_new

    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if DIRECT:
        # One split owns the whole sequence: normalise and write the output, no partials, no combine.
        o = acc / l_i[:, None]
        t = (b * S + s).to(tl.int64)
        tl.store(
            out_ptr + t[:, None] * out_stride + (h * D)[:, None] + dv[None, :],
            o.to(tl.bfloat16),
            mask=row_ok[:, None] & dv_ok[None, :],
        )
    else:
        base = (b * n_splits + split).to(tl.int64)
        tl.store(
            acc_ptr + (base * rows + r)[:, None] * D + dv[None, :], acc, mask=row_ok[:, None] & dv_ok[None, :]
        )
        if part == 0:
            tl.store(ml_ptr + (base * 2) * rows + r, m_i, mask=row_ok)
            tl.store(ml_ptr + (base * 2 + 1) * rows + r, l_i, mask=row_ok)


@triton.jit
def _combine_store(o, t, h, dblk, d, d_ok, out_ptr, out_stride, q_ptr, s_ptr, H, T, rows_padded,
                   D: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_PAIR: tl.constexpr, FLOOR: tl.constexpr,
                   LAYOUT: tl.constexpr, HW_CVT: tl.constexpr):  # fmt: skip
    """Dims ``d`` of head ``h`` in row ``t``: bf16 (WRITE_Y) and/or, the block being one 128-column word
    of the [T, H * D] row, its MXFP8 pair (WRITE_PAIR): bit for bit ``quantize_mxfp8`` of the bf16 values."""
    yb = bf16_bits(o, HW_CVT)
    cols = h * D + d
    t64 = t.to(tl.int64)
    if WRITE_Y:
        tl.store(out_ptr + t64 * out_stride + cols, bits_to_bf16(yb), mask=d_ok)
    if WRITE_PAIR:
        n_cols = H * D
        ybits = tl.reshape(yb << 16, (1, 4, 32))  # one scale word: four blocks of 32
        sc = mxfp8_scale_bytes(tl.max(ybits & 0x7FFFFFFF, axis=2), FLOOR)  # [1, 4]
        tl.store(q_ptr + t64 * n_cols + tl.reshape(cols, (1, 4, 32)), mxfp8_codes(ybits, sc, HW_CVT))
        word = (h * D) // 128 + dblk + tl.zeros((1,), dtype=tl.int32)
        store_scale_words(s_ptr, sc[None, :, :], t + tl.zeros((1,), dtype=tl.int32), word, T, rows_padded,
                          n_cols // 32, n_cols // 128, LAYOUT)  # fmt: skip
        if t == T - 1:
            # Scale rows past the last token up to the layout's row alignment are 0 (this word's).
            zr = tl.arange(0, 16)
            for z0 in range(T, rows_padded, 16):
                store_scale_words(s_ptr, tl.zeros((16, 1, 4), dtype=tl.int32), z0 + zr, word, T, rows_padded,
                                  n_cols // 32, n_cols // 128, LAYOUT)  # fmt: skip


@triton.jit(do_not_specialize=["S", "H", "capacity", "n_splits", "out_stride", "T", "rows_padded"])
def mqa_combine_kernel(
    acc_ptr,
    ml_ptr,
    lens_ptr,
    out_ptr,  # [T, H * D] bf16, rows of stride out_stride
    q_ptr,  # [T, H * D] fp8 codes of the pair (WRITE_PAIR)
    s_ptr,  # its scale storage in LAYOUT
    S,
    H,
    capacity,
    n_splits,
    out_stride,
    T,
    rows_padded,
    D: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    SPLIT_CHUNK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_TILES: tl.constexpr,
    USE_PDL: tl.constexpr,
    ONE_PASS: tl.constexpr,
    WRITE_Y: tl.constexpr = True,
    WRITE_PAIR: tl.constexpr = False,
    FLOOR: tl.constexpr = False,
    LAYOUT: tl.constexpr = 1,
    HW_CVT: tl.constexpr = True,
    PDL_SIGNAL: tl.constexpr = False,
):
    """One program per (sequence, row, BLOCK_DC output dims): the partials of SPLIT_CHUNK splits are
    loaded as one [SPLIT_CHUNK, BLOCK_DC] tile (all loads in flight at once), weighted and summed.
    ``ONE_PASS`` (every split fits one chunk): the maxima, sums and partials are loaded together, so the
    program waits on memory once instead of twice (the maxima, then the rest); the same arithmetic.
    WRITE_PAIR (BLOCK_DC = 128, D a multiple of 128): the row's MXFP8 pair too, or instead of bf16
    (WRITE_Y off); the last token's programs write the layout's zero padding rows of their word."""
    b = tl.program_id(0)
    r = tl.program_id(1)
    dblk = tl.program_id(2)
    rows = S * H
    d = dblk * BLOCK_DC + tl.arange(0, BLOCK_DC)
    d_ok = d < D
    jj = tl.arange(0, SPLIT_CHUNK)

    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    if PDL_SIGNAL:  # the next kernel (wo_a, a programmatic dependent) may launch now
        tl.extra.cuda.gdc_launch_dependents()
    _, n_keys, chunk = _split_bounds(lens_ptr, b, S, capacity, n_splits, BLOCK_N, MIN_TILES)
    used = tl.cdiv(n_keys, chunk)  # splits that own keys; the rest wrote nothing this combine reads

    if ONE_PASS:
        j_ok = jj < used
        base = (b * n_splits + jj).to(tl.int64)
        m = tl.load(ml_ptr + (base * 2) * rows + r, mask=j_ok, other=float("-inf"))
        s_l = tl.load(ml_ptr + (base * 2 + 1) * rows + r, mask=j_ok, other=0.0)
        part = tl.load(
            acc_ptr + (base * rows + r)[:, None] * D + d[None, :],
            mask=j_ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        m_max = tl.max(m, 0)
        m_ref = tl.where(m_max == float("-inf"), 0.0, m_max)
        w = tl.exp2(m - m_ref)
        o = tl.sum(w[:, None] * part, 0) / tl.sum(w * s_l, 0)
        _combine_store(o, b * S + r // H, r % H, dblk, d, d_ok, out_ptr, out_stride, q_ptr, s_ptr, H, T,
                       rows_padded, D, WRITE_Y, WRITE_PAIR, FLOOR, LAYOUT, HW_CVT)  # fmt: skip
    else:
        m_max = float("-inf")
        for j0 in range(0, used, SPLIT_CHUNK):
            j = j0 + jj
            base = (b * n_splits + j).to(tl.int64)
            m = tl.load(ml_ptr + (base * 2) * rows + r, mask=j < used, other=float("-inf"))
            m_max = tl.maximum(m_max, tl.max(m, 0))
        m_ref = tl.where(m_max == float("-inf"), 0.0, m_max)
        total = tl.zeros([SPLIT_CHUNK], tl.float32)
        o = tl.zeros([BLOCK_DC], tl.float32)
        for j0 in range(0, used, SPLIT_CHUNK):
            j = j0 + jj
            j_ok = j < used
            base = (b * n_splits + j).to(tl.int64)
            w = tl.exp2(tl.load(ml_ptr + (base * 2) * rows + r, mask=j_ok, other=float("-inf")) - m_ref)
            total += w * tl.load(ml_ptr + (base * 2 + 1) * rows + r, mask=j_ok, other=0.0)
            part = tl.load(
                acc_ptr + (base * rows + r)[:, None] * D + d[None, :],
                mask=j_ok[:, None] & d_ok[None, :],
                other=0.0,
            )
            o += tl.sum(w[:, None] * part, 0)
        o = o / tl.sum(total, 0)
        _combine_store(o, b * S + r // H, r % H, dblk, d, d_ok, out_ptr, out_stride, q_ptr, s_ptr, H, T,
                       rows_padded, D, WRITE_Y, WRITE_PAIR, FLOOR, LAYOUT, HW_CVT)  # fmt: skip
