"""The fused mHC boundary kernel on the GPU: every contract of the boundary, and the fused path proven.

Outputs are poisoned (0xA5) before each call, so an unwritten byte fails; contracts and tolerances are
in tests/support/hc_checks.py: R' and the pair bit for bit, y a bound token by token (docs/hc.md). Shapes sample T in {1, 3, 16, 64, 129, 2048} x H in {4096, 5120, 7168} x
both orderings x the three scale layouts: every T with both orderings at H = 5120 (deepgemm), the other
layouts at T = 3 and 129, and the other hiddens at four T each. The scale layout, the rounding and the
loop counts are runtime arguments of the kernel, so few compiled variants serve the whole sample (the
first run compiles about twenty; keeping this file near two minutes on an H200).
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from hc_checks import assert_boundary_matches, poison_outputs, written_buffers
from hc_inputs import (
    MODEL_PARAMS,
    REVEALING_ROWS,
    UPSTREAM_PARAMS,
    BoundaryInputs,
    make_inputs,
    revealing_inputs,
)

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits, assert_ulp_close
from mxfuse import MxfuseError, MxfuseUnavailableError, hc, witness
from mxfuse.kernels.hc import HcConfig, HcWorkspace, launch_boundary

register(
    on=("h100", "b200", "gb300", "5090"),
    gpus=1,
    est_time={"h100": 360, "b200": 160, "gb300": 160, "5090": 160},
)

DEVICE = "cuda"
ORDERINGS = {"normal": False, "shifted": True}


@functools.lru_cache(maxsize=4)
def _cached_inputs(
    tokens: int, hidden: int, shifted: bool, seed: int, copies: tuple[int, ...]
) -> BoundaryInputs:
    return make_inputs(tokens, hidden, shifted=shifted, seed=seed, device=DEVICE, copies_of_row0=copies)


def _inputs(tokens: int, hidden: int, shifted: bool, *, seed: int = 0, copies: tuple[int, ...] = ()):
    """Fresh copies of cached inputs (tests may write into theirs)."""
    cached = _cached_inputs(tokens, hidden, shifted, seed, copies)
    tensors = {k: (None if v is None else v.clone()) for k, v in cached.tensors().items()}
    return BoundaryInputs(**tensors, params=cached.params)


def _outputs(
    tokens: int, hidden: int, layout: str = "deepgemm", *, y: bool = True, pair: bool = True, rounding="rceil"
):
    out = hc.empty_hc_boundary_outputs(
        tokens, hidden, device=DEVICE, y=y, pair=pair, scale_layout=layout, rounding=rounding
    )
    return poison_outputs(out, layout)


def _reference(inputs: BoundaryInputs, layout: str = "deepgemm", rounding: str = "rceil"):
    return hc.mhc_boundary_reference(
        *inputs.args(), **inputs.kwargs(), scale_layout=layout, rounding=rounding
    )


def _boundary(inputs: BoundaryInputs, out: hc.HcBoundaryOutputs, layout: str = "deepgemm", **kwargs):
    """Run the boundary into ``out``; returns the witness records it emitted."""
    with witness.capture() as records:
        got = hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), scale_layout=layout, out=out, **kwargs)
    torch.cuda.synchronize()
    assert got is out
    return records


MATRIX = (
    [(t, 5120, o, "deepgemm") for t in (1, 3, 16, 64, 129, 2048) for o in ORDERINGS]
    + [(t, 5120, o, lay) for t in (3, 129) for o in ORDERINGS for lay in ("e8m0", "swizzled_128x4")]
    + [
        (1, 4096, "normal", "swizzled_128x4"),
        (64, 4096, "shifted", "swizzled_128x4"),
        (129, 4096, "shifted", "e8m0"),
        (2048, 4096, "normal", "deepgemm"),
        (1, 7168, "shifted", "deepgemm"),
        (16, 7168, "normal", "e8m0"),
        (129, 7168, "normal", "swizzled_128x4"),
        (2048, 7168, "shifted", "e8m0"),
    ]
)


@pytest.mark.parametrize(
    ("tokens", "hidden", "ordering", "layout"), MATRIX, ids=[" ".join(map(str, c)) for c in MATRIX]
)
def test_fused_kernel_matches_reference(tokens, hidden, ordering, layout):
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    out = _outputs(tokens, hidden, layout)
    records = _boundary(inputs, out, layout)
    assert [r["path"] for r in records] == ["hc.boundary.kernel.pair"]
    assert records[0]["ordering"] == ordering and records[0]["scale_layout"] == layout
    assert_boundary_matches(out, _reference(inputs, layout), layout=layout)


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize(("tokens", "hidden"), [(3, 5120), (2048, 7168)])
def test_residual_is_bit_identical_to_the_unfused_chain(tokens, hidden, ordering):
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    fused = _outputs(tokens, hidden)
    _boundary(inputs, fused)
    unfused = _outputs(tokens, hidden)
    records = _boundary(inputs, unfused, fused=False)
    assert [r["path"] for r in records] == ["hc.boundary.unfused"]
    assert_same_bits(fused.residual, unfused.residual, name="R' fused vs unfused")
    assert_boundary_matches(unfused, _reference(inputs), layout="deepgemm")


# Configurations whose fused kernel once differed from the unfused chain in the last bit of y (a sum
# of squares whose order followed the register layout), and one of each kind of phase A.
CONFIGS = {
    "default": None,
    "bt32 single-step finish": HcConfig(32, 32, 4, 32, 64, 0, 8, 1, "dot", 1),
    "bt32 two launches pipelined": HcConfig(32, 32, 2, 32, 64, 0, 8, 2, "dot", 3),
    "bt16 dot two launches": HcConfig(16, 16, 2, 16, 32, 0, 4, 2, "dot", 2),
    "bt4 fma one launch": HcConfig(4, 32, 1, 4, 64, 0, 4, 1, "fma", 1),
    # The shifted ordering's split finish in items of 2 words, counters and tickets (one launch).
    "bt4 fma one launch, split of 2 words": HcConfig(4, 32, 1, 4, 64, 0, 4, 1, "fma", 1, 0, 2),
    # One launch whose one-row Sinkhorn items sum their rows' records after the A items (and wait for
    # the F items' arrivals before they reset the counters), and the same tiles in two launches.
    "bt1 fma one launch, one-row Sinkhorn": HcConfig(1, 32, 1, 1, 64, 0, 4, 1, "fma", 1, 0, 1),
    "bt16 dot one launch, one-row Sinkhorn": HcConfig(16, 16, 2, 1, 32, 0, 4, 1, "dot", 2, 0, 1),
    "bt16 dot two launches, one-row Sinkhorn": HcConfig(16, 16, 2, 1, 32, 0, 4, 2, "dot", 2, 0, 1),
}
UNFUSED_CASES = [(64, 5120, c) for c in CONFIGS] + [(64, 4096, "default"), (4, 7168, "bt4 fma one launch")]
UNFUSED_CASES += [(t, 5120, "default") for t in (1, 4, 16)] + [
    (7, 5120, "bt4 fma one launch, split of 2 words"),
    (1, 5120, "bt1 fma one launch, one-row Sinkhorn"),
    (7, 7168, "bt1 fma one launch, one-row Sinkhorn"),
    (16, 5120, "bt16 dot one launch, one-row Sinkhorn"),
    (16, 5120, "bt16 dot two launches, one-row Sinkhorn"),
]


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize(
    ("tokens", "hidden", "config"), UNFUSED_CASES, ids=[f"{t} {h} {c}" for t, h, c in UNFUSED_CASES]
)
def test_every_output_is_bit_identical_to_the_unfused_chain(tokens, hidden, config, ordering):
    """R', pre, post', comb', y and the pair: the fused kernel and the unfused chain (post kernel, mixes,
    bf16 y, then ``quantize_mxfp8``) of the same configuration agree bit for bit."""
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    fused, unfused = _outputs(tokens, hidden), _outputs(tokens, hidden)
    fused_records = _boundary(inputs, fused, config=CONFIGS[config])
    unfused_records = _boundary(inputs, unfused, fused=False, config=CONFIGS[config])
    assert [r["path"] for r in fused_records] == ["hc.boundary.kernel.pair"]
    assert [r["path"] for r in unfused_records] == ["hc.boundary.unfused"]
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(getattr(fused, name), getattr(unfused, name), name=f"{name} fused vs unfused")
    assert_same_bits(
        fused.pair.data.view(torch.uint8), unfused.pair.data.view(torch.uint8), name="pair elements"
    )
    # The fused pair is quantize(y), scales and padding included (the unfused pair is that by construction).
    assert_boundary_matches(fused, _reference(inputs), layout="deepgemm")


def test_the_shifted_y_does_not_depend_on_the_configuration():
    """In the shifted ordering y sums the same 16-column slices of the collapse whatever the A split and
    the finish's items, so y and the pair are the same bits under every configuration."""
    inputs = _inputs(16, 5120, True)
    first = _outputs(16, 5120)
    _boundary(inputs, first, config=None)
    for name in (
        "bt16 dot two launches",
        "bt4 fma one launch",
        "bt4 fma one launch, split of 2 words",
        "bt16 dot one launch, one-row Sinkhorn",
    ):
        other = _outputs(16, 5120)
        _boundary(inputs, other, config=CONFIGS[name])
        assert_same_bits(other.y, first.y, name=f"y, {name} vs default")
        assert_same_bits(
            other.pair.data.view(torch.uint8), first.pair.data.view(torch.uint8), name=f"pair, {name}"
        )


