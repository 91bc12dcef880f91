"""The folded-scale MXFP8 mainloop: every power-of-two scale folded into a 16-bit operand, one fp32
accumulator, no promotion inside the K loop. Shared by the GEMM's ``fold`` kernel (``gemm.fold``) and
the grouped wo_a projection (through ``gemm.mainloop``, ``DOT_FOLD``).

E4M3 is exact in fp16 and bf16, and so is E4M3 times a power of two inside a window (``FOLD_WINDOW``);
then every product of two folded operands is an exact fp32 and the tensor core sums them in fp32. Scales
are folded relative to references fixed for a program's whole K range, so one multiply after the loop
restores them. A range whose scale bytes leave the window is recomputed group by group (``_exact_group``:
fp16 dots of the raw codes, each group's sum times its two scales as exact fp32 factors), exact for any
bytes (NaN blocks included): a decision per program after its loop, so the loop has no branch.
Summation order: within a program, the tensor core's fp32 accumulation in K order; across split-K
programs, ``mxfuse.kernels.splitk`` sums in split order. Which variant wins is pending measurement
(benchmarks/mxfp8_gemm_sweep.py); benchmarks/RESULTS.md records what each compiles to.

How the operands are built (kernel constants):

* ``ACT``: ``ACT_INLOOP`` converts the activation's E4M3 tile and folds its scales in the loop;
  ``ACT_PREFOLD`` reads a 16-bit copy folded once per call (``fold_activation_row``, run by a separate
  launch), so the MMA's shared-memory operand comes straight from the pipelined loads. Triton 3.6 keeps
  an sm_90 wgmma asynchronous only then (its ``WGMMAPipeline``: every shared-memory operand must come
  from a multi-buffered load); an operand computed in the loop makes each dot wait for completion.
* ``WSCALE``: ``WSCALE_OPERAND`` folds the weight's scales into its 16-bit register operand, from scale
  bytes gathered per element, so every op from the loads to the dot is elementwise and the converted
  tile stays in registers as the wgmma's A operand (Triton's ``MMAV3HoistLayoutConversion``);
  ``WSCALE_ACC`` issues one dot per 32-wide group on the raw weight codes and multiplies each group's
  fp32 sum by its weight scale (``ACT_INLOOP`` only).
* ``OP``: fp16 (window of 22 binades; conversions ``CVT_CAST``, ``CVT_BITS`` or ``CVT_ASM``) or bf16
  (wide windows; ``CVT_CAST`` only; not runnable under the Triton interpreter, whose bf16 dots and
  bitcasts are wrong).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.decode import act_scale_offsets, e4m3_bits_to_f32, e8m0_to_f32, pow2_product
from mxfuse.kernels.gemm.steps import group_operands

__all__ = [
    "ACT_CODE",
    "ACT_INLOOP",
    "ACT_PREFOLD",
    "CVT_ASM",
    "CVT_BITS",
    "CVT_CAST",
    "CVT_CODE",
    "FOLD_WINDOW",
    "OPERAND_CODE",
    "OP_BF16",
    "OP_F16",
    "WSCALE_ACC",
    "WSCALE_CODE",
    "WSCALE_OPERAND",
    "e4m3_to_16",
    "fold_activation_row",
    "fold_mainloop",
]

OP_F16 = 0
OP_BF16 = 1
OPERAND_CODE = {"f16": OP_F16, "bf16": OP_BF16}
CVT_CAST = 0  # Triton's own cast of float8e4nv
CVT_BITS = 1  # integer shifts of the code, f16 only (NaN codes are not mapped)
CVT_ASM = 2  # cvt.rn.f16x2.e4m3x2 issued directly (sm_89+, f16 only; never under the interpreter)
CVT_CODE = {"cast": CVT_CAST, "bits": CVT_BITS, "asm": CVT_ASM}
WSCALE_OPERAND = 0
WSCALE_ACC = 1
WSCALE_CODE = {"operand": WSCALE_OPERAND, "acc": WSCALE_ACC}
ACT_INLOOP = 0
ACT_PREFOLD = 1
ACT_CODE = {"inloop": ACT_INLOOP, "prefold": ACT_PREFOLD}
# Exponents that fold exactly, per 16-bit type: the activation's d_a = sa - ref_a (its row's
# reference); the weight's d_w = sw - W_BIAS (bf16: 127) when folded into its operand
# (d_a + d_w in [-108, 95], see fold_step), and d_w = sw - 127 when it scales each group's fp32 sum
# (sums of 2**-32 .. 2**30 (fp16) or 2**-72 .. 2**63 (bf16) times 2**d_w stay normal below 2**113).
FOLD_WINDOW = {
    OP_F16: {"act": (-14, 7), "weight_operand": (-14, 7), "weight_acc": (-94, 83)},
    OP_BF16: {"act": (-54, 40), "weight_operand": (-54, 55), "weight_acc": (-54, 50)},
}


@triton.jit
def _cvt_f16_asm(q):
    """E4M3 -> fp16 by ``cvt.rn.f16x2.e4m3x2``, two codes per instruction (sm_89+)."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        "=r,=r,r",
        [q.to(tl.uint8, bitcast=True)],
        dtype=tl.float16,
        is_pure=True,
        pack=4,
    )


