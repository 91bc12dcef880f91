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
def _load4(mix_ptr, rows64, ok, base_ptr, j0: tl.constexpr):
    """Logits j0 .. j0 + 3 of the rows and their four ``base`` values, as loaded."""
    return (
        _mix(mix_ptr, rows64, j0, ok), _mix(mix_ptr, rows64, j0 + 1, ok), _mix(mix_ptr, rows64, j0 + 2, ok),
        _mix(mix_ptr, rows64, j0 + 3, ok), tl.load(base_ptr + j0), tl.load(base_ptr + j0 + 1),
        tl.load(base_ptr + j0 + 2), tl.load(base_ptr + j0 + 3),
    )  # fmt: skip


@triton.jit
def _softmax4(m0, m1, m2, m3, b0, b1, b2, b3, rs, s2, sk_eps):
    """A row of comb from its four logits ``m`` and bases ``b``: softmax + eps (the reference's first
    Sinkhorn step)."""
    l0 = (m0 * rs) * s2 + b0
    l1 = (m1 * rs) * s2 + b1
    l2 = (m2 * rs) * s2 + b2
    l3 = (m3 * rs) * s2 + b3
    mx = tl.maximum(tl.maximum(l0, l1), tl.maximum(l2, l3))
    e0 = tl.exp(l0 - mx)
    e1 = tl.exp(l1 - mx)
    e2 = tl.exp(l2 - mx)
    e3 = tl.exp(l3 - mx)
    r = 1.0 / (((e0 + e1) + e2) + e3)
    return e0 * r + sk_eps, e1 * r + sk_eps, e2 * r + sk_eps, e3 * r + sk_eps


@triton.jit
def _post(m, b, rs, s1, post_scale):
    """One post' value from its logit ``m`` and base ``b``."""
    return (1.0 / (1.0 + tl.exp(-((m * rs) * s1 + b)))) * post_scale


@triton.jit
def _norm4(a, b, c, d, eps):
    r = 1.0 / ((((a + b) + c) + d) + eps)
    return a * r, b * r, c * r, d * r


@triton.jit
def phase_s(b, g, mix_ptr, posto_ptr, combo_ptr, scale_ptr, base_ptr, T, H, norm_eps, post_scale, sk_eps,
             sk_iters, BT: tl.constexpr, RS: tl.constexpr):  # fmt: skip
    """post' and comb' of RS rows from their logits. Each of the 16 entries of comb is a [RS] tensor, so
    the row and column sums of Sinkhorn are adds between tensors: no reduction across threads.

    Every load comes before the first store: a load after a store to memory it may alias is not moved
    above it, so loads between the stores would each wait a round trip to L2 of their own."""
    rows = b * BT + g * RS + tl.arange(0, RS)
    ok = rows < T
    r64 = rows.to(tl.int64)
    ones = tl.full((RS,), 1.0, dtype=tl.float32)
    sumsq = _mix(mix_ptr, r64, 24, ok)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    p0, p1, p2, p3, pb0, pb1, pb2, pb3 = _load4(mix_ptr, r64, ok, base_ptr, 4)
    m00, m01, m02, m03, b00, b01, b02, b03 = _load4(mix_ptr, r64, ok, base_ptr, 8)
    m10, m11, m12, m13, b10, b11, b12, b13 = _load4(mix_ptr, r64, ok, base_ptr, 12)
    m20, m21, m22, m23, b20, b21, b22, b23 = _load4(mix_ptr, r64, ok, base_ptr, 16)
    m30, m31, m32, m33, b30, b31, b32, b33 = _load4(mix_ptr, r64, ok, base_ptr, 20)
    rs = tl.div_rn(ones, tl.sqrt_rn(tl.div_rn(sumsq, ones * (4 * H)) + norm_eps))
    post0 = _post(p0, pb0, rs, s1, post_scale)
    post1 = _post(p1, pb1, rs, s1, post_scale)
    post2 = _post(p2, pb2, rs, s1, post_scale)
    post3 = _post(p3, pb3, rs, s1, post_scale)
    c00, c01, c02, c03 = _softmax4(m00, m01, m02, m03, b00, b01, b02, b03, rs, s2, sk_eps)
    c10, c11, c12, c13 = _softmax4(m10, m11, m12, m13, b10, b11, b12, b13, rs, s2, sk_eps)
    c20, c21, c22, c23 = _softmax4(m20, m21, m22, m23, b20, b21, b22, b23, rs, s2, sk_eps)
    c30, c31, c32, c33 = _softmax4(m30, m31, m32, m33, b30, b31, b32, b33, rs, s2, sk_eps)
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
    po = posto_ptr + r64 * 4
    tl.store(po, post0, mask=ok)
    tl.store(po + 1, post1, mask=ok)
    tl.store(po + 2, post2, mask=ok)
    tl.store(po + 3, post3, mask=ok)
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
