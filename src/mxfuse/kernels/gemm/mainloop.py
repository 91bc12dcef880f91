"""The one K-loop of the MXFP8 GEMM family, as one ``@triton.jit`` function.

``mxfp8_mainloop`` returns ``acc + deq(A)[rows, K range] @ deq(W)[cols, K range].T`` (fp32), where ``A``
rows are activations (E4M3, scales per 32 K in any of the three layouts, possibly a column slice of wider
rows, as one group's slice of the grouped wo_a input is) and ``W`` rows a prepared weight (E4M3, one E8M0
byte per row and 32 K, stored K-group-major ``[K/32, n_ws]``). The GEMM's ``dq16`` and ``mma8`` kernels
(``mxfuse.kernels.gemm.mma``) and the grouped wo_a (``mxfuse.kernels.grouped_wo_a``) run their K range
through it, so every operator dequantizes, promotes and guards extreme scales one way (the steps are
``mxfuse.kernels.gemm.steps``). Four ways to take the product (``DOT``):

* ``DOT_DQ16`` (the default): ``steps.dq16_step``: both tiles dequantized to fp16 with each 32-group's
  scale folded in relative to the row's largest scale in the step, one fp16 dot per step of
  ``BLOCK_G`` groups promoted by the exact product of the two rows' largest scales; a step whose scales
  span more than 12 binades within a row takes one exact dot per group instead.
* ``DOT_FOLD``: ``fold_steps.fold_mainloop``, the GEMM's ``fold`` kernel's loop: every scale folded into
  16-bit operands (``FOLD_*`` say how) relative to references fixed for the range, one accumulator,
  scaled once after the loop; ranges whose scales leave the exact window are recomputed exactly.
* ``DOT_FP8``: ``steps.mma8_group``: one fp8 tensor-core dot per 32-wide group, promoted with the
  group's scale product. Hopper adds the 32 products of an fp8 MMA with fewer than fp32's bits
  (DeepSeek-V3 report, section 3.3.2: about 14), so this mode is the less precise; it skips the
  per-element dequantization.
* ``DOT_F32``: E4M3 codes (uint8) decoded bit by bit to fp32, scaled exactly, IEEE fp32 dot. Slow on a
  GPU; it is the mode the Triton interpreter runs exactly: the interpreter reads E4M3 0x7F as 480, not
  NaN, in the casts the other modes use (otherwise they interpret correctly).

The K range is walked as ``for i in tl.range(lo, hi, STRIDE)``, index ``i`` standing for groups from
``(base + i) * IDX_GROUPS`` on: the GEMM walks its split's steps (``dq16``: ``base`` 0, one step an
index) or group indices (``mma8``: ``STRIDE`` BLOCK_G, ``IDX_GROUPS`` 1) with run-time bounds, groups
at or past ``g_end`` masked off; the grouped wo_a walks a constant number of whole steps from its split's
first (``base``; ``IDX_GROUPS`` BLOCK_G for ``DOT_FP8``), nothing masked (``G_MASK`` False; a constant
trip count, which the Triton 3.6 interpreter runs without numpy < 2.4). Each caller's loop compiles to
the same code as when it had a loop of its own.

``SWAP_AB`` computes the transposed tile (``acc`` is ``[BLOCK_N, BLOCK_M]``: weight rows in the MMA's M
slot, which is 64 wide on Hopper, so a few tokens fill the N slot). NaN elements and NaN scales (0xFF)
reach every output they touch.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.decode import act_scale_offsets, e4m3_bits_to_f32, e8m0_to_f32
from mxfuse.kernels.gemm.fold_steps import fold_mainloop
from mxfuse.kernels.gemm.steps import dq16_step, mma8_group

__all__ = ["DOT_CODE", "DOT_DQ16", "DOT_F32", "DOT_FOLD", "DOT_FP8", "DOT_STREAM", "mxfp8_mainloop"]

DOT_DQ16 = 0
DOT_FP8 = 1
DOT_F32 = 2
DOT_FOLD = 3
DOT_STREAM = 4  # CUDA cores, stream.stream_mainloop (callers branch to it; mxfp8_mainloop does not take it)
DOT_CODE = {"dq16": DOT_DQ16, "fp8": DOT_FP8, "fp32": DOT_F32, "fold": DOT_FOLD, "stream": DOT_STREAM}


@triton.jit
def _dequantize_f32(x, s, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """float32 ``[ROWS, BLOCK_K]`` of E4M3 codes ``x`` under scale bytes ``s`` ``[ROWS, BLOCK_K // 32]``:
    exact (E4M3 * 2**(s - 127) is an fp32 with at most 4 significant bits, at or above 2**-136)."""
    xf = tl.reshape(e4m3_bits_to_f32(x), (ROWS, BLOCK_K // 32, 32))
    xf = xf * e8m0_to_f32(s.to(tl.int32))[:, :, None]
    return tl.reshape(xf, (ROWS, BLOCK_K))


@triton.jit
def mxfp8_mainloop(
    acc,  # fp32 [BLOCK_M, BLOCK_N], or [BLOCK_N, BLOCK_M] with SWAP_AB
    a_rows,  # [BLOCK_M, 1] pointers to A's rows at K = 0 of its range: float8e4nv (uint8 codes for DOT_F32)
    w_rows,  # [BLOCK_N, 1] pointers to W's rows, same dtype rule
    as_ptr,  # A's scale storage as bytes
    ws_ptr,  # W's scale byte (n, k // 32) at ws_ptr + (k // 32) * n_ws + n: K-group-major
    rows,  # [BLOCK_M] row indices of A
    cols,  # [BLOCK_N] row indices of W
    row_ok,
    col_ok,
    lo,  # the loop's first index
    hi,  # one past its last
    base,  # index i stands for groups from (base + i) * IDX_GROUPS
    g_end,  # groups at or past this are masked off (DOT_DQ16; DOT_FP8 with G_MASK)
    a_group0,  # scale-group index of A's column 0 (A may be a column slice of wider rows)
    a_n_groups,  # scale groups per row of the whole A
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(a_n_groups, 4) / 4: swizzled tile stride
    n_ws,  # columns of W's scale storage [K/32, n_ws]
    p_rows,  # DOT_FOLD with FOLD_ACT prefold: A's folded 16-bit copy, addressed as A
    pref_ptr,  # DOT_FOLD with FOLD_ACT prefold: int32 reference byte per row of A
    A_LAYOUT: tl.constexpr,
    DOT: tl.constexpr,
    SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,  # 32-wide groups per step (DOT_FP8: dots per step)
    NUM_STAGES: tl.constexpr,
    STRIDE: tl.constexpr = 1,
    IDX_GROUPS: tl.constexpr = 1,  # DOT_FP8, DOT_F32 and DOT_FOLD: groups one loop index stands for
    G_MASK: tl.constexpr = True,  # DOT_FP8: mask groups at or past g_end
    EVEN: tl.constexpr = True,  # DOT_FOLD: every weight tile of the range is whole
    FOLD_OP: tl.constexpr = 0,  # DOT_FOLD: fold_steps.OPERAND_CODE
    FOLD_CVT: tl.constexpr = 0,  # DOT_FOLD: fold_steps.CVT_CODE
    FOLD_ACT: tl.constexpr = 0,  # DOT_FOLD: fold_steps.ACT_CODE
    FOLD_WSCALE: tl.constexpr = 0,  # DOT_FOLD: fold_steps.WSCALE_CODE
    FOLD_W_BIAS: tl.constexpr = 127,  # DOT_FOLD: the weight scale byte folded as 2**0
):
    """``acc`` plus the products over the K range the loop's indices stand for (module docstring).

    ``tl.range(num_stages=)`` "tries to pipeline most loads in this loop" (Triton 3.6 docstring), the
    scale loads included; the kernel's num_stages argument pipelines only the loads feeding tl.dot.
    DOT_FOLD's loop (``fold_steps.fold_mainloop``, shared with the GEMM's ``fold`` kernel) runs over the
    groups of indices ``[lo, hi)`` with its own run-time bounds.
    """
    if DOT == 3:
        folded, _ = fold_mainloop(
            a_rows,
            w_rows,
            as_ptr,
            ws_ptr,
            p_rows,
            pref_ptr,
            rows,
            cols,
            row_ok,
            col_ok,
            (base + lo) * IDX_GROUPS,
            (base + hi) * IDX_GROUPS,
            a_group0,
            a_n_groups,
            rows4,
            n_k4,
            n_ws,
            A_LAYOUT,
            SWAP_AB,
            BLOCK_M,
            BLOCK_N,
            BLOCK_G,
            FOLD_OP,
            FOLD_CVT,
            FOLD_ACT,
            FOLD_WSCALE,
            FOLD_W_BIAS,
            EVEN,
            NUM_STAGES,
        )
        acc = acc + folded
    else:
        for i in tl.range(lo, hi, STRIDE, num_stages=NUM_STAGES):
            if DOT == 0:
                acc = dq16_step(
                    acc,
                    base + i,
                    a_rows,
                    w_rows,
                    as_ptr,
                    ws_ptr,
                    rows,
                    cols,
                    row_ok,
                    col_ok,
                    g_end,
                    a_group0,
                    a_n_groups,
                    rows4,
                    n_k4,
                    n_ws,
                    A_LAYOUT,
                    BLOCK_M,
                    BLOCK_N,
                    BLOCK_G,
                    SWAP_AB,
                )
            elif DOT == 1:
                for j in tl.static_range(BLOCK_G):
                    g = (base + i) * IDX_GROUPS + j
                    if G_MASK:
                        g_ok = g < g_end
                    else:
                        g_ok = True
                    acc = mma8_group(
                        acc,
                        g,
                        g_ok,
                        a_rows,
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
                        A_LAYOUT,
                        SWAP_AB,
                    )
            else:
                g = (base + i) * IDX_GROUPS + tl.arange(0, BLOCK_G)
                sa = tl.load(
                    as_ptr
                    + act_scale_offsets(
                        rows[:, None], a_group0 + g[None, :], a_n_groups, rows4, n_k4, A_LAYOUT
                    ),
                    mask=row_ok[:, None],
                    other=0,
                )
                sw = tl.load(
                    ws_ptr + g[None, :].to(tl.int64) * n_ws + cols[:, None], mask=col_ok[:, None], other=0
                )
                kk = (base + i) * (IDX_GROUPS * 32) + tl.arange(0, BLOCK_G * 32)
                a = tl.load(a_rows + kk[None, :], mask=row_ok[:, None], other=0)
                w = tl.load(w_rows + kk[None, :], mask=col_ok[:, None], other=0)
                af = _dequantize_f32(a, sa, BLOCK_M, BLOCK_G * 32)
                wf = _dequantize_f32(w, sw, BLOCK_N, BLOCK_G * 32)
                if SWAP_AB:
                    acc = tl.dot(wf, tl.trans(af), acc, input_precision="ieee")
                else:
                    acc = tl.dot(af, tl.trans(wf), acc, input_precision="ieee")
    return acc
