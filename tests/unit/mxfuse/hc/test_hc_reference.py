"""The mHC boundary reference against an independent float64 numpy formulation, and the CPU entry point.

The numpy version computes every step in float64 (exact products and sums, in a different order from
the reference's fp32 ones) and rounds to bf16 where the specification does, by its own arithmetic
(frexp + round-half-even), so it shares no code and no summation order with ``mxfuse.hc``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import numpy as np
import pytest
import torch
from hc_inputs import MODEL_PARAMS, UPSTREAM_PARAMS, make_inputs

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits, assert_ulp_close
from mxfuse import hc, witness
from mxfuse.formats import empty_mxfp8_pair, quantize_mxfp8_reference, scale_spec, scale_storage_view

register(on=("cpu",), est_time=15)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")


# ---------------------------------------------------------------------------------------------
# The independent formulation


def _bf16(v: np.ndarray) -> np.ndarray:
    """float64 -> nearest bf16 value (ties to even), as float64: 8 significant bits."""
    mant, exp = np.frexp(v)
    return np.ldexp(np.round(np.ldexp(mant, 8)), exp - 8)


def _f64(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.double().numpy()


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def numpy_sinkhorn(logits: np.ndarray, eps: float, iters: int) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    c = e / e.sum(-1, keepdims=True) + eps
    c = c / (c.sum(-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdims=True) + eps)
        c = c / (c.sum(-2, keepdims=True) + eps)
    return c


def numpy_boundary(inputs, s: hc.HcParams) -> dict[str, np.ndarray]:
    x, r, post, comb = _f64(inputs.x), _f64(inputs.residual), _f64(inputs.post), _f64(inputs.comb)
    tokens, n, hidden = r.shape
    new_r = _bf16(post[:, :, None] * x[:, None, :] + np.einsum("tjk,tjh->tkh", comb, r))
    flat = new_r.reshape(tokens, n * hidden)
    rs = 1.0 / np.sqrt((flat**2).sum(-1) / (n * hidden) + s.hc_norm_eps)
    scales = np.concatenate([np.full(n, v) for v, k in zip(_f64(inputs.scale), (n, n, n * n), strict=True)
                             for _ in range(k // n)])  # fmt: skip
    m = (flat @ _f64(inputs.fn).T) * rs[:, None] * scales + _f64(inputs.base)
    pre = _sigmoid(m[:, :n]) + s.hc_pre_eps
    new_post = _sigmoid(m[:, n : 2 * n]) * s.hc_post_scale
    new_comb = numpy_sinkhorn(m[:, 2 * n :].reshape(tokens, n, n), s.sinkhorn_eps, s.sinkhorn_iters)
    p = pre if inputs.prev_pre is None else _f64(inputs.prev_pre)
    v = _bf16(np.einsum("ti,tih->th", p, new_r))
    mean_square = (v**2).mean(-1)
    w = _f64(inputs.norm_weight) * s.rms_scale
    y = _bf16(v / np.sqrt(mean_square + s.rms_eps)[:, None] * w)
    return {"residual": new_r, "pre": pre, "post": new_post, "comb": new_comb, "v": v, "y": y}


def _as(t: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(t).to(like.dtype)


# ---------------------------------------------------------------------------------------------
# Reference against numpy


@pytest.mark.parametrize("params", ["upstream", "model"])
@pytest.mark.parametrize("shifted", [False, True], ids=["normal", "shifted"])
@pytest.mark.parametrize(("tokens", "hidden"), [(1, 128), (7, 512), (33, 256)])
def test_reference_matches_float64_numpy(tokens, hidden, shifted, params):
    s = UPSTREAM_PARAMS if params == "upstream" else MODEL_PARAMS
    inputs = make_inputs(tokens, hidden, shifted=shifted, seed=tokens + hidden, params=s)
    ref = hc.mhc_boundary_reference(*inputs.args(), **inputs.kwargs())
    want = numpy_boundary(inputs, s)
    # R' rounds an fp32 sum of five terms once: within one bf16 step of the exactly rounded value.
    assert_ulp_close(ref.residual, _as(want["residual"], ref.residual), max_ulp=1, name="R'")
    # Coefficients: fp32 against float64, per-dtype defaults (rtol 1.3e-6, atol 1e-5).
    assert_close(ref.pre, _as(want["pre"], ref.pre), name="pre")
    assert_close(ref.post, _as(want["post"], ref.post), name="post'")
    assert_close(ref.comb, _as(want["comb"], ref.comb), name="comb'")
    # y: bf16 defaults (rtol 1.6e-2, four bf16 steps; a collapse weight that differs in its last fp32
    # bit can move v, hence y, by one step).
    assert_close(ref.y, _as(want["y"], ref.y), name="y")
    weights = ref.pre if inputs.prev_pre is None else inputs.prev_pre
    assert_close(hc.hc_collapse(ref.residual, weights), _as(want["v"], ref.y), name="collapse v")


@pytest.mark.parametrize("iters", [1, 2, 20])
def test_sinkhorn_ends_on_a_column_normalisation(iters):
    logits = torch.randn(64, 24, generator=torch.Generator().manual_seed(iters))
    params = hc.HcParams(hc_pre_eps=1e-6, hc_post_scale=2.0, sinkhorn_eps=1e-6, sinkhorn_iters=iters)
    pre, post, comb = hc.hc_sinkhorn(logits, params=params)
    want = numpy_sinkhorn(logits[:, 8:].double().numpy().reshape(64, 4, 4), 1e-6, iters)
    assert_close(comb, torch.from_numpy(want).float(), name="comb'")
    # Every column of comb' sums to S / (S + eps) for its sum S before the last step: within 1e-5 of 1
    # once a row step has brought S near 1 (a lone softmax can leave a column nearly empty).
    if iters > 1:
        assert_close(comb.sum(-2), torch.ones(64, 4), rtol=0.0, atol=1e-5, name="column sums")
    assert_close(pre, torch.sigmoid(logits[:, :4]) + 1e-6, name="pre")
    assert_close(post, 2.0 * torch.sigmoid(logits[:, 4:8]), name="post'")


def test_sinkhorn_of_equal_logits_is_uniform():
    params = hc.HcParams(hc_pre_eps=0.0, hc_post_scale=2.0, sinkhorn_eps=0.0, sinkhorn_iters=20)
    _, _, comb = hc.hc_sinkhorn(torch.zeros(2, 24), params=params)
    assert_close(comb, torch.full((2, 4, 4), 0.25), rtol=0.0, atol=0.0, name="comb'")


def test_orderings_differ_only_in_the_collapse_weights():
    normal = make_inputs(5, 256, shifted=False, seed=3)
    shifted = make_inputs(5, 256, shifted=True, seed=3)
    a = hc.mhc_boundary_reference(*normal.args(), **normal.kwargs())
    b = hc.mhc_boundary_reference(*shifted.args(), **shifted.kwargs())
    for name in ("residual", "pre", "post", "comb"):
        assert_same_bits(getattr(b, name), getattr(a, name), name=name)
    s = normal.params
    want_b = hc.rmsnorm(
        hc.hc_collapse(b.residual, shifted.prev_pre), shifted.norm_weight, eps=s.rms_eps, scale=s.rms_scale
    )
    assert_same_bits(b.y, want_b, name="shifted y")
    assert not torch.equal(a.y, b.y)  # the inputs are such that the two orderings differ


def test_post_step_follows_the_specified_fp32_order():
    """R' rounds post*x + comb0*R0 + comb1*R1 + comb2*R2 + comb3*R3 summed left to right in fp32."""
    inputs = make_inputs(4, 128, shifted=False, seed=8)
    r = inputs.residual.float()
    acc = inputs.post[:, :, None] * inputs.x.float()[:, None, :]
    for j in range(4):
        acc = acc + inputs.comb[:, j, :, None] * r[:, j, None, :]
    got = hc.hc_post(inputs.x, inputs.residual, inputs.post, inputs.comb)
    assert_same_bits(got, acc.to(torch.bfloat16), name="R'")


