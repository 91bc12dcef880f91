"""The unfused chain's post step as a kernel of its own (device code): R' written bit for bit as the fused
boundary writes it (both use ``hc.tile.post_tile``)."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.hc.tile import load_post_coefs, post_tile

__all__ = ["hc_post_kernel"]


@triton.jit(do_not_specialize=["T"])
def hc_post_kernel(x_ptr, r_ptr, post_ptr, comb_ptr, ro_ptr, T, H, HW_CVT: tl.constexpr, BT: tl.constexpr,
                    BH: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    col_blocks = H // BH
    rows = (pid // col_blocks) * BT + tl.arange(0, BT)
    cols = (pid % col_blocks) * BH + tl.arange(0, BH)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    (p0, p1, p2, p3, c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32,
     c33) = load_post_coefs(post_ptr, comb_ptr, rows64, row_ok)  # fmt: skip
    post_tile(x_ptr, r_ptr, ro_ptr, rows64, cols, row_ok[:, None], H, p0, p1, p2, p3, c00, c01, c02, c03, c10,
              c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33, HW_CVT)  # fmt: skip