PREPARED_CASES = [
    (64, 5120, "default", True),
    (16, 7168, "bt16 dot two launches", False),
    (2048, 7168, "default", True),
]


@pytest.mark.parametrize(
    ("tokens", "hidden", "config", "shifted"),
    PREPARED_CASES,
    ids=[f"{t} {h} {c}" for t, h, c, _ in PREPARED_CASES],
)
def test_a_prepared_projection_gives_the_same_bits(tokens, hidden, config, shifted):
    """fn as an HcProjection (the tensor-core mixes read its bf16 pieces): every output of the fused kernel
    and of the unfused chain the same bits as with the fp32 fn."""
    inputs = _inputs(tokens, hidden, shifted)
    projection = hc.HcProjection.prepare(inputs.fn)
    for fused in (True, False):
        plain, prepared = _outputs(tokens, hidden), _outputs(tokens, hidden)
        _boundary(inputs, plain, config=CONFIGS[config], fused=fused)
        plain_inputs, weights = inputs.args()
        weights = dataclasses.replace(weights, fn=projection)
        with witness.capture() as records:
            hc.mhc_boundary(
                plain_inputs, weights, **inputs.kwargs(), out=prepared, config=CONFIGS[config], fused=fused
            )
        torch.cuda.synchronize()
        assert [r["path"] for r in records] == ["hc.boundary.kernel.pair" if fused else "hc.boundary.unfused"]
        for name in ("residual", "pre", "post", "comb", "y"):
            assert_same_bits(getattr(prepared, name), getattr(plain, name), name=f"{name} (fused={fused})")
        assert_same_bits(prepared.pair.data.view(torch.uint8), plain.pair.data.view(torch.uint8), name="pair")


