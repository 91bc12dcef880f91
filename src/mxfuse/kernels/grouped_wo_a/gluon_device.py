"""The Gluon grouped wo_a for Hopper (sm_90a) on the Gluon decode GEMM's mainloop, its epilogue writing
bf16 z and/or wo_b's MXFP8 pair (device code; the host side is ``gluon_launch``).

``z[t, g, :] = deq(a)[t, g*r:(g+1)*r] @ deq(w[g]).T``: one program per (``BLOCK_N`` rows of one group's
R, ``BLOCK_T`` tokens, K split). The product is the decode GEMM's, swap-AB
(``gemm.gluon_mainloop.gluon_decode_mainloop``): group g's weight rows ``g*R + n`` of the flat
``[G*R, r]`` weight as wgmma's A from registers, converted to bf16 exactly; the tokens' bf16 activation
(``gluon_prep``, each 128 columns in the mainloop's operand order) as N, read from column ``g*r`` of
``[T, G*r]``. ``r`` is a multiple of the 128-wide K step (the launcher's rule), so no tile reads another
group's columns. Summation order, NaN and the exact
conversion are ``gemm.gluon_decode``'s; split-K partials are summed in split order 0..S-1 by the split
that arrives last (an int32 ticket, no float atomics), then the epilogue runs once per tile.

The epilogue, on the accumulator ``acc[n, t]`` (``[BLOCK_N, BLOCK_T]``: a 32-column scale block of the
pair runs along its rows):

1. transposed to ``[BLOCK_T, BLOCK_N]`` in a blocked layout where each thread holds one token's 32
   consecutive columns (one scale block: its max is a reduction inside the thread, its 32 codes and
   64 bytes of z are contiguous stores);
2. rounded to bf16 (nearest-even), or, for a token ``gluon_prep`` flagged, replaced by its exact bf16 z;
   tokens past T are 0 (their scale rows are the layout's padding, whose bytes are 0);
3. z stored; the pair quantized from those bf16 values widened to fp32 with ``mxfuse.kernels.mxfp8``'s
   ``mxfp8_scale_bytes`` and ``mxfp8_codes`` (the Triton quantize kernel's own functions): bit for bit
   ``quantize_mxfp8`` of the z it stores, as the Triton grouped kernel's epilogue;
4. each scale byte stored alone at its byte offset in the output's layout (``decode.act_scale_offsets``,
   the same formula the readers use), so a 64-row tile writes half of a packed deepgemm or swizzled word
   and no word is assembled across programs; the last token tile also zeroes the layout's padding rows
   past its end (swizzled_128x4 pads T to 128).

``gluon_launch.pair_tile_reference`` is these four steps in torch, checked against ``quantize_mxfp8`` on
the CPU.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from mxfuse.kernels.gemm.decode import act_scale_offsets
from mxfuse.kernels.gemm.gluon_mainloop import gluon_decode_mainloop, split_k_arrive, split_k_total
from mxfuse.kernels.mxfp8.device import mxfp8_codes, mxfp8_scale_bytes

__all__ = ["grouped_wo_a_gluon_kernel"]


@gluon.jit
def _zero_padding_scales(s_ptr, t_end, col0, rows_padded, GR, O_LAYOUT: gl.constexpr, NB: gl.constexpr,
                         BLOCK_T: gl.constexpr, s_layout: gl.constexpr):  # fmt: skip
    """Scale bytes 0 for the padding rows ``[t_end, rows_padded)`` of this tile's columns (fewer than 128
    rows: a fixed number of ``BLOCK_T`` chunks)."""
    zeros = gl.zeros([BLOCK_T, NB], gl.uint8, layout=s_layout)
    grp = col0 // 32 + gl.arange(0, NB, layout=gl.SliceLayout(0, s_layout))
    for c in gl.static_range((128 + BLOCK_T - 1) // BLOCK_T):
        ts = t_end + c * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, s_layout))
        offs = act_scale_offsets(ts[:, None], grp[None, :], GR // 32, rows_padded, GR // 128, O_LAYOUT)
        gl.store(s_ptr + offs, zeros, mask=ts[:, None] < rows_padded)


@gluon.jit
def _write_tile(acc, off_t, col0, last_t_tile, T, GR, z_ptr, q_ptr, s_ptr, exact_ptr, skip_ptr, rows_padded,
                STORE_Z: gl.constexpr, STORE_PAIR: gl.constexpr, O_LAYOUT: gl.constexpr, FLOOR: gl.constexpr,
                BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr):  # fmt: skip
    """The epilogue (module docstring) of ``acc`` ``[BLOCK_N, BLOCK_T]``: columns ``col0 ..`` of the
    ``[T, G*R]`` view, tokens ``off_t ..``."""
    NB: gl.constexpr = BLOCK_N // 32
    epi: gl.constexpr = gl.BlockedLayout([1, 32], [32 // NB, NB], [gl.num_warps(), 1], [1, 0])
    v = gl.convert_layout(gl.permute(acc, (1, 0)), epi)  # [BLOCK_T, BLOCK_N]
    tt = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, epi))
    nn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, epi))
    row_ok = tt < T
    skip = gl.load(skip_ptr + tt, mask=row_ok, other=0)
    flagged = (skip != 0)[:, None]
    offs = tt[:, None].to(gl.int64) * GR + col0 + nn[None, :]
    exact = gl.load(exact_ptr + offs, mask=row_ok[:, None] & flagged, other=0.0)
    half = gl.where(flagged, exact, v.to(gl.bfloat16))
    half = gl.where(row_ok[:, None], half, 0.0)
    if STORE_Z:
        gl.store(z_ptr + offs, half, mask=row_ok[:, None])
    if STORE_PAIR:
        bits = half.to(gl.uint16, bitcast=True).to(gl.int32) << 16  # the bf16 value as fp32 bits
        blocks = gl.reshape(bits, [BLOCK_T, NB, 32])
        s = mxfp8_scale_bytes(gl.max(blocks & 0x7FFFFFFF, axis=2), FLOOR)  # [BLOCK_T, NB]
        codes = gl.convert_layout(gl.reshape(mxfp8_codes(blocks, s, True), [BLOCK_T, BLOCK_N]), epi)
        gl.store(q_ptr + offs, codes, mask=row_ok[:, None])
        s_layout: gl.constexpr = s.type.layout
        ts = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, s_layout))
        grp = col0 // 32 + gl.arange(0, NB, layout=gl.SliceLayout(0, s_layout))
        s_offs = act_scale_offsets(ts[:, None], grp[None, :], GR // 32, rows_padded, GR // 128, O_LAYOUT)
        gl.store(s_ptr + s_offs, s.to(gl.uint8), mask=ts[:, None] < rows_padded)
        if O_LAYOUT == 2:
            if last_t_tile:
                _zero_padding_scales(s_ptr, off_t + BLOCK_T, col0, rows_padded, GR, O_LAYOUT, NB, BLOCK_T,
                                     s_layout)  # fmt: skip


# T and the padded row count vary per call: not specialized, one compile per configuration.
@gluon.jit(do_not_specialize=["T", "rows_padded"])
def grouped_wo_a_gluon_kernel(
    w_desc,  # TMA descriptor: E4M3 [G*R, r], block [BLOCK_N, 128]
    a_desc,  # TMA descriptor: bf16 [T, G*r] (gluon_prep's, in the mainloop's operand order), block [BLOCK_T, 128]
    ws_ptr,  # uint8 [G, r/32, R]: the weight's scale bytes, K-group-major per group
    z_ptr,  # bf16 [T, G, R]; unused unless STORE_Z
    q_ptr,  # E4M3 [T, G*R]; unused unless STORE_PAIR
    s_ptr,  # uint8 view of the pair's scale storage, padding included; unused unless STORE_PAIR
    exact_ptr,  # bf16 [T, G*R]: flagged tokens' exact z (gluon_prep)
    skip_ptr,  # int32 [T]: nonzero for flagged tokens
    work_ptr,  # fp32 split-K partials [tiles, SPLIT_K, BLOCK_N, BLOCK_T]; unused when SPLIT_K == 1
    cnt_ptr,  # int32 arrival counters, one per tile, zero between launches; unused when SPLIT_K == 1
    T,
    R,
    K,  # r
    GR,  # G * R
    rows_padded,  # the pair's scale rows, padding included
    O_LAYOUT: gl.constexpr,  # mxfuse.kernels.mxfp8.LAYOUT_CODE of the pair's scales
    STORE_Z: gl.constexpr,
    STORE_PAIR: gl.constexpr,
    FLOOR: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_T: gl.constexpr,
    SPLIT_K: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    LOAD: gl.constexpr,  # gemm.gluon_launch.operand_layouts: the weight codes' register layouts
    CODES3: gl.constexpr,
):
    BLOCK_K: gl.constexpr = 128
    pid_n = gl.program_id(0)  # BLOCK_N rows of the flat [G*R, r] weight: group pid_n // (R / BLOCK_N)
    pid_t = gl.program_id(1)
    pid_k = gl.program_id(2)
    w_row = pid_n * BLOCK_N
    g = w_row // R
    off_t = pid_t * BLOCK_T
    steps = K // BLOCK_K
    per_split = gl.cdiv(steps, SPLIT_K)
    k_begin = pid_k * per_split
    n_steps = gl.minimum(per_split, steps - k_begin)  # >= 1: the launcher keeps every split non-empty
    ws_group = ws_ptr + g.to(gl.int64) * (K // 32) * R

    acc = gluon_decode_mainloop(w_desc, a_desc, ws_group, w_row, w_row - g * R, off_t, g * K, R, K, k_begin,
                                n_steps, BLOCK_N, BLOCK_T, NUM_STAGES, LOAD, CODES3)  # fmt: skip
    last_t_tile = pid_t == gl.num_programs(1) - 1
    if SPLIT_K == 1:
        _write_tile(acc, off_t, w_row, last_t_tile, T, GR, z_ptr, q_ptr, s_ptr, exact_ptr, skip_ptr, rows_padded,
                    STORE_Z, STORE_PAIR, O_LAYOUT, FLOOR, BLOCK_N, BLOCK_T)  # fmt: skip
    else:
        mma_layout: gl.constexpr = acc.type.layout
        tile = pid_t * gl.num_programs(0) + pid_n
        base = work_ptr + tile.to(gl.int64) * (SPLIT_K * BLOCK_N * BLOCK_T)
        ln = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_layout))
        lt = gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma_layout))
        local = ln[:, None] * BLOCK_T + lt[None, :]
        if split_k_arrive(acc, base, local, cnt_ptr + tile, pid_k, SPLIT_K, BLOCK_N * BLOCK_T):
            total = split_k_total(base, local, SPLIT_K, BLOCK_N * BLOCK_T)
            _write_tile(total, off_t, w_row, last_t_tile, T, GR, z_ptr, q_ptr, s_ptr, exact_ptr, skip_ptr,
                        rows_padded, STORE_Z, STORE_PAIR, O_LAYOUT, FLOOR, BLOCK_N, BLOCK_T)  # fmt: skip
            gl.atomic_xchg(cnt_ptr + tile, 0)
