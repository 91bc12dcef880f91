"""The first launch of the Gluon decode GEMM (Triton, device code): each token's activation dequantized
to bf16 once per call, and the exact fallback for tokens whose scales leave bf16's exact window.

One program per chunk of 1024 K of each token row ``t`` of ``a`` (E4M3 ``[M, K]``, scales in any of the three
layouts), the row's last program to arrive finishing the row:

* ``a16[t, operand_column(k)] = bf16(code * 2**(s - 127))`` (the Gluon kernel's operand order). Exact when the block's scale byte ``s`` lies in the window
  ``[W_LO, W_HI]``: an E4M3 value has 4 significant bits and lies in ``[2**-9, 448]``, so every nonzero
  product is a normal bf16 (``2**(W_LO - 136) >= 2**-126``, ``448 * 2**(W_HI - 127) < 2**128``);
  ``s = 0xFF`` gives NaN (the NaN reaches exactly this token's outputs through the GEMM); a block of
  zero codes is exact (zero) whatever its byte.
* ``skip[t] = 1`` when any other block of the row leaves the window. Such a token is then computed here,
  exactly: ``out[t, n] = sum over groups g, in K order, of (sum of the 32 code products, fp32, a fixed
  tree) * 2**(sa - 127) * 2**(sw - 127)`` with the two powers of two applied as two exact fp32 factors
  (``decode.pow2_product``: their product may leave fp32 while the scaled sum does not). That is the
  rule of the Triton stream kernel; it is slow (one program streams the whole weight for its token) and
  only runs for extreme scale bytes (below 10 or above 246), which real activations do not have. The
  Gluon kernel does not store rows with ``skip[t] != 0``, so the two launches never write one element
  twice, in any order.

``exact_product_row`` and ``dequantize_row_bf16`` are public: the Gluon grouped wo_a's first launch
(``mxfuse.kernels.grouped_wo_a.gluon_prep``) runs them per token and group.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.decode import act_scale_offsets, pow2_product

__all__ = ["W_HI", "W_LO", "dequantize_row_bf16", "exact_product_row", "gluon_prep_kernel", "operand_column"]

# The scale bytes whose E4M3 blocks convert to bf16 exactly (module docstring).
W_LO = 10
W_HI = 246


@triton.jit
def operand_column(k):
    """Where the decode kernel's wgmma reads physical column ``k`` of a 128-wide step: the operand's K
    order (``gluon_decode``), ``l = p0 + 2 p5 + 4 p6 + 8 p1 + 16 p2 + 32 p3 + 64 p4`` for the bits ``p`` of
    ``k mod 128``."""
    p = k % 128
    return k - p + ((p & 1) | ((p >> 4) & 6) | ((p << 2) & 120))


@triton.jit
def _in_window(s, codes_nonzero):
    return (s == 255) | ((s >= 10) & (s <= 246)) | (codes_nonzero == 0)


@triton.jit
def exact_product_row(a_row, as_ptr, w_ptr, ws_ptr, out_row, t, N, K, g_first, row_groups, rows4, n_k4,
                      A_LAYOUT: tl.constexpr, BLOCK_FN: tl.constexpr):  # fmt: skip
    """``out_row[n] = bf16(sum_k a[t, k] * w[n, k])`` for one token and a weight ``[N, K]`` (E4M3, scale
    bytes K-group-major ``ws_ptr[(k // 32) * N + n]``), exactly (module docstring), BLOCK_FN weight rows
    at a time. ``a_row`` points at the token's K = 0, which is its scale group ``g_first`` of
    ``row_groups`` (the whole row's, for the layout's offsets): a slice of a wider row, as the grouped
    wo_a reads one group's."""
    j = tl.arange(0, 32)
    for n0 in range(0, N, BLOCK_FN):
        cols = n0 + tl.arange(0, BLOCK_FN)
        col_ok = cols < N
        acc = tl.zeros([BLOCK_FN, 1], tl.float32)
        for g in range(0, K // 32):
            a = tl.load(a_row + g * 32 + j).to(tl.float32)
            offs = act_scale_offsets(t, g_first + g, row_groups, rows4, n_k4, A_LAYOUT)
            sa = tl.load(as_ptr + offs).to(tl.int32)
            w = tl.load(w_ptr + cols[:, None].to(tl.int64) * K + g * 32 + j[None, :], mask=col_ok[:, None],
                        other=0.0).to(tl.float32)  # fmt: skip
            sw = tl.load(ws_ptr + g * N + cols, mask=col_ok, other=127).to(tl.int32)  # < N * K / 32
            part = tl.sum(w * a[None, :], axis=1)
            f1, f2 = pow2_product(sw, tl.zeros([1], tl.int32) + sa)
            acc += (part[:, None] * f1) * f2
        tl.store(out_row + cols[:, None], acc.to(tl.bfloat16), mask=col_ok[:, None])


@triton.jit
def _dequantize_groups(a_row, as_ptr, a16_row, t, g, n_groups, padded_groups, rows4, n_k4,
                       A_LAYOUT: tl.constexpr):  # fmt: skip
    """Groups ``g`` (a block of 32-wide groups) of token ``t``'s E4M3 row written to ``a16_row`` as bf16
    (exact inside the window, NaN for 0xFF) in the Gluon mainloop's operand order (``operand_column``),
    zeros from ``n_groups`` to ``padded_groups``; per group 1 when it has nonzero codes and its byte
    outside the window (the token must then be computed by ``exact_product_row``), else 0."""
    j = tl.arange(0, 32)
    g_ok = g < n_groups
    s = tl.load(as_ptr + act_scale_offsets(t, g, n_groups, rows4, n_k4, A_LAYOUT), mask=g_ok, other=127)
    s = s.to(tl.int32)
    offs = g[:, None] * 32 + j[None, :]
    codes = tl.load(a_row + offs, mask=g_ok[:, None], other=0.0)
    nonzero = tl.max((codes.to(tl.uint8, bitcast=True) & 0x7F).to(tl.int32), axis=1)
    bits = tl.where(s == 255, 0x7FC00000, s << 23)
    factor = bits.to(tl.float32, bitcast=True)
    value = codes.to(tl.float32) * factor[:, None]
    tl.store(a16_row + operand_column(offs), value.to(tl.bfloat16), mask=(g < padded_groups)[:, None])
    return tl.where(_in_window(s, nonzero), 0, 1)


@triton.jit
def dequantize_row_bf16(a_row, as_ptr, a16_row, t, n_groups, padded_groups, rows4, n_k4, A_LAYOUT: tl.constexpr,
                        BLOCK_G: tl.constexpr):  # fmt: skip
    """Token ``t``'s E4M3 row of ``n_groups`` scale groups written to ``a16_row`` by ``_dequantize_groups``,
    ``BLOCK_G`` groups at a time up to ``padded_groups``; returns 1 when a block with nonzero codes has its
    byte outside the window (the token must then be computed by ``exact_product_row``), else 0."""
    gi = tl.arange(0, BLOCK_G)
    bad = tl.zeros([BLOCK_G], tl.int32)
    for g0 in range(0, padded_groups, BLOCK_G):
        flags = _dequantize_groups(a_row, as_ptr, a16_row, t, g0 + gi, n_groups, padded_groups, rows4, n_k4,
                                   A_LAYOUT)  # fmt: skip
        bad = tl.maximum(bad, flags)
    return tl.max(bad, axis=0)


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def gluon_prep_kernel(
    a_ptr,  # E4M3 [M, K] contiguous
    as_ptr,  # uint8 view of a's scale storage
    a16_ptr,  # bf16 [M, k_padded]: written, each 128 K in the Gluon kernel's operand order
    skip_ptr,  # int32 [M]: written, 1 where the row left the window
    flags_ptr,  # int32 [M, chunks]: each chunk's own flag, written before its ticket
    tickets_ptr,  # int32 [M]: arrival tickets, zero between launches (the last program resets its row's)
    w_ptr,  # E4M3 [N, K] contiguous (read for fallback rows only)
    ws_ptr,  # uint8 [K/32, N]: the weight's scales, K-group-major
    out_ptr,  # bf16 [M, N]: fallback rows written here
    M,
    N,
    K,
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(K/32, 4) / 4: swizzled tile stride
    k_padded,  # K rounded up to 128: a16's row length (zeros past K)
    A_LAYOUT: tl.constexpr,
    BLOCK_G: tl.constexpr,  # 32-wide groups per program: its chunk of the row
    CHUNKS_POW2: tl.constexpr,  # chunks per row, rounded up to a power of two
    BLOCK_FN: tl.constexpr,  # weight rows per step of the fallback
    PDL: tl.constexpr = False,  # a programmatic dependent: wait for the previous kernel, then signal
):
    """Program ``(t, c)``: chunk ``c`` (``BLOCK_G`` groups) of token ``t``'s row, then an arrival ticket;
    the row's last program to arrive (acq_rel, GPU scope) reads every chunk's flag, writes ``skip[t]`` and,
    for a flagged row, computes it exactly. With PDL the program waits for the previous kernel (whose
    output the activation may be) before anything, then lets the Gluon kernel launch: its programs
    start streaming the weight while this launch runs."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0)
    c = tl.program_id(1)
    chunks = tl.num_programs(1)
    n_groups = K // 32
    a_row = a_ptr + t.to(tl.int64) * K
    a16_row = a16_ptr + t.to(tl.int64) * k_padded
    g = c * BLOCK_G + tl.arange(0, BLOCK_G)
    outside = _dequantize_groups(
        a_row, as_ptr, a16_row, t, g, n_groups, k_padded // 32, rows4, n_k4, A_LAYOUT
    )
    tl.store(flags_ptr + t * chunks + c, tl.max(outside, axis=0))
    ticket = tl.atomic_add(tickets_ptr + t, 1, sem="acq_rel", scope="gpu")
    if ticket == chunks - 1:
        tl.atomic_xchg(tickets_ptr + t, 0)
        ci = tl.arange(0, CHUNKS_POW2)
        flags = tl.load(flags_ptr + t * chunks + ci, mask=ci < chunks, other=0, cache_modifier=".cg")
        flagged = tl.max(flags, axis=0)
        tl.store(skip_ptr + t, flagged)
        if flagged != 0:
            exact_product_row(a_row, as_ptr, w_ptr, ws_ptr, out_ptr + t.to(tl.int64) * N, t, N, K, 0, n_groups,
                              rows4, n_k4, A_LAYOUT, BLOCK_FN)  # fmt: skip
