"""The K mainloop of an MXFP8 x MXFP8 product over row slices, as one ``@triton.jit`` function.

``mxfp8_mainloop`` returns ``acc + deq(A)[rows, K range] @ deq(W)[cols, K range].T`` (fp32), where ``A``
rows are activations (E4M3, scales per 32 K in any of the three layouts, possibly a column slice of wider
rows, as one group's slice of the grouped wo_a input is) and ``W`` rows a prepared weight (E4M3, one E8M0
byte per row and 32 K, stored K-group-major ``[K/32, N]``). Its tensor-core steps are the MXFP8 GEMM's
own (``mxfuse.kernels.mxfp8_steps``), so both operators dequantize, promote and guard extreme scales one
way. Four ways to take the product (``DOT``):

* ``DOT_DQ16`` (the default): ``mxfp8_steps.dq16_step``: both tiles dequantized to fp16 with each
  32-group's scale folded in relative to the row's largest scale in the step, one fp16 dot per
  ``BLOCK_K`` promoted by the exact product of the two rows' largest scales; a step whose scales span
  more than 12 binades within a row takes one exact dot per group instead.
* ``DOT_FOLD``: ``mxfp8_fold_steps.fold_mainloop``, the GEMM's ``fold`` kernel's loop: every scale
  folded into 16-bit operands (``FOLD_*`` say how) relative to references fixed for the range, one
  accumulator, scaled once after the loop; ranges whose scales leave the exact window are recomputed
  with ``DOT_DQ16``'s steps.
* ``DOT_FP8``: ``mxfp8_steps.mma8_group``: one fp8 tensor-core dot per 32-wide group, promoted with the
  group's scale product. Hopper adds the 32 products of an fp8 MMA with fewer than fp32's bits
  (DeepSeek-V3 report, section 3.3.2: about 14), so this mode is the less precise; it skips the
  per-element dequantization.
* ``DOT_F32``: E4M3 codes (uint8) decoded bit by bit to fp32, scaled exactly, IEEE fp32 dot. Slow on a
  GPU; it is the mode the Triton interpreter runs exactly: the interpreter reads E4M3 0x7F as 480, not
  NaN, in the casts the other modes use (otherwise they interpret correctly).

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
DOT_STREAM = 4  # CUDA cores, mxfp8_stream's mainloop (callers branch to it; mxfp8_mainloop does not take it)
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
    a_ptr,  # A (m, k) at a_ptr + m * stride_am + k: float8e4nv (uint8 codes for DOT_F32)
    as_ptr,  # A's scale storage as bytes
    w_ptr,  # W (n, k) at w_ptr + n * stride_wn + k, same dtype rule
    ws_ptr,  # W's scale byte (n, k // 32) at ws_ptr + (k // 32) * n_ws + n: K-group-major
    rows,  # [BLOCK_M] row indices of A
    cols,  # [BLOCK_N] row indices of W
    M,
    N,
    k_start,  # first K of the range, a multiple of BLOCK_K
    a_group0,  # scale-group index of A's column 0 (A may be a column slice of wider rows)
    a_n_groups,  # scale groups per row of the whole A
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(a_n_groups, 4) / 4: swizzled tile stride
    stride_am,
    stride_wn,
    n_ws,  # columns of W's scale storage [K/32, n_ws]
    p_ptr,  # DOT_FOLD with FOLD_ACT prefold: A's folded 16-bit copy, addressed as A
    pref_ptr,  # DOT_FOLD with FOLD_ACT prefold: int32 reference byte per row of A
    A_LAYOUT: tl.constexpr,
    DOT: tl.constexpr,
    SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_ITERS: tl.constexpr,  # BLOCK_K steps in the range
    NUM_STAGES: tl.constexpr,
    FOLD_OP: tl.constexpr = 0,  # DOT_FOLD: mxfp8_fold_steps.OPERAND_CODE
    FOLD_CVT: tl.constexpr = 0,  # DOT_FOLD: mxfp8_fold_steps.CVT_CODE
    FOLD_ACT: tl.constexpr = 0,  # DOT_FOLD: mxfp8_fold_steps.ACT_CODE
    FOLD_WSCALE: tl.constexpr = 0,  # DOT_FOLD: mxfp8_fold_steps.WSCALE_CODE
    FOLD_W_BIAS: tl.constexpr = 127,  # DOT_FOLD: the weight scale byte folded as 2**0
):
    """``acc`` plus the products over ``[k_start, k_start + K_ITERS * BLOCK_K)``.

    The trip count is a constant so the loop has no data-dependent bound (the Triton 3.6 interpreter
    needs numpy < 2.4 for those); DOT_FOLD's loop (``mxfp8_fold_steps.fold_mainloop``, shared with the GEMM)
    takes its bounds at run time.
    """
    BG: tl.constexpr = BLOCK_K // 32
    row_ok = rows < M
    col_ok = cols < N
    a_rows = a_ptr + rows[:, None].to(tl.int64) * stride_am
    w_rows = w_ptr + cols[:, None].to(tl.int64) * stride_wn
    if DOT == 3:
        g_begin = k_start // 32
        folded, _ = fold_mainloop(
            a_rows,
            w_rows,
            as_ptr,
            ws_ptr,
            p_ptr + rows[:, None].to(tl.int64) * stride_am,
            pref_ptr,
            rows,
            cols,
            row_ok,
            col_ok,
            g_begin,
            g_begin + K_ITERS * BG,
            a_group0,
            a_n_groups,
            rows4,
            n_k4,
            n_ws,
            A_LAYOUT,
            SWAP_AB,
            BLOCK_M,
            BLOCK_N,
            BG,
            FOLD_OP,
            FOLD_CVT,
            FOLD_ACT,
            FOLD_WSCALE,
            FOLD_W_BIAS,
            True,  # R % BLOCK_N == 0 and K = SPLIT * K_ITERS * BLOCK_K: every tile is whole
            NUM_STAGES,
        )
        acc = acc + folded
    else:
        step0 = k_start // BLOCK_K
        n_groups = (k_start // BLOCK_K + K_ITERS) * BG  # groups up to the range's end: nothing is masked
        # tl.range(num_stages=) "tries to pipeline most loads in this loop" (Triton 3.6 docstring), the
        # scale loads included; the kernel's num_stages argument pipelines only the loads feeding tl.dot.
        for i in tl.range(0, K_ITERS, num_stages=NUM_STAGES):
            if DOT == 0:
                acc = dq16_step(
                    acc,
                    step0 + i,
                    a_rows,
                    w_rows,
                    as_ptr,
                    ws_ptr,
                    rows,
                    cols,
                    row_ok,
                    col_ok,
                    n_groups,
                    a_group0,
                    a_n_groups,
                    rows4,
                    n_k4,
                    n_ws,
                    A_LAYOUT,
                    BLOCK_M,
                    BLOCK_N,
                    BG,
                    SWAP_AB,
                )
            elif DOT == 1:
                for j in tl.static_range(BG):
                    acc = mma8_group(
                        acc,
                        (step0 + i) * BG + j,
                        True,
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
                g = (step0 + i) * BG + tl.arange(0, BG)
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
                kk = (step0 + i) * BLOCK_K + tl.arange(0, BLOCK_K)
                a = tl.load(a_rows + kk[None, :], mask=row_ok[:, None], other=0)
                w = tl.load(w_rows + kk[None, :], mask=col_ok[:, None], other=0)
                af = _dequantize_f32(a, sa, BLOCK_M, BLOCK_K)
                wf = _dequantize_f32(w, sw, BLOCK_N, BLOCK_K)
                if SWAP_AB:
                    acc = tl.dot(wf, tl.trans(af), acc, input_precision="ieee")
                else:
                    acc = tl.dot(af, tl.trans(wf), acc, input_precision="ieee")
    return acc