# ---------------------------------------------------------------------------------------------
# The entry point on CPU tensors: the reference, into caller buffers


def _poisoned(tokens: int, hidden: int, layout: str = "deepgemm", *, y=True, pair=True):
    out = hc.empty_hc_boundary_outputs(tokens, hidden, device="cpu", y=y, pair=pair, scale_layout=layout)
    for t in _buffers(out, layout):
        t.view(torch.uint8).fill_(0xA5)
    return out


def _buffers(out: hc.HcBoundaryOutputs, layout: str) -> list[torch.Tensor]:
    tensors = [out.residual, out.pre, out.post, out.comb]
    if out.y is not None:
        tensors.append(out.y)
    if out.pair is not None:
        assert out.pair.scale_layout.value == layout
        tensors += [out.pair.data.view(torch.uint8), out.pair.scale_bytes()]
    return tensors


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shifted", [False, True], ids=["normal", "shifted"])
def test_cpu_entry_point_writes_the_reference_into_out(shifted, layout):
    inputs = make_inputs(6, 256, shifted=shifted, seed=5)
    ref = hc.mhc_boundary_reference(*inputs.args(), **inputs.kwargs(), scale_layout=layout)
    out = _poisoned(6, 256, layout)
    with witness.capture() as records:
        got = hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), scale_layout=layout, out=out)
    assert got is out
    assert [r["path"] for r in records] == ["hc.boundary.reference"]
    assert records[0]["ordering"] == ("shifted" if shifted else "normal")
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(getattr(out, name), getattr(ref, name), name=name)
    q, s = quantize_mxfp8_reference(ref.y, scale_layout=layout)
    spec = scale_spec(6, 256, scale_layout=layout)
    assert_same_bits(out.pair.data.view(torch.uint8), q.view(torch.uint8), name="q")
    assert_same_bits(out.pair.scale_storage(), scale_storage_view(s, spec), name="scales")
    assert out.pair.scale_layout.value == layout and out.pair.rounding.value == "rceil"


