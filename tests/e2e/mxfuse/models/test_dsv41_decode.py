"""The DeepSeek-V4.1-Flash attention sublayer on one GPU at the real dims, from a checkpoint file.

Contracts: the fused path (boundary kernel writes wqkv_a's pair, wo_a's epilogue writes wo_b's pair,
both linears consume them) equals the unfused path (bf16 producers, each linear quantizes its own input)
bit for bit, eagerly and as one captured CUDA graph per decode step replayed on fresh inputs; the witness
shows which path ran; at T = 2049 and in prefill the fused model falls back with the gate's reason and
still equals the unfused one; both stay within the stated calc_diff budget of the all-bf16 baseline
(dsv41_cases.BUDGET), and the bf16 path within bf16 roundings of a float64 oracle.

Every GPU class registered below has a backend that consumes MXFP8 pairs (Triton on sm_89+, DeepGEMM
or FlashInfer where installed): a device whose linears end up unable to take pairs fails here.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from dsv41_cases import (
    ORACLE_BF16_BUDGET,
    assert_same_outputs,
    assert_within_budget,
    decode_inputs,
    oracle_step,
    paths,
)
from gemm_routing import expected_call_backend
from safetensors.torch import load_file

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import witness
from mxfuse.gemm import select_backend
from mxfuse.kernels.pdl import programmatic_launch
from mxfuse.models.dsv41 import CONFIGS, AttentionSublayer, StepOutputs, load_sublayer, make_checkpoint

register(
    on=("h100", "b200", "gb300", "5090"),
    gpus=1,
    est_time={"h100": 89, "b200": 170, "gb300": 170, "5090": 170},
)

FLASH, TP4 = CONFIGS["flash"], CONFIGS["flash-tp4"]
TOKENS = (1, 4, 16, 64)
CAPACITY = 256  # KV positions per sequence; the benchmark runs 4096
SITES = ("layers.0.attn.wqkv_a", "layers.0.attn.wq_b", "layers.0.attn.wo_b")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("dsv41") / "flash"
    make_checkpoint(directory, FLASH, seed=0, device="cuda")  # the whole model: TP4 ranks read their shard
    return str(directory)


def _load(checkpoint: str, config, path: str, **kwargs) -> AttentionSublayer:
    return load_sublayer(checkpoint, config, path=path, device="cuda", **kwargs)


@pytest.fixture(scope="module")
def models(checkpoint) -> dict[str, AttentionSublayer]:
    fused = _load(checkpoint, FLASH, "fused")
    for layer in (fused.wqkv_a, fused.wq_b, fused.wo_b):
        assert layer.takes_mxfp8_input, f"{layer.site} takes no MXFP8 pairs here: {layer.processed.reason}"
    # The final boundary also writes the FFN's pair, in a layout this device's consumer reads.
    layout = fused.wqkv_a.input_scale_layout
    return {
        "fused": _load(checkpoint, FLASH, "fused", next_pair_layout=layout),
        "unfused": _load(checkpoint, FLASH, "unfused", next_pair_layout=layout),
        "bf16": _load(checkpoint, FLASH, "bf16"),
    }


def _step(model: AttentionSublayer, state, cache, *, context: str = "decode"):
    with witness.capture() as records:
        out = model(state, cache.clone(), context=context)
    torch.cuda.synchronize()
    return out, records


def _assert_fused_records(records: list[dict], model: AttentionSublayer) -> None:
    # Each linear on the backend the checked-in Gluon table routes its shape and rows to (else the
    # device's shape-free choice): tests/support/gemm_routing.py.
    default, _ = select_backend("cuda")
    linear = [r for r in records if r["path"].startswith("linear.")]
    (rows,) = {r["rows"] for r in linear}  # every linear of the step sees the step's T rows
    expected = []
    for site in SITES:
        n, k = getattr(model, site.rsplit(".", 1)[1]).weight.shape
        expected.append(
            ("linear.pair_consumed", site, expected_call_backend("cuda", n, k, rows, default=default))
        )
    linear = [(r["path"], r["site"], r["backend"]) for r in linear]
    assert linear == expected
    boundary = [r for r in records if r["path"].startswith("hc.boundary")]
    final = "hc.boundary.kernel.pair" if model.next_pair_layout is not None else "hc.boundary.kernel.bf16"
    assert [r["path"] for r in boundary] == ["hc.boundary.kernel.pair", final]
    assert boundary[0]["scale_layout"] == model.wqkv_a.input_scale_layout.value
    (q_norm,) = [r for r in records if r["path"].startswith("norm.")]  # wq_b's producer: the norm kernel
    assert (q_norm["path"], q_norm["scale_layout"]) == (
        "norm.kernel.pair",
        model.wq_b.input_scale_layout.value,
    )
    (einsum,) = [r for r in records if r["path"].startswith("einsum.wo_a")]
    assert (einsum["path"], einsum["out_scale_layout"], einsum["input"]) == (
        "einsum.wo_a.kernel.pair",
        model.wo_b.input_scale_layout.value,
        "pair",
    )
    # wo_a's input pair: written by the attention's combine kernel, deepgemm scales.
    (attention,) = [r for r in records if r["path"].startswith("attention.")]
    assert (attention["path"], attention["pair"], attention["out_scale_layout"]) == (
        "attention.kernel",
        "combine",
        "deepgemm",
    )


def _assert_unfused_records(records: list[dict]) -> None:
    assert paths(records, "linear.") == [("linear.self_quantized", site) for site in SITES]
    assert [r["path"] for r in records if r["path"].startswith("hc.boundary")] == [
        "hc.boundary.kernel.bf16"
    ] * 2
    assert [(r["path"], r["input"]) for r in records if r["path"].startswith("einsum.wo_a")] == [
        ("einsum.wo_a.kernel.bf16", "quantized here")
    ]
    assert [r["path"] for r in records if r["path"].startswith("norm.")] == ["norm.kernel.bf16"]


@pytest.mark.parametrize("tokens", TOKENS)
def test_fused_equals_unfused_and_both_stay_within_budget_of_bf16(models, tokens):
    state, cache = decode_inputs(FLASH, tokens, seed=tokens, capacity=CAPACITY, device="cuda")
    fused, fused_records = _step(models["fused"], state, cache)
    unfused, unfused_records = _step(models["unfused"], state, cache)
    bf16, bf16_records = _step(models["bf16"], state, cache)
    _assert_fused_records(fused_records, models["fused"])
    _assert_unfused_records(unfused_records)
    assert paths(bf16_records, "linear.") == [("linear.bf16", site) for site in SITES]
    for records in (fused_records, unfused_records, bf16_records):  # every path attends with the kernel
        assert [r["path"] for r in records if r["path"].startswith("attention.")] == ["attention.kernel"]
    assert_same_outputs(fused, unfused, name=f"T={tokens}")
    assert_within_budget(fused, bf16, name=f"T={tokens} fused vs bf16")


def test_the_bf16_path_matches_a_float64_oracle_at_the_flash_dims(models, checkpoint):
    state, cache = decode_inputs(FLASH, 4, seed=40, capacity=CAPACITY, new=2, device="cuda")
    expected = oracle_step(load_file(f"{checkpoint}/model.safetensors"), FLASH, state, cache.clone())
    bf16, _ = _step(models["bf16"], state, cache, context="target_verify")
    assert_within_budget(bf16, expected, name="bf16 vs oracle", budget=ORACLE_BF16_BUDGET)
    fused, records = _step(models["fused"], state, cache, context="target_verify")
    _assert_fused_records(records, models["fused"])
    assert_within_budget(fused, expected, name="fused vs oracle")


def _poison(out: StepOutputs) -> None:
    """0xA5 into every byte a step writes, so a replay that leaves any unwritten fails the comparison."""
    tensors = [out.attn_out, out.residual, out.pre, out.post, out.comb, out.y]
    if out.pair is not None:
        tensors += [out.pair.data, out.pair.scale_storage()]
    for t in tensors:
        t.view(torch.uint8).fill_(0xA5)


def _capture(model: AttentionSublayer, state, cache):
    """One CUDA graph of one decode step over static ``state`` / ``cache``, as a serving engine runs it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile, grow workspaces and warm up outside the capture
        for _ in range(2):
            model(state, cache, context="decode")
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with witness.capture() as records, torch.cuda.graph(graph):
        out = model(state, cache, context="decode")
    return graph, out, records


