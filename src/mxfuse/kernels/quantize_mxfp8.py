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
    check_mxfp8_pair,
    check_quantize_input,
    empty_mxfp8_pair,
    parse_scale_layout,
    parse_scale_rounding,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
)
from mxfuse.kernels.mxfp8_tile import (
    mxfp8_codes,
    mxfp8_scale_bytes,
    scale_target,
    store_scale_words,
)
from mxfuse.kernels.pdl import OFF, pdl_policy

__all__ = ["quantize_mxfp8"]

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
    PDL_WAIT: tl.constexpr,  # a programmatic dependent: wait for the previous kernel first
    PDL_SIGNAL: tl.constexpr,  # then let the next kernel (a programmatic dependent) launch
):
    if PDL_WAIT:
        tl.extra.cuda.gdc_wait()
    if PDL_SIGNAL:
        tl.extra.cuda.gdc_launch_dependents()
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

    s = mxfp8_scale_bytes(tl.max(bits & 0x7FFFFFFF, axis=3), FLOOR)  # [BLOCK_M, BLOCK_W, 4]
    codes = mxfp8_codes(bits, s, HW_CVT)
    q_offs = r4.to(tl.int64) * K + cols
    tl.store(q_ptr + q_offs, codes, mask=in_bounds)
    store_scale_words(s_ptr, s, rows, words, M, rows_padded, K // 32, n_words, LAYOUT)


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
    n_words = -(-k // _COLS_PER_WORD)
    s_flat, layout_code, rows_padded = scale_target(scale, m=m, k=k, layout=layout)
    block_m, block_w, num_warps = config or _block_config(rows_padded, n_words)
    n_word_blocks = triton.cdiv(n_words, block_w)
    grid = (triton.cdiv(rows_padded, block_m) * n_word_blocks,)
    pdl = pdl_policy(x.device) if hw_cvt else OFF
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
        PDL_WAIT=pdl.wait,
        PDL_SIGNAL=pdl.signal,
        num_warps=num_warps,
        **({"launch_pdl": True} if pdl.wait else {}),
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