def test_outputs_wanted_and_allocated():
    inputs = make_inputs(3, 128, shifted=False)
    both = hc.mhc_boundary(*inputs.args(), **inputs.kwargs())
    assert both.y is not None and both.pair is not None
    only_pair = hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), want_y=False, scale_layout="e8m0")
    assert only_pair.y is None and only_pair.pair.scale.dtype == torch.uint8
    assert only_pair.pair.scale_layout.value == "e8m0"
    assert_same_bits(only_pair.pair.data.view(torch.uint8), both.pair.data.view(torch.uint8), name="q")
    only_y = hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), out=_poisoned(3, 128, pair=False))
    assert only_y.pair is None
    assert_same_bits(only_y.y, both.y, name="y")


def test_residual_may_be_updated_in_place():
    inputs = make_inputs(4, 256, shifted=True, seed=2)
    ref = hc.mhc_boundary_reference(*inputs.args(), **inputs.kwargs())
    out = _poisoned(4, 256)
    out = hc.HcBoundaryOutputs(inputs.residual, out.pre, out.post, out.comb, out.y, out.pair)
    hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), out=out)
    assert_same_bits(inputs.residual, ref.residual, name="R' in place")
    assert_same_bits(out.y, ref.y, name="y")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_tokens_give_empty_outputs(layout):
    inputs = make_inputs(0, 256, shifted=True)
    out = hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), scale_layout=layout)
    spec = scale_spec(0, 256, scale_layout=layout)
    assert tuple(out.residual.shape) == (0, 4, 256) and out.residual.dtype == torch.bfloat16
    assert tuple(out.pre.shape) == (0, 4) and tuple(out.comb.shape) == (0, 4, 4)
    assert tuple(out.y.shape) == (0, 256) and out.pair.shape == (0, 256)
    assert tuple(out.pair.scale.shape) == spec.shape and out.pair.scale.dtype == spec.dtype


