"""``MxTensor``: the MXFP8 operand value, checked once where it is built, and ``as_mxtensor``, the one
place a plain ``(q, scale)`` tuple becomes one (its layout given, or told from the scale's dtype and rank).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.formats import (
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    as_mxtensor,
    dequantize_mxfp8,
    empty_mxfp8_pair,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
)
from mxfuse.formats import mxtensor as mxtensor_module

register(on=("cpu",), est_time=2)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
# (layout, rows) -> scale rows held, padding included
PADDED = {
    ("e8m0", 5): 5,
    ("deepgemm", 5): 8,
    ("deepgemm", 8): 8,
    ("swizzled_128x4", 5): 128,
    ("swizzled_128x4", 129): 256,
}


def _pair(m: int = 5, k: int = 288, layout: str = "deepgemm", rounding: str = "rceil"):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m * k))
    return quantize_mxfp8_reference(x, rounding=rounding, scale_layout=layout)


@pytest.mark.parametrize(("layout", "m"), list(PADDED), ids=[f"{lay} M={m}" for lay, m in PADDED])
def test_an_mxtensor_knows_its_layout_shape_and_padding(layout, m):
    q, s = _pair(m, 288, layout, "floor")
    mx = MxTensor(q, s, layout, "floor")
    assert mx.data is q and mx.scale is s
    assert mx.scale_layout is ScaleLayout(layout) and mx.rounding is ScaleRounding.FLOOR
    assert mx.shape == (m, 288) and mx.device == q.device
    assert mx.rows_padded == PADDED[(layout, m)] and mx.padding_rows == PADDED[(layout, m)] - m
    assert mx.spec == scale_spec(m, 288, scale_layout=layout)
    assert_same_bits(mx.scale_storage(), scale_storage_view(s, mx.spec), name="scale storage")
    assert mx.scale_bytes().dtype == torch.uint8
    assert_same_bits(mx.dequantize(), dequantize_mxfp8(q, s, scale_layout=layout), name="dequantized")
    assert f"{layout} scales" in repr(mx) and "floor" in repr(mx)


def test_an_mxtensor_is_frozen():
    mx = MxTensor(*_pair(), "deepgemm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        mx.scale_layout = ScaleLayout.E8M0  # type: ignore[misc]


def test_rounding_is_optional_and_can_be_recorded():
    q, s = _pair()
    mx = MxTensor(q, s, ScaleLayout.DEEPGEMM)
    assert mx.rounding is None and "unknown" in repr(mx)
    again = mx.with_rounding("rceil")
    assert again.rounding is ScaleRounding.RCEIL and again.data is q and again.scale is s


@pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"), reason="this torch has no float8_e8m0fnu")
def test_e8m0fnu_scales_are_kept_as_their_bytes():
    q, s = _pair(layout="e8m0")
    mx = MxTensor(q, s.view(torch.float8_e8m0fnu), "e8m0")
    assert mx.scale.dtype == torch.uint8
    assert_same_bits(mx.scale, s, name="scale")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_allocates_the_layout_exactly(layout):
    mx = MxTensor.empty(5, 288, scale_layout=layout, device="cpu")
    spec = scale_spec(5, 288, scale_layout=layout)
    assert mx.data.dtype == torch.float8_e4m3fn and mx.data.shape == (5, 288) and mx.data.is_contiguous()
    assert (mx.scale.dtype, tuple(mx.scale.shape), mx.scale.stride()) == (spec.dtype, spec.shape, spec.stride)
    assert mx.scale_storage().numel() == spec.storage_numel
    assert mx.rounding is ScaleRounding.RCEIL
    assert MxTensor.empty(0, 64, scale_layout=layout, rounding=None, device="cpu").rounding is None


def _bad_parts():
    q, s = _pair(4, 256, "deepgemm")
    e8 = _pair(4, 256, "e8m0")[1]
    return [
        (
            "data not a tensor",
            (q.tolist(), s, "deepgemm"),
            TypeError,
            r"MxTensor.data must be a torch.Tensor",
        ),
        (
            "data bf16",
            (q.to(torch.bfloat16), s, "deepgemm"),
            ValueError,
            r"MxTensor.data must be a 2-D float8",
        ),
        ("data 3-D", (q.view(2, 2, 256), s, "deepgemm"), ValueError, r"MxTensor.data must be a 2-D float8"),
        ("K not a multiple of 32", (q[:, :48], s, "deepgemm"), ValueError, r"MxTensor.data.shape\[1\] \(K\)"),
        (
            "data strided",
            (q.t().contiguous().t(), s, "deepgemm"),
            ValueError,
            "MxTensor.data must be contiguous",
        ),
        (
            "scale in another layout",
            (q, e8, "deepgemm"),
            ValueError,
            r"MxTensor.scale must have dtype torch.int32",
        ),
        ("scale short", (q, s[:2], "deepgemm"), ValueError, r"MxTensor.scale must have shape"),
        (
            "scale on another device",
            (q, s.to("meta"), "deepgemm"),
            ValueError,
            r"MxTensor.scale must be on cpu",
        ),
        ("scale not a tensor", (q, None, "deepgemm"), ValueError, r"MxTensor.scale must be a torch.Tensor"),
        ("unknown layout", (q, s, "row"), ValueError, "scale_layout must be one of"),
        ("unknown rounding", (q, s, "deepgemm", "ceil"), ValueError, "rounding must be one of"),
    ]


@pytest.mark.parametrize(("name", "args", "error", "match"), _bad_parts(), ids=[c[0] for c in _bad_parts()])
def test_bad_parts_are_refused_naming_the_field(name, args, error, match):
    with pytest.raises(error, match=match):
        MxTensor(*args)


def test_the_checks_run_once_where_the_value_is_built(monkeypatch):
    calls = []
    check = mxtensor_module.check_mxfp8_parts
    monkeypatch.setattr(
        mxtensor_module, "check_mxfp8_parts", lambda *a, **k: calls.append(1) or check(*a, **k)
    )
    mx = MxTensor(*_pair(), "deepgemm")
    assert len(calls) == 1
    assert as_mxtensor(mx) is mx and as_mxtensor(mx, scale_layout="deepgemm", argument="out") is mx
    mx.with_rounding("floor")
    MxTensor.empty(3, 64, scale_layout="e8m0", device="cpu")
    assert len(calls) == 1
    as_mxtensor(_pair(), argument="a")
    assert len(calls) == 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_tuple_becomes_an_mxtensor_with_its_layout_told_apart(layout):
    q, s = _pair(layout=layout)
    mx = as_mxtensor((q, s), rounding="rceil")
    assert mx.scale_layout is ScaleLayout(layout) and mx.data is q and mx.rounding is ScaleRounding.RCEIL
    assert as_mxtensor([q, s], scale_layout=layout).scale_layout is ScaleLayout(layout)


def _bad_values():
    q, s = _pair(4, 256, "deepgemm")
    return [
        ("not a pair", dict(value=q), TypeError, r"a must be an MxTensor or a pair"),
        ("three parts", dict(value=(q, s, s)), TypeError, r"a must be an MxTensor or a pair"),
        ("q bf16", dict(value=(q.to(torch.bfloat16), s)), ValueError, r"a\[0\] must be a 2-D float8"),
        ("scale int64", dict(value=(q, s.long())), ValueError, r"a\[1\] must be int32 \[M, ceil\(K/128\)\]"),
        ("scale not a tensor", dict(value=(q, 3)), TypeError, r"a\[1\] must be a torch.Tensor"),
        (
            "layout given, scale in another",
            dict(value=(q, s), scale_layout="e8m0"),
            ValueError,
            r"a\[1\] must have dtype",
        ),
        (
            "an MxTensor in another layout",
            dict(value=MxTensor(q, s, "deepgemm"), scale_layout="e8m0"),
            ValueError,
            "a holds deepgemm scales; e8m0 scales are required here",
        ),
        ("argument named", dict(value=q, argument="out_pair"), TypeError, r"out_pair must be an MxTensor"),
    ]


@pytest.mark.parametrize(
    ("name", "kwargs", "error", "match"), _bad_values(), ids=[c[0] for c in _bad_values()]
)
def test_as_mxtensor_refuses_naming_the_argument(name, kwargs, error, match):
    with pytest.raises(error, match=match):
        as_mxtensor(**kwargs)


def test_an_empty_pair_from_the_tuple_allocator_converts():
    mx = as_mxtensor(empty_mxfp8_pair(5, 288, scale_layout="swizzled_128x4", device="cpu"))
    assert mx.scale_layout is ScaleLayout.SWIZZLED_128X4 and mx.padding_rows == 123
