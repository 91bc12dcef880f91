"""The mHC reference against math written here, on inputs where the fp32 order and the eps placement show.

``mxfuse.hc.reference`` promises more than closeness: R' and the collapse v are fp32 sums in a fixed order
(products rounded before each add; R' adds ``post * x`` first, then the streams in index order; v sums the
streams in index order), which the kernels follow bit for bit; RMSNorm and the mixes put their eps inside
the square root. Random inputs cannot tell those choices apart (a different order moves a few fp32 bits
and almost never a bf16 output). So the inputs here are built to make them visible:

* order tokens: in every element two streams carry +-2**e (e in 8..20, a residual's massive activations)
  that cancel exactly, and the small terms are added before or after them depending on the order, so an
  order other than the documented one loses their low bits (or all of them) in the fp32 sum;
* a zero token (no eps, or eps outside the square root, makes it NaN or Inf), a tiny token (2**-100:
  mean squares far below eps, where eps decides the scale) and tokens whose mean square is about eps.

Everything expected is computed in numpy, not with ``mxfuse``: the fp32 sums in the documented order
(numpy float32, whose operations round as IEEE says), bf16 by round-to-nearest-even on the float64 bits,
and the rest in float64. Checks: R' and v bit for bit; y within one bf16 step of the float64 value of
its formula (the reference's fp32 rsqrt and products are not correctly rounded, so that is the bound);
pre, post' and comb' within the fp32 defaults of float64. The inputs are checked too: the other orders
and the exactly rounded sum must differ from the documented order's bf16 result in many elements.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hc_checks import assert_boundary_matches
from hc_inputs import MODEL_PARAMS, REVEALING_ROWS, REVEALING_TOKENS, UPSTREAM_PARAMS, revealing_inputs

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits, assert_ulp_close
from mxfuse import hc
from mxfuse.formats import quantize_mxfp8_reference

register(on=("cpu",), est_time=5)

N = 4
HIDDEN = 256
F32 = np.float32

ROWS, TOKENS = REVEALING_ROWS, REVEALING_TOKENS


def make_inputs(params: hc.HcParams, *, seed: int) -> dict[str, torch.Tensor]:
    """The revealing batch (tests/support/hc_inputs.py) as a dict; ``prev_pre`` always present."""
    return revealing_inputs(params, seed=seed, shifted=True, hidden=HIDDEN).tensors()


def _reference(inputs: dict[str, torch.Tensor], params: hc.HcParams, *, shifted: bool):
    prev_pre = inputs["prev_pre"] if shifted else None
    step = hc.HcInputs(inputs["x"], inputs["residual"], inputs["post"], inputs["comb"], prev_pre)
    weights = hc.HcWeights(*(inputs[k] for k in ("fn", "scale", "base", "norm_weight")))
    return hc.mhc_boundary_reference(step, weights, params=params, want_pair=False)


# ---------------------------------------------------------------------------------------------
# The formulation written here


def _np(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy()


def post_fp32(x: np.ndarray, r: np.ndarray, post: np.ndarray, comb: np.ndarray, order: str) -> np.ndarray:
    """R' before rounding to bf16: an fp32 sum of fp32 products in ``order``.

    "documented": post*x, then comb[j]*R[j] for j = 0..3; "streams_first": the streams, then post*x;
    "reversed": post*x, then the streams 3..0.
    """
    terms = [post[:, :, None] * x[:, None, :]] + [comb[:, j, :, None] * r[:, j, None, :] for j in range(N)]
    if order == "streams_first":
        terms = terms[1:] + terms[:1]
    elif order == "reversed":
        terms = terms[:1] + terms[:0:-1]
    acc = terms[0]
    for term in terms[1:]:
        acc = acc + term  # float32 + float32: one IEEE rounding
    assert acc.dtype == F32
    return acc


def collapse_fp32(r_prime: np.ndarray, weights: np.ndarray, order: str) -> np.ndarray:
    """v before rounding: fp32 sum of weights[i] * R'[i], streams in index order ("documented") or 3..0."""
    streams = range(N) if order == "documented" else range(N - 1, -1, -1)
    terms = [weights[:, i, None] * r_prime[:, i, :] for i in streams]
    acc = terms[0]
    for term in terms[1:]:
        acc = acc + term
    return acc


