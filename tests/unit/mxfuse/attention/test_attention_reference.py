"""``mxfuse.attention`` on the CPU: the reference against float64 math written here, the semantics (causal
new tokens, length 0, unused cache never read), argument checks, witness records and restored state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attention_checks import make_mqa_inputs, row_normalised

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits
from mxfuse import witness
from mxfuse.attention import MqaConfig, mqa_decode_attention, mqa_decode_attention_reference
from mxfuse.formats import empty_mxfp8_pair, quantize_mxfp8_reference, scale_spec, scale_storage_view

register(on=("cpu",), est_time=10)


def oracle(q: torch.Tensor, kv: torch.Tensor, lens: list[int], scale: float) -> np.ndarray:
    """float64, one row at a time: out[b*S + s, h] = softmax(scale * K q) K over K = kv[b, :lens[b] + s + 1]."""
    tokens, heads, dim = q.shape
    sequences = kv.shape[0]
    new = tokens // sequences
    qs = q.double().numpy()
    out = np.zeros((tokens, heads, dim))
    for b in range(sequences):
        for s in range(new):
            keys = kv[b, : lens[b] + s + 1].double().numpy()
            for h in range(heads):
                logits = keys @ qs[b * new + s, h] * scale
                p = np.exp(logits - logits.max())
                out[b * new + s, h] = (p / p.sum()) @ keys
    return out.reshape(tokens, heads * dim)


CASES = [
    # (lens, new tokens, heads, head_dim, q scale): sharp softmaxes (q x 4) make the order of the
    # exponent and the max subtraction matter; lens 0 is a sequence with no earlier token.
    ([5], 1, 4, 64, 1.0),
    ([0, 9, 33], 1, 8, 32, 1.0),
    ([0, 3], 4, 2, 64, 1.0),
    ([200, 17, 64], 3, 4, 128, 4.0),
    ([1000], 2, 2, 512, 1.0),
]


@pytest.mark.parametrize(("lens", "new", "heads", "dim", "q_scale"), CASES)
def test_reference_matches_float64_math(lens, new, heads, dim, q_scale) -> None:
    x = make_mqa_inputs(
        lens, new_tokens=new, heads=heads, head_dim=dim, seed=sum(lens) + dim, q_scale=q_scale
    )
    got = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    want = torch.from_numpy(oracle(x.q, x.kv, lens, x.scale))
    a, e = row_normalised(got, want, heads)
    # fp32 math, then one bf16 rounding: within a bf16 step of each element, 1e-5 of the row's max near 0
    assert_close(a, e, rtol=2.0**-8, atol=1e-5, name="reference vs float64")


def test_new_tokens_are_causal_and_later_tokens_unseen() -> None:
    x = make_mqa_inputs([10], new_tokens=3, heads=4, head_dim=64, seed=1)
    before = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    x.kv[0, 11] = torch.randn(64).to(torch.bfloat16) * 3  # new token 1: visible to rows of tokens 1 and 2
    after = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    assert_same_bits(after[0], before[0], name="token 0 does not see token 1")
    assert not torch.equal(after[1], before[1]) and not torch.equal(after[2], before[2])


def test_length_zero_first_token_attends_to_itself() -> None:
    x = make_mqa_inputs([0], new_tokens=2, heads=4, head_dim=64, seed=2)
    out = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    assert_same_bits(out[0].view(4, 64), x.kv[0, 0].expand(4, 64), name="softmax over one key")


def test_unused_cache_is_never_read() -> None:
    x = make_mqa_inputs([4, 30], new_tokens=2, heads=4, head_dim=64, capacity=40, seed=3, poison_unused=None)
    clean = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    x.kv[0, 6:] = float("nan")
    x.kv[1, 32:] = float("inf")
    assert_same_bits(mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale), clean, name="out")


def test_nan_in_a_sequence_reaches_only_its_rows() -> None:
    x = make_mqa_inputs([8, 8], new_tokens=1, heads=2, head_dim=32, seed=4)
    clean = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    x.kv[1, 2, 5] = float("nan")
    out = mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
    assert torch.isnan(out[1]).all()
    assert_same_bits(out[0], clean[0], name="the other sequence")


def test_entry_point_on_cpu_runs_the_reference_into_out_and_witnesses_it() -> None:
    x = make_mqa_inputs([7, 2], new_tokens=2, heads=4, head_dim=64, seed=5)
    out = torch.full((4, 256), float("nan"), dtype=torch.bfloat16)
    with witness.capture() as records:
        got = mqa_decode_attention(x.q, x.kv, x.lens, scale=x.scale, out=out)
    assert got is out
    assert [r["path"] for r in records] == ["attention.reference"]
    assert "cpu" in records[0]["reason"] and records[0]["heads"] == 4 and records[0]["new_tokens"] == 2
    assert_same_bits(out, mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale), name="out")


def test_zero_tokens() -> None:
    kv = torch.zeros(2, 8, 64, dtype=torch.bfloat16)
    out = mqa_decode_attention(
        torch.zeros(0, 4, 64, dtype=torch.bfloat16), kv, torch.tensor([1, 2]), scale=0.125
    )
    assert out.shape == (0, 256) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("flag", (True, False))
def test_reference_restores_the_tf32_flag(flag: bool) -> None:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = flag
    try:
        x = make_mqa_inputs([3], new_tokens=1, heads=2, head_dim=32)
        mqa_decode_attention_reference(x.q, x.kv, x.lens, scale=x.scale)
        assert torch.backends.cuda.matmul.allow_tf32 is flag
        with pytest.raises(ValueError):
            mqa_decode_attention_reference(x.q, x.kv, torch.tensor([99]), scale=x.scale)
        assert torch.backends.cuda.matmul.allow_tf32 is flag
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _bad(**change):
    def build():
        x = make_mqa_inputs([5, 2], new_tokens=2, heads=4, head_dim=64, capacity=16, seed=6)
        args = {"q": x.q, "kv": x.kv, "lens": x.lens, "scale": x.scale} | {
            k: (v(x) if callable(v) else v) for k, v in change.items()
        }
        return args

    return build


BAD = [
    ("q list", _bad(q=lambda x: x.q.tolist()), TypeError, "q must be a torch.Tensor"),
    ("q float32", _bad(q=lambda x: x.q.float()), ValueError, "q must be a bf16"),
    ("q 2-D", _bad(q=lambda x: x.q.flatten(1)), ValueError, "q must be a bf16"),
    ("q strided", _bad(q=lambda x: x.q.transpose(1, 2).contiguous().transpose(1, 2)), ValueError, "unit stride"),
    ("kv fp16", _bad(kv=lambda x: x.kv.half()), ValueError, "kv must be a bf16"),
    ("kv head_dim", _bad(kv=lambda x: x.kv[:, :, :32].contiguous()), ValueError, "kv's head_dim"),
    ("head_dim 8", _bad(q=lambda x: x.q[:, :, :8].contiguous(), kv=lambda x: x.kv[:, :, :8].contiguous()),
     ValueError, "head_dim must be in"),
    ("no heads", _bad(q=lambda x: x.q[:, :0]), ValueError, "at least one head"),
    ("tokens", _bad(q=lambda x: x.q[:3]), ValueError, "multiple of kv's sequence count"),
    ("capacity", _bad(kv=lambda x: x.kv[:, :1].contiguous()), ValueError, "capacity"),
    ("kv meta", _bad(kv=lambda x: x.kv.to("meta")), ValueError, "one device"),
    ("lens float", _bad(lens=lambda x: x.lens.float()), ValueError, "lens must be an int32 or int64"),
    ("lens shape", _bad(lens=lambda x: x.lens[:1]), ValueError, r"lens must be an int32 or int64 tensor of shape \(2,\)"),
    ("lens negative", _bad(lens=torch.tensor([-1, 2])), ValueError, r"lens\[0\] = -1"),
    ("lens past capacity", _bad(lens=torch.tensor([5, 15])), ValueError, r"lens\[1\] = 15"),
    ("lens at capacity", _bad(lens=torch.tensor([14, 2])), None, None),  # 14 + 2 = 16: the last slot, valid
    ("scale nan", _bad(scale=float("nan")), ValueError, "scale must be"),
    ("scale 0", _bad(scale=0.0), ValueError, "scale must be"),
    ("scale bool", _bad(scale=True), ValueError, "scale must be"),
    ("scale tensor", _bad(scale=torch.tensor(0.1)), ValueError, "scale must be"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "error", "match"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_naming_the_argument(build, error, match) -> None:
    args = build()
    out = torch.full((4, 256), 1.5, dtype=torch.bfloat16)
    before = out.clone()
    if error is None:
        mqa_decode_attention(args.pop("q"), args.pop("kv"), args.pop("lens"), **args)
        return
    with pytest.raises(error, match=match):
        mqa_decode_attention(args.pop("q"), args.pop("kv"), args.pop("lens"), out=out, **args)
    assert_same_bits(out, before, name="out after a refused call")


def test_bad_out_and_config() -> None:
    x = make_mqa_inputs([5, 2], new_tokens=1, heads=4, head_dim=64, seed=7)
    call = lambda **kw: mqa_decode_attention(x.q, x.kv, x.lens, scale=x.scale, **kw)  # noqa: E731
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        call(out=[0.0])
    with pytest.raises(ValueError, match=r"out must be bf16 of shape \(2, 256\)"):
        call(out=torch.empty(2, 255, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="out must be bf16"):
        call(out=torch.empty(2, 256))
    with pytest.raises(ValueError, match="unit stride"):
        call(out=torch.empty(256, 2, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match="must not overlap"):
        call(out=x.q.view(2, 256))
    with pytest.raises(TypeError, match="config must be an MqaConfig"):
        call(config={"splits": 2})


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"block_n": 24}, "block_n must be a positive power of two"),
        ({"block_n": 8}, ">= 16"),
        ({"d_parts": 4}, "d_parts must be 1 or 2"),
        ({"splits": 0}, r"splits must be an integer in \[1, 1024\]"),
        ({"num_warps": 3}, "num_warps must be a positive power of two"),
        ({"num_stages": 0}, "num_stages must be a positive integer"),
    ],
)
def test_config_is_validated(fields, match) -> None:
    with pytest.raises(ValueError, match=match):
        MqaConfig(**fields)


@pytest.mark.parametrize("layout", ["deepgemm", "e8m0", "swizzled_128x4"])
def test_a_pair_on_cpu_is_the_reference_quantized(layout) -> None:
    inputs = make_mqa_inputs([5, 9, 0], new_tokens=1, heads=2, head_dim=128, seed=4)
    pair = empty_mxfp8_pair(3, 256, scale_layout=layout, device="cpu")
    with witness.capture() as records:
        got = mqa_decode_attention(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale, out_pair=pair)
    assert got.data is pair[0] and got.scale is pair[1] and got.scale_layout.value == layout
    assert [(r["path"], r["out_scale_layout"]) for r in records] == [("attention.reference", layout)]
    want_q, want_s = quantize_mxfp8_reference(
        mqa_decode_attention_reference(inputs.q, inputs.kv, inputs.lens, scale=inputs.scale),
        scale_layout=layout,
    )
    spec = scale_spec(3, 256, scale_layout=layout)
    assert_same_bits(pair[0].view(torch.uint8), want_q.view(torch.uint8), name="codes")
    assert_same_bits(scale_storage_view(pair[1], spec), scale_storage_view(want_s, spec), name="scales")


def test_bad_out_pair_is_refused_naming_it() -> None:
    inputs = make_mqa_inputs([5, 9], new_tokens=1, heads=2, head_dim=128, seed=5)
    args = (inputs.q, inputs.kv, inputs.lens)
    good = empty_mxfp8_pair(2, 256, scale_layout="deepgemm", device="cpu")
    with pytest.raises(ValueError, match=r"out_pair\[0\] must have dtype"):
        mqa_decode_attention(*args, scale=inputs.scale, out_pair=(good[0].view(torch.uint8), good[1]))
    with pytest.raises(ValueError, match=r"out_pair\[0\] must have shape"):
        mqa_decode_attention(
            *args,
            scale=inputs.scale,
            out_pair=empty_mxfp8_pair(3, 256, scale_layout="deepgemm", device="cpu"),
        )
    with pytest.raises(ValueError, match=r"out_pair\[1\]"):
        mqa_decode_attention(*args, scale=inputs.scale, out_pair=(good[0], torch.zeros(2, 3)))
    with pytest.raises(ValueError, match="out_scale_layout describes out_pair"):
        mqa_decode_attention(*args, scale=inputs.scale, out_scale_layout="deepgemm")
    with pytest.raises(ValueError, match="rounding"):
        mqa_decode_attention(*args, scale=inputs.scale, out_pair=good, rounding="up")