@triton.jit
def _u16(like, value: tl.constexpr):
    """A uint16 constant shaped like ``like``: keeps 16-bit arithmetic 16-bit (a Python int operand
    would widen it to int32, and the narrowing back stops Triton keeping the dot operand in registers)."""
    return tl.full(like.shape, value, tl.uint16)


@triton.jit
def e4m3_to_16(q, OP: tl.constexpr, CVT: tl.constexpr):
    """E4M3 codes ``q`` as 16-bit values, exactly: fp16 (``OP_F16``) or bf16 (``OP_BF16``, cast only).

    ``CVT_CAST`` / ``CVT_ASM``: the value itself (hardware cvt; NaN codes become NaN). ``CVT_BITS`` (fp16):
    the code's bits moved into place, no conversion instruction: sign to bit 15, exponent and mantissa
    below it, which is the value times 2**-8 (exponent bias 15 against 7); E4M3 subnormals land on fp16
    subnormals, which are linear too (the factors take the 2**8 back). NaN codes are not mapped: they
    come only under a NaN scale byte (0xFF), whose ranges take the exact path.
    """
    if CVT == 1:
        b = q.to(tl.uint8, bitcast=True).to(tl.uint16)
        bits = ((b << _u16(b, 8)) & _u16(b, 0x8000)) | ((b & _u16(b, 0x7F)) << _u16(b, 7))
        return bits.to(tl.float16, bitcast=True)
    elif CVT == 2:
        return _cvt_f16_asm(q)
    else:
        if OP == 0:
            return q.to(tl.float8e4nv, bitcast=True).to(tl.float16)
        else:
            return q.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)


@triton.jit
def _act_factor(d, OP: tl.constexpr, CVT: tl.constexpr):
    """16-bit ``2**d`` for the activation's exponents ``d = sa - ref_a`` (clamped to the window), times
    2**8 when ``e4m3_to_16`` moved bits."""
    if OP == 0:
        e = tl.minimum(tl.maximum(d, -14), 7) + 8 * (CVT == 1)
        return ((e + 15) << 10).to(tl.int16).to(tl.float16, bitcast=True)
    else:
        e = tl.minimum(tl.maximum(d, -54), 40)
        # Through fp32 (exact for a power of two): the interpreter mis-reads an int16 -> bf16 bitcast.
        return ((e + 127) << 23).to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _weight_factor(sw, OP: tl.constexpr, CVT: tl.constexpr, W_BIAS: tl.constexpr):
    """16-bit ``2**(sw - W_BIAS)`` (times 2**8 after ``CVT_BITS``) from weight scale bytes ``sw``, in
    16-bit integer arithmetic only: every op from the byte load to the dot is elementwise and widening,
    so Triton keeps the converted weight tile in registers as the wgmma's A operand. Bytes outside the
    window give garbage factors; ``weight_in_window`` sends those ranges to the exact path. bf16 takes
    W_BIAS = 127: the byte is the exponent field."""
    s = sw.to(tl.uint8, bitcast=True).to(tl.uint16)
    if OP == 0:
        e = s + _u16(s, (15 + 8 * (CVT == 1) - W_BIAS) & 0xFFFF)
        return (e << _u16(s, 10)).to(tl.float16, bitcast=True)
    else:
        return (s << _u16(s, 7)).to(tl.bfloat16, bitcast=True)


