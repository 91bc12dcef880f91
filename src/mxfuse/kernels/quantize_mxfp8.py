"""MXFP8 quantize: bf16/fp16/fp32 [M, K] -> (E4M3 [M, K], UE8M0 scales in a consumer's layout).

One program quantizes a tile of BLOCK_M rows x BLOCK_W * 128 columns, i.e. BLOCK_W packed scale words per
row, so every program owns whole 32-bit scale words and no two programs write the same byte. The
reference is ``mxfuse.formats.quantize_mxfp8_reference``; this kernel is bit-identical to it.

The scale is integer arithmetic on float32 bit patterns: the block maximum is an integer max of
``bits & 0x7FFFFFFF`` (NaN and Inf sort above every finite value, so no float max can drop a NaN), and the
scale exponent is read from its bits, with no division, no log2 and no subnormal arithmetic. Elements are
scaled by an exact power-of-two multiply and rounded to E4M3 one of two ways:
  * ``HW_CVT=True`` (GPUs, sm_89+): ``cvt.rn.satfinite.e4m3x2.f32``. At 16384 x 7168 on an H200 this runs
    at the copy ceiling (84.4 us against 84.7 for a copy of the same bytes);
  * ``HW_CVT=False``: bit arithmetic for normals and the ``+ 2**14`` float add for subnormals, which the
    Triton interpreter runs exactly (its own float8 cast rounds half-up). It costs about twice the
    instructions and is bound by the integer pipe on the GPU (132.5 us), so it serves the CPU test; the
    GPU tests check both against the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mxfuse import MxfuseUnavailableError
from mxfuse.formats import (
    BLOCK_SIZE,
    ScaleLayout,
    ScaleRounding,
    align,
    check_mxfp8_pair,
    check_quantize_input,
    empty_mxfp8_pair,
    parse_scale_layout,
    parse_scale_rounding,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
)

__all__ = ["quantize_mxfp8"]

_LAYOUT_CODE = {ScaleLayout.E8M0: 0, ScaleLayout.DEEPGEMM: 1, ScaleLayout.SWIZZLED_128X4: 2}
_ROWS_ALIGN = {ScaleLayout.E8M0: 1, ScaleLayout.DEEPGEMM: 4, ScaleLayout.SWIZZLED_128X4: 128}
_COLS_PER_WORD = 4 * BLOCK_SIZE  # 128 elements share one packed int32 scale word
_MIN_CAPABILITY = (8, 9)  # cvt.rn.satfinite.e4m3x2.f32


# Shape-dependent integers are not specialized (no "== 1" or divisibility variants): one compile per
# dtype, layout, rounding and block shape. K and the row stride keep their divisibility, which the
# 16-byte loads need.
@triton.jit(do_not_specialize=["M", "rows_padded", "n_words", "n_word_blocks"])
def _quantize_mxfp8_kernel(
    x_ptr,  # [M, K] bf16/fp16/fp32, unit stride along K
    q_ptr,  # [M, K] contiguous: float8e4nv (HW_CVT) or the uint8 view of it
    s_ptr,  # uint8 [M, K/32] (LAYOUT 0), or int32 words: 1 deepgemm, 2 swizzled_128x4, 3 e8m0, K % 128 == 0
    M,
    K,
    stride_xm,
    rows_padded,  # rows whose scales are written: M rounded up to the layout's row alignment
    n_words,  # ceil(K / 128): packed words per row
    n_word_blocks,  # cdiv(n_words, BLOCK_W): programs along K
    FLOOR: tl.constexpr,
    HW_CVT: tl.constexpr,  # hardware fp8 conversion; False: integer rounding (interpreter; also GPU-tested)
    LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    # 1-D grid, K-blocks fastest: neighbouring programs read neighbouring bytes of the same rows.
    pid = tl.program_id(0)
    pid_m = pid // n_word_blocks
    pid_w = pid % n_word_blocks
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    words = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    slot = tl.arange(0, 4)
    lane = tl.arange(0, 32)

    # [BLOCK_M, BLOCK_W, 4, 32]: row, scale word, byte of the word (k-group), element of the group.
    r4 = rows[:, None, None, None]
    cols = words[None, :, None, None] * 128 + slot[None, None, :, None] * 32 + lane[None, None, None, :]
    in_bounds = (r4 < M) & (cols < K)
    # Out-of-bounds elements read 0: padding rows and k-slots get amax 0, hence scale byte 0.
    raw = tl.load(x_ptr + r4.to(tl.int64) * stride_xm + cols, mask=in_bounds, other=0.0)
    if raw.dtype == tl.bfloat16:
        # bf16 is the top half of an fp32: widen by bits (the interpreter's bf16 cast loses subnormals).
        bits = raw.to(tl.uint16, bitcast=True).to(tl.int32) << 16
    else:
        bits = raw.to(tl.float32).to(tl.int32, bitcast=True)
    x = bits.to(tl.float32, bitcast=True)

    amax_bits = tl.max(bits & 0x7FFFFFFF, axis=3)  # [BLOCK_M, BLOCK_W, 4]
    nonfinite = amax_bits >= 0x7F800000
    e = amax_bits >> 23  # biased exponent; 0 for zero and subnormal maxima
    if FLOOR:
        # floor(log2(amax)) - 8 + 127 = e - 135 + 127; subnormal maxima clamp to 0.
        s = tl.minimum(tl.maximum(e - 8, 0), 254)
    else:
        # RCEIL: s = biased_exponent(q) + (mantissa(q) != 0) with q = fp32(amax / 448), 448 = 1.75 * 2**8.
        # For normal amax = 1.f * 2**(e-127), q is a power of two only when 1.f == 1.75 exactly, and no
        # rounding of amax/448 reaches one from above (checked exhaustively over all finite fp32
        # amax against the division), so s = e - 8 + (f > 0x600000), at least 1 while q > 0.
        # Subnormal amax = f * 2**-149 gives q > 0 (hence s = 1) only when f / 448 rounds above 0: f > 224.
        f = amax_bits & 0x7FFFFF
        s = tl.where(e == 0, (f > 224).to(tl.int32), tl.maximum(e - 8 + (f > 0x600000).to(tl.int32), 1))
        s = tl.minimum(s, 254)
    s = tl.where(nonfinite, 255, s)

    # x / 2**(s-127) == x * 2**(127-s) exactly: 2**(127-s) is a normal float32 for s in [0, 253] (bits
    # (254 - s) << 23; finite blocks have s <= 247) and the subnormal 0x00400000 for s = 254.
    # NaN blocks multiply by NaN: every element becomes NaN, which the conversions write as 0x7F.
    inv_bits = tl.where(s == 254, 0x00400000, (254 - s) << 23)
    inv_bits = tl.where(nonfinite, 0x7FC00000, inv_bits)
    v = x * inv_bits.to(tl.float32, bitcast=True)[:, :, :, None]
    q_offs = r4.to(tl.int64) * K + cols
    if HW_CVT:
        # cvt.rn.satfinite.e4m3x2.f32 (sm_89+): nearest-even, saturating to +-448, two per instruction;
        # a NaN input (always the positive canonical NaN after the multiply) gives 0x7F.
        tl.store(q_ptr + q_offs, v.to(tl.float8e4nv), mask=in_bounds)
    else:
        mag = tl.minimum(tl.abs(v), 448.0)  # saturate before rounding, so FLOOR never makes NaN
        mag_bits = mag.to(tl.int32, bitcast=True)
        # Normal E4M3 (mag >= 2**-6): rebias the exponent 127 -> 7 and round the 23-bit mantissa to 3 bits,
        # nearest-even: add 0x7FFFF plus the lowest kept bit, then drop 20 bits. mag <= 448 caps it at 0x7E.
        odd = (mag_bits >> 20) & 1
        normal = (mag_bits - (120 << 23) + 0x7FFFF + odd) >> 20
        # Subnormal E4M3 (steps of 2**-9): 2**14 has an ulp of 2**-9, so the fp32 add rounds mag to the
        # nearest even step, and the bits above 2**14's are the step count 0..8 (8 = 2**-6, the smallest
        # normal).
        subnormal = (mag + 16384.0).to(tl.int32, bitcast=True) - 0x46800000
        code = tl.where(mag_bits < (121 << 23), subnormal, normal) | ((bits >> 24) & 0x80)
        code = tl.where(nonfinite[:, :, :, None], 0x7F, code)
        tl.store(q_ptr + q_offs, code.to(tl.uint8), mask=in_bounds)

    if LAYOUT == 0:
        groups = words[None, :, None] * 4 + slot[None, None, :]
        r3 = rows[:, None, None]
        mask = (r3 < M) & (groups < K // 32)
        tl.store(s_ptr + r3.to(tl.int64) * (K // 32) + groups, s.to(tl.uint8), mask=mask)
    else:
        # Byte j of word p is group 4p + j; the bytes are disjoint, so the sum is an OR.
        word = tl.sum(s << (slot * 8)[None, None, :], axis=2)  # [BLOCK_M, BLOCK_W]
        r2 = rows[:, None].to(tl.int64)
        w2 = words[None, :]
        if LAYOUT == 1:
            offs = r2 + w2 * rows_padded
        elif LAYOUT == 3:
            offs = r2 * n_words + w2  # row-major bytes, four groups at a time
        else:
            offs = (r2 // 128) * (n_words * 128) + w2 * 128 + (r2 % 32) * 4 + (r2 % 128) // 32
        tl.store(s_ptr + offs, word, mask=(r2 < rows_padded) & (w2 < n_words))


def _block_config(rows: int, n_words: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_W, num_warps) for ``rows`` (padded) x ``128 * n_words`` elements.

    Chosen by sweep on an H200, K = 7168, deepgemm scales (benchmarks/NOTES-quantize.md): one scale word
    (128 columns) per program along K beat two or four at every M; large M: 16 rows, 2 warps (84.6 us at
    16384 rows against 85.3 for 16 x 2 words, 4 warps; copy ceiling 84.8); up to 128 rows: 4 rows, 1 warp
    (2.79 us at 128 rows against 2.91, 1.44 against 1.64 at 16), more programs for a latency-bound launch.
    """
    del n_words  # one word per program at every width swept (K = 32 to 7168)
    if rows <= 128:
        return min(4, triton.next_power_of_2(max(rows, 1))), 1, 1
    return 16, 1, 2


