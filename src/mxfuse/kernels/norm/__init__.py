"""RMSNorm of each row in one launch: ``y = bf16(x * rsqrt(mean(x^2) + eps) * weight)``, fp32 math, written
as bf16 y and/or as the next GEMM's MXFP8 pair of y.

The decode step's attention core normalises three small tensors a step (q_lora, each head of q, the KV
head); as torch operators each is five to seven launches (casts, square, mean, rsqrt, two multiplies,
the bf16 cast), as this kernel one. q_lora's norm is also a producer: it can write wq_b's MXFP8 input
directly, bit for bit ``quantize_mxfp8`` of the bf16 y it would write (the same ``mxfuse.kernels.mxfp8`` steps as
the quantize kernel, on y's bf16-rounded values).

One program a row, the row in registers as ``[WORDS, 4, 32]`` (scale word, k-group, element; rows up to
16384 wide). The sum of squares is Triton's tree over that tile, not torch's reduction, so y can differ
from the torch formula (``mxfuse.norm.rms_norm_reference``) in the last bit; every path of the decode step
runs this same kernel on CUDA, so fused and unfused stay bit-identical.
"""

from __future__ import annotations

import torch
import triton

from mxfuse.formats import MxTensor
from mxfuse.kernels.mxfp8 import mx_target
from mxfuse.kernels.norm.device import rms_norm_kernel
from mxfuse.kernels.pdl import OFF, pdl_policy

__all__ = [
    "MAX_ROW",
    "check_norm_eps",
    "check_norm_weight",
    "launch_rms_norm",
    "rms_norm_into_cache",
    "rms_norm_rows",
    "rms_norm_rows_and_cache",
]

MAX_ROW = 16384


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> torch.Tensor:
    """bf16 RMSNorm over the last dim of ``x`` (a float tensor on CUDA) with an optional ``weight`` [D];
    a new tensor of ``x``'s shape. A 2-D ``x`` whose rows are strided (a column slice of a larger tensor)
    is read in place."""
    rows = _rows(x)
    check_norm_weight(weight, x)
    check_norm_eps(eps)
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    launch_rms_norm(rows, weight, eps, y=out.view(-1, rows.shape[1]))
    return out


