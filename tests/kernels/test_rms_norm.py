"""The one-launch RMSNorm kernel (``mxfuse.kernels.rms_norm``) on the GPU against a float64 reference.

Metric: every bf16 output within one bf16 ulp of ``bf16(x * rsqrt(mean(x^2) + eps) * w)`` computed in
float64 (the kernel's fp32 sum may round the last bit either way); outputs land in fresh tensors, and a
row the kernel skipped would hold whatever ``torch.empty`` gave, which the ulp check catches (NaN fails).
"""

from __future__ import annotations

import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_ulp_close
from mxfuse.kernels.rms_norm import rms_norm_rows

register(on=("h100", "b200", "gb300", "5090"), gpus=1, est_time=20)


def _reference(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    xd = x.double()
    y = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.double()
    return y.to(torch.bfloat16)


@pytest.mark.parametrize(
    ("shape", "weighted"),
    [((1, 1024), True), ((16, 64, 512), False), ((7, 512), True), ((3, 5, 300), True), ((2048, 1024), True)],
)
def test_rows_match_float64(shape, weighted):
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = (torch.randn(shape, device="cuda", generator=g) * 3).to(torch.bfloat16)
    x[..., 0, :] *= 1e-3  # one tiny row
    w = (torch.rand(shape[-1], device="cuda", generator=g) + 0.5).to(torch.bfloat16) if weighted else None
    got = rms_norm_rows(x, w, eps=1e-6)
    assert got.shape == x.shape and got.dtype == torch.bfloat16
    assert_ulp_close(got, _reference(x, w, 1e-6), max_ulp=1, name=f"rms_norm {shape}")


def test_a_column_slice_is_read_in_place():
    """q_lora and the KV head are column slices of wqkv_a's output: rows strided by its width."""
    g = torch.Generator(device="cuda").manual_seed(5)
    qkv = torch.randn(16, 1536, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.rand(512, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    kv = qkv[:, 1024:]
    got = rms_norm_rows(kv, w, eps=1e-20)
    assert_ulp_close(got, _reference(kv, w, 1e-20), max_ulp=1, name="kv slice")
    assert_ulp_close(rms_norm_rows(kv.contiguous(), w, eps=1e-20), got, max_ulp=0, name="contiguous copy")