@pytest.mark.parametrize("params", ["upstream", "model"])
@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("hidden", [256, 5120])
def test_order_revealing_zero_and_tiny_tokens(hidden, ordering, params):
    """R' bit for bit where any other fp32 order (or an FMA) shows in bf16; zero, tiny (2**-100) and
    eps-sized tokens, whose y eps placement decides, held to their own size (hc_inputs.revealing_inputs)."""
    s = MODEL_PARAMS if params == "model" else UPSTREAM_PARAMS
    inputs = revealing_inputs(
        s, seed=hidden + len(params), shifted=ORDERINGS[ordering], hidden=hidden, device=DEVICE
    )
    tokens = inputs.x.shape[0]
    for layout in ("deepgemm", "e8m0"):
        out = _outputs(tokens, hidden, layout)
        records = _boundary(inputs, out, layout)
        assert [r["path"] for r in records] == ["hc.boundary.kernel.pair"]
        assert_boundary_matches(out, _reference(inputs, layout), layout=layout)
        zero = REVEALING_ROWS["zero"][0]
        assert not out.y[zero].view(torch.int16).bitwise_and(0x7FFF).any(), "a zero token's y is 0"
        assert not out.pair.data[zero].view(torch.uint8).bitwise_and(0x7F).any(), "a zero token's codes are 0"


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_twenty_reruns_are_bitwise_identical(ordering):
    tokens, hidden = 129, 5120  # three token blocks, lagged phases
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    first = _outputs(tokens, hidden)
    _boundary(inputs, first)
    for rerun in range(20):
        again = _outputs(tokens, hidden)
        poison_outputs(again, "deepgemm", byte=0x5A if rerun % 2 else 0xA5)
        _boundary(inputs, again)
        for a, b in zip(written_buffers(again, "deepgemm"), written_buffers(first, "deepgemm"), strict=True):
            assert_same_bits(a, b, name=f"rerun {rerun}")


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize(
    ("tokens", "copies"), [(129, (1, 63, 64, 65, 127, 128)), (2048, (63, 64, 511, 512, 1025, 2047))]
)
def test_rows_copied_from_row_0_give_row_0s_outputs(tokens, copies, ordering):
    inputs = _inputs(tokens, 5120, ORDERINGS[ordering], copies=copies)
    out = _outputs(tokens, 5120)
    _boundary(inputs, out)
    for row in copies:
        for name in ("residual", "pre", "post", "comb", "y"):
            assert_same_bits(getattr(out, name)[row], getattr(out, name)[0], name=f"{name} row {row}")
        assert_same_bits(
            out.pair.data[row].view(torch.uint8), out.pair.data[0].view(torch.uint8), name=f"q row {row}"
        )
        assert_same_bits(out.pair.scale[row], out.pair.scale[0], name=f"scales row {row}")


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_non_finite_tokens_stay_in_their_token(ordering):
    """NaN in a token's residual: all its outputs NaN, pair blocks 0xFF. Inf in a token's x: its
    coefficients NaN, and y NaN wherever the math makes it (all of it in the normal ordering). Every
    other token is bitwise what the same call without them writes."""
    tokens, hidden, nan_token, inf_token = 16, 5120, 5, 9
    clean_inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    clean = _outputs(tokens, hidden)
    _boundary(clean_inputs, clean)
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    inputs.residual[nan_token, 3, 1000] = float("nan")
    inputs.x[inf_token, 77] = float("inf")
    out = _outputs(tokens, hidden)
    _boundary(inputs, out)
    others = [t for t in range(tokens) if t not in (nan_token, inf_token)]
    for name in ("residual", "pre", "post", "comb", "y"):
        assert_same_bits(
            getattr(out, name)[others], getattr(clean, name)[others], name=f"{name}, other tokens"
        )
    assert_same_bits(
        out.pair.data[others].view(torch.uint8), clean.pair.data[others].view(torch.uint8), name="q"
    )
    assert_same_bits(out.pair.scale[others], clean.pair.scale[others], name="scales, other tokens")
    for token in (nan_token, inf_token):
        for name in ("pre", "post", "comb"):
            assert torch.isnan(getattr(out, name)[token]).all(), (name, token)
    assert torch.isnan(out.y[nan_token]).all()
    assert (out.pair.data[nan_token].view(torch.uint8) == 0x7F).all()
    assert (out.pair.scale[nan_token] == -1).all()  # every scale byte 0xFF
    if ordering == "normal":
        assert torch.isnan(out.y[inf_token]).all()
    else:
        assert torch.isnan(out.y[inf_token, 77]) and not torch.isnan(out.y[inf_token]).all()
    ref = _reference(inputs)
    for token in (nan_token, inf_token):
        assert_same_bits(torch.isnan(out.y[token]), torch.isnan(ref.y[token]), name="where y is NaN")


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize(("tokens", "layout"), [(1, "swizzled_128x4"), (129, "deepgemm")])
def test_cuda_graph_capture_and_replay_with_fresh_inputs(tokens, layout, ordering):
    hidden = 5120
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    out = _outputs(tokens, hidden, layout)
    _boundary(inputs, out, layout)  # compile and size the workspace outside the capture
    graph = torch.cuda.CUDAGraph()
    with witness.capture() as records:
        with torch.cuda.graph(graph):
            hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), scale_layout=layout, out=out)
    assert [r["path"] for r in records] == ["hc.boundary.kernel.pair"]
    for seed in (11, 12):
        fresh = make_inputs(tokens, hidden, shifted=ORDERINGS[ordering], seed=seed, device=DEVICE)
        for name, tensor in inputs.tensors().items():
            if tensor is not None:
                tensor.copy_(getattr(fresh, name))
        poison_outputs(out, layout, byte=0x5A)
        with witness.capture() as replayed:
            graph.replay()
        torch.cuda.synchronize()
        assert replayed == []  # decided once, at capture
        assert_boundary_matches(out, _reference(fresh, layout), layout=layout)


