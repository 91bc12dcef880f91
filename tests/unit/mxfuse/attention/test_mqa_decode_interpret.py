"""The decode-attention kernels' logic on the CPU: the Triton interpreter against the reference.

The kernels run under the interpreter in one child process (``interpreter.run_interpreted``, once per
session, shared by the xdist workers). They run with
``fp32_dots``: the interpreter's bf16 dot does not multiply bf16 values, so both dots take fp32 copies of
the same bf16 operands (P still rounded to bf16, by the interpreter's truncating cast). Each case writes
into NaN-poisoned outputs and partials, over a cache whose unused positions are NaN.
"""

from __future__ import annotations

import pytest
import torch
from attention_checks import assert_attention_matches, make_mqa_inputs
from interpreter import run_interpreted

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.attention import mqa_decode_attention_reference
from mxfuse.formats import quantize_mxfp8_reference, scale_spec, scale_storage_view

register(on=("cpu",), est_time=60)

# name: (lens, new tokens, heads, head_dim, capacity or None, config fields)
CASES = {
    "one split writes the output": (
        [5, 40],
        1,
        4,
        32,
        None,
        dict(block_n=16, block_m=16, d_parts=1, splits=1),
    ),
    "three splits": ([0, 9, 70], 1, 8, 32, None, dict(block_n=16, block_m=16, d_parts=1, splits=3)),
    "two output parts": ([33, 2], 2, 8, 64, None, dict(block_n=16, block_m=16, d_parts=2, splits=4)),
    "two row blocks, S = 4": ([21, 0], 4, 8, 32, None, dict(block_n=16, block_m=16, d_parts=2, splits=2)),
    "more splits than tiles": ([3, 50], 2, 4, 32, None, dict(block_n=16, block_m=16, d_parts=1, splits=9)),
    # More than 64 splits: the combine's two-pass loop over chunks of 64 (fewer take the one-pass path).
    "70 splits, two combine chunks": (
        [1100, 3],
        1,
        4,
        32,
        None,
        dict(block_n=16, block_m=16, d_parts=1, splits=70),
    ),
    "at least 2 tiles a split": (
        [3, 90],
        1,
        4,
        32,
        None,
        dict(block_n=16, block_m=16, splits=5, min_tiles=2),
    ),
    "head_dim 48 (masked dims)": ([30], 1, 4, 48, None, dict(block_n=16, block_m=16, d_parts=2, splits=2)),
    "duplicated sequence": ([60, 60], 1, 4, 32, None, dict(block_n=16, block_m=16, d_parts=1, splits=3)),
    "lens past capacity, clamped": (
        [500, 7],
        2,
        4,
        32,
        48,
        dict(block_n=16, block_m=16, d_parts=1, splits=2),
    ),
}

_WORKER = """
import importlib, sys, torch
md = importlib.import_module("mxfuse.kernels.attention")
cases, pairs = torch.load(sys.argv[1], weights_only=False)
results = {"interpreted": type(md.mqa_split_kernel).__name__}
for name, c in cases.items():
    q, kv, lens = c["q"], c["kv"], c["lens"]
    cfg = md.MqaConfig(**c["config"])
    tokens, heads, dim = q.shape
    out = torch.full((tokens, heads * dim), float("nan"), dtype=torch.bfloat16)
    a, m = md.mqa_partials_numel(kv.shape[0], (tokens // kv.shape[0]) * heads, dim, cfg.splits)
    partials = torch.full((a,), float("nan")), torch.full((m,), float("nan"))
    md.launch_mqa_decode(q, kv, lens, partials=partials, scale=c["scale"], config=cfg, out=out, fp32_dots=True)
    results[name] = out
from mxfuse.formats import MxTensor
for name, c in pairs.items():
    q, kv, lens = c["q"], c["kv"], c["lens"]
    cfg = md.MqaConfig(**c["config"])
    tokens, heads, dim = q.shape
    a, m = md.mqa_partials_numel(kv.shape[0], (tokens // kv.shape[0]) * heads, dim, cfg.splits)
    partials = torch.full((a,), float("nan")), torch.full((m,), float("nan"))
    y = torch.full((tokens, heads * dim), float("nan"), dtype=torch.bfloat16)
    md.launch_mqa_decode(q, kv, lens, partials=partials, scale=c["scale"], config=cfg, out=y, fp32_dots=True,
                         hw_cvt=False)
    layout, width = c["layout"], heads * dim
    got = {"y": y}
    for poison in (0xA5, 0x5A):
        pair = MxTensor.empty(tokens, width, scale_layout=layout, rounding=c["rounding"], device="cpu")
        pair.data.view(torch.uint8).fill_(poison)
        pair.scale_bytes().fill_(poison)
        md.launch_mqa_decode(q, kv, lens, partials=partials, scale=c["scale"], config=cfg, pair=pair,
                             fp32_dots=True, hw_cvt=False)
        got[poison] = (pair.data.view(torch.uint8), pair.scale_bytes())
    results["pair: " + name] = got
torch.save(results, sys.argv[2])
"""


