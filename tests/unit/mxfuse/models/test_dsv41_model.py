"""The DeepSeek-V4.1 attention sublayer on the CPU (tiny config, torch backends): checkpoint format and
round trip, the lifecycle, the wiring against a float64 oracle, the three paths and their witness
records, fallback, tensor-parallel shards, reloads and bad input.

Expected values come from the checkpoint's raw tensors by plain arithmetic (dsv41_cases), never from the
model; paths that must agree are compared bit for bit.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from dsv41_cases import (
    BUDGET,
    ORACLE_BF16_BUDGET,
    assert_same_outputs,
    assert_within_budget,
    decode_inputs,
    native_value,
    oracle_step,
    paths,
)
from safetensors import safe_open
from safetensors.torch import load_file

from gpumatrix import register
from gpumatrix.compare import assert_diff, assert_same_bits
from mxfuse import witness
from mxfuse.formats import MxTensor, quantize_mxfp8_reference
from mxfuse.hc import HcProjection
from mxfuse.layers import LayerNotReadyError, forward_context
from mxfuse.models.dsv41 import (
    CONFIGS,
    AttentionSublayer,
    Dsv41Config,
    HcState,
    KvCache,
    expected_tensors,
    load_sublayer,
    make_checkpoint,
    quantize_blocks_32x32,
    read_checkpoint,
)
from mxfuse.models.dsv41.__main__ import main as cli

register(on=("cpu",), est_time=25)

TINY = CONFIGS["tiny"]
PATHS = ("fused", "unfused", "bf16")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("dsv41") / "tiny"
    make_checkpoint(directory, TINY, seed=7)
    return str(directory)


@pytest.fixture(scope="module")
def raw(checkpoint) -> dict[str, torch.Tensor]:
    return load_file(f"{checkpoint}/model.safetensors")


@pytest.fixture(scope="module")
def models(checkpoint) -> dict[str, AttentionSublayer]:
    return {p: load_sublayer(checkpoint, TINY, path=p) for p in PATHS}


def _run(model: AttentionSublayer, state: HcState, cache: KvCache, **kwargs):
    with witness.capture() as records:
        out = model(state, cache.clone(), **kwargs)
    return out, records


# ---- config -------------------------------------------------------------------------------------------


def test_the_named_configs_have_the_v41_flash_shapes():
    flash, tp2, tp4 = CONFIGS["flash"], CONFIGS["flash-tp2"], CONFIGS["flash-tp4"]
    assert (flash.hidden, flash.wqkv_a_out, flash.group_width, flash.wo_b_in) == (5120, 1792, 4096, 8192)
    assert (flash.local_heads, flash.local_groups, flash.rms_norm_eps) == (64, 8, 1e-20)
    assert (tp2.local_heads, tp2.local_groups, tp2.wqkv_a_out, tp2.wo_b_in) == (32, 4, 1792, 4096)
    assert (tp4.local_heads, tp4.local_groups, tp4.wqkv_a_out, tp4.wo_b_in) == (16, 2, 1792, 2048)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden": 200}, "hidden"),
        ({"o_lora_rank": 96}, "o_lora_rank"),
        ({"heads": 5}, "o_groups"),
        ({"tp_size": 3}, "tp_size"),
        ({"tp_size": 2, "tp_rank": 2}, "tp_rank"),
        ({"hc_mult": 2}, "hc_mult"),
        ({"head_dim": 0}, "head_dim"),
        ({"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    ],
    ids=lambda v: str(v),
)
def test_bad_configs_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        Dsv41Config(**{**TINY.model_dims(), **change})


# ---- checkpoint ---------------------------------------------------------------------------------------


def test_the_checkpoint_holds_every_tensor_in_the_native_format(checkpoint):
    expected = expected_tensors(TINY)
    with safe_open(f"{checkpoint}/model.safetensors", framework="pt") as f:
        names = set(f.keys())
        assert names == {f"layers.0.{n}" for n in expected}
        for name, (dtype, shape) in expected.items():
            tensor = f.get_tensor(f"layers.0.{name}")
            want = torch.float8_e8m0fnu if dtype == "e8m0" else dtype
            assert (tensor.dtype, tuple(tensor.shape)) == (want, shape), name
    meta = json.loads(open(f"{checkpoint}/config.json").read())
    assert meta["weight_block_size"] == [32, 32] and meta["model_dims"] == TINY.model_dims()


def test_weights_have_the_stated_magnitudes(raw):
    # N(0, 1/K) before quantization: the dequantized weight's std is K**-0.5 within sampling error.
    for name in ("attn.wq_a", "attn.wo_a", "attn.wo_b"):
        w = native_value(raw[f"layers.0.{name}.weight"], raw[f"layers.0.{name}.scale"])
        assert abs(float(w.std()) * w.shape[1] ** 0.5 - 1.0) < 0.05, name
    assert abs(float(raw["layers.0.hc_attn_fn"].std()) - 1e-2) < 1e-3


def test_block_quantization_follows_the_rceil_rule_per_32x32_block():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 96, generator=g) * torch.exp2(torch.randint(-6, 6, (64, 1), generator=g).float())
    q, s = quantize_blocks_32x32(w)
    # The block's scale is the largest of its rows' 1x32 RCEIL scales (the rule is monotone in amax) ...
    row_q, row_s = quantize_mxfp8_reference(w, scale_layout="e8m0")
    block_max = row_s.view(2, 32, 3).amax(dim=1)
    assert_same_bits(s, block_max, name="block scales")
    # ... and a 1x32 group whose own scale is the block's is quantized exactly as the reference does.
    own = row_s == s.repeat_interleave(32, 0)
    mask = own.repeat_interleave(32, 1)
    assert int(own.sum()) >= 6
    assert_same_bits(q.view(torch.uint8)[mask], row_q.view(torch.uint8)[mask], name="codes")


def test_the_cli_writes_a_deterministic_checkpoint(tmp_path):
    runner = CliRunner()
    outputs = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        result = runner.invoke(
            cli, ["make-checkpoint", str(tmp_path / name), "--seed", str(seed), "--config", "tiny"]
        )
        assert result.exit_code == 0, result.output
        outputs.append((tmp_path / name / "model.safetensors").read_bytes())
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]
    bad = runner.invoke(cli, ["make-checkpoint", str(tmp_path / "d"), "--seed", "1", "--config", "huge"])
    assert bad.exit_code != 0 and "huge" in bad.output


def test_a_checkpoint_for_other_dims_is_refused(checkpoint):
    other = Dsv41Config(**{**TINY.model_dims(), "q_lora_rank": 64}, name="other")
    with pytest.raises(ValueError, match="q_lora_rank = 128 in the checkpoint, 64 in the config"):
        next(iter(read_checkpoint(checkpoint, other)))


# ---- lifecycle and loading ----------------------------------------------------------------------------


def test_loaded_weights_are_the_checkpoints_values(models, raw):
    wq_a = native_value(raw["layers.0.attn.wq_a.weight"], raw["layers.0.attn.wq_a.scale"])
    wkv = native_value(raw["layers.0.attn.wkv.weight"], raw["layers.0.attn.wkv.scale"])
    stacked = torch.cat([wq_a, wkv])
    fused, bf16 = models["fused"], models["bf16"]
    assert (fused.wqkv_a.takes_mxfp8_input, fused.wo_b.takes_mxfp8_input) == (True, True)
    assert (bf16.wqkv_a.takes_mxfp8_input, bf16.wqkv_a.processed.weight_format) == (False, "bf16")
    # The MXFP8 paths keep the native codes and scales (expanded per row); bf16 holds their exact values.
    assert_same_bits(
        fused.wqkv_a.weight.view(torch.uint8),
        torch.cat([raw["layers.0.attn.wq_a.weight"], raw["layers.0.attn.wkv.weight"]]).view(torch.uint8),
        name="codes",
    )
    assert_same_bits(bf16.wqkv_a.weight.to(torch.float64), stacked, name="bf16 wqkv_a")
    wo_b = native_value(raw["layers.0.attn.wo_b.weight"], raw["layers.0.attn.wo_b.scale"])
    assert_same_bits(bf16.wo_b.weight.to(torch.float64), wo_b, name="bf16 wo_b")
    wo_a = native_value(raw["layers.0.attn.wo_a.weight"], raw["layers.0.attn.wo_a.scale"])
    assert_same_bits(bf16.wo_a_bf16.to(torch.float64).reshape(wo_a.shape), wo_a, name="bf16 wo_a")
    assert_same_bits(
        fused.wo_a.scale_e8m0.reshape(-1, wo_a.shape[1] // 32),
        raw["layers.0.attn.wo_a.scale"].view(torch.uint8).repeat_interleave(32, 0),
        name="wo_a",
    )


def test_the_lifecycle_refuses_out_of_order_calls(checkpoint):
    model = AttentionSublayer(TINY, path="fused")
    state, cache = decode_inputs(TINY, 2, seed=1)
    with pytest.raises(LayerNotReadyError, match="load_weights"):
        model(state, cache)
    with pytest.raises(LayerNotReadyError, match="load_weights"):
        model.process_weights_after_loading()
    weights = dict(read_checkpoint(checkpoint, TINY))
    model.load_weights((k, v) for k, v in weights.items() if k != "attn.wkv.scale")
    with pytest.raises(ValueError, match="missing \\['attn.wkv.scale'\\]"):
        model.process_weights_after_loading()
    with pytest.raises(LayerNotReadyError):
        model(state, cache)


@pytest.mark.parametrize(
    ("name", "tensor", "match"),
    [
        ("attn.wq_c.weight", torch.zeros(1), "unexpected tensor 'attn.wq_c.weight'"),
        ("attn.wq_b.weight", torch.zeros(256, 128), "attn.wq_b.weight must be torch.bfloat16"),
        (
            "attn.wo_b.scale",
            torch.zeros(8, 9, dtype=torch.uint8),
            "attn.wo_b.scale must be .* shape \\[8, 8\\]",
        ),
        ("hc_attn_fn", torch.zeros(24, 1024, dtype=torch.float64), "hc_attn_fn must be torch.float32"),
    ],
    ids=["unknown", "dtype", "scale shape", "hc dtype"],
)
def test_bad_checkpoint_tensors_are_refused_by_name(name, tensor, match):
    model = AttentionSublayer(TINY, path="unfused")
    good = ("attn_norm.weight", torch.ones(TINY.hidden, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=match):
        model.load_weights([good, (name, tensor)])
    assert model.state == "requested"  # nothing of the refused call was staged
    with pytest.raises(LayerNotReadyError, match="nothing to process"):
        model.process_weights_after_loading()


def test_a_reload_copies_in_place_and_computes_with_the_new_weights(tmp_path, checkpoint):
    other = tmp_path / "other"
    make_checkpoint(other, TINY, seed=8)
    state, cache = decode_inputs(TINY, 4, seed=2)
    for path in PATHS:
        model = load_sublayer(checkpoint, TINY, path=path)
        before = {n: t.data_ptr() for n, t in model.named_parameters()}
        model.load_weights(read_checkpoint(other, TINY))
        result = model.process_weights_after_loading()
        assert result.graph_safe and result.rebound == ()
        assert {n: t.data_ptr() for n, t in model.named_parameters()} == before
        for fn in ("hc_attn_fn", "hc_ffn_fn"):  # the projections' bf16 pieces follow the new weights
            assert_same_bits(
                getattr(model, f"{fn}_pieces"), HcProjection.prepare(getattr(model, fn)).pieces, name=fn
            )
        fresh = load_sublayer(other, TINY, path=path)
        assert_same_outputs(model(state, cache.clone()), fresh(state, cache.clone()), name=path)


# ---- the paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_fused_and_unfused_are_bit_identical_and_witnessed(models, tokens):
    state, cache = decode_inputs(TINY, tokens, seed=tokens)
    fused, fused_records = _run(models["fused"], state, cache, context="decode")
    unfused, unfused_records = _run(models["unfused"], state, cache, context="decode")
    assert_same_outputs(fused, unfused, name=f"T={tokens}")
    sites = ("layers.0.attn.wqkv_a", "layers.0.attn.wq_b", "layers.0.attn.wo_b")
    assert paths(fused_records, "linear.") == [("linear.pair_consumed", s) for s in sites]
    assert paths(unfused_records, "linear.") == [("linear.self_quantized", s) for s in sites]
    # The producers wrote the pairs in the layout each consumer reads (CPU: the reference producers).
    m = models["fused"]
    (b1, _) = [r for r in fused_records if r["path"].startswith("hc.boundary")]
    (einsum,) = [r for r in fused_records if r["path"].startswith("einsum.wo_a")]
    (q_norm,) = [r for r in fused_records if r["path"].startswith("norm.")]
    assert b1["scale_layout"] == m.wqkv_a.input_scale_layout.value
    assert q_norm["scale_layout"] == m.wq_b.input_scale_layout.value
    assert einsum["out_scale_layout"] == m.wo_b.input_scale_layout.value
    assert [r["scale_layout"] for r in unfused_records if r["path"].startswith("norm.")] == [None]
    assert all("scale_layout" not in r for r in unfused_records if r["path"].startswith("hc.boundary"))
    (einsum,) = [r for r in unfused_records if r["path"].startswith("einsum.wo_a")]
    assert (einsum["out_scale_layout"], einsum["input"]) == (None, "quantized here")
    # The attention is wo_a's producer on the fused path only: its pair (deepgemm scales) read as it is.
    (fused_einsum,) = [r for r in fused_records if r["path"].startswith("einsum.wo_a")]
    assert (fused_einsum["input"], fused_einsum["scale_layout"]) == ("pair", "deepgemm")
    (attention,) = [r for r in fused_records if r["path"].startswith("attention.")]
    assert attention["out_scale_layout"] == "deepgemm"
    (attention,) = [r for r in unfused_records if r["path"].startswith("attention.")]
    assert "out_scale_layout" not in attention


def test_target_verify_and_the_next_pair_are_bit_identical(checkpoint):
    state, cache = decode_inputs(TINY, 8, seed=3, new=4)  # two sequences, four drafted tokens each
    outs = {}
    for path in ("fused", "unfused"):
        model = load_sublayer(checkpoint, TINY, path=path, next_pair_layout="deepgemm")
        outs[path], _ = _run(model, state, cache, context="target_verify")
    assert outs["fused"].pair is not None
    assert_same_outputs(outs["fused"], outs["unfused"], name="target_verify")
    q, s = quantize_mxfp8_reference(outs["fused"].y, scale_layout="deepgemm")
    want = MxTensor(q, s, "deepgemm")
    assert_same_outputs(
        outs["fused"], outs["fused"].__class__(**{**outs["fused"].__dict__, "pair": want}), name="pair of y"
    )


@pytest.mark.parametrize(("tokens", "new"), [(1, 1), (16, 1), (8, 2), (4, 4)])
def test_the_paths_match_an_independent_float64_oracle(models, raw, tokens, new):
    state, cache = decode_inputs(TINY, tokens, seed=20 + tokens, new=new)
    expected = oracle_step(raw, TINY, state, cache.clone())
    bf16, _ = _run(models["bf16"], state, cache)
    assert_within_budget(bf16, expected, name="bf16 vs oracle", budget=ORACLE_BF16_BUDGET)
    for path in ("fused", "unfused"):
        out, _ = _run(models[path], state, cache)
        assert_within_budget(out, expected, name=f"{path} vs oracle")
        assert_within_budget(out, bf16, name=f"{path} vs bf16")


def test_the_cache_receives_the_new_tokens_kv(models):
    state, cache = decode_inputs(TINY, 4, seed=5, new=2)
    for path in PATHS:
        before = cache.clone()
        after = cache.clone()
        models[path](state, after)
        written = torch.zeros_like(after.kv, dtype=torch.bool)
        for b in range(2):
            start = int(before.lens[b])
            written[b, start : start + 2] = True
        assert_same_bits(after.kv[~written], before.kv[~written], name=f"{path}: untouched positions")
        assert bool((after.kv[written] != before.kv[written]).any())
        assert_same_bits(after.lens, before.lens, name="lens are the engine's to advance")


@pytest.mark.parametrize(
    ("tokens", "new", "mode", "failed", "reason"),
    [(2049, 1, "decode", ["rows"], "2049 rows > 2048"), (8, 8, "prefill", ["mode"], "forward mode prefill")],
    ids=["T=2049", "prefill"],
)
def test_the_fused_model_falls_back_with_the_gates_reason(models, tokens, new, mode, failed, reason):
    state, cache = decode_inputs(TINY, tokens, seed=9, new=new, capacity=8)
    fused, records = _run(models["fused"], state, cache, context=mode)
    unfused, _ = _run(models["unfused"], state, cache, context=mode)
    assert_same_outputs(fused, unfused, name=mode)
    linear = [r for r in records if r["path"].startswith("linear.")]
    assert [(r["path"], r["failed"]) for r in linear] == [("linear.bf16", failed)] * 3
    assert all(reason in r["reason"] for r in linear)
    assert all("scale_layout" not in r for r in records if r["path"].startswith("hc.boundary"))
    assert [r["out_scale_layout"] for r in records if r["path"].startswith("einsum.wo_a")] == [None]
    assert [r["scale_layout"] for r in records if r["path"].startswith("norm.")] == [None]


def test_the_ambient_forward_context_reaches_the_gate(models):
    state, cache = decode_inputs(TINY, 2, seed=10)
    with forward_context("prefill"):
        _, records = _run(models["fused"], state, cache)
    assert [r["mode_from"] for r in records if r["path"] == "linear.bf16"] == ["forward_context"] * 3


def test_a_nan_token_stays_nan_and_never_passes_the_budget(models):
    state, cache = decode_inputs(TINY, 4, seed=11)
    clean, _ = _run(models["fused"], state, cache)
    poisoned = state.clone()
    poisoned.x[2, 5] = float("nan")
    out, _ = _run(models["fused"], poisoned, cache)
    assert bool(out.attn_out[2].isnan().all()) and bool(out.y[2].isnan().any())
    keep = torch.tensor([0, 1, 3])
    assert_same_bits(out.attn_out[keep], clean.attn_out[keep], name="other tokens")
    with pytest.raises(AssertionError):
        assert_diff(out.attn_out, clean.attn_out, max_diff=BUDGET["attn_out"])


# ---- tensor parallelism -------------------------------------------------------------------------------


def test_tensor_parallel_ranks_read_their_shard(tmp_path):
    full = Dsv41Config(**{**TINY.model_dims(), "name": "tiny-tp1"})
    make_checkpoint(tmp_path, full, seed=12)
    raw = load_file(str(tmp_path / "model.safetensors"))
    halves = {
        "attn.wq_b.weight": 0,
        "attn.wo_a.weight": 0,
        "attn.wo_a.scale": 0,
        "attn.wo_b.weight": 1,
        "attn.wo_b.scale": 1,
    }
    for rank in (0, 1):
        config = Dsv41Config(**{**TINY.model_dims(), "name": "tiny-tp2", "tp_size": 2, "tp_rank": rank})
        shard = dict(read_checkpoint(tmp_path, config))
        for name, tensor in shard.items():
            whole = raw[f"layers.0.{name}"]
            if name in halves:
                whole = whole.chunk(2, dim=halves[name])[rank]
            assert_same_bits(
                tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor,
                whole.view(torch.uint8) if whole.element_size() == 1 else whole,
                name=name,
            )
        state, cache = decode_inputs(config, 4, seed=13)
        outs = {p: load_sublayer(tmp_path, config, path=p)(state, cache.clone()) for p in PATHS}
        assert outs["fused"].attn_out.shape == (4, config.hidden)
        assert_same_outputs(outs["fused"], outs["unfused"], name=f"rank {rank}")
        assert_within_budget(outs["fused"], outs["bf16"], name=f"rank {rank}")


# ---- bad input ----------------------------------------------------------------------------------------


def _replace(obj, **changes):
    return obj.__class__(**{**obj.__dict__, **changes})


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda s, c: (_replace(s, x=s.x.float()), c), ValueError, "state.x must be torch.bfloat16"),
        (
            lambda s, c: (_replace(s, residual=s.residual[:, :3].contiguous()), c),
            ValueError,
            "state.residual",
        ),
        (
            lambda s, c: (_replace(s, comb=s.comb.transpose(1, 2)), c),
            ValueError,
            "state.comb must be contiguous",
        ),
        (lambda s, c: (_replace(s, prev_pre=None), c), TypeError, "state.prev_pre must be a torch.Tensor"),
        (lambda s, c: (_replace(s, x=s.x[:0]), c), ValueError, "T >= 1"),
        (lambda s, c: (s, _replace(c, lens=c.lens[:3])), ValueError, "cache.lens"),
        (
            lambda s, c: (s, _replace(c, lens=c.lens.float())),
            ValueError,
            "cache.lens must be an int32 or int64",
        ),
        (lambda s, c: (s, _replace(c, kv=c.kv[:, :, :32].contiguous())), ValueError, "cache.kv must be"),
        (
            lambda s, c: (s, _replace(c, lens=c.lens + 40)),
            ValueError,
            "cache.lens must be in .* = \\[0, 39\\]",
        ),
        (lambda s, c: (s, _replace(c, kv=c.kv[:3], lens=c.lens[:3])), ValueError, "multiple of the cache's"),
        (lambda s, c: (s.x, c), TypeError, "state must be an HcState"),
        (lambda s, c: (s, c.kv), TypeError, "cache must be a KvCache"),
    ],
    ids=[
        "x dtype",
        "residual shape",
        "comb strides",
        "prev_pre missing",
        "T=0",
        "lens shape",
        "lens dtype",
        "kv head_dim",
        "lens range",
        "T % B",
        "state type",
        "cache type",
    ],
)
def test_bad_inputs_are_refused_before_anything_is_written(models, make, error, match):
    state, cache = decode_inputs(TINY, 4, seed=14)
    state, cache_arg = make(state, cache)
    kv_before = cache.kv.clone()
    with pytest.raises(error, match=match):
        models["fused"](state, cache_arg)
    assert_same_bits(cache.kv, kv_before, name="cache after a refused call")


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="path must be one of"):
        AttentionSublayer(TINY, path="fp4")
    with pytest.raises(TypeError, match="config must be a Dsv41Config"):
        AttentionSublayer(TINY.model_dims())
    with pytest.raises(ValueError, match="layer must be"):
        AttentionSublayer(TINY, layer=-1)
