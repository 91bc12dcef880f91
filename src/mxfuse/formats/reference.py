"""The MXFP8 reference: E8M0 codecs, quantize and dequantize in plain torch on any device.

Every kernel in mxfuse is tested bit-exact against ``quantize_mxfp8_reference``. It is written for
clarity, in float32, one step per line of docs/mxfp8.md; it is not fast.
"""

from __future__ import annotations

import torch

from mxfuse.formats.config import ScaleLayout, ScaleRounding, parse_scale_layout, parse_scale_rounding
from mxfuse.formats.constants import (
    BLOCK_SIZE,
    E4M3_MAX,
    E4M3_MAX_POW2,
    E4M3_NAN_BYTE,
    E8M0_EXPONENT_BIAS,
    E8M0_MAX_FINITE,
    E8M0_NAN,
    E8M0_ZERO_EXPONENT_VALUE_BITS,
    F32_EXP_MASK,
    F32_MANTISSA_BITS,
    F32_MANTISSA_MASK,
)
from mxfuse.formats.layouts import scale_from_layout, scale_to_layout

__all__ = [
    "INPUT_DTYPES",
    "check_quantize_input",
    "dequantize_mxfp8",
    "e8m0_to_float",
    "float_to_e8m0",
    "quantize_mxfp8_reference",
]

INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

_F32_NAN_BITS = 0x7FC00000


def e8m0_to_float(scale: torch.Tensor) -> torch.Tensor:
    """Decode E8M0 bytes to float32: ``s`` -> 2**(s - 127), 0 -> 2**-127 (an fp32 subnormal), 0xFF -> NaN."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"scale must be a torch.Tensor; got {type(scale).__name__}")
    if scale.dtype != torch.uint8:
        raise ValueError(f"scale must be a uint8 tensor of E8M0 bytes; got {scale.dtype}")
    s = scale.to(torch.int32)
    bits = torch.where(s == 0, E8M0_ZERO_EXPONENT_VALUE_BITS, s << F32_MANTISSA_BITS)
    bits = torch.where(s == E8M0_NAN, _F32_NAN_BITS, bits)
    return bits.view(torch.float32)


def float_to_e8m0(value: torch.Tensor) -> torch.Tensor:
    """Encode float32 values as E8M0 bytes: the largest power of two ``<= value``, by its exact exponent.

    The exponent is clamped to the finite range [2**-127, 2**127] (so zero, negative and values below
    2**-127 give 0); NaN and +-Inf give 0xFF. Powers of two in range round-trip through ``e8m0_to_float``.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"value must be a torch.Tensor; got {type(value).__name__}")
    if value.dtype != torch.float32:
        raise ValueError(f"value must be a float32 tensor; got {value.dtype}")
    # frexp: value = mantissa * 2**exp with mantissa in [0.5, 1), exact for subnormals too.
    _, exp = torch.frexp(value)
    s = (exp.to(torch.int32) - 1 + E8M0_EXPONENT_BIAS).clamp(0, E8M0_MAX_FINITE)
    s = torch.where(value > 0, s, 0)
    s = torch.where(torch.isfinite(value), s, E8M0_NAN)
    return s.to(torch.uint8)


