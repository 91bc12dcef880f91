"""MXFP8 x MXFP8 -> bf16 GEMM in Triton, for GPUs with FP8 but no MXFP8 tensor-core instruction (sm_89+,
Hopper included).

``out[M, N] = sum_k dequant(a)[m, k] * dequant(w)[n, k]``, fp32 accumulation. ``a``: E4M3 ``[M, K]`` with
UE8M0 scales per 32 K in any of the three layouts; ``w``: E4M3 ``[N, K]`` with UE8M0 scales stored
K-group-major, uint8 ``[K/32, N]`` (N contiguous: one coalesced load per group for a tile of N rows).

Products of two E4M3 values are exact in fp32 (8 significant bits); each 32-wide group is summed raw and
multiplied once by the product of its two scales, ``2**(sa-127) * 2**(sw-127)`` as an fp32 multiply of two
exactly representable powers of two (a NaN scale byte 0xFF makes it NaN, so NaN blocks reach the output).
A scale product above 2**127 saturates to inf: such blocks hold values of 2**110 and more.

Two kernels, chosen by ``choose_config`` from M:
  * ``gemv`` (decode, M <= 8): CUDA cores, no tensor-core dot. Each program owns BLOCK_N weight rows and
    a K range; the weight stream is the whole cost, so programs are many and loads wide.
  * ``mma`` (M > 8): one FP8 tensor-core dot per 32-wide group (``tl.dot`` on E4M3, K = 32) promoted into
    the fp32 accumulator with the scale product. ``SWAP_AB`` puts weight rows in the MMA's M slot so a
    small M fills the N slot (the wgmma M is 64).
Both may split K over programs. The split partials go to an fp32 workspace and the last program to arrive
at a tile (an acq_rel arrival counter) sums them in split order and writes bf16, then resets the counter:
one launch, no zeroing kernel, and the same bits on every run (no float atomics).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

__all__ = ["GemmConfig", "choose_config", "launch_mxfp8_gemm", "weight_scale_kgroup_major"]

# Activation scale layouts as kernel constants (byte addressing, see _act_scale_offsets).
_A_LAYOUT = {"e8m0": 0, "deepgemm": 1, "swizzled_128x4": 2}


@triton.jit
def _e8m0_to_f32(s):
    """2**(s-127) as fp32 for int32 bytes s: 0 -> 2**-127 (subnormal), 0xFF -> NaN."""
    bits = tl.where(s == 0, 0x00400000, s << 23)
    bits = tl.where(s == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _act_scale_offsets(rows, groups, n_groups, rows4, n_k4, A_LAYOUT: tl.constexpr):
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
def _reduce_splits(
    out_ptr,
    ws_base,
    cnt_ptr,
    rows,
    cols,
    M,
    N,
    tile_id,
    BM: tl.constexpr,
    BN: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """Called by every split after storing its [BM, BN] partial at ``ws_base + split * BM * BN``: the last
    to arrive sums the partials in split order, writes bf16 and resets the tile's counter."""
    # Every thread's partial is stored before the arrival is published (bar.sync, then a release).
    tl.debug_barrier()
    arrived = tl.atomic_add(cnt_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        total = tl.zeros([BM, BN], tl.float32)
        for s in tl.static_range(SPLIT_K):
            # .cg: read from L2, where the other programs' partials are, never a stale L1 line.
            total += tl.load(ws_base + s * (BM * BN) + local, cache_modifier=".cg")
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], total.to(tl.bfloat16), mask=mask)
        tl.atomic_xchg(cnt_ptr + tile_id, 0)  # ready for the next launch (or CUDA-graph replay)


@triton.jit
def _finish_tile(
    acc,
    out_ptr,
    ws_ptr,
    cnt_ptr,
    rows,
    cols,
    M,
    N,
    tile_id,
    pid_k,
    BM: tl.constexpr,
    BN: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """Write ``acc`` ([BM, BN] fp32) as bf16, or, split over K, hand it to ``_reduce_splits``."""
    if SPLIT_K == 1:
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], acc.to(tl.bfloat16), mask=mask)
    else:
        base = ws_ptr + tile_id.to(tl.int64) * (SPLIT_K * BM * BN)
        local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        tl.store(base + pid_k * (BM * BN) + local, acc)
        _reduce_splits(out_ptr, base, cnt_ptr, rows, cols, M, N, tile_id, BM, BN, SPLIT_K)


