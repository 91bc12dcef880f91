"""Split-KV multi-query decode attention where one cached vector is both key and value (K = V).

``q`` [T, H, D] bf16 (T = B * S: S new tokens of each of B sequences, sequence-major), the cache ``kv``
[B, capacity, D] bf16 and ``lens`` [B] (tokens each sequence held before its S new ones, which are already
in the cache at ``lens[b] .. lens[b] + S - 1``). Row ``s * H + h`` of sequence b (new token s, head h)
attends to cache positions ``0 .. lens[b] + s``. Output [T, H * D] bf16.

Two launches:
  * ``_mqa_split_kernel``, grid (B, SPLITS, row blocks x D parts): program (b, j) owns keys
    ``[j * chunk, (j + 1) * chunk)`` of sequence b, where ``chunk`` is ``lens[b] + S`` split SPLITS ways,
    rounded up to whole BLOCK_N tiles and at least MIN_TILES of them, so the work follows each sequence's
    length, not the capacity (splits past the end write nothing). Every head of the S new tokens sits in the MMA's M
    dimension (up to BLOCK_M rows a program), so a KV tile is loaded once and feeds both dots:
    ``scores = q @ kv^T`` and ``acc += p @ kv``. With D_PARTS = 2 a program accumulates half of the output
    dims (it still scores with the whole vector; the half it multiplies is re-read from L1), halving the
    accumulator's registers. Online softmax in base 2 with fp32 state; partials (max, sum, acc) in fp32.
  * ``_mqa_combine_kernel``: per row, the partials of the splits are merged in split order, in fp32, and
    divided once: a fixed order, so the result is the same bits on every run.
Masked keys are never read (masked loads), so whatever the cache holds past a sequence's tokens, NaN
included, reaches no output; a NaN inside a sequence's visible tokens reaches that sequence's rows only.

Lengths are clamped in the kernels to [0, capacity - S], so a bad length cannot read outside the cache;
the entry point (``mxfuse.attention``) checks them where that needs no device synchronisation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import torch
import triton
import triton.language as tl

from mxfuse.kernels.hc_tile import bf16_bits, bits_to_bf16
from mxfuse.kernels.mxfp8_tile import mxfp8_codes, mxfp8_scale_bytes, store_scale_words
from mxfuse.kernels.pdl import OFF, pdl_policy

__all__ = ["MqaConfig", "choose_mqa_config", "launch_mqa_decode", "mqa_partials_numel"]

_LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class MqaConfig:
    """One launch configuration: keys per tile, heads per program, output-dim parts, splits per sequence,
    the split kernel's warps and pipeline stages, whether the combine is a programmatic dependent launch
    of the split kernel (sm_90+), and the fewest key tiles a split takes (``splits`` is the most splits a
    sequence uses; a shorter one uses fewer)."""

    block_n: int = 32
    block_m: int = 64
    d_parts: int = 1
    splits: int = 32
    num_warps: int = 8
    num_stages: int = 2
    pdl: bool = False
    min_tiles: int = 1

    def __post_init__(self) -> None:
        for name in ("block_n", "block_m", "num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"MqaConfig.{name} must be a positive power of two; got {value!r}")
        if self.block_n < 16 or self.block_m < 16:
            raise ValueError(f"MqaConfig block_n and block_m must be >= 16 (an MMA tile); got {self}")
        if self.d_parts not in (1, 2):
            raise ValueError(f"MqaConfig.d_parts must be 1 or 2; got {self.d_parts!r}")
        if not isinstance(self.splits, int) or not 1 <= self.splits <= 1024:
            raise ValueError(f"MqaConfig.splits must be an integer in [1, 1024]; got {self.splits!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"MqaConfig.num_stages must be a positive integer; got {self.num_stages!r}")
        if not isinstance(self.min_tiles, int) or not 1 <= self.min_tiles <= 4096:
            raise ValueError(f"MqaConfig.min_tiles must be an integer in [1, 4096]; got {self.min_tiles!r}")
        if not isinstance(self.pdl, bool):
            raise ValueError(f"MqaConfig.pdl must be a bool; got {self.pdl!r}")


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
def _mqa_split_kernel(
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
def _mqa_combine_kernel(
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


# ---------------------------------------------------------------------------------------------------------
# Configurations

_TABLE_FILE = "mqa_decode_configs.json"


@lru_cache(maxsize=1)
def _config_table() -> dict:
    """The checked-in table written by ``benchmarks/attention.py --sweep`` (see its docstring)."""
    text = resources.files("mxfuse.kernels").joinpath(_TABLE_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def _bucket(value: int, edges: list[int]) -> int:
    for edge in edges:
        if value <= edge:
            return edge
    return edges[-1]


def choose_mqa_config(
    sequences: int, new_tokens: int, heads: int, head_dim: int, *, multiprocessors: int = 132
) -> MqaConfig:
    """The launch configuration for a shape, from the checked-in table.

    The table is keyed by the row count of one sequence (``new_tokens * heads``) and by a bucket of B;
    its splits are the best measured for that bucket on the device it was swept on, then scaled to
    ``multiprocessors``. Shapes the table lacks take its default row, with splits chosen so
    ``B x splits x programs per split`` is about two waves.
    """
    table = _config_table()
    rows = new_tokens * heads
    entry = dict(table["default"])
    key = f"rows{_bucket(rows, table['row_buckets'])}_b{_bucket(sequences, table['b_buckets'])}_d{head_dim}"
    entry.update(table["configs"].get(key, {}))
    block_m = min(entry["block_m"], max(16, triton.next_power_of_2(rows)))
    splits = entry.get("splits")
    if splits is None:
        programs = sequences * triton.cdiv(rows, block_m) * entry["d_parts"]
        splits = max(1, min(entry["max_splits"], math.ceil(2 * multiprocessors / programs)))
    return MqaConfig(
        block_n=entry["block_n"],
        block_m=block_m,
        d_parts=entry["d_parts"],
        splits=splits,
        num_warps=entry["num_warps"],
        num_stages=entry["num_stages"],
        pdl=entry.get("pdl", False),
        min_tiles=entry.get("min_tiles", 1),
    )


def mqa_partials_numel(sequences: int, rows: int, head_dim: int, splits: int) -> tuple[int, int]:
    """fp32 elements of the accumulator partials and of the (max, sum) partials."""
    return sequences * splits * rows * head_dim, sequences * splits * 2 * rows


def launch_mqa_decode(
    q: torch.Tensor,
    kv: torch.Tensor,
    lens: torch.Tensor,
    out: torch.Tensor,
    acc: torch.Tensor,
    ml: torch.Tensor,
    *,
    scale: float,
    config: MqaConfig,
    fp32_dots: bool = False,
    pair: tuple[torch.Tensor, torch.Tensor] | None = None,
    layout_code: int = 1,
    rows_padded: int = 0,
    floor: bool = False,
    write_y: bool = True,
    hw_cvt: bool = True,
) -> None:
    """Run both kernels. Arguments are validated by ``mxfuse.attention``; ``acc`` and ``ml`` hold at least
    ``mqa_partials_numel`` fp32 elements. ``pair``: ``(codes [T, H * D], scale storage)`` the combine also
    writes (``layout_code``, scale rows up to ``rows_padded``, FLOOR or RCEIL scales; the codes a uint8 view
    without ``hw_cvt``), bf16 ``out`` only when ``write_y``; it needs ``config.splits > 1`` and D a multiple
    of 128. ``config.pdl`` launches the combine as a programmatic dependent
    of the split kernel (sm_90+), which lets it launch once every split program has finished its loop. ``fp32_dots``: both dots on fp32 copies of the same bf16 operands (P still
    rounded to bf16), for the Triton interpreter, whose bf16 dot does not compute bf16 products."""
    tokens, heads, dim = q.shape
    sequences, capacity, _ = kv.shape
    new = tokens // sequences
    rows = new * heads
    cfg = config
    policy = OFF if fp32_dots else pdl_policy(q.device)
    use_pdl = (cfg.pdl or policy.wait) and not fp32_dots
    block_d = triton.next_power_of_2(dim)
    _mqa_split_kernel[(sequences, cfg.splits, triton.cdiv(rows, cfg.block_m) * cfg.d_parts)](
        q,
        kv,
        lens,
        acc,
        ml,
        out,
        new,
        heads,
        capacity,
        cfg.splits,
        float(scale) * _LOG2E,
        out.stride(0),
        q.stride(0),
        q.stride(1),
        kv.stride(0),
        kv.stride(1),
        D=dim,
        BLOCK_D=block_d,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        D_PARTS=cfg.d_parts,
        MIN_TILES=cfg.min_tiles,
        DIRECT=cfg.splits == 1,
        USE_PDL=use_pdl,
        FP32_DOTS=fp32_dots,
        PDL_WAIT=policy.wait,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **({"launch_pdl": True} if policy.wait else {}),
    )
    if cfg.splits == 1:
        if pair is not None:
            raise ValueError("a pair is written by the combine: config.splits must be > 1")
        return
    if pair is not None and dim % 128:
        raise ValueError(f"the pair needs head_dim a multiple of 128; got {dim}")
    # One combine program per (row, 128 output dims): 256 programs at T = 1, each with every split's
    # partial of its slice in flight at once (a loop over splits one load at a time took 20 us there).
    block_dc = min(block_d, 128)
    split_chunk = min(64, triton.next_power_of_2(cfg.splits))
    _mqa_combine_kernel[(sequences, rows, triton.cdiv(dim, block_dc))](
        acc,
        ml,
        lens,
        out,
        out if pair is None else pair[0],
        out if pair is None else pair[1],
        new,
        heads,
        capacity,
        cfg.splits,
        out.stride(0),
        tokens,
        rows_padded,
        D=dim,
        BLOCK_DC=block_dc,
        SPLIT_CHUNK=split_chunk,
        BLOCK_N=cfg.block_n,
        MIN_TILES=cfg.min_tiles,
        USE_PDL=use_pdl,
        ONE_PASS=cfg.splits <= split_chunk,
        WRITE_Y=write_y or pair is None,
        WRITE_PAIR=pair is not None,
        FLOOR=floor,
        LAYOUT=layout_code,
        HW_CVT=hw_cvt,
        PDL_SIGNAL=policy.signal,
        num_warps=4,
        **({"launch_pdl": True} if use_pdl else {}),
    )