@pytest.mark.parametrize("tokens", TOKENS)
def test_captured_decode_steps_replay_bit_identically_on_fresh_inputs(models, tokens):
    static_state, static_cache = decode_inputs(
        FLASH, tokens, seed=100 + tokens, capacity=CAPACITY, device="cuda"
    )
    graphs = {}
    for path in ("fused", "unfused"):
        graphs[path] = _capture(models[path], static_state, static_cache)
    _assert_fused_records(graphs["fused"][2], models["fused"])  # decided once, at capture
    _assert_unfused_records(graphs["unfused"][2])

    for seed in (200, 300):  # fresh inputs copied into the static buffers, as each decode step does
        state, cache = decode_inputs(FLASH, tokens, seed=seed + tokens, capacity=CAPACITY, device="cuda")
        caches = {}
        for path, (graph, out, _) in graphs.items():
            static_state.copy_(state)
            static_cache.kv.copy_(cache.kv)
            static_cache.lens.copy_(cache.lens)
            _poison(out)
            graph.replay()
            caches[path] = static_cache.kv.clone()
        torch.cuda.synchronize()
        # The contract first: the two replays agree bit for bit (outputs and the KV they wrote) ...
        assert_same_outputs(graphs["fused"][1], graphs["unfused"][1], name=f"T={tokens}: replays")
        assert_same_bits(caches["fused"], caches["unfused"], name=f"T={tokens}: cache after the replays")
        # ... then each replay is what an eager step on the same inputs computes.
        for path, (_, out, _) in graphs.items():
            eager_cache = cache.clone()
            eager = models[path](state, eager_cache, context="decode")
            torch.cuda.synchronize()
            assert_same_outputs(out, eager, name=f"T={tokens} {path}: replay vs eager")
            assert_same_bits(caches[path], eager_cache.kv, name=f"T={tokens} {path}: cache, replay vs eager")


