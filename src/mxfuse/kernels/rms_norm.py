"""RMSNorm of each row into bf16 in one launch: ``bf16(x * rsqrt(mean(x^2) + eps) * weight)``, fp32 math.

The decode step's attention core normalises three small tensors a step (q_lora, each head of q, the KV
head); as torch operators each is five to seven launches (casts, square, mean, rsqrt, two multiplies,
the bf16 cast), as this kernel one. One program a row, the row in registers (rows up to 16384 wide).
The sum of squares is Triton's tree over the row, not torch's reduction, so the result can differ from
``mxfuse.models.dsv41.attention.rms_norm``'s CPU formula in the last bit of a bf16 output; every path of
the step runs this same kernel on CUDA, so fused and unfused stay bit-identical.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["MAX_ROW", "rms_norm_rows"]

MAX_ROW = 16384


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, out_ptr, stride_x, stride_out, cols, eps,
    HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    inside = offs < cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(x * x, axis=0) / cols
    y = x * (1.0 / tl.sqrt_rn(mean + eps))
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, y.to(tl.bfloat16), mask=inside)


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (a float tensor on CUDA) with an optional ``weight`` [D];
    returns a new bf16 tensor of ``x``'s shape. A 2-D ``x`` whose rows are strided (a column slice of a
    larger tensor) is read in place."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor; got {getattr(x, 'dtype', type(x))}")
    if x.device.type != "cuda":
        raise ValueError(f"x must be on a CUDA device (the kernel's); got {x.device}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; got a scalar")
    cols = x.shape[-1]
    if not 0 < cols <= MAX_ROW:
        raise ValueError(f"x's last dim must be in 1..{MAX_ROW}; got {cols}")
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or weight.shape != (cols,):
            raise ValueError(
                f"weight must be a tensor of shape ({cols},); got {getattr(weight, 'shape', weight)}"
            )
        if weight.device != x.device or not weight.is_floating_point():
            raise ValueError(
                f"weight must be a float tensor on {x.device}; got {weight.dtype} on {weight.device}"
            )
        weight = weight.contiguous()
    if not isinstance(eps, float) or not eps > 0:
        raise ValueError(f"eps must be a positive float; got {eps!r}")
    rows_view = x if x.dim() == 2 and x.stride(-1) == 1 else x.reshape(-1, cols).contiguous()
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    _launch(rows_view, weight, out.view(-1, cols), eps)
    return out


def _launch(rows: torch.Tensor, weight: torch.Tensor | None, out: torch.Tensor, eps: float) -> None:
    """The kernel over ``rows`` [R, D] (unit column stride) into contiguous ``out`` [R, D] bf16."""
    count, cols = rows.shape
    if count == 0:
        return
    block = triton.next_power_of_2(cols)
    _rms_norm_kernel[(count,)](
        rows, weight if weight is not None else rows, out, rows.stride(0), cols, cols, eps,
        HAS_WEIGHT=weight is not None, BLOCK=block, num_warps=max(1, min(8, block // 256)),
    )  # fmt: skip
