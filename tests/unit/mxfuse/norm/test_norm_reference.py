"""``mxfuse.norm.rms_norm`` on the CPU: the torch formula, the reference pair of its y, what it refuses."""

from __future__ import annotations

import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_same_bits, assert_ulp_close
from mxfuse import witness
from mxfuse.formats import empty_mxfp8_pair, quantize_mxfp8_reference, scale_spec, scale_storage_view
from mxfuse.norm import rms_norm, rms_norm_reference

register(on=("cpu",), est_time=5)


def _x(rows=3, cols=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * 3).to(torch.bfloat16), (
        torch.rand(cols, generator=g) + 0.5
    ).to(torch.bfloat16)


def test_y_is_the_formula_within_one_ulp_of_float64():
    x, w = _x()
    xd = x.double()
    want = (xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6) * w.double()).to(torch.bfloat16)
    out = rms_norm(x, w, eps=1e-6)
    assert out.pair is None
    assert_ulp_close(out.y, want, max_ulp=1, name="y")
    assert_same_bits(out.y, rms_norm_reference(x, w, eps=1e-6), name="y against the reference")


@pytest.mark.parametrize("layout", ["deepgemm", "e8m0", "swizzled_128x4"])
def test_the_pair_is_the_reference_quantization_of_y(layout):
    x, w = _x(rows=5, cols=256, seed=1)
    q, s = empty_mxfp8_pair(5, 256, scale_layout=layout, device="cpu")
    spec = scale_spec(5, 256, scale_layout=layout)
    q.view(torch.uint8).fill_(0xA5)
    scale_storage_view(s, spec).view(torch.uint8).fill_(0xA5)
    with witness.capture() as records:
        out = rms_norm(x, w, eps=1e-6, want_pair=True, scale_layout=layout, rounding="floor", out_pair=(q, s))
    want_q, want_s = quantize_mxfp8_reference(out.y, rounding="floor", scale_layout=layout)
    assert_same_bits(q.view(torch.uint8), want_q.view(torch.uint8), name="codes")
    assert_same_bits(scale_storage_view(s, spec), scale_storage_view(want_s, spec), name="scales")
    assert [(r["path"], r["scale_layout"], r["rows"]) for r in records] == [("norm.reference", layout, 5)]


def test_pair_only_and_a_column_slice():
    wide, _ = _x(rows=4, cols=384, seed=2)
    x = wide[:, 128:]
    out = rms_norm(x, None, eps=1e-6, want_y=False, want_pair=True)
    assert out.y is None
    want = quantize_mxfp8_reference(rms_norm_reference(x, None, eps=1e-6), scale_layout="deepgemm")
    assert_same_bits(out.pair.data.view(torch.uint8), want[0].view(torch.uint8), name="codes")
    assert out.pair.scale_layout.value == "deepgemm" and out.pair.rounding.value == "rceil"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"x": torch.zeros(4, dtype=torch.bfloat16)}, TypeError, "x must be a 2-D floating-point"),
        ({"x": torch.zeros(2, 4, dtype=torch.int32)}, TypeError, "x must be a 2-D floating-point"),
        ({"weight": torch.ones(5)}, ValueError, r"weight must be a tensor of shape \(128,\)"),
        ({"eps": 0.0}, ValueError, "eps must be a positive float"),
        ({"want_y": False}, ValueError, "nothing to write"),
        ({"want_pair": 1}, TypeError, "want_pair must be a bool"),
        ({"x": torch.zeros(2, 100, dtype=torch.bfloat16), "weight": None, "want_pair": True}, ValueError,
         "multiple of 32"),
        ({"out_pair": empty_mxfp8_pair(3, 128, scale_layout="deepgemm", device="cpu")}, ValueError, "want_pair=False"),
        ({"want_pair": True, "out_pair": empty_mxfp8_pair(2, 128, scale_layout="deepgemm", device="cpu")}, ValueError, "out_pair"),
        ({"want_pair": True, "scale_layout": "nvfp4"}, ValueError, "scale_layout"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(kwargs, error, match):
    x, w = _x()
    args = {"x": x, "weight": w, "eps": 1e-6, **kwargs}
    with pytest.raises(error, match=match):
        rms_norm(args.pop("x"), args.pop("weight"), **args)
