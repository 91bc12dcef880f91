"""The quantize kernel's logic on CPU: the Triton interpreter against the reference, and the launcher.

The interpreter runs in a child process (``interpreter.run_interpreted``), which quantizes every case
below into poisoned buffers; this process compares what came back with the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter import run_interpreted

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.formats import (
    MxTensor,
    empty_mxfp8_pair,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
)
from mxfuse.kernels import quantize_mxfp8

register(on=("cpu",), est_time=40)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
ROUNDINGS = ("rceil", "floor")
POISONS = (0xA5, 0x5A)  # two different fills: a byte left unwritten differs from the reference in one run

_WORKER = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels.quantize.launch import launch_quantize, quantize_mxfp8_kernel
cases, poisons = torch.load(sys.argv[1])
results = {"interpreted": type(quantize_mxfp8_kernel).__name__}
for name, x, rounding, layout in cases:
    m, k = x.shape
    for poison in poisons:
        out = MxTensor.empty(m, k, scale_layout=layout, rounding=rounding, device="cpu")
        out.data.view(torch.uint8).fill_(poison)
        out.scale_bytes().fill_(poison)
        launch_quantize(x, out, hw_cvt=False)
        results[(name, rounding, layout, poison)] = (out.data.view(torch.uint8), out.scale_bytes())
torch.save(results, sys.argv[2])
"""


def _specials() -> torch.Tensor:
    """One fp32 block per row: NaN, -NaN, +-Inf, zeros, subnormal maxima, 448 boundaries, ties."""
    rows = [
        [float("nan"), 1.0],
        [-float("inf"), 2.0],
        [float("inf")],
        [-0.0] * 32,
        [2.0**-149] * 32,
        [224 * 2.0**-149, -(2.0**-145)],  # amax / 448 = 2**-150 exactly: a tie that rounds to 0
        [-225 * 2.0**-149, 2.0**-145],
        [2.0**-126, 2.0**-127],
        [448.0, 1.0625, 1.1875, 2.0**-10, 3 * 2.0**-10, -(2.0**-10), 2.0**-9, -(2.0**-11)],
        [450.0, -449.0, 447.9],
        [510.0, 1.0],
        [1.75, -1.75 * 2**-3],
        [float(np.nextafter(np.float32(1.75), np.float32(2))), 1.0],
        [float(np.finfo(np.float32).max), -1.0],
        [3.0, 0.0],
    ]
    x = torch.zeros(len(rows), 64)
    for i, values in enumerate(rows):
        x[i, : len(values)] = torch.tensor(values)
        x[i, 32:] = torch.linspace(-3, 5, 32) * 2.0 ** (i - 7)  # a finite neighbour block
    x[0, 0] = (
        torch.tensor([0xFFC00000], dtype=torch.int64).to(torch.int32).view(torch.float32)[0]
    )  # negative NaN
    return x


def _patterns(dtype: torch.dtype) -> torch.Tensor:
    """All 65536 bf16 or fp16 bit patterns, 32 to a row."""
    bits = torch.arange(2**16, dtype=torch.int32).to(torch.int16)
    return bits.view(dtype).reshape(-1, 32)