SIDE_CASES = [
    (1, None),
    (4, None),
    (16, None),
    (16, "bt16 dot two launches"),
    (64, "bt32 two launches pipelined"),
    (1, "bt1 fma one launch, one-row Sinkhorn"),  # one launch of A and F items, then S on the side
    (16, "bt16 dot one launch, one-row Sinkhorn"),
]


@pytest.mark.parametrize(
    ("tokens", "config"), SIDE_CASES, ids=[f"T{t} {c or 'table'}" for t, c in SIDE_CASES]
)
def test_sinkhorn_on_a_side_stream_in_a_graph(tokens, config):
    """Two boundaries in a row, as a step runs them (the second reads the first's pre, post' and comb'),
    with the Sinkhorn items on a side stream, captured in a CUDA graph and replayed on fresh inputs:
    every output the bits of the same boundaries without the side stream. The second boundary joins
    the first's side launch before it reads the coefficients and the workspace."""
    hidden, cfg = 5120, CONFIGS[config] if config else None
    side = hc.HcSideStream(DEVICE)
    inputs = _inputs(tokens, hidden, True, seed=tokens)

    def chain(out1, out2, side):
        hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), out=out1, config=cfg, side=side)
        nxt = hc.HcInputs(inputs.x, out1.residual, out1.post, out1.comb, out1.pre)
        hc.mhc_boundary(nxt, inputs.args()[1], **inputs.kwargs(), out=out2, config=cfg, side=side)
        if side is not None:
            side.join()

    got = (_outputs(tokens, hidden), _outputs(tokens, hidden))
    with witness.capture() as records:
        chain(*got, side)  # compile and size the workspace outside the capture
    assert [r["sinkhorn"] for r in records] == ["side stream"] * 2  # not a silent fallback to inline
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(*got, side)
    assert not side.pending
    for seed in (31, 32):
        fresh = make_inputs(tokens, hidden, shifted=True, seed=seed, device=DEVICE)
        for name, tensor in inputs.tensors().items():
            tensor.copy_(getattr(fresh, name))
        for out in got:
            poison_outputs(out, "deepgemm", byte=0x5A)
        graph.replay()
        want = (_outputs(tokens, hidden), _outputs(tokens, hidden))
        with witness.capture() as inline:
            chain(*want, None)
        torch.cuda.synchronize()
        assert [r["sinkhorn"] for r in inline] == ["in the boundary's launch"] * 2
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            for name in ("residual", "pre", "post", "comb", "y"):
                assert_same_bits(getattr(a, name), getattr(b, name), name=f"boundary {i + 1} {name}")
            assert_same_bits(a.pair.data.view(torch.uint8), b.pair.data.view(torch.uint8), name="pair")
            assert_same_bits(a.pair.scale_storage(), b.pair.scale_storage(), name="scales")
        assert_boundary_matches(got[0], _reference(fresh), layout="deepgemm")