@pytest.mark.parametrize("value", [math.nan, math.inf])
@pytest.mark.parametrize("where", ["residual", "x"])
@pytest.mark.parametrize("shifted", [False, True], ids=["normal", "shifted"])
def test_a_non_finite_input_stays_in_its_token(shifted, where, value):
    """NaN: the token's every output is NaN (pair blocks 0xFF). Inf: its coefficients are NaN (the
    mixes meet Inf * 0 and Inf - Inf); y is NaN wherever the math makes it so (all of it in the normal
    ordering; in the shifted one rsqrt(Inf) = 0 zeroes the finite columns). Other tokens never change."""
    inputs = make_inputs(4, 256, shifted=shifted, seed=6)
    clean = hc.mhc_boundary_reference(*inputs.args(), **inputs.kwargs())
    bad = 2
    if where == "x":
        inputs.x[bad, 37] = value
    else:
        inputs.residual[bad, 1, 200] = value
    got = hc.mhc_boundary(*inputs.args(), **inputs.kwargs())
    keep = [0, 1, 3]
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(getattr(got, name)[keep], getattr(clean, name)[keep], name=f"{name}, other tokens")
    for name in ("pre", "post", "comb"):
        assert torch.isnan(getattr(got, name)[bad]).all(), name
    column = 37 if where == "x" else 200
    assert not torch.isfinite(got.residual[bad, :, column]).any()
    y_nan = torch.isnan(got.y[bad])
    scales = got.pair.scale
    if math.isnan(value) or not shifted:
        assert y_nan.all()
        words = scales[bad].to(torch.int64) & 0xFFFFFFFF
        assert (words == 0xFFFFFFFF).all()  # every scale byte of the token 0xFF
    else:
        assert y_nan[column] and not y_nan.all()


# ---------------------------------------------------------------------------------------------
# Bad arguments: a ValueError or TypeError naming the argument, and nothing written


_INPUTS = ("x", "residual", "post", "comb", "prev_pre")
_WEIGHTS = ("fn", "scale", "base", "norm_weight")


def _call(**changes):
    """The fields of a good call's inputs and weights, by name, with ``changes``, and its keywords."""
    inputs = make_inputs(3, 256, shifted=True, seed=1)
    args = {name: getattr(inputs, name) for name in (*_INPUTS, *_WEIGHTS)}
    kwargs = inputs.kwargs()
    kwargs.update(changes.pop("kwargs", {}))
    args.update(changes)
    return args, kwargs


def _boundary(args: dict, kwargs: dict, **more):
    inputs = hc.HcInputs(*(args[n] for n in _INPUTS))
    weights = hc.HcWeights(*(args[n] for n in _WEIGHTS))
    return hc.mhc_boundary(inputs, weights, **kwargs, **more)


def _transposed_residual():
    return torch.zeros(3, 256, 4, dtype=torch.bfloat16).transpose(1, 2)


