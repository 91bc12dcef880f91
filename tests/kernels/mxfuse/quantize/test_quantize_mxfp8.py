"""The Triton MXFP8 quantize kernel against the reference, bit for bit, on the GPU.

Every output is compared with ``assert_same_bits`` over the whole storage the kernel owns, padding
included, after filling it with a poison byte: an unwritten byte cannot pass.
"""

from __future__ import annotations

import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import MxfuseUnavailableError
from mxfuse.formats import (
    MxTensor,
    empty_mxfp8_pair,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
)
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.quantize.launch import launch_quantize

register(
    on=("h100", "b200", "gb300", "5090"),
    gpus=1,
    est_time={"h100": 22, "b200": 120, "gb300": 120, "5090": 120},
)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
ROUNDINGS = ("rceil", "floor")
MS = (1, 7, 128, 2048, 4099)
KS = (32, 2080, 7168)


def _input(
    m: int, k: int, dtype: torch.dtype = torch.bfloat16, *, seed: int = 0, exps=(-30, 30)
) -> torch.Tensor:
    """Gaussian blocks at per-block magnitudes, with NaN, Inf, zero and subnormal blocks where they fit."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    scale = torch.exp2(torch.randint(*exps, (m, k // 32, 1), generator=g, device="cuda").float())
    x = (torch.randn(m, k // 32, 32, generator=g, device="cuda") * scale).reshape(m, k)
    flat = x.view(-1)
    n = flat.numel()
    for index, value in ((n // 3, float("nan")), (n // 2 + 5, float("-inf")), (n - 1, float("inf"))):
        if n > 96:
            flat[index] = value
    if m > 4:
        x[3, :32] = 0.0
        x[4, :32] = 2.0**-133  # a bf16-subnormal block: scale from an fp32-subnormal quotient
    return x.to(dtype)


def _poisoned_pair(m: int, k: int, layout: str, poison: int) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = empty_mxfp8_pair(m, k, scale_layout=layout, device="cuda")
    q.view(torch.uint8).fill_(poison)
    scale_storage_view(s, scale_spec(m, k, scale_layout=layout)).view(torch.uint8).fill_(poison)
    return q, s


def _quantize(x: torch.Tensor, rounding: str, layout: str, *, poison: int = 0xA5, hw_cvt: bool = True):
    q, s = _poisoned_pair(*x.shape, layout, poison)
    if hw_cvt:
        got = quantize_mxfp8(x, rounding=rounding, scale_layout=layout, out=(q, s))
        assert got.data is q and got.scale is s
        assert (got.scale_layout.value, got.rounding.value) == (layout, rounding)
    else:
        launch_quantize(x, MxTensor(q, s, layout, rounding), hw_cvt=False)
    torch.cuda.synchronize()
    return q, s


def _assert_matches_reference(x: torch.Tensor, q, s, rounding: str, layout: str) -> None:
    want_q, want_s = quantize_mxfp8_reference(x, rounding=rounding, scale_layout=layout)
    spec = scale_spec(*x.shape, scale_layout=layout)
    assert_same_bits(q.view(torch.uint8), want_q.view(torch.uint8), name="q")
    assert_same_bits(scale_storage_view(s, spec), scale_storage_view(want_s, spec), name="scale storage")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("m", MS)
def test_matches_reference(m, k, rounding, layout):
    x = _input(m, k, seed=m * 7 + k)
    q, s = _quantize(x, rounding, layout)
    _assert_matches_reference(x, q, s, rounding, layout)


@pytest.mark.parametrize("poison", [0xA5, 0x5A, 0x00, 0xFF])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("m", "k"), [(7, 2080), (4099, 2080), (1, 32)])
def test_every_byte_is_written(m, k, layout, poison):
    x = _input(m, k, seed=3)
    q, s = _quantize(x, "rceil", layout, poison=poison)
    _assert_matches_reference(x, q, s, "rceil", layout)


@pytest.mark.parametrize("hw_cvt", [True, False], ids=["hardware cvt", "integer rounding"])
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"]
)
@pytest.mark.parametrize(("m", "k"), [(7, 2080), (2048, 7168)])
def test_input_dtypes_and_both_rounding_paths(m, k, dtype, hw_cvt):
    exps = (-20, 12) if dtype == torch.float16 else (-140, 120)
    x = _input(m, k, dtype, seed=5, exps=exps)
    for rounding in ROUNDINGS:
        for layout in LAYOUTS:
            q, s = _quantize(x, rounding, layout, hw_cvt=hw_cvt)
            _assert_matches_reference(x, q, s, rounding, layout)


def _every_pattern(dtype: torch.dtype) -> torch.Tensor:
    """All 65536 16-bit patterns, 32 to a row; then each alone in a block beside 448 (scale 1)."""
    bits = torch.arange(2**16, dtype=torch.int32, device="cuda").to(torch.int16).view(dtype)
    beside = torch.zeros(2**16, 32, dtype=dtype, device="cuda")
    beside[:, 0] = bits
    beside[:, 1] = 448.0
    return torch.cat([bits.reshape(-1, 32).repeat(1, 16), beside.reshape(-1, 32 * 16)])


@pytest.mark.parametrize("hw_cvt", [True, False], ids=["hardware cvt", "integer rounding"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_every_16_bit_pattern(dtype, hw_cvt):
    x = _every_pattern(dtype)
    for rounding in ROUNDINGS:
        for layout in LAYOUTS:
            q, s = _quantize(x, rounding, layout, hw_cvt=hw_cvt)
            _assert_matches_reference(x, q, s, rounding, layout)


def test_fp32_boundaries():
    """fp32 maxima the 16-bit inputs cannot reach: subnormal quotient ties, the largest float, 2**-149."""
    values = [
        224 * 2.0**-149,
        225 * 2.0**-149,
        2.0**-149,
        2.0**-126,
        3.4028234663852886e38,
        1.75,
        448.0,
        449.0,
        1.75 * (1 + 2.0**-23),
        1.75 * (1 - 2.0**-24),
        511.99,
        -0.0,
    ]
    x = torch.zeros(len(values), 64, device="cuda")
    for i, v in enumerate(values):
        x[i, 0] = v
        x[i, 1:32] = torch.linspace(-1, 1, 31, device="cuda") * v
        x[i, 32] = -v
    for rounding in ROUNDINGS:
        for hw_cvt in (True, False):
            q, s = _quantize(x, rounding, "e8m0", hw_cvt=hw_cvt)
            _assert_matches_reference(x, q, s, rounding, "e8m0")


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_gpu_reference_matches_cpu_reference(rounding):
    """The comparisons above use the reference on the GPU; anchor it to the CPU one."""
    x = _input(2048, 7168, seed=9, exps=(-140, 120))
    gpu_q, gpu_s = quantize_mxfp8_reference(x, rounding=rounding)
    cpu_q, cpu_s = quantize_mxfp8_reference(x.cpu(), rounding=rounding)
    assert_same_bits(gpu_q.cpu().view(torch.uint8), cpu_q.view(torch.uint8), name="q")
    assert_same_bits(gpu_s.cpu(), cpu_s, name="scale")


def test_rows_with_a_larger_stride():
    wide = _input(300, 2080 + 160, seed=4)
    x = wide[:, 64 : 64 + 2080]
    for layout in LAYOUTS:
        q, s = _quantize(x, "rceil", layout)
        _assert_matches_reference(x, q, s, "rceil", layout)


@pytest.mark.parametrize("given", ["tuple", "MxTensor"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_graph_capture_and_replay(layout, given):
    """Into a caller's buffers, a plain tuple or an MxTensor: nothing allocated, nothing synchronised."""
    m, k = 1000, 2080
    x = _input(m, k, seed=1)
    q, s = _poisoned_pair(m, k, layout, 0xA5)
    out = (q, s) if given == "tuple" else MxTensor(q, s, layout, "rceil")
    quantize_mxfp8(x, scale_layout=layout, out=out)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = quantize_mxfp8(x, scale_layout=layout, out=out)
    assert got.data is q and got.scale is s
    assert given == "tuple" or got is out
    for seed in (2, 3):
        x.copy_(_input(m, k, seed=seed))
        q.view(torch.uint8).fill_(0x5A)
        scale_storage_view(s, scale_spec(m, k, scale_layout=layout)).view(torch.uint8).fill_(0x5A)
        graph.replay()
        torch.cuda.synchronize()
        _assert_matches_reference(x, q, s, "rceil", layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(0, 7168), (5, 0)])
def test_empty_input(shape, layout):
    got = quantize_mxfp8(torch.empty(shape, dtype=torch.bfloat16, device="cuda"), scale_layout=layout)
    q, s = got.data, got.scale
    spec = scale_spec(*shape, scale_layout=layout)
    assert q.is_cuda and tuple(q.shape) == shape and tuple(s.shape) == spec.shape and s.dtype == spec.dtype


def test_out_on_another_device_is_rejected():
    x = _input(4, 64)
    out = empty_mxfp8_pair(4, 64, scale_layout="deepgemm", device="cpu")
    with pytest.raises(ValueError, match=r"out\[0\] must be on cuda"):
        quantize_mxfp8(x, out=out)


def test_gpus_without_fp8_conversion_are_refused(monkeypatch):
    x = _input(4, 64)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    with pytest.raises(MxfuseUnavailableError, match=r"needs FP8 conversion .* is sm_86"):
        quantize_mxfp8(x)