def check_quantize_input(x: object, *, argument: str = "x") -> torch.Tensor:
    """Raise unless ``x`` is an ``[M, K]`` bf16/fp16/fp32 tensor with K a multiple of 32; return it."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise ValueError(f"{argument} must be bfloat16, float16 or float32; got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{argument} must be 2-D [M, K]; got shape {tuple(x.shape)}")
    if x.shape[1] % BLOCK_SIZE:
        raise ValueError(f"{argument}.shape[1] (K) must be a multiple of {BLOCK_SIZE}; got {x.shape[1]}")
    return x


def _block_scales(amax: torch.Tensor, rounding: ScaleRounding) -> torch.Tensor:
    """int32 scale bytes of finite blocks from their float32 maxima (docs/mxfp8.md, word for word)."""
    if rounding is ScaleRounding.RCEIL:
        # Divide by a tensor, not a Python number: CUDA torch turns a scalar divisor into a multiply by
        # fp32(1/448), which misrounds ties such as amax = 224 * 2**-149 (true quotient 2**-150 -> 0).
        q_bits = (amax / torch.full_like(amax, E4M3_MAX)).view(torch.int32)
        exponent = (q_bits >> F32_MANTISSA_BITS) & F32_EXP_MASK
        s = exponent + ((q_bits & F32_MANTISSA_MASK) != 0).to(torch.int32)
    else:
        # floor(log2(amax)) from the exact exponent: frexp's mantissa is in [0.5, 1), so it is exp - 1.
        _, exp = torch.frexp(amax)
        s = exp.to(torch.int32) - 1 - E4M3_MAX_POW2 + E8M0_EXPONENT_BIAS
    s = s.clamp(0, E8M0_MAX_FINITE)
    return torch.where(amax == 0, 0, s)


def quantize_mxfp8_reference(
    x: torch.Tensor,
    *,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
    scale_layout: ScaleLayout | str = ScaleLayout.E8M0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` [M, K] (bf16/fp16/fp32, K % 32 == 0) to ``(float8_e4m3fn [M, K], scales)``.

    Blocks are 32 consecutive elements of a row. The scale byte follows ``rounding`` (see
    ``ScaleRounding``); each element is ``x / 2**(s - 127)`` rounded to nearest-even into E4M3 and
    saturated to +-448. A block holding NaN or +-Inf gets scale 0xFF and all 32 elements NaN (byte 0x7F).
    Scales come in ``scale_layout``, padding zeroed.
    """
    rounding = parse_scale_rounding(rounding)
    layout = parse_scale_layout(scale_layout)
    check_quantize_input(x)
    m, k = x.shape
    blocks = x.to(torch.float32).reshape(m, k // BLOCK_SIZE, BLOCK_SIZE)

    nonfinite = ~torch.isfinite(blocks).all(dim=-1)
    amax = torch.where(nonfinite, 0.0, blocks.abs().amax(dim=-1))
    s = _block_scales(amax, rounding)

    # 2**(s - 127) as float32 bits; s == 0 is the subnormal 2**-127, whose exponent field is 0.
    divisor = torch.where(s > 0, s << F32_MANTISSA_BITS, E8M0_ZERO_EXPONENT_VALUE_BITS).view(torch.float32)
    scaled = blocks / divisor[..., None]
    # The clamp is the saturation: FLOOR scales leave maxima up to 511.99, which a plain cast makes NaN.
    q_bytes = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    q_bytes = torch.where(nonfinite[..., None], E4M3_NAN_BYTE, q_bytes)
    s = torch.where(nonfinite, E8M0_NAN, s).to(torch.uint8)

    q = q_bytes.reshape(m, k).view(torch.float8_e4m3fn)
    return q, scale_to_layout(s, scale_layout=layout)


def dequantize_mxfp8(
    q: torch.Tensor, scale: torch.Tensor, *, scale_layout: ScaleLayout | str
) -> torch.Tensor:
    """``(float8_e4m3fn [M, K], scales in scale_layout)`` -> float32 [M, K]; NaN scales give NaN blocks."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor; got {type(q).__name__}")
    if q.dtype != torch.float8_e4m3fn or q.dim() != 2 or q.shape[1] % BLOCK_SIZE:
        raise ValueError(
            f"q must be a 2-D float8_e4m3fn tensor [M, K] with K a multiple of {BLOCK_SIZE}; "
            f"got {q.dtype} {tuple(q.shape)}"
        )
    m, k = q.shape
    s = scale_from_layout(scale, scale_layout=scale_layout, m=m, k=k)
    if s.device != q.device:
        raise ValueError(f"scale must be on {q.device} like q; got {s.device}")
    factors = e8m0_to_float(s).repeat_interleave(BLOCK_SIZE, dim=1)
    return q.to(torch.float32) * factors
