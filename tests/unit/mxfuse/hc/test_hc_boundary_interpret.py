"""The boundary kernels' logic on CPU: the Triton interpreter against the reference and the contracts.

The kernels run under the interpreter in one child process (``interpreter.run_interpreted``, once per
session, shared by the xdist workers); it writes every case into poisoned buffers and this process checks
what came back. The kernels run with
``hw_cvt=False``: integer bf16/E4M3 rounding and fp32 dots, the arithmetic the interpreter runs exactly
(the GPU tests compare that path with the hardware one). Interpreted programs run one after another in
ticket order, so every wait in the kernel is already satisfied: a wait on a later ticket would hang
here, which is what the multi-block cases (several blocks, lags 1 and 2) would show.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
import torch
from hc_checks import assert_boundary_matches
from hc_inputs import MODEL_PARAMS, REVEALING_TOKENS, UPSTREAM_PARAMS, make_inputs, revealing_inputs
from interpreter import run_interpreted

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import hc
from mxfuse.formats import MxTensor, scale_spec, scale_storage_view, scale_to_layout

register(on=("cpu",), est_time=60)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
POISON, OTHER_POISON = 0xA5, 0x5A


@dataclass(frozen=True)
class Case:
    name: str
    tokens: int
    hidden: int
    shifted: bool
    layout: str = "deepgemm"
    kind: str = "fused"  # "unfused": post, mixes, norm steps, then the quantize kernel; "side": fused,
    # given an HcSideStream (the Sinkhorn items as a launch of their own)
    want_y: bool = True
    want_pair: bool = True
    rounding: str = "rceil"
    config: tuple[int, ...] | None = None  # HcConfig fields; None: choose_config
    copies_of_row0: tuple[int, ...] = ()
    poison: int = POISON
    model_scalars: bool = False
    fp32_weight: bool = False
    nonfinite: tuple[str, int, float] | None = None  # (input, token, value)
    revealing: bool = False  # hc_inputs.revealing_inputs: order-revealing, zero, tiny and eps-sized tokens
    prepared: bool = False  # fn as an HcProjection: the tensor-core mixes read its bf16 pieces
    seed: int = field(default=0)

    def inputs(self):
        params = MODEL_PARAMS if self.model_scalars else UPSTREAM_PARAMS
        if self.revealing:
            return revealing_inputs(params, seed=self.seed, shifted=self.shifted, hidden=self.hidden)
        inputs = make_inputs(self.tokens, self.hidden, shifted=self.shifted, seed=self.seed,
                             copies_of_row0=self.copies_of_row0, params=params)  # fmt: skip
        if self.fp32_weight:
            inputs.norm_weight = inputs.norm_weight.float() * 1.01
        if self.nonfinite is not None:
            where, token, value = self.nonfinite
            if where == "x":
                inputs.x[token, self.hidden // 3] = value
            else:
                inputs.residual[token, 2, self.hidden - 5] = value
        return inputs


def _order(shifted: bool) -> str:
    return "shifted" if shifted else "normal"


CASES = [
    Case(f"T{t} H{h} {_order(s)} {lay}", t, h, s, lay, seed=t)
    for t, h in ((1, 256), (3, 384), (5, 256))
    for s in (False, True)
    for lay in LAYOUTS
]
CASES += [
    Case("T0", 0, 256, True),
    Case("T2 H128 normal e8m0", 2, 128, False, "e8m0", seed=2),  # the smallest hidden size
    # Several blocks: lag 1, four S items per block, finishes of two steps (v through y), swizzled
    # padding rows up to 128 written by the zero loop, rows copied from row 0 in three different blocks.
    Case("T37 normal swizzled, 3 blocks, lag 1", 37, 512, False, "swizzled_128x4",
         config=(16, 32, 2, 4, 2, 1), copies_of_row0=(5, 16, 33), seed=7),
    # Two blocks of 32, lag 2, one-word finish steps (four), deepgemm padding rows, 16-wide A steps.
    Case("T37 shifted deepgemm, 2 blocks, lag 2", 37, 512, True, "deepgemm",
         config=(32, 16, 4, 8, 1, 2), copies_of_row0=(5, 16, 33), seed=7),
    # Phase A on the CUDA cores: blocks of one row (three blocks, lag 1), and of four rows in two launches.
    Case("T3 normal deepgemm, fma rows of 1, lag 1", 3, 256, False, config=(1, 64, 2, 1, 2, 1, 4, 1, "fma", 1),
         seed=3),
    Case("T9 normal swizzled, fma rows of 1, 9 blocks, lag 2", 9, 128, False, "swizzled_128x4",
         config=(1, 64, 1, 1, 1, 2, 4, 1, "fma", 1), copies_of_row0=(4, 8), seed=9),
    Case("T6 shifted e8m0, fma blocks of 4, two launches", 6, 384, True, "e8m0",
         config=(4, 32, 3, 2, 4, 0, 4, 2, "fma", 2), copies_of_row0=(5,), seed=6),
    # Two launches: A items, then the finishes and Sinkhorn (no programmatic launch in the interpreter).
    Case("T5 normal e8m0, two launches", 5, 384, False, "e8m0", config=(16, 64, 2, 16, 4, 0, 4, 2), seed=5),
    Case("T5 shifted swizzled, two launches, pair only, two-step finish", 5, 384, True, "swizzled_128x4",
         want_y=False, config=(16, 32, 3, 2, 2, 0, 4, 2), seed=5),
    # The finish launch on 16 warps, which loads the norm weight before it waits (bf16 and fp32 weights).
    Case("T6 normal deepgemm, finish on 16 warps, weight first", 6, 384, False,
         config=(4, 32, 3, 2, 4, 0, 4, 2, "fma", 1, 16), copies_of_row0=(4,), seed=11),
    Case("T6 shifted e8m0, finish on 16 warps, weight first, fp32 weight", 6, 384, True, "e8m0",
         fp32_weight=True, config=(16, 32, 2, 4, 4, 0, 4, 2, "dot", 1, 16), seed=12),
    Case("T20 normal e8m0 floor, model scalars, fp32 weight", 20, 256, False, "e8m0", rounding="floor",
         model_scalars=True, fp32_weight=True, seed=9),
    Case("T5 shifted y only", 5, 384, True, want_pair=False, seed=5),
    Case("T5 normal pair only", 5, 384, False, "e8m0", want_y=False, seed=5),
    Case("T5 normal deepgemm, poison 0x5A", 5, 256, False, poison=OTHER_POISON, seed=5),
    Case("T5 normal NaN in residual", 5, 256, False, nonfinite=("residual", 2, float("nan")), seed=5),
    Case("T5 shifted NaN in x", 5, 256, True, "swizzled_128x4", nonfinite=("x", 3, float("nan")), seed=5),
    Case("T5 normal unfused", 5, 256, False, kind="unfused", seed=5),
    # R' of cancelling streams (any other fp32 order shows), zero, tiny and eps-sized tokens.
    Case("revealing normal deepgemm", REVEALING_TOKENS, 256, False, revealing=True, seed=21),
    Case("revealing shifted e8m0, model scalars", REVEALING_TOKENS, 256, True, "e8m0", revealing=True,
         model_scalars=True, seed=22),
    Case("T5 shifted unfused", 5, 256, True, kind="unfused", seed=5),
    # The shifted ordering's split finish (A items write the collapse and its 16-column sums of squares):
    # items of two words in one launch (tickets and counters, lag 1), and of one word after 16-column A
    # steps in two launches, pair only (v in the workspace); the default's T5 case with another config.
    Case("T7 shifted e8m0, split finish of 2 words, one launch, lag 1", 7, 384, True, "e8m0",
         config=(4, 32, 3, 2, 4, 1, 4, 1, "fma", 1, 0, 2), copies_of_row0=(4,), seed=14),
    Case("T5 shifted swizzled, split finish of 1 word, 16-column A steps, pair only", 5, 256, True,
         "swizzled_128x4", want_y=False, fp32_weight=True, config=(16, 16, 4, 4, 2, 0, 4, 2, "dot", 2, 0, 1),
         seed=15),
    Case("T5 H256 shifted deepgemm, another config", 5, 256, True, config=(16, 16, 2, 8, 1, 0, 4, 2, "dot", 2, 0, 2),
         seed=5),
    # Two launches with Sinkhorn items of one row, which sum their row's records themselves (both orderings).
    Case("T6 shifted deepgemm, one-row Sinkhorn items summing their records", 6, 256, True,
         config=(4, 32, 2, 1, 2, 0, 4, 2, "fma", 1), copies_of_row0=(5,), seed=16),
    Case("T6 normal e8m0, one-row Sinkhorn items summing their records", 6, 256, False, "e8m0",
         config=(4, 32, 2, 1, 2, 0, 4, 2, "fma", 1), seed=17),
    # One launch whose one-row Sinkhorn items sum their records (and compute pre) after the A items:
    # the shifted ordering's split finish over two blocks (lag 1), and one token; the same tiles in two
    # launches and as the unfused chain, for the bit-for-bit comparisons below.
    Case("T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1", 6, 256, True,
         config=(4, 32, 2, 1, 2, 1, 4, 1, "fma", 1, 0, 1), copies_of_row0=(5,), seed=18),
    Case("T6 shifted deepgemm, two launches, one-row Sinkhorn items", 6, 256, True,
         config=(4, 32, 2, 1, 2, 0, 4, 2, "fma", 1, 0, 1), copies_of_row0=(5,),
         seed=18),
    Case("T6 shifted deepgemm, unfused, one-row Sinkhorn items", 6, 256, True, kind="unfused",
         config=(4, 32, 2, 1, 2, 0, 4, 2, "fma", 1, 0, 1), copies_of_row0=(5,),
         seed=18),
    Case("T6 shifted deepgemm, unfused in one launch each, one-row Sinkhorn items, lag 1", 6, 256, True,
         kind="unfused", config=(4, 32, 2, 1, 2, 1, 4, 1, "fma", 1, 0, 1), copies_of_row0=(5,), seed=18),
    Case("T1 shifted swizzled, one launch, one-row Sinkhorn item", 1, 256, True, "swizzled_128x4",
         config=(1, 32, 1, 1, 2, 0, 4, 1, "fma", 1, 0, 1), seed=19),
    Case("T1 shifted swizzled, two launches, one-row Sinkhorn item", 1, 256, True, "swizzled_128x4",
         config=(1, 32, 1, 1, 2, 0, 4, 2, "fma", 1, 0, 1), seed=19),
    # The Sinkhorn items on a side stream (here in place after the A items): a launch of their own, one
    # row an item, beside the finish launch; each against the same tiles without the side stream.
    Case("T1 shifted swizzled, Sinkhorn on the side", 1, 256, True, "swizzled_128x4", kind="side",
         config=(1, 32, 1, 1, 2, 0, 4, 2, "fma", 1, 0, 1), seed=19),
    Case("T6 shifted deepgemm, two launches, one-row Sinkhorn items, on the side", 6, 256, True, kind="side",
         config=(4, 32, 2, 1, 2, 0, 4, 2, "fma", 1, 0, 1), copies_of_row0=(5,), seed=18),
    Case("T5 shifted swizzled, two launches, pair only, Sinkhorn of 2 rows on the side", 5, 384, True,
         "swizzled_128x4", want_y=False, kind="side", config=(16, 32, 3, 2, 2, 0, 4, 2), seed=5),
    Case("T37 shifted e8m0, 3 blocks, two launches", 37, 512, True, "e8m0",
         config=(16, 16, 2, 4, 1, 0, 4, 2, "dot", 2, 0, 1), copies_of_row0=(5, 16, 33), seed=23),
    Case("T37 shifted e8m0, 3 blocks, two launches, Sinkhorn on the side", 37, 512, True, "e8m0", kind="side",
         config=(16, 16, 2, 4, 1, 0, 4, 2, "dot", 2, 0, 1), copies_of_row0=(5, 16, 33), seed=23),
    # One launch of the A and F items, then the S items on the side: one block, and two blocks (lag 2).
    Case("T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1, on the side", 6, 256, True, kind="side",
         config=(4, 32, 2, 1, 2, 1, 4, 1, "fma", 1, 0, 1), copies_of_row0=(5,), seed=18),
    Case("T37 shifted deepgemm, 2 blocks, lag 2, on the side", 37, 512, True, "deepgemm", kind="side",
         config=(32, 16, 4, 8, 1, 2), copies_of_row0=(5, 16, 33), seed=7),
    # The normal ordering's finish needs pre: the side stream leaves its launches as they are.
    Case("T6 normal e8m0, one-row Sinkhorn items, given a side stream", 6, 256, False, "e8m0", kind="side",
         config=(4, 32, 2, 1, 2, 0, 4, 2, "fma", 1), seed=17),
]  # fmt: skip
# Pairs of cases that run the same tiles with and without the Sinkhorn items on a side stream.
SIDE_PAIRS = [
    ("T1 shifted swizzled, Sinkhorn on the side", "T1 shifted swizzled, two launches, one-row Sinkhorn item"),
    ("T6 shifted deepgemm, two launches, one-row Sinkhorn items, on the side",
     "T6 shifted deepgemm, two launches, one-row Sinkhorn items"),
    ("T5 shifted swizzled, two launches, pair only, Sinkhorn of 2 rows on the side",
     "T5 shifted swizzled, two launches, pair only, two-step finish"),
    ("T37 shifted e8m0, 3 blocks, two launches, Sinkhorn on the side", "T37 shifted e8m0, 3 blocks, two launches"),
    ("T6 normal e8m0, one-row Sinkhorn items, given a side stream",
     "T6 normal e8m0, one-row Sinkhorn items summing their records"),
    ("T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1, on the side",
     "T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1"),
    ("T37 shifted deepgemm, 2 blocks, lag 2, on the side", "T37 shifted deepgemm, 2 blocks, lag 2"),
]  # fmt: skip
# The same cases with fn prepared (HcProjection): the same bits, checked pair by pair below.
PREPARED = {
    "T37 normal swizzled, 3 blocks, lag 1": "T37 normal swizzled, 3 blocks, lag 1, prepared fn",
    "T37 shifted deepgemm, 2 blocks, lag 2": "T37 shifted deepgemm, 2 blocks, lag 2, prepared fn",
    "T5 normal unfused": "T5 normal unfused, prepared fn",
    "T6 normal deepgemm, fma rows of 4": "T6 normal deepgemm, fma rows of 4, prepared fn (unused)",
}
CASES.append(Case("T6 normal deepgemm, fma rows of 4", 6, 256, False, config=(4, 32, 2, 4, 2, 0, 4, 2, "fma", 1),
                  seed=13))  # fmt: skip
CASES += [
    dataclasses.replace(c, name=PREPARED[c.name], prepared=True) for c in list(CASES) if c.name in PREPARED
]
BY_NAME = {c.name: c for c in CASES}

_WORKER = """
import sys, torch
from mxfuse.hc import empty_hc_boundary_outputs
from mxfuse.kernels.hc import HcConfig, HcInputs, HcParams, HcProjection, HcSideStream, HcWeights, HcWorkspace
from mxfuse.kernels.hc import launch as fused, steps
from mxfuse.kernels.quantize.launch import launch_quantize
cases = torch.load(sys.argv[1], weights_only=False)
results = {"interpreted": type(fused.hc_kernel).__name__}
for c in cases:
    t, h, layout = c["tokens"], c["hidden"], c["layout"]
    x = c["inputs"]
    out = empty_hc_boundary_outputs(t, h, device="cpu", y=c["want_y"], pair=c["want_pair"], scale_layout=layout,
                                    rounding=c["rounding"])
    written = [out.residual, out.pre, out.post, out.comb]
    if out.y is not None:
        written.append(out.y)
    if out.pair is not None:
        written += [out.pair.data, out.pair.scale_storage()]
    for buf in written:
        buf.view(torch.uint8).fill_(c["poison"])
    params = HcParams(**c["params"])
    ws = HcWorkspace("cpu")
    config = None if c["config"] is None else HcConfig(*c["config"])
    inputs = HcInputs(x["x"], x["residual"], x["post"], x["comb"], x["prev_pre"])
    fn = HcProjection.prepare(x["fn"]) if c["prepared"] else x["fn"]
    weights = HcWeights(fn, x["scale"], x["base"], x["norm_weight"])
    on_side = None
    if c["kind"] in ("fused", "side"):
        side = HcSideStream("cpu") if c["kind"] == "side" else None
        on_side = fused.launch_boundary(inputs, weights, out, params=params, workspace=ws, config=config,
                                        hw_cvt=False, side=side)
    else:
        steps.launch_post(inputs, residual_out=out.residual, hw_cvt=False)
        steps.launch_mixes(out, weights, params=params, workspace=ws, config=config, hw_cvt=False)
        collapse = out.pre if x["prev_pre"] is None else x["prev_pre"]
        steps.launch_norm(out.residual, collapse, x["norm_weight"], params=params, y_out=out.y, workspace=ws,
                          config=config, hw_cvt=False, split=x["prev_pre"] is not None)
        if out.pair is not None:
            launch_quantize(out.y, out.pair, hw_cvt=False)
    results[c["name"]] = {
        "residual": out.residual, "pre": out.pre, "post": out.post, "comb": out.comb, "y": out.y,
        "q": None if out.pair is None else out.pair.data.view(torch.uint8),
        "scales": None if out.pair is None else out.pair.scale_bytes().clone(),
        "counters": ws._counters.clone(),
        "on_side": on_side,
    }
