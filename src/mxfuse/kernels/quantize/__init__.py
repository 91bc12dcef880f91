"""MXFP8 quantize: bf16/fp16/fp32 [M, K] -> an ``MxTensor`` (E4M3 [M, K], UE8M0 scales in a consumer's layout).

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

from mxfuse import MxfuseUnavailableError
from mxfuse.formats import (
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    check_quantize_input,
    mxtensor_out,
    quantize_mxfp8_reference,
    scale_storage_view,
)
from mxfuse.kernels.quantize.launch import launch_quantize

__all__ = ["quantize_mxfp8"]

_MIN_CAPABILITY = (8, 9)  # cvt.rn.satfinite.e4m3x2.f32


def quantize_mxfp8(
    x: torch.Tensor,
    *,
    rounding: ScaleRounding | str | None = None,
    scale_layout: ScaleLayout | str | None = None,
    out: MxTensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> MxTensor:
    """Quantize ``x`` [M, K] to an ``MxTensor``: float8_e4m3fn ``[M, K]`` and its scales in ``scale_layout``.

    Bit-identical to ``quantize_mxfp8_reference`` and writes every byte of both parts, padding included.
    ``rounding`` (default RCEIL) and ``scale_layout`` (default deepgemm) may be left to ``out``: an
    MxTensor (``MxTensor.empty``) or a ``(q, scale)`` tuple (converted once), written without allocating,
    so the call can be captured in a CUDA graph; it is returned. CUDA tensors run the Triton kernel
    (sm_89+, else ``MxfuseUnavailableError``); CPU tensors run the reference. Bad arguments raise
    ValueError or TypeError naming the argument; an empty ``x`` gives an empty MxTensor.
    """
    check_quantize_input(x)
    m, k = x.shape
    if k > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have contiguous rows (stride 1 along K); got strides {tuple(x.stride())}")
    if m > 1 and x.stride(0) < k:
        raise ValueError(
            f"x rows must not overlap (stride along M >= K = {k}); got strides {tuple(x.stride())}"
        )
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"x must be on a CUDA device or the CPU; got {x.device}")
    out = mxtensor_out(out, m=m, k=k, device=x.device, scale_layout=scale_layout, rounding=rounding)
    if m == 0 or k == 0:
        return out
    if x.device.type == "cpu":
        ref_q, ref_scale = quantize_mxfp8_reference(x, rounding=out.rounding, scale_layout=out.scale_layout)
        out.data.copy_(ref_q)
        out.scale_storage().copy_(scale_storage_view(ref_scale, out.spec))
        return out
    capability = torch.cuda.get_device_capability(x.device)
    if capability < _MIN_CAPABILITY:
        sm = f"sm_{capability[0]}{capability[1]}"
        raise MxfuseUnavailableError(
            f"quantize_mxfp8 needs FP8 conversion (cvt.e4m3x2, sm_89+); {x.device} is {sm}"
        )
    with torch.cuda.device(x.device):
        launch_quantize(x, out, hw_cvt=True)
    return out