@triton.jit
def _e4m3_bits_to_f32(q):
    """E4M3 values ``q`` as fp32 times 2**-120, by moving their bits (no conversion instruction, which
    runs at a quarter of the FMA rate on sm_90): exponent and mantissa shift into place; E4M3
    subnormals land on fp32 subnormals, which are linear too. NaN bytes are not mapped (a NaN block's
    scale byte 0xFF makes its factor NaN)."""
    b = q.to(tl.uint8, bitcast=True).to(tl.int32)
    return (((b & 0x7F) << 20) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def _gemv_row(
    acc,
    w3,
    a_ptr,
    as_ptr,
    row,
    koff3,
    k_ok3,
    k_ok,
    grp,
    fw,
    M,
    n_groups,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BITS: tl.constexpr,
):
    """acc [BN, C] += the 16-wide partial dots of activation row ``row`` with the weight tile ``w3``."""
    ok = row < M
    # The activation is read through a [BN, C, 16] pointer (stride 0 along N): the same layout as the
    # weight tile, so the product needs no layout conversion; the repeated bytes are L1 broadcasts.
    a3 = tl.load(a_ptr + row * n_groups * 32 + koff3, mask=k_ok3 & ok, other=0.0)
    sa = tl.load(
        as_ptr + _act_scale_offsets(row, grp, n_groups, rows4, n_k4, A_LAYOUT), mask=k_ok & ok, other=0
    )
    if BITS:
        # w3 holds weights * 2**-120; the activation side is exact fp32, so products stay exact (E4M3
        # products are multiples of 2**-138 here) and the group sum is scaled back by 2**120.
        a3 = _e4m3_bits_to_f32(a3) * 1.329227995784916e36  # 2**120
        part = tl.sum(w3 * a3, axis=2) * 1.329227995784916e36
    else:
        part = tl.sum(w3 * a3.to(tl.float32), axis=2)  # in-thread: each thread holds 16 consecutive elements
    return acc + part * (fw * _e8m0_to_f32(sa.to(tl.int32))[None, :])


@triton.jit
def _store_row(acc, out_ptr, ws_row_ptr, row, cols, M, N, SPLIT_K: tl.constexpr):
    total = tl.sum(acc, axis=1)  # [BN]: the one cross-thread reduction, after the K loop
    if SPLIT_K == 1:
        tl.store(out_ptr + row * N + cols, total.to(tl.bfloat16), mask=(cols < N) & (row < M))
    else:
        tl.store(ws_row_ptr, total)


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def _mxfp8_gemv_kernel(
    a_ptr,  # E4M3 [M, K] contiguous
    as_ptr,  # uint8 view of a's scale storage
    w_ptr,  # E4M3 [N, K] contiguous
    ws_ptr,  # uint8 [K/32, N] contiguous
    out_ptr,  # bf16 [M, N] contiguous
    work_ptr,  # fp32 split-K partials
    cnt_ptr,  # int32 arrival counters, one per output tile
    M,
    N,
    K,
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(K/32, 4) / 4: swizzled tile stride
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 (>= M)
    BLOCK_N: tl.constexpr,
    CHUNKS: tl.constexpr,  # 16-element chunks of K per step
    SPLIT_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    BITS: tl.constexpr,  # convert E4M3 by moving bits (integer pipe) instead of cvt instructions
):
    """Decode GEMV: each thread streams 16 weight bytes of one row per chunk and keeps elementwise partial
    sums; the only cross-thread reduction is after the K loop."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_groups = K // 32
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    chunk = tl.arange(0, CHUNKS)
    elem = tl.arange(0, 16)
    n_chunks = n_groups * 2
    steps_per_split = ((n_chunks + CHUNKS - 1) // CHUNKS + SPLIT_K - 1) // SPLIT_K
    s_begin = pid_k * steps_per_split
    col_ok = cols < N
    w_rows = w_ptr + cols[:, None, None].to(tl.int64) * K
    zero_n = tl.zeros([BLOCK_N, 1, 1], tl.int32)

    acc0 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc1 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc2 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc3 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    for step in tl.range(s_begin, s_begin + steps_per_split, num_stages=NUM_STAGES):
        kc = step * CHUNKS + chunk  # [C] chunk indices
        k_ok = kc < n_chunks
        koff3 = zero_n + kc[None, :, None] * 16 + elem[None, None, :]  # [BN, C, 16]
        k_ok3 = (zero_n == 0) & k_ok[None, :, None]
        w3 = tl.load(w_rows + koff3, mask=col_ok[:, None, None] & k_ok3, other=0.0)
        if BITS:
            w3 = _e4m3_bits_to_f32(w3)
        else:
            w3 = w3.to(tl.float32)
        grp = kc // 2
        sw = tl.load(
            ws_ptr + grp[None, :].to(tl.int64) * N + cols[:, None],
            mask=col_ok[:, None] & k_ok[None, :],
            other=0,
        )
        fw = _e8m0_to_f32(sw.to(tl.int32))  # [BN, C]
        acc0 = _gemv_row(
            acc0, w3, a_ptr, as_ptr, 0, koff3, k_ok3, k_ok, grp, fw, M, n_groups, rows4, n_k4, A_LAYOUT, BITS
        )
        if BLOCK_M > 1:
            acc1 = _gemv_row(
                acc1,
                w3,
                a_ptr,
                as_ptr,
                1,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )
        if BLOCK_M > 2:
            acc2 = _gemv_row(
                acc2,
                w3,
                a_ptr,
                as_ptr,
                2,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )
            acc3 = _gemv_row(
                acc3,
                w3,
                a_ptr,
                as_ptr,
                3,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )

    base = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N) + pid_k * (BLOCK_M * BLOCK_N)
    _store_row(acc0, out_ptr, base + cols % BLOCK_N, 0, cols, M, N, SPLIT_K)
    if BLOCK_M > 1:
        _store_row(acc1, out_ptr, base + BLOCK_N + cols % BLOCK_N, 1, cols, M, N, SPLIT_K)
    if BLOCK_M > 2:
        _store_row(acc2, out_ptr, base + 2 * BLOCK_N + cols % BLOCK_N, 2, cols, M, N, SPLIT_K)
        _store_row(acc3, out_ptr, base + 3 * BLOCK_N + cols % BLOCK_N, 3, cols, M, N, SPLIT_K)
    if SPLIT_K > 1:
        tile_base = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
        _reduce_splits(
            out_ptr, tile_base, cnt_ptr, tl.arange(0, BLOCK_M), cols, M, N, pid_n, BLOCK_M, BLOCK_N, SPLIT_K
        )


@triton.jit
def _fp16_relative(s, s_ref):
    """fp16 factors 2**(s - s_ref) for scale bytes ``s`` [R, G] under per-row ``s_ref`` [R] (s <= s_ref).

    Folding a group's scale into fp16 elements relative to the largest scale of the row in this K step
    keeps every factor <= 1, so E4M3 * factor never overflows fp16 and is exact down to 2**-14 (d >= -12
    for E4M3 subnormals); groups more than 24 binades below the row's largest flush to 0, contributing
    under 2**-24 of that group's terms.
    """
    d = s - s_ref[:, None]
    bits = tl.where(d >= -14, (d + 15) << 10, tl.where(d >= -24, 1 << tl.maximum(d + 24, 0), 0))
    return bits.to(tl.int16).to(tl.float16, bitcast=True)


@triton.jit
def _dq16_tile(ptr_rows, scale_bytes, ok_rows, g_ok, g, lane, BR: tl.constexpr, BG: tl.constexpr):
    """Load a [BR, BG*32] E4M3 tile and its scale bytes [BR, BG]; return the fp16 tile with the scales
    folded in relative to each row's largest, that largest scale byte [BR], and the spread: the most
    negative ``s - s_ref`` over the tile's groups that hold a nonzero scale (zero blocks fold exactly
    whatever their factor)."""
    q = tl.load(
        ptr_rows + (g[None, :, None] * 32 + lane[None, None, :]),
        mask=ok_rows[:, None, None] & g_ok[None, :, None],
        other=0.0,
    )
    s = scale_bytes.to(tl.int32)
    # A NaN block (0xFF) makes its whole row NaN through the returned reference byte; it takes no part
    # in the folding, so it cannot push the other rows of the tile onto the per-group path (their bits
    # stay what they are without it).
    nan_row = tl.max((s == 255).to(tl.int32), axis=1) > 0
    s = tl.where(s == 255, 0, s)
    s_ref = tl.max(s, axis=1)
    f = _fp16_relative(s, s_ref)
    v = q.to(tl.float16) * f[:, :, None]
    spread = tl.min(tl.where(s > 0, s - s_ref[:, None], 0))
    return tl.reshape(v, [BR, BG * 32]), tl.where(nan_row, 255, s_ref), spread


@triton.jit
def _pow2_product(s_rows, s_cols):
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
def _dq16_step(
    acc,
    step,
    a_rows,  # [BM, 1] pointers to the rows of a (the K range's first element)
    w_rows,  # [BN, 1] pointers to the rows of w
    as_ptr,
    ws_ptr,
    rows,
    cols,
    row_ok,
    col_ok,
    n_groups,  # 32-wide groups in the K range (masks a partial last step)
    a_group0,  # scale group of a's first column in its scale rows (a may be a column slice)
    a_n_groups,  # scale groups per row of a's scale storage
    rows4,
    n_k4,
    n_ws,  # columns of w's K-group-major scale storage [K/32, n_ws]
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,
    SWAP_AB: tl.constexpr,
):
    """One K step of the fp16 tensor-core product: ``acc`` plus the BLOCK_G groups of step ``step``.

    Shared by ``_mxfp8_dq16_kernel`` and the grouped wo_a projection (``mxfp8_dot.mxfp8_mainloop``)."""
    gl = tl.arange(0, BLOCK_G)
    lane = tl.arange(0, 32)
    g = step * BLOCK_G + gl
    g_ok = g < n_groups
    sw = tl.load(
        ws_ptr + g[None, :].to(tl.int64) * n_ws + cols[:, None],
        mask=col_ok[:, None] & g_ok[None, :],
        other=0,
    )
    sa = tl.load(
        as_ptr + _act_scale_offsets(rows[:, None], a_group0 + g[None, :], a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=row_ok[:, None] & g_ok[None, :],
        other=0,
    )
    w16, fw, spread_w = _dq16_tile(w_rows[:, :, None], sw, col_ok, g_ok, g, lane, BLOCK_N, BLOCK_G)
    a16, fa, spread_a = _dq16_tile(a_rows[:, :, None], sa, row_ok, g_ok, g, lane, BLOCK_M, BLOCK_G)
    if tl.minimum(spread_w, spread_a) >= -12:
        # Every folded factor is 2**-12 or more: E4M3 times it is exact in fp16.
        if SWAP_AB:
            f1, f2 = _pow2_product(fw, fa)
            acc += tl.dot(w16, tl.trans(a16)) * f1 * f2
        else:
            f1, f2 = _pow2_product(fa, fw)
            acc += tl.dot(a16, tl.trans(w16)) * f1 * f2
    else:
        # Scales more than 12 binades apart within a row of this step (rare in models; adversarial
        # inputs pair a tiny weight scale with a huge activation one): one exact dot per group.
        for j in tl.static_range(BLOCK_G):
            gj = step * BLOCK_G + j
            ok = gj < n_groups
            k = gj * 32 + lane
            aj = tl.load(a_rows + k[None, :], mask=row_ok[:, None] & ok, other=0.0).to(tl.float16)
            wj = tl.load(w_rows + k[None, :], mask=col_ok[:, None] & ok, other=0.0).to(tl.float16)
            saj = tl.load(
                as_ptr + _act_scale_offsets(rows, a_group0 + gj, a_n_groups, rows4, n_k4, A_LAYOUT),
                mask=row_ok & ok,
                other=0,
            ).to(tl.int32)
            swj = tl.load(ws_ptr + gj.to(tl.int64) * n_ws + cols, mask=col_ok & ok, other=0).to(tl.int32)
            if SWAP_AB:
                f1, f2 = _pow2_product(swj, saj)
                acc += tl.dot(wj, tl.trans(aj)) * f1 * f2
            else:
                f1, f2 = _pow2_product(saj, swj)
                acc += tl.dot(aj, tl.trans(wj)) * f1 * f2
    return acc


@triton.jit
def _mma8_group(
    acc,
    g,  # the 32-wide group
    g_ok,
    a_rows,  # [BM, 1] row pointers, as in _dq16_step
    w_rows,
    as_ptr,
    ws_ptr,
    rows,
    cols,
    row_ok,
    col_ok,
    a_group0,
    a_n_groups,
    rows4,
    n_k4,
    n_ws,
    A_LAYOUT: tl.constexpr,
    SWAP_AB: tl.constexpr,
):
    """``acc`` plus one FP8 tensor-core dot over group ``g``, promoted by the group's scale product.

    Shared by ``_mxfp8_mma_kernel`` and the grouped wo_a projection."""
    lane = tl.arange(0, 32)
    k = g * 32 + lane
    a = tl.load(a_rows + k[None, :], mask=row_ok[:, None] & g_ok, other=0.0)  # [BM, 32] K-major
    w = tl.load(w_rows + k[None, :], mask=col_ok[:, None] & g_ok, other=0.0)  # [BN, 32] K-major
    sa = tl.load(
        as_ptr + _act_scale_offsets(rows, a_group0 + g, a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=row_ok & g_ok,
        other=0,
    )
    sw = tl.load(ws_ptr + g.to(tl.int64) * n_ws + cols, mask=col_ok & g_ok, other=0)
    fa = _e8m0_to_f32(sa.to(tl.int32))
    fw = _e8m0_to_f32(sw.to(tl.int32))
    if SWAP_AB:
        acc += tl.dot(w, tl.trans(a)) * (fw[:, None] * fa[None, :])
    else:
        acc += tl.dot(a, tl.trans(w)) * (fa[:, None] * fw[None, :])
    return acc


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def _mxfp8_dq16_kernel(
    a_ptr,
    as_ptr,
    w_ptr,
    ws_ptr,
    out_ptr,
    work_ptr,
    cnt_ptr,
    M,
    N,
    K,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,  # 32-wide groups per step: BLOCK_K = 32 * BLOCK_G
    SPLIT_K: tl.constexpr,
    SWAP_AB: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """Tensor-core path: both operands dequantized to fp16 in registers with their per-32 scales folded
    in relative to each row's largest scale in the step, one fp16 dot per BLOCK_K, and one promotion per
    step by the product of the two rows' largest scales."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    n_groups = K // 32
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    steps_per_split = ((n_groups + BLOCK_G - 1) // BLOCK_G + SPLIT_K - 1) // SPLIT_K
    s_begin = pid_k * steps_per_split
    row_ok = rows < M
    col_ok = cols < N
    a_rows = a_ptr + rows[:, None].to(tl.int64) * K
    w_rows = w_ptr + cols[:, None].to(tl.int64) * K
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for step in tl.range(s_begin, s_begin + steps_per_split, num_stages=NUM_STAGES):
        acc = _dq16_step(
            acc,
            step,
            a_rows,
            w_rows,
            as_ptr,
            ws_ptr,
            rows,
            cols,
            row_ok,
            col_ok,
            n_groups,
            0,
            n_groups,
            rows4,
            n_k4,
            N,
            A_LAYOUT,
            BLOCK_M,
            BLOCK_N,
            BLOCK_G,
            SWAP_AB,
        )
    if SWAP_AB:
        acc = tl.trans(acc)
    tile_id = pid_m * tl.num_programs(0) + pid_n
    _finish_tile(acc, out_ptr, work_ptr, cnt_ptr, rows, cols, M, N, tile_id, pid_k, BLOCK_M, BLOCK_N, SPLIT_K)


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def _mxfp8_mma_kernel(
    a_ptr,
    as_ptr,
    w_ptr,
    ws_ptr,
    out_ptr,
    work_ptr,
    cnt_ptr,
    M,
    N,
    K,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SUB: tl.constexpr,  # 32-wide groups per loop step (one dot each)
    SPLIT_K: tl.constexpr,
    SWAP_AB: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    n_groups = K // 32
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    steps_per_split = ((n_groups + SUB - 1) // SUB + SPLIT_K - 1) // SPLIT_K
    g_begin = pid_k * steps_per_split * SUB
    g_end = min(g_begin + steps_per_split * SUB, n_groups)
    row_ok = rows < M
    col_ok = cols < N
    a_rows = a_ptr + rows[:, None].to(tl.int64) * K
    w_rows = w_ptr + cols[:, None].to(tl.int64) * K

    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for g0 in tl.range(g_begin, g_end, SUB, num_stages=NUM_STAGES):
        for j in tl.static_range(SUB):
            g = g0 + j
            acc = _mma8_group(
                acc,
                g,
                g < g_end,
                a_rows,
                w_rows,
                as_ptr,
                ws_ptr,
                rows,
                cols,
                row_ok,
                col_ok,
                0,
                n_groups,
                rows4,
                n_k4,
                N,
                A_LAYOUT,
                SWAP_AB,
            )
    if SWAP_AB:
        acc = tl.trans(acc)
    tile_id = pid_m * tl.num_programs(0) + pid_n
    _finish_tile(acc, out_ptr, work_ptr, cnt_ptr, rows, cols, M, N, tile_id, pid_k, BLOCK_M, BLOCK_N, SPLIT_K)


@dataclass(frozen=True)
class GemmConfig:
    """One launch configuration.

    ``kind``: ``"gemv"`` (CUDA cores, M <= 4; ``block_g`` = 16-element chunks of K per step), ``"dq16"``
    (fp16 tensor-core dots on dequantized tiles; ``block_g`` = 32-wide groups per step) or ``"mma8"``
    (one FP8 dot per 32-wide group; ``block_g`` = dots per step). ``swap_ab`` puts weight rows in the
    MMA's M slot.
    """

    kind: str
    block_m: int
    block_n: int
    block_g: int
    split_k: int
    num_warps: int
    num_stages: int
    swap_ab: bool = False
    bits: bool = False  # gemv: convert E4M3 by moving bits instead of cvt instructions


def choose_config(m: int, n: int, k: int, *, num_sms: int = 132) -> GemmConfig:
    """The launch configuration for an ``[m, k] x [n, k]`` product, from the sweep in
    benchmarks/mxfp8_gemm.py on an H200 (benchmarks/RESULTS.md has the figures):

    * m <= 2: the CUDA-core GEMV, 2 weight rows x 512 K per step, split-K to 2 (10.3 us at 1792 x 5120,
      against 11.4 for 4 rows and 15.6 for 8);
    * m <= 32: one FP8 dot per 32-K group, weights in the MMA's M slot (64 rows), split-K until about
      3.4 programs per SM (11.4 us at m = 4 and 11.7 at m = 16 on 1792 x 5120 with split 16);
    * m <= 64: fp16 dots on dequantized 64 x 128 x 128 tiles, split-K to fill the GPU once (20.4 us on
      1792 x 5120, 100.7 on 7168 x 16384);
    * above: FP8 dots per group on 64 x 128 tiles.
    """
    groups = k // 32
    if m <= 2:
        split = _split_for(triton.cdiv(n, 2), 2 * groups // 32, target=8 * num_sms, most=2)
        return GemmConfig("gemv", triton.next_power_of_2(m), 2, 32, split, 4, 3)
    if m <= 32:
        block_m = max(16, triton.next_power_of_2(m))
        split = _split_for(triton.cdiv(n, 64), groups // 4, target=448)
        return GemmConfig("mma8", block_m, 64, 4, split, 4, 3, swap_ab=True)
    if m <= 64:
        split = _split_for(triton.cdiv(n, 128), groups // 4, target=3 * num_sms // 4)
        return GemmConfig("dq16", 64, 128, 4, split, 4, 3, swap_ab=True)
    tiles = triton.cdiv(n, 128) * triton.cdiv(m, 64)
    split = _split_for(tiles, groups // 4, target=num_sms, most=2)
    return GemmConfig("mma8", 64, 128, 4, split, 4, 3)


def _split_for(tiles: int, steps: int, *, target: int, most: int = 16) -> int:
    """The smallest power-of-two split (<= ``most``) giving ``target`` programs, keeping >= 2 steps each."""
    split = 1
    while tiles * split < target and split < most and steps // (split * 2) >= 2:
        split *= 2
    return split


def weight_scale_kgroup_major(scale_e8m0: torch.Tensor) -> torch.Tensor:
    """Row-major uint8 ``[N, K/32]`` weight scales -> the kernel's K-group-major uint8 ``[K/32, N]``."""
    return scale_e8m0.t().contiguous()


# Split-K partials and arrival counters, per (device, size). Never freed: a CUDA graph captured against
# one keeps reading it, and every launch leaves its counters at zero.
_WORKSPACES: dict[tuple[torch.device, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(device: torch.device, partial_numel: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    key = (device, partial_numel, tiles)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = (
            torch.empty(partial_numel, dtype=torch.float32, device=device),
            torch.zeros(tiles, dtype=torch.int32, device=device),
        )
    return _WORKSPACES[key]


def launch_mxfp8_gemm(
    a_q: torch.Tensor,
    a_scale_bytes: torch.Tensor,
    a_layout: str,
    w_q: torch.Tensor,
    w_scale_t: torch.Tensor,
    out: torch.Tensor,
    *,
    config: GemmConfig | None = None,
) -> None:
    """Run the GEMM into ``out`` (bf16 ``[M, N]``). Arguments are validated by ``mxfuse.gemm``.

    ``a_scale_bytes``: a uint8 view of every byte of ``a``'s scale storage (padding included);
    ``w_scale_t``: uint8 ``[K/32, N]`` (``weight_scale_kgroup_major``). ``config`` overrides
    ``choose_config`` (benchmarks sweep it).
    """
    m, k = a_q.shape
    n = w_q.shape[0]
    if m == 0:
        return
    cfg = config or choose_config(m, n, k)
    groups = k // 32
    rows4 = -(-m // 4) * 4
    n_k4 = -(-groups // 4)
    grid_n = triton.cdiv(n, cfg.block_n)
    if cfg.kind == "gemv":
        if cfg.block_m < m or cfg.block_m not in (1, 2, 4):
            raise ValueError(
                f"config.block_m must be 1, 2 or 4 and >= M ({m}) for the gemv kernel; got {cfg.block_m}"
            )
        grid_m = 1
    else:
        grid_m = triton.cdiv(m, cfg.block_m)
    tiles = grid_n * grid_m
    work, counters = _workspace(out.device, tiles * cfg.split_k * cfg.block_m * cfg.block_n, tiles)
    common = dict(
        A_LAYOUT=_A_LAYOUT[a_layout],
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k,
        NUM_STAGES=cfg.num_stages,
        num_warps=cfg.num_warps,
    )
    args = (a_q, a_scale_bytes, w_q, w_scale_t, out, work, counters, m, n, k, rows4, n_k4)
    if cfg.kind == "gemv":
        _mxfp8_gemv_kernel[(grid_n, cfg.split_k)](*args, CHUNKS=cfg.block_g, BITS=cfg.bits, **common)
    elif cfg.kind == "dq16":
        _mxfp8_dq16_kernel[(grid_n, grid_m, cfg.split_k)](
            *args, BLOCK_G=cfg.block_g, SWAP_AB=cfg.swap_ab, **common
        )
    else:
        _mxfp8_mma_kernel[(grid_n, grid_m, cfg.split_k)](
            *args, SUB=cfg.block_g, SWAP_AB=cfg.swap_ab, **common
        )