torch.save(results, sys.argv[2])
"""


def _payload(case: Case) -> dict:
    inputs = case.inputs()
    return {
        "name": case.name,
        "tokens": case.tokens,
        "hidden": case.hidden,
        "layout": case.layout,
        "kind": case.kind,
        "want_y": case.want_y,
        "want_pair": case.want_pair,
        "rounding": case.rounding,
        "config": case.config,
        "prepared": case.prepared,
        "poison": case.poison,
        "params": dataclasses.asdict(inputs.params),
        "inputs": inputs.tensors(),
    }


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    return run_interpreted(
        tmp_path_factory, "hc_boundary_interpret", _WORKER, lambda: [_payload(c) for c in CASES], timeout=1500
    )


def _reference(case: Case, inputs=None) -> hc.HcBoundaryOutputs:
    inputs = inputs or case.inputs()
    return hc.mhc_boundary_reference(
        *inputs.args(), **inputs.kwargs(), rounding=case.rounding, scale_layout=case.layout
    )


def test_worker_ran_the_interpreter(interpreted):
    assert interpreted["interpreted"] == "InterpretedFunction"


def _outputs(case: Case, got: dict) -> hc.HcBoundaryOutputs:
    """The child's results as the boundary's outputs (the pair rebuilt from its bytes)."""
    pair = None
    if got["q"] is not None:
        spec = scale_spec(case.tokens, case.hidden, scale_layout=case.layout)
        scales = got["scales"].view(spec.dtype).as_strided(spec.shape, spec.stride)
        pair = MxTensor(got["q"].view(torch.float8_e4m3fn), scales, case.layout, case.rounding)
    return hc.HcBoundaryOutputs(got["residual"], got["pre"], got["post"], got["comb"], got["y"], pair)


@pytest.mark.parametrize("name", [c.name for c in CASES if c.nonfinite is None], ids=str)
def test_kernel_matches_reference_and_contracts(interpreted, name):
    case = BY_NAME[name]
    got = interpreted[name]
    # Contracts (R' bit for bit, y a bound token by token, the pair bit for bit the quantizer applied to
    # the y the kernel wrote): see hc_checks.
    assert_boundary_matches(_outputs(case, got), _reference(case), layout=case.layout, rounding=case.rounding)
    assert not got["counters"].any(), "the kernel must leave its counters at zero"


@pytest.mark.parametrize("name", [c.name for c in CASES if c.copies_of_row0], ids=str)
def test_rows_copied_from_row_0_give_row_0s_outputs(interpreted, name):
    got = interpreted[name]
    for row in BY_NAME[name].copies_of_row0:
        for key in ("residual", "pre", "post", "comb", "y", "q"):
            if got[key] is not None:
                assert_same_bits(got[key][row], got[key][0], name=f"{key} row {row}")


def test_a_second_poison_gives_the_same_bytes(interpreted):
    """Every byte is written (no poison survives) and a second launch is bitwise identical."""
    first, second = interpreted["T5 H256 normal deepgemm"], interpreted["T5 normal deepgemm, poison 0x5A"]
    for key in ("residual", "pre", "post", "comb", "y", "q", "scales"):
        assert_same_bits(second[key], first[key], name=key)


@pytest.mark.parametrize("shifted", [False, True], ids=["normal", "shifted"])
def test_unfused_chain_writes_the_fused_residual_bit_for_bit(interpreted, shifted):
    unfused = interpreted[f"T5 {_order(shifted)} unfused"]
    fused = interpreted[f"T5 H256 {_order(shifted)} deepgemm"]
    assert_same_bits(unfused["residual"], fused["residual"], name="R' unfused vs fused")
    for key in ("pre", "post", "comb", "y"):
        assert_same_bits(unfused[key], fused[key], name=f"{key} unfused vs fused")


@pytest.mark.parametrize(
    ("name", "other"),
    [
        ("T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1",
         "T6 shifted deepgemm, two launches, one-row Sinkhorn items"),
        ("T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1",
         "T6 shifted deepgemm, unfused, one-row Sinkhorn items"),
        ("T6 shifted deepgemm, one launch, one-row Sinkhorn items, lag 1",
         "T6 shifted deepgemm, unfused in one launch each, one-row Sinkhorn items, lag 1"),
        ("T1 shifted swizzled, one launch, one-row Sinkhorn item",
         "T1 shifted swizzled, two launches, one-row Sinkhorn item"),
    ],
    ids=["one vs two launches", "one launch vs unfused", "one launch vs unfused in one launch each",
         "T1 one vs two launches"],
)  # fmt: skip
def test_one_launch_gives_the_bits_of_two_and_of_the_unfused_chain(interpreted, name, other):
    """The same tiles in one launch (the Sinkhorn items summing their rows' records after the A items),
    in two, or as the unfused chain (pair from the quantize kernel): every output the same bits."""
    one, two = interpreted[name], interpreted[other]
    for key in ("residual", "pre", "post", "comb", "y", "q", "scales"):
        assert_same_bits(two[key], one[key], name=f"{key}: {other}")


@pytest.mark.parametrize(("name", "other"), SIDE_PAIRS, ids=[p[0] for p in SIDE_PAIRS])
def test_sinkhorn_on_a_side_stream_gives_the_same_bits(interpreted, name, other):
    """The Sinkhorn items as a launch of their own (one row an item, summing the records themselves) and
    the finish launch without them: every output the bits of the same tiles in two launches."""
    side, two = interpreted[name], interpreted[other]
    # The launcher says where the S items ran: on the side in the shifted ordering only.
    assert side["on_side"] is BY_NAME[name].shifted and two["on_side"] is False
    for key in ("residual", "pre", "post", "comb", "y", "q", "scales"):
        if two[key] is None:
            assert side[key] is None, key
        else:
            assert_same_bits(side[key], two[key], name=f"{key}: {name}")


def test_the_shifted_finish_does_not_depend_on_the_configuration(interpreted):
    """The shifted ordering's y sums the same 16-column slices whatever the A items' split and the
    finish's items: another configuration gives the same y and pair (pre, post' and comb' follow the
    A split, which this does not claim)."""
    first, second = (
        interpreted["T5 H256 shifted deepgemm"],
        interpreted["T5 H256 shifted deepgemm, another config"],
    )
    for key in ("residual", "y", "q", "scales"):
        assert_same_bits(second[key], first[key], name=key)


@pytest.mark.parametrize(
    ("name", "clean", "token"),
    [
        ("T5 normal NaN in residual", "T5 H256 normal deepgemm", 2),
        ("T5 shifted NaN in x", "T5 H256 shifted swizzled_128x4", 3),
    ],
)
def test_a_nan_token_is_nan_and_alone(interpreted, name, clean, token):
    got, want = interpreted[name], interpreted[clean]
    others = [t for t in range(5) if t != token]
    for key in ("residual", "pre", "post", "comb", "y", "q"):
        assert_same_bits(got[key][others], want[key][others], name=f"{key}, other tokens")
    for key in ("pre", "post", "comb", "y"):
        assert torch.isnan(got[key][token]).all(), key
    assert (got["q"][token] == 0x7F).all()
    layout = BY_NAME[name].layout
    spec = scale_spec(5, 256, scale_layout=layout)
    for row in range(5):
        # The scale bytes of one row: where a row of 1s lands in the layout.
        marks = torch.zeros(5, 256 // 32, dtype=torch.uint8)
        marks[row] = 1
        mine = scale_storage_view(scale_to_layout(marks, scale_layout=layout), spec).view(torch.uint8) == 1
        if row == token:
            assert (got["scales"][mine] == 0xFF).all()
        else:
            assert_same_bits(got["scales"][mine], want["scales"][mine], name=f"scales of row {row}")


@pytest.mark.parametrize("name", sorted(PREPARED))
def test_a_prepared_projection_gives_the_same_bits(interpreted, name):
    """fn as an HcProjection (its bf16 pieces read, not cut from fp32 in every step): every output the same."""
    plain, prepared = interpreted[name], interpreted[PREPARED[name]]
    for key in ("residual", "pre", "post", "comb", "y", "q", "scales"):
        if plain[key] is None:
            assert prepared[key] is None, key
        else:
            assert_same_bits(prepared[key], plain[key], name=f"{name}: {key}")
