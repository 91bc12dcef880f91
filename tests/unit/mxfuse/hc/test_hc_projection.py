"""``HcProjection``: the mixes' projection weight split once into three bf16 pieces, on the CPU.

The pieces must add up to the fp32 weight exactly (so the tensor-core products are the fp32 products),
``hi`` must be the nearest bf16 (the kernel's own split, which the pieces replace), and a projection is
taken wherever ``fn`` is: the reference path gives the same outputs, a wrong one is refused by name.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hc_inputs import make_inputs

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import hc
from mxfuse.hc import HcProjection

register(on=("cpu",), est_time=3)


def _awkward_weight() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(24, 512, generator=g) * torch.exp2(torch.randint(-60, 60, (24, 512), generator=g).float())
    w[0, :8] = torch.tensor([0.0, -0.0, 1e-40, -3e-42, 1.1754942e-38, 3.0e38, -2.9e38, 1 + 2**-23])
    w[1] = torch.randint(-(2**23), 2**23, (512,), generator=g).float() * 2**-20  # 24 significant bits
    return w


def test_the_pieces_add_up_to_the_weight_exactly_and_hi_is_the_nearest_bf16():
    w = _awkward_weight()
    p = HcProjection.prepare(w)
    assert p.weight is w and p.pieces.shape == (3, 24, 512) and p.pieces.dtype == torch.bfloat16
    total = p.pieces[0].double() + p.pieces[1].double() + p.pieces[2].double()
    # Exact while every piece is a normal bf16 (|w| >= 2^-110); below, each piece is the nearest bf16
    # subnormal (steps of 2^-133), and the zero's sign is not kept.
    normal = w.abs() >= 2.0**-110
    assert_same_bits(total[normal], w.double()[normal], name="hi + mid + lo")
    assert ((total - w.double()).abs()[~normal] <= 2.0**-133).all()
    assert int((~normal).sum()) >= 5  # the zeros and subnormals placed in row 0 are among them
    assert_same_bits(p.pieces[0], w.to(torch.bfloat16), name="hi")


def test_the_reference_path_takes_a_projection_as_it_takes_fn():
    inputs = make_inputs(3, 256, shifted=True, seed=4)
    plain = hc.mhc_boundary(*inputs.args(), **inputs.kwargs())
    step, weights = inputs.args()
    weights = dataclasses.replace(weights, fn=HcProjection.prepare(inputs.fn))
    prepared = hc.mhc_boundary(step, weights, **inputs.kwargs())
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(getattr(prepared, name), getattr(plain, name), name=name)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("not a tensor", TypeError, r"fn must be a torch.Tensor"),
        (torch.zeros(24, 512, dtype=torch.float16), ValueError, r"fn must be a contiguous 2-D float32"),
        (torch.zeros(2, 24, 512), ValueError, r"fn must be a contiguous 2-D float32"),
        (torch.zeros(512, 24).t(), ValueError, r"fn must be a contiguous 2-D float32"),
    ],
)
def test_prepare_refuses_what_is_not_a_weight(value, error, match):
    with pytest.raises(error, match=match):
        HcProjection.prepare(value)


def test_pieces_that_do_not_fit_the_weight_are_refused():
    w = torch.zeros(24, 512)
    with pytest.raises(ValueError, match=r"HcProjection.pieces must be contiguous bfloat16 \[3, 24, 512\]"):
        HcProjection(w, torch.zeros(3, 24, 512))
    with pytest.raises(ValueError, match=r"HcProjection.pieces"):
        HcProjection(w, torch.zeros(2, 24, 512, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match=r"HcProjection.weight and .pieces must be torch.Tensors"):
        HcProjection(w, None)


def test_a_projection_for_another_hidden_size_is_refused_by_name():
    inputs = make_inputs(2, 256, shifted=False)
    step, weights = inputs.args()
    weights = dataclasses.replace(weights, fn=HcProjection.prepare(torch.zeros(24, 4 * 384)))
    with pytest.raises(ValueError, match=r"^fn"):
        hc.mhc_boundary(step, weights, **inputs.kwargs())
