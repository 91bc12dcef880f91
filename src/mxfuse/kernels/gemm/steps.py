"""Triton building blocks of the MXFP8 products: scale bytes, E4M3 decodes, and one K step of each mainloop.

Every kernel that multiplies MXFP8 operands (the GEMM's kernels, the grouped wo_a projection) takes its
arithmetic from here, so that both dequantize, promote and guard extreme scales one way. Operands:

* ``a`` rows (activations): E4M3, one E8M0 byte per row and 32 K in any of the three layouts
  (``act_scale_offsets``), possibly a column slice of wider rows (``a_group0`` / ``a_n_groups``);
* ``w`` rows (a prepared weight): E4M3, one E8M0 byte per row and 32 K, stored K-group-major
  (``[K/32, n_ws]``, N contiguous: one coalesced load per group for a tile of weight rows).

Two ways to take one K step promoted inside the loop, each exact in its products (the third,
``fold_steps``, folds the scales into the operands and promotes once after the loop):

* ``mma8_group``: one FP8 tensor-core dot over a 32-wide group, promoted into the fp32 accumulator with
  the group's two scales (Hopper sums an fp8 MMA's products with fewer than fp32's bits: DeepSeek-V3
  report, section 3.3.2);
* ``dq16_step``: both tiles dequantized to fp16 with each group's scale folded in relative to the row's
  largest in the step, one fp16 dot per step promoted by the two rows' largest scales; a step whose scales
  span more than 12 binades within a row takes one exact dot per group instead (the fold's exact path).

``SWAP_AB`` computes the transposed tile (``acc`` is ``[BLOCK_N, BLOCK_M]``: weight rows in the MMA's M
slot, which is 64 wide on Hopper, so a few tokens fill the N slot).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.decode import act_scale_offsets, e8m0_to_f32, pow2_product

__all__ = ["dq16_step", "group_operands", "mma8_group"]


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
    v = q.to(tl.float8e4nv, bitcast=True).to(tl.float16) * f[:, :, None]
    spread = tl.min(tl.where(s > 0, s - s_ref[:, None], 0))
    return tl.reshape(v, [BR, BG * 32]), tl.where(nan_row, 255, s_ref), spread


@triton.jit
def dq16_step(
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
    """One K step of the fp16 tensor-core product: ``acc`` plus the BLOCK_G groups of step ``step``."""
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
        as_ptr + act_scale_offsets(rows[:, None], a_group0 + g[None, :], a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=row_ok[:, None] & g_ok[None, :],
        other=0,
    )
    w16, fw, spread_w = _dq16_tile(w_rows[:, :, None], sw, col_ok, g_ok, g, lane, BLOCK_N, BLOCK_G)
    a16, fa, spread_a = _dq16_tile(a_rows[:, :, None], sa, row_ok, g_ok, g, lane, BLOCK_M, BLOCK_G)
    if tl.minimum(spread_w, spread_a) >= -12:
        # Every folded factor is 2**-12 or more: E4M3 times it is exact in fp16.
        if SWAP_AB:
            f1, f2 = pow2_product(fw, fa)
            acc += tl.dot(w16, tl.trans(a16)) * f1 * f2
        else:
            f1, f2 = pow2_product(fa, fw)
            acc += tl.dot(a16, tl.trans(w16)) * f1 * f2
    else:
        # Scales more than 12 binades apart within a row of this step (rare in models; adversarial
        # inputs pair a tiny weight scale with a huge activation one): one exact dot per group.
        for j in tl.static_range(BLOCK_G):
            gj = step * BLOCK_G + j
            aj, wj, saj, swj = group_operands(
                gj, gj < n_groups, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, a_group0,
                a_n_groups, rows4, n_k4, n_ws, A_LAYOUT,
            )  # fmt: skip
            aj = aj.to(tl.float8e4nv, bitcast=True).to(tl.float16)
            wj = wj.to(tl.float8e4nv, bitcast=True).to(tl.float16)
            if SWAP_AB:
                f1, f2 = pow2_product(swj, saj)
                acc += tl.dot(wj, tl.trans(aj)) * f1 * f2
            else:
                f1, f2 = pow2_product(saj, swj)
                acc += tl.dot(aj, tl.trans(wj)) * f1 * f2
    return acc


@triton.jit
def group_operands(g, g_ok, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, a_group0, a_n_groups, rows4,
                   n_k4, n_ws, A_LAYOUT: tl.constexpr):  # fmt: skip
    """One 32-wide group's operands: ``a`` codes ``[BM, 32]`` and ``w`` codes ``[BN, 32]`` (K-major, masked
    entries 0) and their scale bytes as int32 ``[BM]`` / ``[BN]`` (masked entries 0)."""
    k = g * 32 + tl.arange(0, 32)
    a = tl.load(a_rows + k[None, :], mask=row_ok[:, None] & g_ok, other=0.0)
    w = tl.load(w_rows + k[None, :], mask=col_ok[:, None] & g_ok, other=0.0)
    sa = tl.load(
        as_ptr + act_scale_offsets(rows, a_group0 + g, a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=row_ok & g_ok,
        other=0,
    )
    sw = tl.load(ws_ptr + g * n_ws + cols, mask=col_ok & g_ok, other=0)
    return a, w, sa.to(tl.int32), sw.to(tl.int32)


@triton.jit
def mma8_group(
    acc,
    g,  # the 32-wide group
    g_ok,
    a_rows,  # [BM, 1] row pointers, as in dq16_step
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
    """``acc`` plus one FP8 tensor-core dot over group ``g``, promoted by the group's scale product."""
    a, w, sa, sw = group_operands(
        g, g_ok, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, a_group0, a_n_groups, rows4, n_k4,
        n_ws, A_LAYOUT,
    )  # fmt: skip
    fa = e8m0_to_f32(sa)
    fw = e8m0_to_f32(sw)
    if SWAP_AB:
        acc += tl.dot(w, tl.trans(a)) * (fw[:, None] * fa[None, :])
    else:
        acc += tl.dot(a, tl.trans(w)) * (fa[:, None] * fw[None, :])
    return acc