@triton.jit
def _act_in_window(lo, hi, ref, OP: tl.constexpr):
    """True when every activation byte in ``[lo, hi]`` (per row and slot) folds exactly against its
    row's ``ref``, none NaN."""
    if OP == 0:
        ok = ((lo - ref[:, None]) >= -14) & ((hi - ref[:, None]) <= 7)
    else:
        ok = ((lo - ref[:, None]) >= -54) & ((hi - ref[:, None]) <= 40)
    return tl.min((ok & (hi < 255)).to(tl.int32)) > 0


@triton.jit
def _weight_in_window(lo, hi, OP: tl.constexpr, WSCALE: tl.constexpr, W_BIAS: tl.constexpr):
    """True when every weight byte in ``[lo, hi]`` folds exactly (``FOLD_WINDOW``), none NaN."""
    if WSCALE == 0:
        if OP == 0:
            ok = ((lo - W_BIAS) >= -14) & ((hi - W_BIAS) <= 7)
        else:
            ok = ((lo - 127) >= -54) & ((hi - 127) <= 55)
    else:
        if OP == 0:
            ok = ((lo - 127) >= -94) & ((hi - 127) <= 83)
        else:
            ok = ((lo - 127) >= -54) & ((hi - 127) <= 50)
    return tl.min((ok & (hi < 255)).to(tl.int32)) > 0