def _gaussian(
    m: int, k: int, dtype: torch.dtype, seed: int, exps: tuple[int, int] = (-30, 30)
) -> torch.Tensor:
    """Gaussian blocks, each at its own power-of-two magnitude drawn from ``exps``."""
    g = torch.Generator().manual_seed(seed)
    exps = torch.randint(*exps, (m, k // 32, 1), generator=g).float()
    x = torch.randn(m, k // 32, 32, generator=g) * torch.exp2(exps)
    return x.reshape(m, k).to(dtype)


def _strided(m: int, k: int) -> torch.Tensor:
    wide = _gaussian(m, k + 96, torch.bfloat16, seed=7)
    return wide[:, 32 : 32 + k]  # row stride k + 96, unit stride along K


INPUTS = {
    "bf16 1x32": lambda: _gaussian(1, 32, torch.bfloat16, 1),
    "bf16 5x288": lambda: _gaussian(5, 288, torch.bfloat16, 2),
    "bf16 9x256 whole scale words": lambda: _gaussian(9, 256, torch.bfloat16, 8),
    "fp16 7x160": lambda: _gaussian(7, 160, torch.float16, 3, exps=(-20, 12)),
    "fp32 130x160": lambda: _gaussian(130, 160, torch.float32, 4),
    "bf16 3x2080 row stride 2176": lambda: _strided(3, 2080),
    "fp32 specials": _specials,
    "bf16 every pattern": lambda: _patterns(torch.bfloat16),
    "fp16 every pattern": lambda: _patterns(torch.float16),
}
CASES = [(name, r, layout) for name in INPUTS for r in ROUNDINGS for layout in LAYOUTS]


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> tuple[dict[str, torch.Tensor], dict]:
    inputs = {name: make() for name, make in INPUTS.items()}

    def cases():
        return [(name, inputs[name], r, layout) for name, r, layout in CASES], POISONS

    return inputs, run_interpreted(tmp_path_factory, "quantize_mxfp8_interpret", _WORKER, cases)


def test_worker_ran_the_interpreter(interpreted):
    _, results = interpreted
    assert results["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("poison", POISONS, ids=[f"poison {p:#04x}" for p in POISONS])
@pytest.mark.parametrize(("name", "rounding", "layout"), CASES, ids=[" ".join(c) for c in CASES])
def test_interpreted_kernel_matches_reference(interpreted, name, rounding, layout, poison):
    inputs, results = interpreted
    x = inputs[name]
    q, scale_bytes = results[(name, rounding, layout, poison)]
    want_q, want_scale = quantize_mxfp8_reference(x, rounding=rounding, scale_layout=layout)
    spec = scale_spec(*x.shape, scale_layout=layout)
    assert_same_bits(q, want_q.view(torch.uint8), name="q")
    assert_same_bits(
        scale_bytes, scale_storage_view(want_scale, spec).view(torch.uint8), name="scale storage"
    )


def test_specials_are_not_trivial():
    """Guard the table above: it must hold NaN blocks, saturating blocks and E4M3 subnormals."""
    q, s = quantize_mxfp8_reference(_specials(), rounding="floor")
    codes = set(q.view(torch.uint8).flatten().tolist())
    assert 255 in s.flatten().tolist() and {0x7F, 0x7E, 0x01, 0x80} <= codes


def test_every_pattern_input_holds_every_pattern():
    assert _patterns(torch.bfloat16).view(torch.int16).flatten().unique().numel() == 2**16


# ---------------------------------------------------------------------------------------------
# The launcher on CPU tensors: the reference, written into caller buffers, padding included.


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_cpu_tensors_go_to_the_reference_into_out(layout, rounding):
    x = _gaussian(6, 288, torch.bfloat16, seed=11)
    want_q, want_s = quantize_mxfp8_reference(x, rounding=rounding, scale_layout=layout)
    spec = scale_spec(6, 288, scale_layout=layout)
    q, s = empty_mxfp8_pair(6, 288, scale_layout=layout, device="cpu")
    q.view(torch.uint8).fill_(0xA5)
    scale_storage_view(s, spec).view(torch.uint8).fill_(0xA5)
    got = quantize_mxfp8(x, rounding=rounding, scale_layout=layout, out=(q, s))
    assert isinstance(got, MxTensor) and got.data is q and got.scale is s
    assert (got.scale_layout.value, got.rounding.value) == (layout, rounding)
    assert_same_bits(q.view(torch.uint8), want_q.view(torch.uint8), name="q")
    assert_same_bits(scale_storage_view(s, spec), scale_storage_view(want_s, spec), name="scale storage")
    fresh = quantize_mxfp8(x, rounding=rounding, scale_layout=layout)
    assert_same_bits(fresh.data.view(torch.uint8), want_q.view(torch.uint8), name="q")
    assert (fresh.scale.dtype, tuple(fresh.scale.shape), fresh.scale.stride()) == (
        spec.dtype,
        spec.shape,
        spec.stride,
    )
    # An MxTensor out knows its layout and rounding: nothing else need be said.
    mx = MxTensor.empty(6, 288, scale_layout=layout, rounding=rounding, device="cpu")
    assert quantize_mxfp8(x, out=mx) is mx
    assert_same_bits(mx.data.view(torch.uint8), want_q.view(torch.uint8), name="q into an MxTensor")
    assert_same_bits(mx.scale_storage(), scale_storage_view(want_s, spec), name="scales into an MxTensor")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(0, 64), (3, 0), (0, 0)])
def test_empty_input_gives_empty_outputs(layout, shape):
    got = quantize_mxfp8(torch.zeros(shape, dtype=torch.bfloat16), scale_layout=layout)
    spec = scale_spec(*shape, scale_layout=layout)
    assert got.shape == shape and tuple(got.scale.shape) == spec.shape and got.scale.dtype == spec.dtype


def _out(layout: str, m: int = 4, k: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    return empty_mxfp8_pair(m, k, scale_layout=layout, device="cpu")


BAD_CALLS = [
    ("x a list", lambda: quantize_mxfp8([[0.0] * 32]), TypeError, "x must be a torch.Tensor"),
    (
        "x int8",
        lambda: quantize_mxfp8(torch.zeros(4, 64, dtype=torch.int8)),
        ValueError,
        "x must be bfloat16",
    ),
    ("x 3-D", lambda: quantize_mxfp8(torch.zeros(2, 4, 64)), ValueError, "x must be 2-D"),
    (
        "K = 48",
        lambda: quantize_mxfp8(torch.zeros(4, 48)),
        ValueError,
        r"x.shape\[1\] \(K\) must be a multiple of 32",
    ),
    (
        "columns not contiguous",
        lambda: quantize_mxfp8(torch.zeros(64, 4).t()),
        ValueError,
        "x must have contiguous rows",
    ),
    (
        "rows overlap",
        lambda: quantize_mxfp8(torch.zeros(256).as_strided((4, 64), (16, 1))),
        ValueError,
        "x rows must not overlap",
    ),
    (
        "unknown rounding",
        lambda: quantize_mxfp8(torch.zeros(4, 64), rounding="ceil"),
        ValueError,
        "rounding must be one of",
    ),
    (
        "unknown layout",
        lambda: quantize_mxfp8(torch.zeros(4, 64), scale_layout="row"),
        ValueError,
        "scale_layout must be one of",
    ),
    (
        "out for another layout",
        lambda: quantize_mxfp8(torch.zeros(4, 64), scale_layout="deepgemm", out=_out("e8m0")),
        ValueError,
        r"out\[1\] must have dtype torch.int32",
    ),
    (
        "out for another shape",
        lambda: quantize_mxfp8(torch.zeros(4, 64), out=_out("deepgemm", m=8)),
        ValueError,
        r"out\[0\] must have shape \(4, 64\)",
    ),
    (
        "out q on another device",
        lambda: quantize_mxfp8(torch.zeros(4, 64), out=(_out("deepgemm")[0].to("meta"), _out("deepgemm")[1])),
        ValueError,
        r"out\[0\] must be on cpu",
    ),
    (
        "out not a pair",
        lambda: quantize_mxfp8(torch.zeros(4, 64), out=_out("deepgemm")[1]),
        TypeError,
        r"out must be an MxTensor or a pair \(fp8 \[M, K\], scale\)",
    ),
    (
        "an MxTensor out for another layout",
        lambda: quantize_mxfp8(
            torch.zeros(4, 64),
            scale_layout="e8m0",
            out=MxTensor.empty(4, 64, scale_layout="deepgemm", device="cpu"),
        ),
        ValueError,
        "out holds deepgemm scales; e8m0 scales are required here",
    ),
    (
        "an MxTensor out for another rounding",
        lambda: quantize_mxfp8(
            torch.zeros(4, 64), rounding="floor", out=MxTensor.empty(4, 64, scale_layout="e8m0", device="cpu")
        ),
        ValueError,
        r"rounding='floor' disagrees with out, an MxTensor for rceil scales",
    ),
    (
        "an MxTensor out for another shape",
        lambda: quantize_mxfp8(
            torch.zeros(4, 64), out=MxTensor.empty(4, 96, scale_layout="e8m0", device="cpu")
        ),
        ValueError,
        r"out must have shape \(4, 64\); got \(4, 96\)",
    ),
    (
        "x on a device with no kernel",
        lambda: quantize_mxfp8(torch.zeros(4, 64, device="meta")),
        ValueError,
        "x must be on a CUDA device or the CPU",
    ),
]


@pytest.mark.parametrize(("name", "call", "error", "match"), BAD_CALLS, ids=[r[0] for r in BAD_CALLS])
def test_quantize_mxfp8_rejects(name, call, error, match):
    with pytest.raises(error, match=match):
        call()