def launch_rms_norm(
    rows: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    y: torch.Tensor | None = None,
    pair: MxTensor | None = None,
    hw_cvt: bool = True,
    lens: torch.Tensor | None = None,
    cache_rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """The kernel over ``rows`` [M, D] (unit column stride) into ``y`` [M, D] bf16 and/or ``pair``, an
    ``[M, D]`` MxTensor (its layout, padding rows and rounding say how its scales are written; its codes
    are stored as uint8 without ``hw_cvt``). With ``lens`` [B], ``y`` is a KV cache [B, capacity, D] and
    row b * S + s goes to ``y[b, lens[b] + s]`` (S = M / B). ``cache_rows`` = (rows2 [M2, D], weight2
    [D], kv [B, capacity, D]) with ``lens``: in the same launch, rows2 normed with weight2 into the cache
    as above (and ``y``, ``pair`` for ``rows`` only, never into a cache). Arguments are validated by the
    caller."""
    count, cols = rows.shape
    q, scale_words, layout_code, rows_padded, floor = (None, None, 1, 0, False)
    if pair is not None:
        q, scale_words, layout_code, rows_padded, floor = mx_target(pair, hw_cvt=hw_cvt)
    first = max(count, rows_padded) if pair is not None else count
    rows2, weight2, kv = cache_rows if cache_rows is not None else (rows, None, None)
    count2 = rows2.shape[0] if cache_rows is not None else 0
    grid = first + count2
    if grid == 0:
        return
    words = triton.next_power_of_2(triton.cdiv(cols, 128))
    dummy = rows
    cache = kv if cache_rows is not None else y
    per_seq, capacity = (1, 0)
    if lens is not None:
        per_seq, capacity = ((count2 if cache_rows is not None else count) // lens.shape[0], cache.shape[1])
    pdl = pdl_policy(rows.device) if hw_cvt else OFF
    rms_norm_kernel[(grid,)](
        rows, dummy if weight is None else weight, dummy if y is None else y, dummy if q is None else q,
        dummy if scale_words is None else scale_words, dummy if lens is None else lens, rows.stride(0), count,
        cols, rows_padded, eps, per_seq, capacity, rows2, dummy if weight2 is None else weight2,
        dummy if kv is None else kv, rows2.stride(0), count2, first,
        HAS_WEIGHT=weight is not None, WRITE_Y=y is not None, WRITE_PAIR=pair is not None, FLOOR=floor,
        HW_CVT=hw_cvt, LAYOUT=layout_code, WORDS=words, TO_CACHE=lens is not None and cache_rows is None,
        PDL_WAIT=pdl.wait, PDL_SIGNAL=pdl.signal, SECOND=cache_rows is not None,
        num_warps=max(1, min(8, words // 2)), **({"launch_pdl": True} if pdl.wait else {}),
    )  # fmt: skip


def rms_norm_into_cache(
    x: torch.Tensor, weight: torch.Tensor | None, *, eps: float, kv: torch.Tensor, lens: torch.Tensor
) -> None:
    """``rms_norm_rows(x, weight)`` written into a KV cache instead of a new tensor: ``x`` [T, D] holds T / B
    new tokens of each of B sequences (sequence-major), ``kv`` [B, capacity, D] bf16 (contiguous) gets
    token s of sequence b at position ``lens[b] + s``; ``lens`` [B] int32/int64 stays on the device (no
    host read, so the call can be captured in a CUDA graph) and a position outside the cache is not
    written. The same bits as ``rms_norm_rows`` then a copy into those rows, in one launch."""
    rows = _rows(x)
    check_norm_weight(weight, x)
    check_norm_eps(eps)
    _check_cache(rows.shape[0], rows.shape[1], x.device, kv, lens)
    launch_rms_norm(rows, weight, eps, y=kv, lens=lens)


def _check_cache(
    count: int, cols: int, device: torch.device, kv: object, lens: object, rows_name: str = "x"
) -> None:
    """ValueError unless ``kv`` is a contiguous bf16 cache [B, capacity, cols] on ``device`` and ``lens``
    an int32/int64 [B] tensor there, B dividing the ``count`` rows written into it."""
    if not isinstance(kv, torch.Tensor) or kv.dim() != 3 or kv.dtype != torch.bfloat16 or kv.shape[2] != cols:
        raise ValueError(f"kv must be a bfloat16 tensor [B, capacity, {cols}]; got {_describe(kv)}")
    if kv.device != device or not kv.is_contiguous():
        raise ValueError(
            f"kv must be contiguous on {device}; got {kv.device}, contiguous={kv.is_contiguous()}"
        )
    b = kv.shape[0]
    if (
        not isinstance(lens, torch.Tensor)
        or lens.shape != (b,)
        or lens.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(f"lens must be an int32 or int64 tensor [{b}]; got {_describe(lens)}")
    if lens.device != device or not lens.is_contiguous():
        raise ValueError(f"lens must be contiguous on {device}; got {lens.device}")
    if b == 0 or count % b:
        raise ValueError(
            f"{rows_name}'s rows (T = {count}) must be a positive multiple of the cache's sequences B = {b}"
        )


def rms_norm_rows_and_cache(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    eps: float,
    kv_x: torch.Tensor,
    kv_weight: torch.Tensor | None,
    kv: torch.Tensor,
    lens: torch.Tensor,
) -> torch.Tensor:
    """``rms_norm_rows(x, weight)`` and ``rms_norm_into_cache(kv_x, kv_weight, kv=kv, lens=lens)`` in one
    launch (the decode step's per-head q norm and its KV norm: two latency-bound launches become one).
    ``x`` and ``kv_x`` must have the same last dim, so each row takes the same tile and operations as in
    a launch of its own: the same bits as the two calls. Returns the first; arguments as those two
    functions take them, checked the same way."""
    rows = _rows(x)
    check_norm_weight(weight, x)
    check_norm_eps(eps)
    rows2 = _rows(kv_x)
    if rows2.shape[1] != rows.shape[1]:
        raise ValueError(
            f"kv_x's last dim must be x's ({rows.shape[1]}): one tile for both; got {rows2.shape[1]}"
        )
    if kv_x.device != x.device:
        raise ValueError(f"kv_x must be on x's device {x.device}; got {kv_x.device}")
    check_norm_weight(kv_weight, kv_x)
    _check_cache(rows2.shape[0], rows2.shape[1], kv_x.device, kv, lens, rows_name="kv_x")
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    launch_rms_norm(
        rows, weight, eps, y=out.view(-1, rows.shape[1]), lens=lens, cache_rows=(rows2, kv_weight, kv)
    )
    return out


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


def _rows(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor; got {getattr(x, 'dtype', type(x))}")
    if x.device.type != "cuda":
        raise ValueError(f"x must be on a CUDA device (the kernel's); got {x.device}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; got a scalar")
    cols = x.shape[-1]
    if not 0 < cols <= MAX_ROW:
        raise ValueError(f"x's last dim must be in 1..{MAX_ROW}; got {cols}")
    return x if x.dim() == 2 and x.stride(-1) == 1 else x.reshape(-1, cols).contiguous()


def check_norm_weight(weight: torch.Tensor | None, x: torch.Tensor) -> None:
    """ValueError unless ``weight`` is None or a contiguous float [D] tensor on ``x``'s device (D = x's last dim)."""
    if weight is None:
        return
    cols = x.shape[-1]
    if not isinstance(weight, torch.Tensor) or weight.shape != (cols,):
        raise ValueError(
            f"weight must be a tensor of shape ({cols},); got {getattr(weight, 'shape', weight)}"
        )
    if weight.device != x.device or not weight.is_floating_point() or not weight.is_contiguous():
        raise ValueError(
            f"weight must be a contiguous float tensor on {x.device}; got {weight.dtype} on {weight.device}"
        )


def check_norm_eps(eps: object) -> None:
    """ValueError unless ``eps`` is a positive float."""
    if not isinstance(eps, float) or not eps > 0:
        raise ValueError(f"eps must be a positive float; got {eps!r}")