def test_a_side_stream_of_another_device_is_refused():
    inputs = _inputs(3, 5120, True)
    out = _outputs(3, 5120)
    with pytest.raises(ValueError, match=r"side must be a side stream of cuda:0"):
        hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), out=out, side=hc.HcSideStream("cpu"))
    assert (out.residual.view(torch.uint8) == 0xA5).all()


def test_workspace_cannot_grow_during_capture():
    inputs = _inputs(3, 5120, False)
    out = _outputs(3, 5120)
    before = [b.clone() for b in written_buffers(out, "deepgemm")]
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(MxfuseError, match="cannot grow during CUDA-graph capture"):
        with torch.cuda.graph(graph):
            hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), out=out, workspace=HcWorkspace(DEVICE))
    torch.cuda.synchronize()
    for a, b in zip(written_buffers(out, "deepgemm"), before, strict=True):
        assert_same_bits(a, b, name="an out buffer after a refused call")


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_hardware_and_integer_rounding_paths_agree(ordering):
    """hw_cvt=False (the interpreter's arithmetic: integer bf16/E4M3 rounding, fp32 FMA dots) on the GPU."""
    tokens, hidden = 129, 5120
    inputs = _inputs(tokens, hidden, ORDERINGS[ordering])
    hardware = _outputs(tokens, hidden)
    _boundary(inputs, hardware)
    integer = _outputs(tokens, hidden)
    assert (integer.pair.scale_layout.value, integer.pair.rounding.value) == ("deepgemm", "rceil")
    launch_boundary(
        *inputs.args(), integer, params=inputs.params, workspace=HcWorkspace(DEVICE), hw_cvt=False
    )
    torch.cuda.synchronize()
    assert_same_bits(integer.residual, hardware.residual, name="R' integer vs hardware rounding")
    assert_boundary_matches(integer, _reference(inputs), layout="deepgemm")