@triton.jit
def _folded_weight(w_rows, ws_ptr, cols, col_ok, k, k_ok, n_ws, OP: tl.constexpr, CVT: tl.constexpr,
                   W_BIAS: tl.constexpr, EVEN: tl.constexpr):  # fmt: skip
    """The weight tile ``[BN, len(k)]`` as 16-bit values times ``2**(sw - W_BIAS)``, each element's
    scale byte gathered by its group (masked elements are 0; EVEN: the tile is whole, no masks, which
    saves a third of the loop's instructions)."""
    sw_ptrs = ws_ptr + (k // 32)[None, :].to(tl.int64) * n_ws + cols[:, None]
    if EVEN:
        w = tl.load(w_rows + k[None, :])
        swt = tl.load(sw_ptrs)
    else:
        mask = col_ok[:, None] & k_ok[None, :]
        w = tl.load(w_rows + k[None, :], mask=mask, other=0.0)
        swt = tl.load(sw_ptrs, mask=mask, other=W_BIAS)
    return e4m3_to_16(w, OP, CVT) * _weight_factor(swt, OP, CVT, W_BIAS)


@triton.jit
def _act_bytes(
    g, g_ok, as_ptr, rows, row_ok, ref_a, a_group0, a_n_groups, rows4, n_k4, A_LAYOUT: tl.constexpr
):
    """The step's activation scale bytes ``[BM, G]`` (int32; masked entries read as the row's ``ref_a``)."""
    ok = row_ok[:, None] & g_ok[None, :]
    sa = tl.load(
        as_ptr + act_scale_offsets(rows[:, None], a_group0 + g[None, :], a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=ok,
        other=0,
    ).to(tl.int32)
    return tl.where(ok, sa, ref_a[:, None])


@triton.jit
def _weight_bytes(g, g_ok, ws_ptr, cols, col_ok, n_ws, W_REF: tl.constexpr):
    """The step's weight scale bytes ``[BN, G]`` (int32; masked entries read as W_REF)."""
    ok = col_ok[:, None] & g_ok[None, :]
    sw = tl.load(ws_ptr + g[None, :].to(tl.int64) * n_ws + cols[:, None], mask=ok, other=0).to(tl.int32)
    return tl.where(ok, sw, W_REF)


@triton.jit
def _fold_step(acc, step, g_end, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, ref_a, a_group0,
               a_n_groups, rows4, n_k4, n_ws, A_LAYOUT: tl.constexpr, SWAP_AB: tl.constexpr,
               BLOCK_G: tl.constexpr, OP: tl.constexpr, CVT: tl.constexpr, W_BIAS: tl.constexpr,
               EVEN: tl.constexpr):  # fmt: skip
    """``ACT_INLOOP`` x ``WSCALE_OPERAND``: ``acc`` plus one 16-bit dot over the step's ``32 * BLOCK_G``
    K of ``a * 2**(sa - ref_a)`` and ``w * 2**(sw - W_BIAS)``, each element's byte gathered by group.

    Exact inside the window: E4M3 * 2**d is a multiple of 2**(d-9) with 4 significant bits, an fp16 for
    d in [-14, 7] (below 2**16) and a bf16 for d in [-124, 119]; two factors with d_a + d_w >= -108
    multiply to at least 2**-126, so every product is an exact normal fp32; d_a + d_w <= 95 keeps the
    fp32 sums below 2**128 for any K.
    """
    k = step * (BLOCK_G * 32) + tl.arange(0, BLOCK_G * 32)
    k_ok = k // 32 < g_end
    w16 = _folded_weight(w_rows, ws_ptr, cols, col_ok, k, k_ok, n_ws, OP, CVT, W_BIAS, EVEN)
    a_ok = row_ok[:, None] & k_ok[None, :]
    a = tl.load(a_rows + k[None, :], mask=a_ok, other=0.0)
    sat = tl.load(
        as_ptr
        + act_scale_offsets(rows[:, None], a_group0 + (k // 32)[None, :], a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=a_ok,
        other=0,
    ).to(tl.int32)
    a16 = e4m3_to_16(a, OP, CVT) * _act_factor(tl.where(a_ok, sat, ref_a[:, None]) - ref_a[:, None], OP, CVT)
    if SWAP_AB:
        return tl.dot(w16, tl.trans(a16), acc)
    else:
        return tl.dot(a16, tl.trans(w16), acc)


@triton.jit
def _prefolded_step(acc, step, g_end, p_rows, w_rows, ws_ptr, cols, row_ok, col_ok, n_ws, SWAP_AB: tl.constexpr,
                    BLOCK_G: tl.constexpr, OP: tl.constexpr, CVT: tl.constexpr, W_BIAS: tl.constexpr,
                    EVEN: tl.constexpr):  # fmt: skip
    """``ACT_PREFOLD`` x ``WSCALE_OPERAND``: as ``_fold_step``, the activation read from its folded
    16-bit copy (``p_rows``), so both MMA operands come from the loads without a computed tile in
    shared memory."""
    k = step * (BLOCK_G * 32) + tl.arange(0, BLOCK_G * 32)
    k_ok = k // 32 < g_end
    w16 = _folded_weight(w_rows, ws_ptr, cols, col_ok, k, k_ok, n_ws, OP, CVT, W_BIAS, EVEN)
    a16 = tl.load(p_rows + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
    if SWAP_AB:
        return tl.dot(w16, tl.trans(a16), acc)
    else:
        return tl.dot(a16, tl.trans(w16), acc)


@triton.jit
def _group_dot(g, g_end, a_rows, w_rows, as_ptr, rows, row_ok, col_ok, ref_a, a_group0, a_n_groups, rows4, n_k4,
               A_LAYOUT: tl.constexpr, SWAP_AB: tl.constexpr, OP: tl.constexpr, CVT: tl.constexpr):  # fmt: skip
    """The unpromoted dot of group ``g``: raw weight codes (exact in 16 bits) against the activation
    with its scale folded in against ``ref_a``."""
    k = g * 32 + tl.arange(0, 32)
    ok = g < g_end
    w = tl.load(w_rows + k[None, :], mask=col_ok[:, None] & ok, other=0.0)
    a = tl.load(a_rows + k[None, :], mask=row_ok[:, None] & ok, other=0.0)
    sa = tl.load(
        as_ptr + act_scale_offsets(rows, a_group0 + g, a_n_groups, rows4, n_k4, A_LAYOUT),
        mask=row_ok & ok,
        other=0,
    ).to(tl.int32)
    a16 = e4m3_to_16(a, OP, CVT) * _act_factor(tl.where(row_ok & ok, sa, ref_a) - ref_a, OP, CVT)[:, None]
    w16 = e4m3_to_16(w, OP, CVT)
    if SWAP_AB:
        return tl.dot(w16, tl.trans(a16))
    else:
        return tl.dot(a16, tl.trans(w16))


@triton.jit
def _promote(acc, d, g, g_end, ws_ptr, cols, col_ok, n_ws, SWAP_AB: tl.constexpr, CVT: tl.constexpr):
    """``acc + d * 2**(sw - 127)`` (times 2**8 after ``CVT_BITS``) for group ``g``'s weight rows."""
    sw = tl.load(ws_ptr + g.to(tl.int64) * n_ws + cols, mask=col_ok & (g < g_end), other=0).to(tl.int32)
    f = tl.where(g < g_end, e8m0_to_f32(sw), 0.0)
    if CVT == 1:
        f = f * 256.0
    if SWAP_AB:
        return acc + d * f[:, None]
    else:
        return acc + d * f[None, :]


@triton.jit
def _acc_step(acc, step, g_end, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, ref_a, a_group0,
              a_n_groups, rows4, n_k4, n_ws, A_LAYOUT: tl.constexpr, SWAP_AB: tl.constexpr,
              BLOCK_G: tl.constexpr, OP: tl.constexpr, CVT: tl.constexpr):  # fmt: skip
    """``ACT_INLOOP`` x ``WSCALE_ACC``: the step's BLOCK_G (1, 2 or 4) groups, one independent dot
    each, all issued before the first is scaled by its weight rows' ``2**(sw - 127)``.

    Each group's fp32 sum (exact products of at least 2**-32, the activation inside ``_fold_step``'s
    window) times a power of two is exact while the weight byte stays in the ``weight_acc`` window."""
    g = step * BLOCK_G
    d0 = _group_dot(g, g_end, a_rows, w_rows, as_ptr, rows, row_ok, col_ok, ref_a, a_group0, a_n_groups, rows4,
                    n_k4, A_LAYOUT, SWAP_AB, OP, CVT)  # fmt: skip
    if BLOCK_G > 1:
        d1 = _group_dot(g + 1, g_end, a_rows, w_rows, as_ptr, rows, row_ok, col_ok, ref_a, a_group0, a_n_groups,
                        rows4, n_k4, A_LAYOUT, SWAP_AB, OP, CVT)  # fmt: skip
    if BLOCK_G > 2:
        d2 = _group_dot(g + 2, g_end, a_rows, w_rows, as_ptr, rows, row_ok, col_ok, ref_a, a_group0, a_n_groups,
                        rows4, n_k4, A_LAYOUT, SWAP_AB, OP, CVT)  # fmt: skip
        d3 = _group_dot(g + 3, g_end, a_rows, w_rows, as_ptr, rows, row_ok, col_ok, ref_a, a_group0, a_n_groups,
                        rows4, n_k4, A_LAYOUT, SWAP_AB, OP, CVT)  # fmt: skip
    acc = _promote(acc, d0, g, g_end, ws_ptr, cols, col_ok, n_ws, SWAP_AB, CVT)
    if BLOCK_G > 1:
        acc = _promote(acc, d1, g + 1, g_end, ws_ptr, cols, col_ok, n_ws, SWAP_AB, CVT)
    if BLOCK_G > 2:
        acc = _promote(acc, d2, g + 2, g_end, ws_ptr, cols, col_ok, n_ws, SWAP_AB, CVT)
        acc = _promote(acc, d3, g + 3, g_end, ws_ptr, cols, col_ok, n_ws, SWAP_AB, CVT)
    return acc


@triton.jit
def _exact_group(acc, g, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, a_group0, a_n_groups, rows4,
                 n_k4, n_ws, A_LAYOUT: tl.constexpr, SWAP_AB: tl.constexpr):  # fmt: skip
    """The exact path, one group: an fp16 dot of the raw E4M3 values (exact products of at least 2**-18,
    sums below 2**22) times the group's two scales as two exact fp32 factors (``pow2_product``), for
    any bytes, NaN (0xFF) included."""
    a, w, sa, sw = group_operands(
        g, True, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, a_group0, a_n_groups, rows4, n_k4, n_ws,
        A_LAYOUT,
    )  # fmt: skip
    a = a.to(tl.float8e4nv, bitcast=True)
    w = w.to(tl.float8e4nv, bitcast=True)
    if SWAP_AB:
        f1, f2 = pow2_product(sw, sa)
        return acc + tl.dot(w.to(tl.float16), tl.trans(a.to(tl.float16))) * f1 * f2
    else:
        f1, f2 = pow2_product(sa, sw)
        return acc + tl.dot(a.to(tl.float16), tl.trans(w.to(tl.float16))) * f1 * f2


@triton.jit
def fold_mainloop(
    a_rows,  # [BM, 1] row pointers of a (column 0 of its K range's group 0)
    w_rows,  # [BN, 1] row pointers of w
    as_ptr,
    ws_ptr,
    p_rows,  # ACT_PREFOLD: [BM, 1] row pointers of the folded 16-bit copy of a
    pref_ptr,  # ACT_PREFOLD: int32 per row of a: reference byte (its fold is 2**(sa - ref)), or -1
    rows,
    cols,
    row_ok,
    col_ok,
    g_begin,  # first 32-wide group of the range, a multiple of BLOCK_G
    g_end,  # one past the last group of the range
    a_group0,
    a_n_groups,
    rows4,
    n_k4,
    n_ws,
    A_LAYOUT: tl.constexpr,
    SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups per K step
    OP: tl.constexpr,
    CVT: tl.constexpr,
    ACT: tl.constexpr,
    WSCALE: tl.constexpr,
    W_BIAS: tl.constexpr,
    EVEN: tl.constexpr,  # every weight tile of the range is whole: no masks on the weight
    NUM_STAGES: tl.constexpr,
):
    """fp32 ``deq(a)[rows] @ deq(w)[cols].T`` over groups ``[g_begin, g_end)`` (transposed with SWAP_AB).

    References: the activation's per row, its largest byte in the range's first step (``ACT_INLOOP``)
    or from ``pref_ptr`` (``ACT_PREFOLD``: the folding launch's; -1 marks a row that does not fold);
    the weight's, W_BIAS (fp16 operand mode) or 127. The loop keeps each row's smallest and largest
    byte; after it, one multiply by ``2**(ref_a + ref_w - 254)``, or the exact path when a byte left
    the window (a NaN block, a zero block next to nonzero ones, scales far apart). Returns (acc, whether
    the folded loop's result was kept).
    """
    if ACT == 1:
        ref_a = tl.load(pref_ptr + rows, mask=row_ok, other=127)
        act_ok = tl.min(ref_a) >= 0
        ref_a = tl.maximum(ref_a, 0)
    else:
        g0 = g_begin + tl.arange(0, BLOCK_G)
        ok0 = row_ok[:, None] & (g0 < g_end)[None, :]
        sa0 = tl.load(
            as_ptr
            + act_scale_offsets(rows[:, None], a_group0 + g0[None, :], a_n_groups, rows4, n_k4, A_LAYOUT),
            mask=ok0,
            other=0,
        ).to(tl.int32)
        ref_a = tl.max(tl.where(ok0 & (sa0 != 255), sa0, 0), axis=1)
    w_ref: tl.constexpr = W_BIAS if (WSCALE == 0) and (OP == 0) else 127
    a_lo = tl.zeros([BLOCK_M, BLOCK_G], tl.int32) + ref_a[:, None]
    a_hi = a_lo
    w_lo = tl.full([BLOCK_N, BLOCK_G], w_ref, tl.int32)
    w_hi = w_lo
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    step0 = g_begin // BLOCK_G
    for step in tl.range(step0, tl.cdiv(g_end, BLOCK_G), num_stages=NUM_STAGES):
        if ACT == 1:
            acc = _prefolded_step(
                acc, step, g_end, p_rows, w_rows, ws_ptr, cols, row_ok, col_ok, n_ws, SWAP_AB, BLOCK_G, OP, CVT,
                W_BIAS, EVEN,
            )  # fmt: skip
        elif WSCALE == 0:
            acc = _fold_step(
                acc, step, g_end, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, ref_a, a_group0,
                a_n_groups, rows4, n_k4, n_ws, A_LAYOUT, SWAP_AB, BLOCK_G, OP, CVT, W_BIAS, EVEN,
            )  # fmt: skip
        else:
            acc = _acc_step(
                acc, step, g_end, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, ref_a, a_group0,
                a_n_groups, rows4, n_k4, n_ws, A_LAYOUT, SWAP_AB, BLOCK_G, OP, CVT,
            )  # fmt: skip
        g = step * BLOCK_G + tl.arange(0, BLOCK_G)
        sw = _weight_bytes(g, g < g_end, ws_ptr, cols, col_ok, n_ws, w_ref)
        w_lo = tl.minimum(w_lo, sw)
        w_hi = tl.maximum(w_hi, sw)
        if ACT == 0:
            sa = _act_bytes(
                g, g < g_end, as_ptr, rows, row_ok, ref_a, a_group0, a_n_groups, rows4, n_k4, A_LAYOUT
            )
            a_lo = tl.minimum(a_lo, sa)
            a_hi = tl.maximum(a_hi, sa)
    # With WSCALE_ACC each group's sum already carries 2**(sw - 127): w_ref is 127.
    w_refs = tl.full([BLOCK_N], w_ref, tl.int32)
    if SWAP_AB:
        f1, f2 = pow2_product(w_refs, ref_a)
    else:
        f1, f2 = pow2_product(ref_a, w_refs)
    acc = acc * f1 * f2
    exact = _weight_in_window(w_lo, w_hi, OP, WSCALE, W_BIAS) & _act_in_window(a_lo, a_hi, ref_a, OP)
    if ACT == 1:
        exact = exact & act_ok
    if not exact:
        acc = tl.zeros_like(acc)
        for g in tl.range(g_begin, g_end):
            acc = _exact_group(acc, g, a_rows, w_rows, as_ptr, ws_ptr, rows, cols, row_ok, col_ok, a_group0, a_n_groups,
                               rows4, n_k4, n_ws, A_LAYOUT, SWAP_AB)  # fmt: skip
    return acc, exact


@triton.jit
def fold_activation_row(
    a_ptr,  # E4M3 codes (uint8) of the row
    as_ptr,
    p_ptr,  # 16-bit folded copy of the row
    row,
    n_groups,
    a_group0,
    a_n_groups,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    OP: tl.constexpr,
    CHUNK_G: tl.constexpr,  # groups per chunk
):
    """Fold one activation row (groups ``[0, n_groups)`` of a slice starting at scale group
    ``a_group0``) into ``p_ptr``: ``a * 2**(sa - ref)`` as fp16, ref the row's largest non-NaN byte, or
    as bf16 with ref 127 (the dequantized value). Returns ref, or -1 when some block that holds a
    nonzero element folds inexactly (outside ``FOLD_WINDOW["act"]``, or, for bf16, under a byte whose
    products could leave the normal fp32 range: outside [73, 174]); a NaN block folds to NaN elements.
    Codes are decoded with integer arithmetic (``e4m3_bits_to_f32``), exact under the interpreter."""
    gl = tl.arange(0, CHUNK_G)
    lane = tl.arange(0, 32)
    ref = tl.full([], 127, tl.int32)
    if OP == 0:
        ref = tl.full([], 0, tl.int32)
        for c in tl.range(0, tl.cdiv(n_groups, CHUNK_G)):
            g = c * CHUNK_G + gl
            s = tl.load(
                as_ptr + act_scale_offsets(row, a_group0 + g, a_n_groups, rows4, n_k4, A_LAYOUT),
                mask=g < n_groups,
                other=0,
            ).to(tl.int32)
            ref = tl.maximum(ref, tl.max(tl.where(s == 255, 0, s)))
    bad = tl.full([], 0, tl.int32)
    for c in tl.range(0, tl.cdiv(n_groups, CHUNK_G)):
        g = c * CHUNK_G + gl
        g_ok = g < n_groups
        s = tl.load(
            as_ptr + act_scale_offsets(row, a_group0 + g, a_n_groups, rows4, n_k4, A_LAYOUT),
            mask=g_ok,
            other=0,
        ).to(tl.int32)
        k = g[:, None] * 32 + lane[None, :]
        code = tl.load(a_ptr + k, mask=g_ok[:, None], other=0)
        v = e4m3_bits_to_f32(code)  # [CHUNK_G, 32], exact, NaN for 0x7F / 0xFF
        d = s - ref
        if OP == 0:
            f = ((tl.minimum(tl.maximum(d, -14), 7) + 127) << 23).to(tl.float32, bitcast=True)
            inexact = (d < -14) | (d > 7)
        else:
            f = e8m0_to_f32(tl.minimum(tl.maximum(s, 73), 174))
            inexact = (s < 73) | (s > 174)
        f = tl.where(s == 255, float("nan"), f)
        nonzero = tl.max(((code.to(tl.int32) & 0x7F) != 0).to(tl.int32), axis=1) > 0
        bad = tl.maximum(bad, tl.max((inexact & (s != 255) & nonzero).to(tl.int32)))
        out = v * f[:, None]
        if OP == 0:
            tl.store(p_ptr + k, out.to(tl.float16), mask=g_ok[:, None])
        else:
            tl.store(p_ptr + k, out.to(tl.bfloat16), mask=g_ok[:, None])
    return tl.where(bad > 0, -1, ref)