def _launch(
    x: torch.Tensor,
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    rounding: ScaleRounding,
    layout: ScaleLayout,
    hw_cvt: bool,
    config: tuple[int, int, int] | None = None,
) -> None:
    """Run the kernel over ``x`` into ``(q, scale)``, both already validated.

    ``hw_cvt=False`` selects the integer E4M3 rounding, the path the Triton interpreter (CPU tensors,
    TRITON_INTERPRET=1) runs bit-exactly; the GPU tests check both paths. ``config`` overrides
    ``_block_config`` (benchmarks sweep it).
    """
    m, k = x.shape
    spec = scale_spec(m, k, scale_layout=layout)
    n_words = -(-k // _COLS_PER_WORD)
    rows_padded = align(m, _ROWS_ALIGN[layout])
    s_flat = scale_storage_view(scale, spec)
    layout_code = _LAYOUT_CODE[layout]
    # Row-major e8m0 rows of a whole number of words are written a word (4 scales) at a time, like the
    # packed layouts: at 16384 x 7168 on an H200 (16 x 256 tiles), 87.6 us against 93.1 with byte stores.
    if layout is ScaleLayout.E8M0 and k % _COLS_PER_WORD == 0 and s_flat.data_ptr() % 4 == 0:
        layout_code = 3
    if layout_code != 0:
        s_flat = s_flat.view(torch.int32)
    block_m, block_w, num_warps = config or _block_config(rows_padded, n_words)
    n_word_blocks = triton.cdiv(n_words, block_w)
    grid = (triton.cdiv(rows_padded, block_m) * n_word_blocks,)
    _quantize_mxfp8_kernel[grid](
        x,
        q if hw_cvt else q.view(torch.uint8),
        s_flat,
        m,
        k,
        x.stride(0),
        rows_padded,
        n_words,
        n_word_blocks,
        FLOOR=rounding is ScaleRounding.FLOOR,
        HW_CVT=hw_cvt,
        LAYOUT=layout_code,
        BLOCK_M=block_m,
        BLOCK_W=block_w,
        num_warps=num_warps,
    )


def quantize_mxfp8(
    x: torch.Tensor,
    *,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
    scale_layout: ScaleLayout | str = ScaleLayout.DEEPGEMM,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` [M, K] to MXFP8 ``(float8_e4m3fn [M, K], scales in scale_layout)``.

    Bit-identical to ``quantize_mxfp8_reference`` and writes every byte of both outputs, padding
    included. With ``out=(q, scale)`` (see ``empty_mxfp8_pair``) it validates both buffers and writes into
    them without allocating, so it can be captured in a CUDA graph. CUDA tensors run the Triton kernel
    (sm_89+, else ``MxfuseUnavailableError``); CPU tensors run the reference. Bad arguments raise
    ValueError or TypeError naming the argument; an empty ``x`` gives empty outputs.
    """
    rounding = parse_scale_rounding(rounding)
    layout = parse_scale_layout(scale_layout)
    check_quantize_input(x)
    m, k = x.shape
    if k > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have contiguous rows (stride 1 along K); got strides {tuple(x.stride())}")
    if m > 1 and x.stride(0) < k:
        raise ValueError(
            f"x rows must not overlap (stride along M >= K = {k}); got strides {tuple(x.stride())}"
        )
    if out is None:
        q, scale = empty_mxfp8_pair(m, k, scale_layout=layout, device=x.device)
    else:
        q, scale = check_mxfp8_pair(out, m=m, k=k, scale_layout=layout, device=x.device)
    if m == 0 or k == 0:
        return q, scale
    if x.device.type == "cpu":
        ref_q, ref_scale = quantize_mxfp8_reference(x, rounding=rounding, scale_layout=layout)
        spec = scale_spec(m, k, scale_layout=layout)
        q.copy_(ref_q)
        scale_storage_view(scale, spec).copy_(scale_storage_view(ref_scale, spec))
        return q, scale
    if x.device.type != "cuda":
        raise ValueError(f"x must be on a CUDA device or the CPU; got {x.device}")
    capability = torch.cuda.get_device_capability(x.device)
    if capability < _MIN_CAPABILITY:
        sm = f"sm_{capability[0]}{capability[1]}"
        raise MxfuseUnavailableError(
            f"quantize_mxfp8 needs FP8 conversion (cvt.e4m3x2, sm_89+); {x.device} is {sm}"
        )
    with torch.cuda.device(x.device):
        _launch(x, q, scale, rounding=rounding, layout=layout, hw_cvt=True)
    return q, scale