BAD = [
    ("x a list", {"x": [[0.0]]}, TypeError, "x must be a torch.Tensor"),
    ("x fp32", {"x": torch.zeros(3, 256)}, ValueError, "x must be torch.bfloat16"),
    ("x 3-D", {"x": torch.zeros(3, 1, 256, dtype=torch.bfloat16)}, ValueError, r"x must be 2-D \[T, H\]"),
    ("H = 96", {"x": torch.zeros(3, 96, dtype=torch.bfloat16)}, ValueError, r"x.shape\[1\] \(H\) must be a positive multiple of 128"),
    ("H = 0", {"x": torch.zeros(3, 0, dtype=torch.bfloat16)}, ValueError, r"x.shape\[1\] \(H\)"),
    ("n = 3", {"residual": torch.zeros(3, 3, 256, dtype=torch.bfloat16)}, ValueError, r"residual.shape\[1\] \(n, the number of streams\) must be 4"),
    ("residual for 2 tokens", {"residual": torch.zeros(2, 4, 256, dtype=torch.bfloat16)}, ValueError, r"residual must have shape \[T, n, H\] = \(3, 4, 256\)"),
    ("residual strided", {"residual": _transposed_residual()}, ValueError, "residual must be contiguous"),
    ("residual a tuple", {"residual": (1, 2)}, TypeError, "residual must be a torch.Tensor"),
    ("post bf16", {"post": torch.zeros(3, 4, dtype=torch.bfloat16)}, ValueError, "post must be torch.float32"),
    ("comb [T, 16]", {"comb": torch.zeros(3, 16)}, ValueError, r"comb must have shape \[T, n, n\]"),
    ("prev_pre [T, 5]", {"prev_pre": torch.zeros(3, 5)}, ValueError, r"prev_pre must have shape \[T, n\]"),
    ("fn for another H", {"fn": torch.zeros(24, 4 * 128)}, ValueError, r"fn must have shape \[n\(n\+2\), n\*H\] = \(24, 1024\)"),
    ("fn on meta", {"fn": torch.zeros(24, 1024, device="meta")}, ValueError, "fn must be on cpu"),
    ("scale [4]", {"scale": torch.zeros(4)}, ValueError, r"scale must have shape \[3\]"),
    ("base fp64", {"base": torch.zeros(24, dtype=torch.float64)}, ValueError, "base must be torch.float32"),
    ("norm_weight fp16", {"norm_weight": torch.zeros(256, dtype=torch.float16)}, ValueError, "norm_weight must be torch.bfloat16 or torch.float32"),
    ("params a dict", {"kwargs": {"params": {"rms_eps": 1e-6}}}, TypeError, r"params must be an mxfuse.hc.HcParams \(the boundary's scalar settings\); got dict"),
    ("params None", {"kwargs": {"params": None}}, TypeError, "params must be an mxfuse.hc.HcParams"),
    ("rounding", {"kwargs": {"rounding": "ceil"}}, ValueError, "rounding must be one of"),
    ("scale_layout", {"kwargs": {"scale_layout": "rows"}}, ValueError, "scale_layout must be one of"),
    ("nothing wanted", {"kwargs": {"want_y": False, "want_pair": False}}, ValueError, "at least one of y and the MXFP8 pair"),
    ("want_y not a bool", {"kwargs": {"want_y": 1}}, TypeError, "want_y must be True, False or None"),
    ("fused not a bool", {"kwargs": {"fused": "no"}}, TypeError, "fused must be a bool"),
    ("workspace", {"kwargs": {"workspace": object()}}, TypeError, "workspace must be an HcWorkspace"),
    ("config", {"kwargs": {"config": {}}}, TypeError, "config must be an HcConfig"),
    ("side a stream", {"kwargs": {"side": "stream"}}, TypeError, "side must be an HcSideStream or None; got str"),
    ("config for another H", {"kwargs": {"config": hc.HcConfig(16, 64, 3, 16, 1, 0)}}, ValueError, "block_h \\* steps_a must divide H"),
    ("x on meta", {"x": torch.zeros(3, 256, dtype=torch.bfloat16, device="meta")}, ValueError, "x must be on a CUDA device or the CPU"),
    ("a layout out.pair is not in", {"kwargs": {"scale_layout": "e8m0"}}, ValueError, "out.pair holds deepgemm scales; e8m0 scales are required here"),
    ("a rounding out.pair is not for", {"kwargs": {"rounding": "floor"}}, ValueError, r"rounding='floor' disagrees with out.pair"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "changes", "error", "match"), BAD, ids=[c[0] for c in BAD])
def test_bad_arguments_are_refused_before_anything_is_written(name, changes, error, match):
    args, kwargs = _call(**changes)
    out = None if "want_y" in kwargs else _poisoned(3, 256)
    written = _buffers(out, "deepgemm") if out is not None else []
    snapshot = [t.clone() for t in written]
    with pytest.raises(error, match=match):
        _boundary(args, kwargs, **({} if out is None else {"out": out}))
    for t, b in zip(written, snapshot, strict=True):
        assert_same_bits(t, b, name="an out buffer after a refused call")


def test_a_side_stream_on_the_cpu_runs_the_reference():
    """The CPU has no stream: a side stream of it changes nothing (the reference's bits, its witness)."""
    args, kwargs = _call()
    plain = _boundary(args, kwargs)
    with witness.capture() as records:
        side = _boundary(args, kwargs, side=hc.HcSideStream("cpu"))
    assert [r["path"] for r in records] == ["hc.boundary.reference"]
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(getattr(side, name), getattr(plain, name), name=name)