def test_y_only_and_pair_only():
    tokens, hidden = 16, 5120
    inputs = _inputs(tokens, hidden, True)
    both = _outputs(tokens, hidden)
    _boundary(inputs, both)
    y_only = _outputs(tokens, hidden, pair=False)
    assert [r["path"] for r in _boundary(inputs, y_only)] == ["hc.boundary.kernel.bf16"]
    assert_same_bits(y_only.y, both.y, name="y")
    pair_only = _outputs(tokens, hidden, y=False)
    assert [r["path"] for r in _boundary(inputs, pair_only)] == ["hc.boundary.kernel.pair"]
    assert_same_bits(pair_only.pair.data.view(torch.uint8), both.pair.data.view(torch.uint8), name="q")
    assert_same_bits(pair_only.pair.scale, both.pair.scale, name="scales")
    assert_same_bits(pair_only.residual, both.residual, name="R'")


def test_floor_rounding_fp32_weight_model_scalars_in_place():
    """FLOOR scales, an fp32 norm weight, V4.1-Flash's rms_eps = 1e-20, and R' written over residual."""
    tokens, hidden = 64, 5120
    inputs = _inputs(tokens, hidden, False)
    inputs.params = dataclasses.replace(MODEL_PARAMS, rms_eps=1e-20)
    inputs.norm_weight = inputs.norm_weight.float() * 1.01
    ref = _reference(inputs, "e8m0", "floor")
    out = _outputs(tokens, hidden, "e8m0", rounding="floor")
    out = hc.HcBoundaryOutputs(inputs.residual, out.pre, out.post, out.comb, out.y, out.pair)
    _boundary(inputs, out, "e8m0", rounding="floor")
    assert_boundary_matches(out, ref, layout="e8m0", rounding="floor")


def test_zero_tokens():
    inputs = _inputs(0, 5120, True)
    out = _outputs(0, 5120, "swizzled_128x4")
    records = _boundary(inputs, out, "swizzled_128x4")
    assert [r["path"] for r in records] == ["hc.boundary.kernel.pair"] and records[0]["rows"] == 0
    fresh = hc.mhc_boundary(*inputs.args(), **inputs.kwargs())
    assert (
        fresh.residual.is_cuda
        and tuple(fresh.residual.shape) == (0, 4, 5120)
        and fresh.pair.data.numel() == 0
    )