def _inputs(name: str):
    lens, new, heads, dim, capacity, _ = CASES[name]
    if capacity is None:
        return make_mqa_inputs(lens, new_tokens=new, heads=heads, head_dim=dim, seed=len(name))
    x = make_mqa_inputs([0] * len(lens), new_tokens=new, heads=heads, head_dim=dim, capacity=capacity,
                        seed=len(name), poison_unused=None)  # fmt: skip
    x.lens = torch.tensor(lens)
    return x


# The combine writing wo_a's MXFP8 pair (head_dim 128: one scale word a program): name -> (lens, new
# tokens, heads, splits, layout, rounding). Three rows pad to 4 (deepgemm) and 128 (swizzled) scale rows.
PAIR_CASES = {
    "3 sequences, 2 heads, 3 splits, deepgemm": ([5, 40, 0], 1, 2, 3, "deepgemm", "rceil"),
    "2 sequences x 2 tokens, 70 splits (two combine chunks), e8m0 floor": (
        [70, 9],
        2,
        2,
        70,
        "e8m0",
        "floor",
    ),
    "3 sequences, 1 head, 2 splits, swizzled": ([12, 1, 33], 1, 1, 2, "swizzled_128x4", "rceil"),
}


def _pair_inputs(name: str):
    lens, new, heads, _, _, _ = PAIR_CASES[name]
    return make_mqa_inputs(lens, new_tokens=new, heads=heads, head_dim=128, seed=len(name))


def _payload() -> tuple[dict, dict]:
    payload = {}
    for name, case in CASES.items():
        x = _inputs(name)
        if name == "duplicated sequence":
            x.kv[1] = x.kv[0]
            x.q[1] = x.q[0]
        payload[name] = {"q": x.q, "kv": x.kv, "lens": x.lens, "scale": x.scale, "config": case[5]}
    pairs = {}
    for name, (_, _, _, splits, layout, rounding) in PAIR_CASES.items():
        x = _pair_inputs(name)
        config = dict(block_n=16, block_m=16, d_parts=1, splits=splits)
        pairs[name] = {"q": x.q, "kv": x.kv, "lens": x.lens, "scale": x.scale, "config": config,
                       "layout": layout, "rounding": rounding}  # fmt: skip
    return payload, pairs


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    return run_interpreted(tmp_path_factory, "mqa_decode_interpret", _WORKER, _payload, timeout=1200)


def test_kernels_ran_interpreted(interpreted) -> None:
    assert interpreted["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("name", [n for n in CASES if n != "lens past capacity, clamped"])
def test_matches_reference(interpreted, name: str) -> None:
    x = _inputs(name)
    if name == "duplicated sequence":
        x.kv[1] = x.kv[0]
        x.q[1] = x.q[0]
    ref = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    assert_attention_matches(interpreted[name], ref, heads=x.q.shape[1], name=name)


@pytest.mark.parametrize("name", list(PAIR_CASES))
def test_the_combines_pair_is_the_reference_quantization_of_its_output(interpreted, name: str) -> None:
    """Every code and scale byte, padding rows included, under two poisons: ``quantize_mxfp8_reference``
    of the bf16 output the same configuration writes (itself checked against the float32 reference)."""
    lens, new, heads, _, layout, rounding = PAIR_CASES[name]
    got = interpreted["pair: " + name]
    x = _pair_inputs(name)
    ref = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    assert_attention_matches(got["y"], ref, heads=heads, name=name)
    want_q, want_s = quantize_mxfp8_reference(got["y"], rounding=rounding, scale_layout=layout)
    spec = scale_spec(len(lens) * new, heads * 128, scale_layout=layout)
    want_storage = scale_storage_view(want_s, spec).contiguous().view(torch.uint8).flatten()
    for poison in (0xA5, 0x5A):
        codes, storage = got[poison]
        assert_same_bits(codes, want_q.view(torch.uint8), name=f"{name}: codes (poison {poison:#x})")
        assert_same_bits(storage, want_storage, name=f"{name}: scale storage (poison {poison:#x})")


def test_duplicated_sequence_gives_the_same_bits(interpreted) -> None:
    out = interpreted["duplicated sequence"]
    assert_same_bits(out[1], out[0], name="sequence 1 (a copy of sequence 0)")


def test_lengths_past_capacity_are_clamped_in_the_kernel(interpreted) -> None:
    """lens[0] = 500 in a cache of 48 with S = 2 reads as 46 (capacity - S): nothing outside the cache."""
    x = _inputs("lens past capacity, clamped")
    x.lens = torch.tensor([46, 7])
    ref = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    assert_attention_matches(interpreted["lens past capacity, clamped"], ref, heads=x.q.shape[1])