def test_a_side_stream_takes_a_bool():
    with pytest.raises(TypeError, match="enabled must be a bool; got int"):
        hc.HcSideStream("cpu", enabled=1)
    side = hc.HcSideStream("cpu", enabled=False)
    ran = []
    with side.fork():  # in place on the CPU: nothing left to join
        ran.append(True)
    assert ran and not side.pending


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((("x",), None), "inputs must be an mxfuse.hc.HcInputs; got tuple"),
        ((None, {"fn": 1}), "weights must be an mxfuse.hc.HcWeights; got dict"),
    ],
    ids=["inputs a tuple", "weights a dict"],
)
def test_inputs_and_weights_come_grouped(args, match):
    inputs = make_inputs(3, 256, shifted=True, seed=1)
    good_inputs, good_weights = inputs.args()
    with pytest.raises(TypeError, match=match):
        hc.mhc_boundary(args[0] if args[0] is not None else good_inputs, args[1] or good_weights)


def _replace(out: hc.HcBoundaryOutputs, **fields) -> hc.HcBoundaryOutputs:
    values = {f: getattr(out, f) for f in ("residual", "pre", "post", "comb", "y", "pair")}
    return hc.HcBoundaryOutputs(**{**values, **fields})


def _r_prime_inside_residual(args, good):
    """An R' buffer that starts inside residual's memory but is not residual itself."""
    flat = torch.zeros(4 * 4 * 256, dtype=torch.bfloat16)
    args["residual"] = flat[: 3 * 4 * 256].view(3, 4, 256)
    return _replace(good, residual=flat[256 : 256 + 3 * 4 * 256].view(3, 4, 256))


# (name, out built from (args, valid poisoned outputs), error, match)
BAD_OUT = [
    ("out a dict", lambda args, good: {}, TypeError, "out must be an HcBoundaryOutputs"),
    ("out.residual fp32", lambda a, g: _replace(g, residual=torch.zeros(3, 4, 256)), ValueError, "out.residual must be torch.bfloat16"),
    ("out.pre [T]", lambda a, g: _replace(g, pre=torch.zeros(3)), ValueError, r"out.pre must have shape \[T, n\]"),
    ("out.comb strided", lambda a, g: _replace(g, comb=torch.zeros(3, 4, 4).transpose(1, 2)), ValueError, "out.comb must be contiguous"),
    ("out.y on meta", lambda a, g: _replace(g, y=torch.zeros(3, 256, dtype=torch.bfloat16, device="meta")), ValueError, "out.y must be on cpu"),
    ("out.pair for 2 tokens", lambda a, g: _replace(g, pair=empty_mxfp8_pair(2, 256, scale_layout="e8m0", device="cpu")), ValueError, r"out.pair\[0\] must have shape \(3, 256\)"),
    ("out.pair a list", lambda a, g: _replace(g, pair=[g.pair.data]), TypeError, "out.pair must be an MxTensor or a pair"),
    ("neither y nor pair", lambda a, g: _replace(g, y=None, pair=None), ValueError, "at least one of out.y and out.pair"),
    ("out.y is x", lambda a, g: _replace(g, y=a["x"]), ValueError, "out.y must not overlap x"),
    ("out.post is out.pre", lambda a, g: _replace(g, post=g.pre), ValueError, "out.post must not overlap out.pre"),
    ("out.pair's scales inside out.y", lambda a, g: _replace(g, pair=(g.pair.data, g.y.view(torch.int32).reshape(-1).as_strided((3, 2), (1, 4)))), ValueError, r"out.pair.scale must not overlap out.y"),
    ("R' partly over residual", _r_prime_inside_residual, ValueError, "out.residual must not overlap residual"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "build", "error", "match"), BAD_OUT, ids=[c[0] for c in BAD_OUT])