_INPUTS = ("x", "residual", "post", "comb", "prev_pre")
_WEIGHTS = ("fn", "scale", "base", "norm_weight")


def _refused(inputs: BoundaryInputs, out: hc.HcBoundaryOutputs, error: type, match: str, **changes) -> None:
    """``mhc_boundary`` on ``inputs`` with ``changes`` (fields of the inputs, the weights or ``params``)
    raises ``error`` matching ``match`` and leaves every byte of ``out`` as it was."""
    fields = {name: getattr(inputs, name) for name in (*_INPUTS, *_WEIGHTS, "params")}
    fields.update(changes)
    changed = hc.HcInputs(*(fields[name] for name in _INPUTS))
    weights = hc.HcWeights(*(fields[name] for name in _WEIGHTS))
    before = [b.clone() for b in written_buffers(out, "deepgemm")]
    with pytest.raises(error, match=match):
        hc.mhc_boundary(changed, weights, params=fields["params"], out=out)
    torch.cuda.synchronize()
    for a, b in zip(written_buffers(out, "deepgemm"), before, strict=True):
        assert_same_bits(a, b, name="an out buffer after a refused call")


def _bf16(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16, device=DEVICE)


# (name, the changed arguments (built at run time: no CUDA at import), error, match)
BAD = [
    ("prev_pre on the CPU", lambda: {"prev_pre": torch.zeros(3, 4)}, ValueError, r"prev_pre must be on cuda:0 \(where x is\)"),
    ("fn bf16", lambda: {"fn": _bf16(24, 4 * 5120)}, ValueError, "fn must be torch.float32"),
    ("n = 2", lambda: {"residual": _bf16(3, 2, 5120)}, ValueError, r"residual.shape\[1\] \(n, the number of streams\) must be 4"),
    ("norm_weight strided", lambda: {"norm_weight": _bf16(2 * 5120)[::2]}, ValueError, "norm_weight must be contiguous"),
    ("params a dict", lambda: {"params": {"sinkhorn_iters": 0}}, TypeError, "params must be an mxfuse.hc.HcParams"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "changes", "error", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_are_refused_before_anything_is_written(name, changes, error, match):
    _refused(_inputs(3, 5120, True), _outputs(3, 5120), error, match, **changes())


def test_out_on_another_device_and_h_not_a_multiple_of_128():
    inputs = _inputs(3, 5120, True)
    on_cpu = poison_outputs(hc.empty_hc_boundary_outputs(3, 5120, device="cpu"), "deepgemm")
    with pytest.raises(ValueError, match=r"out.residual must be on cuda:0"):
        hc.mhc_boundary(*inputs.args(), **inputs.kwargs(), out=on_cpu)
    assert (on_cpu.residual.view(torch.uint8) == 0xA5).all()
    x = torch.zeros(3, 5000, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match=r"x.shape\[1\] \(H\) must be a positive multiple of 128; got 5000"):
        hc.mhc_boundary(dataclasses.replace(inputs.args()[0], x=x), inputs.args()[1], **inputs.kwargs())


def test_gpus_without_fp8_conversion_are_refused(monkeypatch):
    inputs = _inputs(3, 5120, True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    _refused(
        inputs, _outputs(3, 5120), MxfuseUnavailableError, r"needs FP8 conversion \(sm_89\+\); .* is sm_86"
    )


def test_gpu_reference_matches_cpu_reference():
    """The comparisons above use the reference on the GPU; anchor it to the CPU one (R' bit for bit; y
    one bf16 step: CUDA's rsqrt is not the CPU's)."""
    inputs = _inputs(129, 4096, True)
    gpu = _reference(inputs)
    cpu_inputs = BoundaryInputs(**{k: (None if v is None else v.cpu()) for k, v in inputs.tensors().items()},
                                params=inputs.params)  # fmt: skip
    cpu = _reference(cpu_inputs)
    assert_same_bits(gpu.residual.cpu(), cpu.residual, name="R'")
    assert_ulp_close(gpu.y.cpu(), cpu.y, max_ulp=1, name="y")
    assert_close(gpu.comb.cpu(), cpu.comb, name="comb'")
