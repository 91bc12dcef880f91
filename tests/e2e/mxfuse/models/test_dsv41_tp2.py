"""The DeepSeek-V4.1-Flash attention sublayer under tensor parallelism 2 on two real GPUs (NCCL).

The plugin leases this test both GPUs alone (``gpus=2``: an xdist worker running a 1-GPU test never
shares them); the test starts one process per rank on them (``dsv41_tp``, NVLink multicast off) and
compares what the ranks saved. At the real dims, from one checkpoint, each rank loading its shard:

* fused == unfused bit for bit on each rank, eagerly and as one captured CUDA graph per decode step
  (the NCCL all-reduce inside the graph) replayed on fresh inputs; replays equal eager steps;
* both ranks hold the same bits after the reduce, exactly the bf16 sum of their wo_b partials;
* TP=2 within ``TP_BUDGET`` of TP=1 (rank 0 also runs the unsharded model) on every path, and the fused
  path within ``BUDGET`` of the all-bf16 one; a NaN stays NaN and never passes;
* every rank's witness shows the fused path (both linears consumed producer pairs) and one all-reduce
  between wo_b and the second boundary, at capture too.

One test: all of it comes from one start of the two ranks. Where a 1-GPU test bound this process's
CUDA first, the plugin runs this test in a fresh child under the same lease, once.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from dsv41_cases import (
    BUDGET,
    TP_BUDGET,
    assert_reduced,
    assert_same_outputs,
    assert_tp_records,
    assert_within_budget,
)
from dsv41_tp import case, launch, outputs

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.models.dsv41 import CONFIGS, make_checkpoint

register(on=("h100", "b200", "gb300"), gpus=2, est_time=180)

FLASH = CONFIGS["flash"]
PATHS = ("fused", "unfused", "bf16")
CAPACITY = 256
CASES = [
    *(case(f"T={t}", t, seed=t, capacity=CAPACITY) for t in (1, 4, 16, 64)),
    case("verify 4x2", 8, seed=8, new=2, context="target_verify", capacity=CAPACITY),
    case("NaN", 4, seed=4, capacity=CAPACITY, nan_token=2),
]
CLEAN = [c["name"] for c in CASES if c["nan_token"] is None]
GRAPH_TOKENS = (1, 16, 64)


def _out(rank: dict, name: str, path: str):
    return outputs(rank["eager"][name][path])


def _check_ranks(ranks: list[dict], leased: list[str]) -> None:
    assert [(r["rank"], r["backend"]) for r in ranks] == [(0, "nccl"), (1, "nccl")]
    assert ranks[0]["uuid"] != ranks[1]["uuid"], "the ranks share a GPU"
    if all(device.startswith("GPU-") for device in leased):  # the plugin leases real devices by UUID
        assert [r["uuid"] for r in ranks] == leased, "each rank runs on its own leased GPU"
    assert [(r["local_groups"], r["wo_b_in"]) for r in ranks] == [(4, 4096)] * 2
    assert ranks[0]["linear_backend"] != "torch", "a real MXFP8 backend consumes the pairs here"


def _check_eager(ranks: list[dict]) -> None:
    for name in [c["name"] for c in CASES]:
        for rank in ranks:
            assert_same_outputs(
                _out(rank, name, "fused"), _out(rank, name, "unfused"), name=f"{name} rank {rank['rank']}"
            )
            for path in PATHS:
                assert_tp_records(
                    rank["records"][name][path],
                    path=path,
                    rank=rank["rank"],
                    world=2,
                    backend=rank["backend"],
                )
            gemms = {r["backend"] for r in rank["records"][name]["fused"] if r["path"].startswith("gemm.")}
            assert gemms == {rank["linear_backend"]}, gemms
        for path in PATHS:
            assert_same_outputs(_out(ranks[0], name, path), _out(ranks[1], name, path), name=f"{name} {path}")
    for name in CLEAN:
        for path in PATHS:
            partials = [r["partials"][name][path] for r in ranks]
            assert_reduced(_out(ranks[0], name, path).attn_out, partials, name=f"{name} {path}: reduce")
            tp1 = outputs(ranks[0]["tp1"][name][path])
            assert_within_budget(
                _out(ranks[0], name, path), tp1, name=f"{name} {path} vs TP=1", budget=TP_BUDGET
            )
        fused, bf16 = _out(ranks[0], name, "fused"), _out(ranks[0], name, "bf16")
        assert_within_budget(fused, bf16, name=f"{name} fused vs bf16", budget=BUDGET)


def _check_nan(ranks: list[dict]) -> None:
    keep = torch.tensor([0, 1, 3])
    for rank in ranks:
        out, clean = _out(rank, "NaN", "fused"), _out(rank, "T=4", "fused")
        assert bool(out.attn_out[2].isnan().all()) and bool(out.y[2].isnan().any())
        assert_same_bits(out.attn_out[keep], clean.attn_out[keep], name="the tokens beside the NaN")
    tp1 = outputs(ranks[0]["tp1"]["NaN"]["fused"])
    with pytest.raises(AssertionError, match="NaN"):
        assert_within_budget(_out(ranks[0], "NaN", "fused"), tp1, name="NaN", budget=TP_BUDGET)


def _check_graphs(ranks: list[dict]) -> None:
    for tokens in GRAPH_TOKENS:
        for rank in ranks:
            graph = rank["graphs"][tokens]
            for path in ("fused", "unfused"):  # decided once, at capture; the all-reduce is in the graph
                assert_tp_records(
                    graph["records"][path], path=path, rank=rank["rank"], world=2, backend=rank["backend"]
                )
            for i, replay in enumerate(graph["replays"]):
                name = f"T={tokens} replay {i} rank {rank['rank']}"
                fused, unfused = (outputs(replay[p]["out"]) for p in ("fused", "unfused"))
                assert_same_outputs(fused, unfused, name=f"{name}: fused vs unfused")
                assert_same_bits(replay["fused"]["kv"], replay["unfused"]["kv"], name=f"{name}: cache")
                for path in ("fused", "unfused"):
                    eager = outputs(replay[path]["eager"])
                    assert_same_outputs(outputs(replay[path]["out"]), eager, name=f"{name} {path}: vs eager")
                    assert_same_bits(replay[path]["kv"], replay[path]["eager_kv"], name=f"{name} {path}: kv")
        for i in range(2):
            first, second = (outputs(r["graphs"][tokens]["replays"][i]["fused"]["out"]) for r in ranks)
            assert_same_outputs(first, second, name=f"T={tokens} replay {i}: rank 0 vs rank 1")


def test_the_tp2_decode_step_on_two_gpus(tmp_path):
    leased = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    assert len(leased) == 2, f"the plugin leases this test exactly two GPUs; got {leased}"
    checkpoint = tmp_path / "flash"
    make_checkpoint(checkpoint, FLASH, seed=0)  # the whole model, on the CPU: each rank reads its shard
    job = {
        "dir": str(tmp_path / "job"),
        "checkpoint": str(checkpoint),
        "config": dataclasses.asdict(FLASH),
        "device": "cuda",
        "paths": list(PATHS),
        "next_pair_layout": "consumer",  # the final boundary writes the FFN's pair in its consumer's layout
        "cases": CASES,
        "tp1": True,
        "partials": True,
        "graphs": list(GRAPH_TOKENS),
        "refusals": True,
    }
    ranks = launch(job, world=2, timeout=540)
    _check_ranks(ranks, leased)
    _check_eager(ranks)
    _check_nan(ranks)
    _check_graphs(ranks)
    for rank in ranks:
        refusals = rank["refusals"]
        assert set(refusals) == {"unsharded config", "other rank", "nccl on cpu"}
        assert all(message is not None for message in refusals.values()), refusals
        assert "needs a CUDA device" in refusals["nccl on cpu"]