def test_bad_out_buffers_are_refused_before_anything_is_written(name, build, error, match):
    args, kwargs = _call()
    good = _poisoned(3, 256)
    out = build(args, good)
    written = [t for t in _buffers(good, "deepgemm")]
    snapshot = [t.clone() for t in written]
    with pytest.raises(error, match=match):
        _boundary(args, kwargs, out=out)
    for t, b in zip(written, snapshot, strict=True):
        assert_same_bits(t, b, name="an out buffer after a refused call")


def test_want_flags_must_agree_with_out():
    args, kwargs = _call()
    with pytest.raises(ValueError, match="want_pair=False disagrees with out.pair"):
        _boundary(args, kwargs, want_pair=False, out=_poisoned(3, 256))


# ---------------------------------------------------------------------------------------------
# HcParams: the seven scalars, validated once when made

SCALAR_FIELDS = ("hc_norm_eps", "hc_pre_eps", "hc_post_scale", "sinkhorn_eps", "sinkhorn_iters", "rms_eps", "rms_scale")  # fmt: skip


def test_params_default_to_v4_and_are_what_the_entry_points_default_to():
    assert hc.HcParams() == hc.HcParams(
        hc_norm_eps=1e-6,
        hc_pre_eps=1e-6,
        hc_post_scale=2.0,
        sinkhorn_eps=1e-6,
        sinkhorn_iters=20,
        rms_eps=1e-6,
        rms_scale=1.0,
    )
    assert tuple(f.name for f in dataclasses.fields(hc.HcParams)) == SCALAR_FIELDS
    for entry in (hc.mhc_boundary, hc.mhc_boundary_reference, hc.hc_pre):
        assert inspect.signature(entry).parameters["params"].default == hc.HcParams(), entry.__name__


# (id, fields changed from the defaults, error, match): every message names the field and what it expects.
BAD_PARAMS = [
    ("hc_norm_eps NaN", {"hc_norm_eps": math.nan}, TypeError, r"HcParams.hc_norm_eps must be a finite real number; got nan"),
    ("hc_norm_eps < 0", {"hc_norm_eps": -1e-6}, ValueError, r"HcParams.hc_norm_eps must be >= 0; got -1e-06"),
    ("hc_pre_eps inf", {"hc_pre_eps": math.inf}, TypeError, r"HcParams.hc_pre_eps must be a finite real number; got inf"),
    ("hc_pre_eps < 0", {"hc_pre_eps": -0.5}, ValueError, r"HcParams.hc_pre_eps must be >= 0"),
    ("hc_post_scale a str", {"hc_post_scale": "2"}, TypeError, r"HcParams.hc_post_scale must be a finite real number; got '2'"),
    ("hc_post_scale -inf", {"hc_post_scale": -math.inf}, TypeError, r"HcParams.hc_post_scale must be a finite real number"),
    ("sinkhorn_eps < 0", {"sinkhorn_eps": -1e-6}, ValueError, r"HcParams.sinkhorn_eps must be >= 0"),
    ("sinkhorn_eps None", {"sinkhorn_eps": None}, TypeError, r"HcParams.sinkhorn_eps must be a finite real number; got None"),
    ("sinkhorn_iters 0", {"sinkhorn_iters": 0}, ValueError, r"HcParams.sinkhorn_iters must be >= 1; got 0"),
    ("sinkhorn_iters -3", {"sinkhorn_iters": -3}, ValueError, r"HcParams.sinkhorn_iters must be >= 1"),
    ("sinkhorn_iters 2.5", {"sinkhorn_iters": 2.5}, TypeError, r"HcParams.sinkhorn_iters must be an int; got 2.5"),
    ("sinkhorn_iters 20.0", {"sinkhorn_iters": 20.0}, TypeError, r"HcParams.sinkhorn_iters must be an int"),
    ("sinkhorn_iters True", {"sinkhorn_iters": True}, TypeError, r"HcParams.sinkhorn_iters must be an int; got True"),
    ("rms_eps < 0", {"rms_eps": -1e-20}, ValueError, r"HcParams.rms_eps must be >= 0"),
    ("rms_eps True", {"rms_eps": True}, TypeError, r"HcParams.rms_eps must be a finite real number; got True"),
    ("rms_scale NaN", {"rms_scale": math.nan}, TypeError, r"HcParams.rms_scale must be a finite real number"),
    ("rms_scale a tensor", {"rms_scale": torch.tensor(1.0)}, TypeError, r"HcParams.rms_scale must be a finite real number"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "changes", "error", "match"), BAD_PARAMS, ids=[c[0] for c in BAD_PARAMS])
