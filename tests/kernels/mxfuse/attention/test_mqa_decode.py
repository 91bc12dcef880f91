"""The split-KV decode-attention kernel on the GPU against the float32 reference (``mxfuse.attention``).

Metric: every output element within 1e-2 of its reference row's largest magnitude (tests/support/
attention_checks.py says why that bound). Outputs are written into NaN-poisoned buffers, and every cache
position a sequence does not hold is NaN, so an unwritten element or a read past a sequence's end fails.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from attention_checks import assert_attention_matches, make_mqa_inputs

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import witness
from mxfuse.attention import MqaConfig, mqa_decode_attention, mqa_decode_attention_reference
from mxfuse.formats import MxTensor
from mxfuse.kernels import quantize_mxfp8

register(
    on=("h100", "b200", "gb300", "5090"),
    gpus=1,
    est_time={"h100": 22, "b200": 150, "gb300": 150, "5090": 150},
)

LENGTHS = (1, 7, 64, 1000, 4096, 32768)


def _poisoned_out(inputs) -> torch.Tensor:
    tokens, heads, dim = inputs.q.shape
    return torch.full((tokens, heads * dim), float("nan"), dtype=torch.bfloat16, device="cuda")


def _run(inputs, **kwargs) -> torch.Tensor:
    out = _poisoned_out(inputs)
    got = mqa_decode_attention(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out=out, **kwargs)
    assert got is out
    torch.cuda.synchronize()
    return out


def _reference(inputs) -> torch.Tensor:
    return mqa_decode_attention_reference(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale)


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("new_tokens", (1, 4))
@pytest.mark.parametrize("heads", (16, 64))
@pytest.mark.parametrize("head_dim", (64, 512))
def test_matches_reference(length: int, new_tokens: int, heads: int, head_dim: int) -> None:
    inputs = make_mqa_inputs(
        [length], new_tokens=new_tokens, heads=heads, head_dim=head_dim, seed=length + heads, device="cuda"
    )
    with witness.capture() as records:
        out = _run(inputs)
    assert [r["path"] for r in records] == ["attention.kernel"]
    assert_attention_matches(out, _reference(inputs), heads=heads)


@pytest.mark.parametrize("new_tokens", (1, 4))
def test_ragged_lengths_in_one_batch(new_tokens: int) -> None:
    lens = [0, 1, 7, 64, 1000, 4096, 3, 2049]
    inputs = make_mqa_inputs(lens, new_tokens=new_tokens, heads=64, head_dim=512, seed=3, device="cuda")
    assert_attention_matches(_run(inputs), _reference(inputs), heads=64)


def test_length_zero_attends_to_the_new_tokens_only() -> None:
    """lens[b] = 0: new token s sees the new tokens 0..s; token 0 sees itself alone, so its output is
    its own cached vector (softmax over one key is 1), exactly."""
    inputs = make_mqa_inputs([0, 5], new_tokens=4, heads=16, head_dim=512, seed=4, device="cuda")
    out = _run(inputs)
    assert_attention_matches(out, _reference(inputs), heads=16)
    first = out[0].view(16, 512)
    assert_same_bits(first, inputs.kv[0, 0].expand(16, 512), name="token 0 of a sequence with lens 0")


@pytest.mark.parametrize(
    "config",
    [
        MqaConfig(block_n=32, block_m=64, d_parts=1, splits=1),  # no partials: the split writes the output
        MqaConfig(block_n=32, block_m=64, d_parts=2, splits=7),
        MqaConfig(block_n=64, block_m=64, d_parts=1, splits=64, num_stages=2),
        MqaConfig(block_n=16, block_m=16, d_parts=1, splits=300),  # more splits than tiles
        MqaConfig(block_n=64, block_m=64, d_parts=1, splits=128, min_tiles=7),  # short sequences: fewer
    ],
    ids=["splits1", "splits7", "bn64-splits64", "bm16-splits300", "splits128-min7"],
)
@pytest.mark.parametrize("pdl", (False, True))
def test_configurations(config: MqaConfig, pdl: bool) -> None:
    inputs = make_mqa_inputs([4096, 77], new_tokens=2, heads=64, head_dim=512, seed=5, device="cuda")
    out = _run(inputs, config=dataclasses.replace(config, pdl=pdl))
    assert_attention_matches(out, _reference(inputs), heads=64)


def test_nan_in_one_sequence_reaches_only_its_rows() -> None:
    lens = [100, 100, 100]
    inputs = make_mqa_inputs(lens, new_tokens=2, heads=16, head_dim=512, seed=6, device="cuda")
    clean = _run(inputs)
    inputs.kv[1, 50, 7] = float("nan")  # visible to every row of sequence 1
    out = _run(inputs)
    rows = out.view(3, 2, -1)
    assert torch.isnan(rows[1]).all(), "every output of the sequence holding the NaN must be NaN"
    for b in (0, 2):
        assert_same_bits(rows[b], clean.view(3, 2, -1)[b], name=f"sequence {b}")


def test_bitwise_repeatable_and_position_independent() -> None:
    """20 runs give the same bytes; a sequence copied into another slot of the batch gives its bytes."""
    inputs = make_mqa_inputs([3000, 3000, 17], new_tokens=1, heads=64, head_dim=512, seed=7, device="cuda")
    inputs.kv[1] = inputs.kv[0]
    inputs.q[1] = inputs.q[0]
    first = _run(inputs)
    for _ in range(19):
        assert_same_bits(_run(inputs), first, name="repeat")
    assert_same_bits(first[1], first[0], name="duplicated sequence")


def test_graph_replay_with_changed_lengths() -> None:
    inputs = make_mqa_inputs(
        [4000, 10],
        new_tokens=1,
        heads=64,
        head_dim=512,
        capacity=4200,
        seed=8,
        device="cuda",
        poison_unused=None,
    )
    out = _poisoned_out(inputs)
    mqa_decode_attention(
        inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out=out
    )  # warm: partials, compile
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mqa_decode_attention(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out=out)
    for lens in ([4000, 10], [17, 4100], [0, 4199], [2500, 2500]):
        inputs.lens.copy_(torch.tensor(lens))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_attention_matches(out, _reference(inputs), heads=64, name=f"replay with lens {lens}")


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        (lambda i: {"q": i.q.float()}, "q"),
        (lambda i: {"q": i.q[:, :, :48].contiguous()}, "head_dim"),
        (lambda i: {"kv": i.kv.float()}, "kv"),
        (lambda i: {"kv": i.kv.cpu()}, "device"),
        (lambda i: {"lens": i.lens.float()}, "lens"),
        (lambda i: {"lens": i.lens.cpu()}, "lens"),
        (lambda i: {"lens": torch.tensor([5000, 3], device="cuda")}, "lens"),
        (lambda i: {"lens": torch.tensor([-1, 3], device="cuda")}, "lens"),
        (lambda i: {"scale": float("nan")}, "scale"),
        (lambda i: {"q": i.q[:3]}, "multiple"),
    ],
    ids=["q-dtype", "head-dim", "kv-dtype", "kv-device", "lens-dtype", "lens-device", "lens-capacity",
         "lens-negative", "scale-nan", "tokens"],
)  # fmt: skip
def test_bad_input_is_refused_and_nothing_written(change, argument: str) -> None:
    inputs = make_mqa_inputs(
        [100, 3], new_tokens=2, heads=16, head_dim=64, capacity=128, seed=9, device="cuda"
    )
    args = {"q": inputs.q, "kv": inputs.kv, "lens": inputs.lens, "scale": inputs.scale} | change(inputs)
    out = torch.full((4, 16 * 64), 1.5, dtype=torch.bfloat16, device="cuda")
    before = out.clone()
    with pytest.raises((ValueError, TypeError), match=argument):
        mqa_decode_attention(args.pop("q"), args.pop("kv"), args.pop("lens"), out=out, **args)
    torch.cuda.synchronize()
    assert_same_bits(out, before, name="out after a refused call")


def _pair(tokens: int, width: int, layout: str, poison: int, rounding: str = "rceil") -> MxTensor:
    pair = MxTensor.empty(tokens, width, scale_layout=layout, rounding=rounding, device="cuda")
    pair.data.view(torch.uint8).fill_(poison)
    pair.scale_bytes().fill_(poison)
    return pair


def _pair_bytes(pair: MxTensor, tokens: int, width: int, layout: str):
    assert pair.shape == (tokens, width) and pair.scale_layout.value == layout
    return pair.data.view(torch.uint8), pair.scale_bytes()


@pytest.mark.parametrize(
    ("lens", "new", "layout", "rounding", "config"),
    [
        ([4095], 1, "deepgemm", "rceil", None),  # the step at T = 1: table config, 3 padding scale rows
        ([100, 4000, 7], 1, "e8m0", "floor", None),
        ([2000] * 4, 4, "swizzled_128x4", "rceil", None),  # 16 rows padded to 128
        ([3000, 12], 2, "deepgemm", "rceil", MqaConfig(splits=1)),  # no combine: the output is quantized
    ],
    ids=["T1 deepgemm", "T3 e8m0 floor", "T16 swizzled", "one split (quantize)"],
)
def test_the_pair_is_quantize_mxfp8_of_the_bf16_output(lens, new, layout, rounding, config):
    """``out_pair``: every code and scale byte, padding included, under two poisons, is ``quantize_mxfp8``
    of the bf16 output of the same call; with bf16 ``out`` too and without it; the witness says who wrote it."""
    inputs = make_mqa_inputs(
        lens, new_tokens=new, heads=64, head_dim=512, seed=len(lens) + new, device="cuda"
    )
    tokens, width = len(lens) * new, 64 * 512
    out = _run(inputs, config=config)
    want = _pair_bytes(quantize_mxfp8(out, rounding=rounding, scale_layout=layout), tokens, width, layout)
    for poison, with_out in ((0xA5, False), (0x5A, True)):
        pair = _pair(tokens, width, layout, poison, rounding)
        both = _poisoned_out(inputs) if with_out else None
        given = pair if with_out else (pair.data, pair.scale)  # an MxTensor, or a plain tuple converted once
        with witness.capture() as records:
            got = mqa_decode_attention(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out=both,
                                       out_pair=given, rounding=rounding, config=config)  # fmt: skip
        torch.cuda.synchronize()
        assert got.data is pair.data and got.scale is pair.scale and (got is pair) == with_out
        assert (got.scale_layout.value, got.rounding.value) == (layout, rounding)
        (record,) = records
        assert record["pair"] == ("quantize" if config is not None else "combine")
        assert record["out_scale_layout"] == layout
        for name, a, b in zip(
            ("codes", "scales"), _pair_bytes(pair, tokens, width, layout), want, strict=True
        ):
            assert_same_bits(a, b, name=f"{name}, poison {poison:#x}")
        if with_out:
            assert_same_bits(both, out, name="bf16 out written beside the pair")


def test_the_pair_in_a_graph_with_changed_lengths():
    inputs = make_mqa_inputs([4000, 10], new_tokens=1, heads=64, head_dim=512, capacity=4200, seed=18,
                             device="cuda", poison_unused=None)  # fmt: skip
    pair = _pair(2, 64 * 512, "deepgemm", 0xA5)
    mqa_decode_attention(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out_pair=pair)  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mqa_decode_attention(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out_pair=pair)
    for lens in ([17, 4100], [2500, 0]):
        inputs.lens.copy_(torch.tensor(lens))
        graph.replay()
        torch.cuda.synchronize()
        want = quantize_mxfp8(_run(inputs), scale_layout="deepgemm")
        for a, b in zip(_pair_bytes(pair, 2, 64 * 512, "deepgemm"), _pair_bytes(want, 2, 64 * 512, "deepgemm"),
                        strict=True):  # fmt: skip
            assert_same_bits(a, b, name=f"pair after a replay with lens {lens}")