def exact_post(x, r, post, comb) -> np.ndarray:
    x, r, post, comb = (a.astype(np.float64) for a in (x, r, post, comb))
    return post[:, :, None] * x[:, None, :] + np.einsum("tjk,tjh->tkh", comb, r)


def mixes_f64(r_prime: np.ndarray, inputs, s) -> np.ndarray:
    flat = r_prime.reshape(TOKENS, N * HIDDEN).astype(np.float64)
    fn = inputs["fn"].double().numpy()
    scale, base = inputs["scale"].double().numpy(), inputs["base"].double().numpy()
    per_logit = np.concatenate([np.full(N, scale[0]), np.full(N, scale[1]), np.full(N * N, scale[2])])
    norm = 1.0 / np.sqrt((flat**2).sum(-1) / (N * HIDDEN) + s.hc_norm_eps)
    return (flat @ fn.T) * norm[:, None] * per_logit + base


def coefficients_f64(m: np.ndarray, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pre = 1.0 / (1.0 + np.exp(-m[:, :N])) + s.hc_pre_eps
    post = s.hc_post_scale / (1.0 + np.exp(-m[:, N : 2 * N]))
    logits = m[:, 2 * N :].reshape(TOKENS, N, N)
    c = np.exp(logits - logits.max(-1, keepdims=True))
    c = c / c.sum(-1, keepdims=True) + s.sinkhorn_eps
    c = c / (c.sum(-2, keepdims=True) + s.sinkhorn_eps)
    for _ in range(s.sinkhorn_iters - 1):
        c = c / (c.sum(-1, keepdims=True) + s.sinkhorn_eps)
        c = c / (c.sum(-2, keepdims=True) + s.sinkhorn_eps)
    return pre, post, c


def rmsnorm_f64(v: np.ndarray, weight: np.ndarray, s) -> np.ndarray:
    v = v.astype(np.float64)
    return v / np.sqrt((v**2).mean(-1) + s.rms_eps)[:, None] * (weight.astype(np.float64) * s.rms_scale)


def _round_bf16(v: np.ndarray) -> np.ndarray:
    """float64 -> the nearest bf16 value (ties to even), as float64 (normal range only)."""
    mant, exp = np.frexp(v)
    return np.ldexp(np.round(np.ldexp(mant, 8)), exp - 8)


def _bf16_from_fp32(acc: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(acc).to(torch.bfloat16)  # fp32 -> bf16: one rounding to nearest even


def _differing(a: np.ndarray, b: np.ndarray) -> int:
    return int((_round_bf16(a.astype(np.float64)) != _round_bf16(b.astype(np.float64))).sum())


# ---------------------------------------------------------------------------------------------
# Tests

PARAMS = {"model": MODEL_PARAMS, "upstream": UPSTREAM_PARAMS}


@pytest.mark.parametrize("params", PARAMS)
def test_the_inputs_make_the_order_visible_in_bf16(params):
    """Without this, the bit checks below could pass for any order."""
    inputs = make_inputs(PARAMS[params], seed=1)
    x, r, post, comb = (_np(inputs[k]) for k in ("x", "residual", "post", "comb"))
    rows = ROWS["post_order"]
    documented = post_fp32(x, r, post, comb, "documented")[rows]
    elements = documented.size
    for order in ("streams_first", "reversed"):
        other = post_fp32(x, r, post, comb, order)[rows]
        assert _differing(other, documented) > elements // 20, order
    assert _differing(exact_post(x, r, post, comb)[rows], documented) > elements // 20
    rows = ROWS["collapse_order"]
    weights = _np(inputs["prev_pre"])
    v = collapse_fp32(r, weights, "documented")[rows]
    assert _differing(collapse_fp32(r, weights, "reversed")[rows], v) > v.size // 20
    assert _differing(np.einsum("ti,tih->th", weights.astype(np.float64), r.astype(np.float64))[rows], v) > (
        v.size // 20
    )


@pytest.mark.parametrize("shifted", [False, True], ids=["normal", "shifted"])
@pytest.mark.parametrize("params", PARAMS)
def test_reference_matches_the_math_written_here(params, shifted):
    s = PARAMS[params]
    inputs = make_inputs(s, seed=2)
    ref = _reference(inputs, s, shifted=shifted)
    x, r, post, comb = (_np(inputs[k]) for k in ("x", "residual", "post", "comb"))

    # R': bit for bit the documented fp32 order, rounded once to bf16.
    r_prime = _bf16_from_fp32(post_fp32(x, r, post, comb, "documented"))
    assert_same_bits(ref.residual, r_prime, name="R'")

    # Coefficients: float64 of the formula, within the fp32 defaults.
    m = mixes_f64(r_prime.double().numpy(), inputs, s)
    pre, new_post, new_comb = coefficients_f64(m, s)
    assert_close(ref.pre, torch.from_numpy(pre).float(), name="pre")
    assert_close(ref.post, torch.from_numpy(new_post).float(), name="post'")
    assert_close(ref.comb, torch.from_numpy(new_comb).float(), name="comb'")

    # v: bit for bit the documented order, with the weights the reference collapses with.
    weights = inputs["prev_pre"] if shifted else ref.pre
    v = _bf16_from_fp32(collapse_fp32(r_prime.float().numpy(), weights.numpy(), "documented"))
    assert_same_bits(hc.hc_collapse(ref.residual, weights), v, name="v")

    # y: within one bf16 step of float64 RMSNorm of that v (zero token: exactly 0).
    y = _round_bf16(rmsnorm_f64(v.double().numpy(), inputs["norm_weight"].double().numpy(), s))
    assert_ulp_close(ref.y, torch.from_numpy(y).to(torch.bfloat16), max_ulp=1, name="y")
    zero = ROWS["zero"][0]
    assert_same_bits(ref.y[zero], torch.zeros(HIDDEN, dtype=torch.bfloat16), name="y of the zero token")


# ---------------------------------------------------------------------------------------------
# The boundary checks the kernel tests share (tests/support/hc_checks.py), fed a kernel's typical errors


def _with(out: hc.HcBoundaryOutputs, **fields) -> hc.HcBoundaryOutputs:
    values = {f: getattr(out, f) for f in ("residual", "pre", "post", "comb", "y", "pair")}
    return hc.HcBoundaryOutputs(**{**values, **fields})


@pytest.mark.parametrize(
    "error", ["R' one ulp", "tiny token's y doubled", "zero token's y not zero", "one token's y"]
)
def test_the_kernel_checks_fail_on_a_kernels_typical_errors(error):
    s = MODEL_PARAMS
    inputs = revealing_inputs(s, seed=3, shifted=True, hidden=HIDDEN)
    ref = hc.mhc_boundary_reference(*inputs.args(), **inputs.kwargs(), scale_layout="e8m0")
    assert_boundary_matches(ref, ref, layout="e8m0")
    if error == "R' one ulp":  # what an FMA-contracted post step does to a cancelling sum
        residual = ref.residual.clone()
        residual.view(torch.int16)[ROWS["post_order"][0], 1, 7] += 1
        bad = _with(ref, residual=residual)
    else:
        y = ref.y.clone()
        if error == "tiny token's y doubled":
            y[ROWS["tiny"][0]] *= 2
        elif error == "zero token's y not zero":
            y[ROWS["zero"][0], 5] = 1e-30
        else:  # 1% off on every element of one token: inside the elementwise rtol, not the token's calc_diff
            y[ROWS["plain"][0]] *= 1.01
        bad = _with(ref, y=y, pair=None)
    with pytest.raises(AssertionError):
        assert_boundary_matches(bad, ref, layout="e8m0")


# ---------------------------------------------------------------------------------------------
# Defaults and wiring: the model's scalars are the defaults, every scalar reaches its step


def test_the_defaults_are_the_models_scalars():
    assert hc.HcParams() == MODEL_PARAMS
    inputs = revealing_inputs(MODEL_PARAMS, seed=4, shifted=False, hidden=HIDDEN)
    inputs.fn *= 100  # logits far from uniform: comb' still moves between the 20th and 21st iteration
    more = hc.mhc_boundary_reference(*inputs.args(), params=replace(MODEL_PARAMS, sinkhorn_iters=21))
    by_default = hc.mhc_boundary_reference(*inputs.args())
    explicit = hc.mhc_boundary_reference(*inputs.args(), params=MODEL_PARAMS, want_y=True, want_pair=True)
    assert by_default.y is not None and by_default.pair is not None
    assert by_default.pair.scale.dtype == torch.int32  # deepgemm scales by default
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(getattr(by_default, name), getattr(explicit, name), name=name)
    assert not torch.equal(more.comb, explicit.comb)  # so the default iteration count shows
    v = hc.hc_collapse(explicit.residual, explicit.pre)
    assert_same_bits(hc.rmsnorm(v, inputs.norm_weight, eps=1e-6), explicit.y, name="rmsnorm's default scale")
    weights = (inputs.fn, inputs.scale, inputs.base, inputs.norm_weight)
    y, pre, post, comb = hc.hc_pre(inputs.residual, *weights)
    y2, pre2, post2, comb2 = hc.hc_pre(inputs.residual, *weights, params=MODEL_PARAMS)
    for got, want, name in ((y, y2, "y"), (pre, pre2, "pre"), (post, post2, "post"), (comb, comb2, "comb")):
        assert_same_bits(got, want, name=f"hc_pre {name}")


@pytest.mark.parametrize("iters", [1, 3])
def test_sinkhorn_scalars_reach_the_boundary(iters):
    """A large sinkhorn_eps (0.25) and few iterations: eps's sign and every scalar show in comb'."""
    s = replace(UPSTREAM_PARAMS, sinkhorn_eps=0.25, sinkhorn_iters=iters)
    inputs = make_inputs(s, seed=5)
    ref = _reference(inputs, s, shifted=False)
    r_prime = _bf16_from_fp32(
        post_fp32(*(_np(inputs[k]) for k in ("x", "residual", "post", "comb")), "documented")
    )
    _, _, want = coefficients_f64(mixes_f64(r_prime.double().numpy(), inputs, s), s)
    assert_close(ref.comb, torch.from_numpy(want).float(), name="comb'")


def test_want_flags_and_rounding_reach_the_outputs():
    inputs = revealing_inputs(MODEL_PARAMS, seed=6, shifted=True, hidden=HIDDEN)
    only_y = hc.mhc_boundary_reference(*inputs.args(), **inputs.kwargs(), want_pair=False)
    only_pair = hc.mhc_boundary_reference(
        *inputs.args(), **inputs.kwargs(), want_y=False, rounding="floor", scale_layout="e8m0"
    )
    assert only_y.pair is None and only_y.y is not None and only_pair.y is None
    q, s = quantize_mxfp8_reference(only_y.y, rounding="floor", scale_layout="e8m0")
    assert_same_bits(only_pair.pair.data.view(torch.uint8), q.view(torch.uint8), name="floor codes")
    assert_same_bits(only_pair.pair.scale, s, name="floor scales")
    assert only_pair.pair.rounding.value == "floor" and only_pair.pair.scale_layout.value == "e8m0"


def test_empty_outputs_have_the_documented_dtypes_and_device():
    out = hc.empty_hc_boundary_outputs(3, HIDDEN, device="meta")
    assert out.y is not None and out.pair is not None and out.pair.scale.dtype == torch.int32
    for name, dtype in (("residual", torch.bfloat16), ("pre", torch.float32), ("post", torch.float32),
                        ("comb", torch.float32), ("y", torch.bfloat16)):  # fmt: skip
        t = getattr(out, name)
        assert t.dtype == dtype and t.device.type == "meta", name
    assert out.pair.data.device.type == "meta" and out.pair.scale.device.type == "meta"
    bare = hc.empty_hc_boundary_outputs(3, HIDDEN, device="meta", y=False, pair=False)
    assert bare.y is None and bare.pair is None
