"""Triton building blocks that consume MXFP8 operands: decode, activation scale loads, the K mainloop.

A GEMM whose operands are MXFP8 (``A`` rows: activations, any of the three scale layouts; ``W`` rows: a
prepared weight with one E8M0 byte per row and 32 K) computes ``acc[m, n] += sum_k deq(A)[m, k] *
deq(W)[n, k]`` in fp32 with ``mxfp8_mainloop``. The grouped wo_a projection uses it; any MXFP8 GEMM over
``[M, K] x [N, K]`` tiles can.

The scales are exact powers of two, so dequantization ``e4m3 * 2**(s - 127)`` is exact in fp32 for
every scale byte. Three ways to take the dot product (``DOT``):

* ``DOT_BF16`` (GPU default): both operands dequantized in registers to bf16, then one bf16 ``tl.dot``
  per ``BLOCK_K`` with fp32 accumulation. Exact dequantization whenever the scale byte is in [3, 254]:
  ``e4m3 * 2**(s - 127)`` has at most 4 significant bits; its smallest step ``2**(s - 136)`` is on bf16's
  grid (down to ``2**-133``) for ``s >= 3``, and for ``s >= 247`` a value is either exact or beyond
  bf16's and fp32's shared range alike (both give Inf). Blocks with ``s <= 2`` (block maxima below
  ``2**-116``) lose their bits below ``2**-133``. Products of two bf16 are exact in fp32.
* ``DOT_FP8``: one fp8 ``tl.dot`` per 32-wide K block (``BLOCK_K == 32``), its fp32 result multiplied by
  the two scales and added to ``acc``. Hopper's fp8 MMA adds its 32 products with fewer than 24 bits
  (DeepSeek-V3 report, section 3.3.2: about 14), so this is the less precise mode; it avoids the
  per-element dequantization of the weight, which is what the small-M (weight-streaming) case pays for.
* ``DOT_F32``: operands decoded bit by bit to fp32 and multiplied with an IEEE fp32 ``tl.dot``. Slow on a
  GPU; it is the mode the Triton interpreter runs exactly (the interpreter multiplies bf16 as raw
  integers and reads E4M3 0x7F as 480, not NaN), used by the CPU tests.

A NaN element or a NaN scale (0xFF) makes the dequantized value NaN, so every output it touches is NaN.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "DOT_BF16",
    "DOT_CODE",
    "DOT_F32",
    "DOT_FP8",
    "e4m3_bits_to_f32",
    "e8m0_to_f32",
    "load_scale_bytes",
    "mxfp8_mainloop",
]

DOT_BF16 = 0
DOT_FP8 = 1
DOT_F32 = 2
DOT_CODE = {"bf16": DOT_BF16, "fp8": DOT_FP8, "fp32": DOT_F32}


@triton.jit
def e8m0_to_f32(s):
    """float32 ``2**(s - 127)`` of int32 scale bytes: 0 is the subnormal ``2**-127``, 0xFF is NaN."""
    bits = tl.where(s == 0, 0x00400000, s << 23)
    bits = tl.where(s == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e4m3_bits_to_f32(code):
    """float32 values of E4M3 codes (uint8), decoded with integer arithmetic (exact in the interpreter).

    Normal codes rebias the exponent 7 -> 127; subnormal codes are ``m * 2**-9``; 0x7F / 0xFF are NaN.
    """
    c = code.to(tl.int32) & 0xFF
    mag = c & 0x7F
    sign = (c & 0x80) << 24
    normal = (mag + (120 << 3)) << 20  # (exponent + 120) << 23 | mantissa << 20
    subnormal = ((mag & 7).to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True)
    bits = tl.where(mag < 8, subnormal, normal) | sign
    bits = tl.where(mag == 0x7F, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def load_scale_bytes(s_ptr, rows, groups, M, rows_padded, n_groups, LAYOUT: tl.constexpr):
    """int32 ``[ROWS, GROUPS]`` scale bytes of an ``[M, 32 * n_groups]`` MXFP8 activation.

    ``s_ptr`` points at the scale storage as bytes; ``LAYOUT`` is ``mxfp8_tile.LAYOUT_CODE`` (0 e8m0,
    1 deepgemm with ``rows_padded = align(M, 4)`` rows per word column, 2 swizzled_128x4). Rows at or
    past ``M`` read 0.
    """
    r = rows[:, None].to(tl.int64)
    g = groups[None, :]
    if LAYOUT == 0:
        offs = r * n_groups + g
    elif LAYOUT == 1:
        # Word p = g // 4 of row r is int32 number p * rows_padded + r; group 4p + j is its byte j.
        offs = ((g // 4) * rows_padded + r) * 4 + g % 4
    else:
        n_words = (n_groups + 3) // 4
        offs = (r // 128) * (n_words * 512) + (g // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + g % 4
    return tl.load(s_ptr + offs, mask=(r < M) & (g < n_groups), other=0).to(tl.int32)


@triton.jit
def _dequantize(x, s, HW_CVT: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """float32 ``[ROWS, BLOCK_K]`` of E4M3 ``x`` under int32 scale bytes ``s`` ``[ROWS, BLOCK_K // 32]``."""
    if HW_CVT:
        xf = x.to(tl.float32)
    else:
        xf = e4m3_bits_to_f32(x)
    xf = tl.reshape(xf, (ROWS, BLOCK_K // 32, 32)) * e8m0_to_f32(s)[:, :, None]
    return tl.reshape(xf, (ROWS, BLOCK_K))


@triton.jit
def mxfp8_mainloop(
    acc,  # fp32 [BLOCK_M, BLOCK_N]
    a_ptr,  # A (m, k) at a_ptr + m * stride_am + k: float8e4nv, or its uint8 view without HW_CVT
    a_s_ptr,  # A's scale storage as bytes (load_scale_bytes)
    w_ptr,  # W (n, k) at w_ptr + n * stride_wn + k, same dtype rule as A
    w_s_ptr,  # W's scale byte (n, k // 32) at w_s_ptr + n * stride_wsn + (k // 32) * stride_wsk
    rows,  # [BLOCK_M] row indices of A
    cols,  # [BLOCK_N] row indices of W
    M,
    N,
    k_start,  # first K of the range, a multiple of BLOCK_K
    a_group0,  # scale-group index of A's column 0 (A may be a column slice of wider rows)
    a_rows_padded,
    a_n_groups,  # scale groups per row of the whole A
    stride_am,
    stride_wn,
    stride_wsn,
    stride_wsk,
    A_LAYOUT: tl.constexpr,
    DOT: tl.constexpr,  # DOT_BF16 | DOT_FP8 (BLOCK_K == 32, HW_CVT) | DOT_F32
    HW_CVT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_ITERS: tl.constexpr,  # K blocks in the range: a constant trip count (see below)
    NUM_STAGES: tl.constexpr,
):
    """``acc + deq(A)[rows, K range] @ deq(W)[cols, K range].T`` in fp32 (see the module docstring).

    The range is ``[k_start, k_start + K_ITERS * BLOCK_K)``. Its length is a constant because the Triton
    interpreter (with numpy >= 2.4) cannot run a loop whose bounds are runtime values.
    """
    kk = tl.arange(0, BLOCK_K)
    gg = tl.arange(0, BLOCK_K // 32)
    row_ok = (rows < M)[:, None]
    col_ok = (cols < N)[:, None]
    a_rows = a_ptr + rows[:, None].to(tl.int64) * stride_am
    w_rows = w_ptr + cols[:, None].to(tl.int64) * stride_wn
    ws_rows = w_s_ptr + cols[:, None].to(tl.int64) * stride_wsn
    # tl.range(num_stages=) "tries to pipeline most loads in this loop" (Triton 3.6 docstring), the
    # scale loads included; the kernel's num_stages argument pipelines only the loads feeding tl.dot.
    for i in tl.range(0, K_ITERS, num_stages=NUM_STAGES):
        k0 = k_start + i * BLOCK_K
        a = tl.load(a_rows + (k0 + kk)[None, :], mask=row_ok, other=0)
        w = tl.load(w_rows + (k0 + kk)[None, :], mask=col_ok, other=0)
        groups = k0 // 32 + gg
        sa = load_scale_bytes(a_s_ptr, rows, a_group0 + groups, M, a_rows_padded, a_n_groups, A_LAYOUT)
        sw = tl.load(ws_rows + groups[None, :] * stride_wsk, mask=col_ok, other=0).to(tl.int32)
        if DOT == 1:
            # Both operands K-major (the weight tile is loaded [BLOCK_N, 32] and transposed as a view):
            # Triton 3.6 lets Hopper's MMA read a transposed shared-memory operand only for 16-bit types;
            # a non-K-major fp8 operand goes through registers and loses its pipelined load.
            part = tl.dot(a, tl.trans(w))
            part = part * e8m0_to_f32(sa)  # [BLOCK_M, 1] broadcast over columns
            acc += part * tl.reshape(e8m0_to_f32(sw), (1, BLOCK_N))
        else:
            af = _dequantize(a, sa, HW_CVT, BLOCK_M, BLOCK_K)
            wf = _dequantize(w, sw, HW_CVT, BLOCK_N, BLOCK_K)
            if DOT == 0:
                acc = tl.dot(af.to(tl.bfloat16), tl.trans(wf.to(tl.bfloat16)), acc)
            else:
                acc = tl.dot(af, tl.trans(wf), acc, input_precision="ieee")
    return acc
