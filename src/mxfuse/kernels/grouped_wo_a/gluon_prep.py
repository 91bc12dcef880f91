"""The first launch of the Gluon grouped wo_a (Triton, device code): each token's activation ``[G*r]``
dequantized to bf16 once per call, and the exact z of tokens whose scales leave bf16's exact window.

The Gluon decode GEMM's first launch (``mxfuse.kernels.gemm.gluon_prep``) per token, over the whole row of
G groups: ``dequantize_row_bf16`` writes ``a16[t]`` (exact for scale bytes in ``[W_LO, W_HI]``, NaN for
0xFF) and flags the token when a block with nonzero codes has its byte outside; a flagged token's z is
computed here, group by group, by ``exact_product_row`` (fp32 sums of the 32-block products with the two
powers of two applied as exact factors) and written, rounded to bf16, to ``exact[t, g*R:(g+1)*R]``.
The Gluon kernel's epilogue takes a flagged token's values from there instead of its accumulator, then
writes z and the pair from them as from any other token: one writer per output byte.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.gluon_prep import dequantize_row_bf16, exact_product_row

__all__ = ["wo_a_gluon_prep_kernel"]


@triton.jit(do_not_specialize=["T", "rows4", "n_k4"])
def wo_a_gluon_prep_kernel(
    a_ptr,  # E4M3 [T, G*r], rows stride_at apart
    as_ptr,  # uint8 view of a's scale storage
    a16_ptr,  # bf16 [T, G*r] contiguous: written, each 128 columns in the Gluon mainloop's operand order
    skip_ptr,  # int32 [T]: written, 1 where the row left the window
    w_ptr,  # E4M3 [G, R, r] contiguous (read for flagged tokens only)
    ws_ptr,  # uint8 [G, r/32, R]: the weight's scales, K-group-major per group
    exact_ptr,  # bf16 [T, G*R]: flagged tokens' z written here
    T,
    G,
    R,
    K,  # r
    stride_at,
    rows4,  # align(T, 4): deepgemm word stride of a's scales
    n_k4,  # align(G*r/32, 4) / 4: swizzled tile stride of a's scales
    A_LAYOUT: tl.constexpr,
    BLOCK_G: tl.constexpr,  # 32-wide groups per step of the dequantization
    BLOCK_FN: tl.constexpr,  # weight rows per step of the exact rows
):
    t = tl.program_id(0)
    groups_k = K // 32
    row_groups = G * groups_k
    a_row = a_ptr + t.to(tl.int64) * stride_at
    # r is a multiple of 128: every group's columns are whole 128-wide steps of the operand order.
    flagged = dequantize_row_bf16(a_row, as_ptr, a16_ptr + t.to(tl.int64) * (G * K), t, row_groups, row_groups,
                                  rows4, n_k4, A_LAYOUT, BLOCK_G)  # fmt: skip
    tl.store(skip_ptr + t, flagged)
    if flagged != 0:
        # Pointers advance group by group (64-bit pointer arithmetic, no int32 product of G, R and r).
        w_group = w_ptr
        ws_group = ws_ptr
        exact_row = exact_ptr + t.to(tl.int64) * (G * R)
        for g in range(0, G):
            exact_product_row(a_row + g * K, as_ptr, w_group, ws_group, exact_row + g * R, t, R, K, g * groups_k,
                              row_groups, rows4, n_k4, A_LAYOUT, BLOCK_FN)  # fmt: skip
            w_group += R * K
            ws_group += groups_k * R