@pytest.mark.parametrize("path", ["fused", "bf16"])
def test_the_l2_prefetch_and_pdl_change_no_bit(models, path):
    """The step's optional L2 prefetch fork (side stream) and its PDL launches change no bit."""
    model = models[path]
    state, cache = decode_inputs(FLASH, 4, seed=41, capacity=CAPACITY, device="cuda")
    with programmatic_launch(False):
        plain, _ = _step(model, state, cache)
    model.prefetcher.enabled = True
    try:
        assert model.prefetcher.active, "sm_90 and later prefetch"
        forked, _ = _step(model, state, cache)
    finally:
        model.prefetcher.enabled = False
    pdl, _ = _step(model, state, cache)  # the default: programmatic dependent launches
    assert_same_outputs(forked, plain, name=f"{path}: L2 prefetch fork vs plain")
    assert_same_outputs(pdl, plain, name=f"{path}: PDL vs plain")


@pytest.mark.parametrize(
    ("tokens", "new", "mode", "failed", "reason"),
    [
        (2049, 1, "decode", ["rows"], "2049 rows > 2048"),
        (64, 64, "prefill", ["mode"], "forward mode prefill"),
    ],
    ids=["T=2049", "prefill"],
)
def test_the_fused_model_falls_back_with_the_gates_reason(models, tokens, new, mode, failed, reason):
    state, cache = decode_inputs(FLASH, tokens, seed=7, capacity=max(new, 16), new=new, device="cuda")
    fused, records = _step(models["fused"], state, cache, context=mode)
    unfused, _ = _step(models["unfused"], state, cache, context=mode)
    assert_same_outputs(fused, unfused, name=mode)
    linear = [r for r in records if r["path"].startswith("linear.")]
    assert [(r["path"], r["failed"]) for r in linear] == [("linear.bf16", failed)] * len(SITES)
    assert all(reason in r["reason"] for r in linear)
    assert [r["path"] for r in records if r["path"].startswith("hc.boundary")] == [
        "hc.boundary.kernel.bf16"
    ] * 2
    assert [r["path"] for r in records if r["path"].startswith("einsum.wo_a")] == ["einsum.wo_a.kernel.bf16"]
    assert fused.pair is None


@pytest.mark.parametrize("rank", [0, 3])
def test_a_tp4_rank_runs_fused_on_its_shard(checkpoint, rank):
    config = dataclasses.replace(TP4, tp_rank=rank)
    outs = {}
    for path in ("fused", "unfused", "bf16"):
        model = _load(checkpoint, config, path)
        assert (model.config.local_groups, model.wo_b.in_features) == (2, 2048)
        state, cache = decode_inputs(config, 16, seed=50 + rank, capacity=CAPACITY, device="cuda")
        outs[path], records = _step(model, state, cache)
        if path == "fused":
            _assert_fused_records(records, model)
    assert_same_outputs(outs["fused"], outs["unfused"], name=f"TP4 rank {rank}")
    assert_within_budget(outs["fused"], outs["bf16"], name=f"TP4 rank {rank} fused vs bf16")
