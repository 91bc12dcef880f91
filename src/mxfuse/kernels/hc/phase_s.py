"""The boundary kernel's S items (device code): post' and comb' (Sinkhorn) of a few rows from their
logits. See ``mxfuse.kernels.hc.kernel``."""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.hc.plan import RECORD as PLAN_RECORD

__all__ = ["phase_s"]

RECORD = tl.constexpr(PLAN_RECORD)  # kernels may read only constexpr globals


@triton.jit
def _mix(mix_ptr, rows64, j, ok):
    return tl.load(mix_ptr + rows64 * RECORD + j, mask=ok, other=0.0, cache_modifier=".cg")


@triton.jit
def _softmax4(mix_ptr, rows64, ok, j: tl.constexpr, rs, s2, base_ptr, sk_eps):
    """Row j of comb from its four logits: softmax + eps (the reference's first Sinkhorn step)."""
    l0 = (_mix(mix_ptr, rows64, 8 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 8 + 4 * j)
    l1 = (_mix(mix_ptr, rows64, 9 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 9 + 4 * j)
    l2 = (_mix(mix_ptr, rows64, 10 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 10 + 4 * j)
    l3 = (_mix(mix_ptr, rows64, 11 + 4 * j, ok) * rs) * s2 + tl.load(base_ptr + 11 + 4 * j)
    mx = tl.maximum(tl.maximum(l0, l1), tl.maximum(l2, l3))
    e0 = tl.exp(l0 - mx)
    e1 = tl.exp(l1 - mx)
    e2 = tl.exp(l2 - mx)
    e3 = tl.exp(l3 - mx)
    r = 1.0 / (((e0 + e1) + e2) + e3)
    return e0 * r + sk_eps, e1 * r + sk_eps, e2 * r + sk_eps, e3 * r + sk_eps


@triton.jit
def _norm4(a, b, c, d, eps):
    r = 1.0 / ((((a + b) + c) + d) + eps)
    return a * r, b * r, c * r, d * r


@triton.jit
def phase_s(b, g, mix_ptr, posto_ptr, combo_ptr, scale_ptr, base_ptr, T, H, norm_eps, post_scale, sk_eps,
             sk_iters, BT: tl.constexpr, RS: tl.constexpr):  # fmt: skip
    """post' and comb' of RS rows from their logits. Each of the 16 entries of comb is a [RS] tensor, so
    the row and column sums of Sinkhorn are adds between tensors: no reduction across threads."""
    rows = b * BT + g * RS + tl.arange(0, RS)
    ok = rows < T
    r64 = rows.to(tl.int64)
    ones = tl.full((RS,), 1.0, dtype=tl.float32)
    rs = tl.div_rn(ones, tl.sqrt_rn(tl.div_rn(_mix(mix_ptr, r64, 24, ok), ones * (4 * H)) + norm_eps))
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    for k in tl.static_range(4):
        lg = (_mix(mix_ptr, r64, 4 + k, ok) * rs) * s1 + tl.load(base_ptr + 4 + k)
        tl.store(posto_ptr + r64 * 4 + k, (1.0 / (1.0 + tl.exp(-lg))) * post_scale, mask=ok)
    c00, c01, c02, c03 = _softmax4(mix_ptr, r64, ok, 0, rs, s2, base_ptr, sk_eps)
    c10, c11, c12, c13 = _softmax4(mix_ptr, r64, ok, 1, rs, s2, base_ptr, sk_eps)
    c20, c21, c22, c23 = _softmax4(mix_ptr, r64, ok, 2, rs, s2, base_ptr, sk_eps)
    c30, c31, c32, c33 = _softmax4(mix_ptr, r64, ok, 3, rs, s2, base_ptr, sk_eps)
    c00, c10, c20, c30 = _norm4(c00, c10, c20, c30, sk_eps)
    c01, c11, c21, c31 = _norm4(c01, c11, c21, c31, sk_eps)
    c02, c12, c22, c32 = _norm4(c02, c12, c22, c32, sk_eps)
    c03, c13, c23, c33 = _norm4(c03, c13, c23, c33, sk_eps)
    it = 1
    while it < sk_iters:
        c00, c01, c02, c03 = _norm4(c00, c01, c02, c03, sk_eps)
        c10, c11, c12, c13 = _norm4(c10, c11, c12, c13, sk_eps)
        c20, c21, c22, c23 = _norm4(c20, c21, c22, c23, sk_eps)
        c30, c31, c32, c33 = _norm4(c30, c31, c32, c33, sk_eps)
        c00, c10, c20, c30 = _norm4(c00, c10, c20, c30, sk_eps)
        c01, c11, c21, c31 = _norm4(c01, c11, c21, c31, sk_eps)
        c02, c12, c22, c32 = _norm4(c02, c12, c22, c32, sk_eps)
        c03, c13, c23, c33 = _norm4(c03, c13, c23, c33, sk_eps)
        it += 1
    o = combo_ptr + r64 * 16
    tl.store(o, c00, mask=ok)
    tl.store(o + 1, c01, mask=ok)
    tl.store(o + 2, c02, mask=ok)
    tl.store(o + 3, c03, mask=ok)
    tl.store(o + 4, c10, mask=ok)
    tl.store(o + 5, c11, mask=ok)
    tl.store(o + 6, c12, mask=ok)
    tl.store(o + 7, c13, mask=ok)
    tl.store(o + 8, c20, mask=ok)
    tl.store(o + 9, c21, mask=ok)
    tl.store(o + 10, c22, mask=ok)
    tl.store(o + 11, c23, mask=ok)
    tl.store(o + 12, c30, mask=ok)
    tl.store(o + 13, c31, mask=ok)
    tl.store(o + 14, c32, mask=ok)
    tl.store(o + 15, c33, mask=ok)