def test_bad_params_are_refused_naming_the_field(name, changes, error, match):
    with pytest.raises(error, match=match):
        hc.HcParams(**changes)
    with pytest.raises(error, match=match):  # replace() validates the same way
        dataclasses.replace(hc.HcParams(), **changes)


@pytest.mark.parametrize(
    ("changes", "allowed"),
    [
        ({"hc_norm_eps": 0.0, "hc_pre_eps": 0, "sinkhorn_eps": 0.0, "rms_eps": 0.0}, "eps values of 0"),
        ({"hc_post_scale": -2.0, "rms_scale": 0.0}, "scales of any sign"),
        ({"rms_eps": 1e-20, "sinkhorn_iters": 1}, "V4.1-Flash's rms_eps, one Sinkhorn step"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_edge_params_are_accepted(changes, allowed):
    params = hc.HcParams(**changes)
    for field, value in changes.items():
        assert getattr(params, field) == value, allowed


def test_params_hold_python_floats_and_ints():
    """Other real numbers are converted, so equal settings compare and hash equal and the launchers get
    plain Python scalars."""
    params = hc.HcParams(
        hc_norm_eps=np.float32(0.5), hc_post_scale=2, sinkhorn_iters=np.int64(7), rms_scale=1
    )
    assert type(params.hc_norm_eps) is float and params.hc_norm_eps == 0.5
    assert type(params.hc_post_scale) is float and type(params.rms_scale) is float
    assert type(params.sinkhorn_iters) is int and params.sinkhorn_iters == 7
    assert params == hc.HcParams(hc_norm_eps=0.5, hc_post_scale=2.0, sinkhorn_iters=7, rms_scale=1.0)


def test_params_are_frozen_and_hash_by_value():
    params = hc.HcParams(rms_eps=1e-20)
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.rms_eps = 1e-6
    same, other = hc.HcParams(rms_eps=1e-20), hc.HcParams(rms_eps=1e-6)
    assert params == same and hash(params) == hash(same)
    assert params != other and params != dataclasses.asdict(params)
    assert len({params, same, other, hc.HcParams()}) == 2


@pytest.mark.parametrize("field", SCALAR_FIELDS)
def test_the_old_scalar_keywords_are_refused(field):
    """The seven scalars travel only inside ``params``: the entry points no longer take them one by one."""
    args, kwargs = _call()
    value = getattr(hc.HcParams(), field)
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{field}'"):
        _boundary(args, kwargs, **{field: value})
    inputs = hc.HcInputs(*(args[n] for n in _INPUTS))
    weights = hc.HcWeights(*(args[n] for n in _WEIGHTS))
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{field}'"):
        hc.mhc_boundary_reference(inputs, weights, **kwargs, **{field: value})


def test_every_params_field_reaches_the_cpu_boundary():
    """Changing any one field changes the boundary's outputs (nothing is dropped on the way)."""
    inputs = make_inputs(4, 256, shifted=False, seed=9)
    base = hc.mhc_boundary(*inputs.args(), params=hc.HcParams(), want_pair=False)
    changed = {
        "hc_norm_eps": 1.0,
        "hc_pre_eps": 0.25,
        "hc_post_scale": 1.5,
        "sinkhorn_eps": 0.25,
        "sinkhorn_iters": 2,
        "rms_eps": 1.0,
        "rms_scale": 1.5,
    }
    assert tuple(changed) == SCALAR_FIELDS
    for field, value in changed.items():
        params = dataclasses.replace(hc.HcParams(), **{field: value})
        got = hc.mhc_boundary(*inputs.args(), params=params, want_pair=False)
        assert any(
            not torch.equal(getattr(got, k), getattr(base, k)) for k in ("pre", "post", "comb", "y")
        ), field
