"""The DeepSeek-V4.1 sublayer under tensor parallelism 2 on the CPU: two processes, a gloo group.

Each rank loads its shard of one checkpoint (wq_b's heads and wo_a's groups by rows, wo_b's K slice by
columns; the rest replicated) and all-reduces wo_b's output before the second boundary. Contracts:
fused == unfused bit for bit on each rank; both ranks hold the same bits after the reduce, which is
exactly the bf16 sum of the two ranks' partials (each rank's shard run without the group); TP=2 stays
within ``TP_BUDGET`` of TP=1 and within the usual budgets of an independent float64 oracle; every rank's
witness shows its path and one all-reduce between wo_b and the boundary; a NaN stays NaN and never
passes; mismatched groups are refused. The ranks compute (``dsv41_tp``); this process compares.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from dsv41_cases import (
    BUDGET,
    ORACLE_BF16_BUDGET,
    TP_BUDGET,
    assert_reduced,
    assert_same_outputs,
    assert_tp_records,
    assert_within_budget,
    oracle_step,
)
from dsv41_tp import case, launch, outputs, step_inputs
from safetensors.torch import load_file

from gpumatrix import register
from gpumatrix.compare import assert_diff, assert_same_bits
from mxfuse.models.dsv41 import CONFIGS, AttentionSublayer, make_checkpoint, rank_config

register(on=("cpu",), est_time=12)

TINY = CONFIGS["tiny"]
PATHS = ("fused", "unfused", "bf16")
CASES = [
    case("T=1", 1, seed=1),
    case("T=4", 4, seed=4),
    case("T=16", 16, seed=16),
    case("verify 2x4", 8, seed=8, new=4, context="target_verify"),
    case("NaN", 4, seed=4, nan_token=2),  # the T=4 inputs with x[2, 5] = NaN
]
CLEAN = [c["name"] for c in CASES if c["nan_token"] is None]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("dsv41-tp") / "tiny"
    make_checkpoint(directory, TINY, seed=7)
    return str(directory)


@pytest.fixture(scope="module")
def ranks(checkpoint, tmp_path_factory) -> list[dict]:
    job = {
        "dir": str(tmp_path_factory.mktemp("dsv41-tp-job")),
        "checkpoint": checkpoint,
        "config": dataclasses.asdict(TINY),
        "device": "cpu",
        "paths": list(PATHS),
        "next_pair_layout": "deepgemm",  # the second boundary writes the FFN's pair too
        "cases": CASES,
        "tp1": True,
        "partials": True,
        "refusals": True,
    }
    return launch(job, world=2, timeout=240)


def _out(rank: dict, name: str, path: str):
    return outputs(rank["eager"][name][path])


def test_each_rank_ran_its_own_shard_over_gloo(ranks):
    assert [(r["rank"], r["world"], r["backend"]) for r in ranks] == [(0, 2, "gloo"), (1, 2, "gloo")]
    # tiny: 2 groups of 128 -> one group and K = 128 of wo_b per rank
    assert [(r["local_groups"], r["wo_b_in"]) for r in ranks] == [(1, 128), (1, 128)]
    assert ranks[0]["tp1"] and not ranks[1]["tp1"]


@pytest.mark.parametrize("name", [c["name"] for c in CASES])
def test_fused_equals_unfused_on_each_rank_and_the_ranks_agree(ranks, name):
    for rank in ranks:
        fused = _out(rank, name, "fused")
        assert fused.pair is not None
        assert_same_outputs(fused, _out(rank, name, "unfused"), name=f"{name} rank {rank['rank']}")
    for path in PATHS:
        assert_same_outputs(_out(ranks[0], name, path), _out(ranks[1], name, path), name=f"{name} {path}")


@pytest.mark.parametrize("name", CLEAN)
def test_the_reduce_is_the_bf16_sum_of_the_ranks_partials(ranks, name):
    for path in PATHS:
        partials = [r["partials"][name][path] for r in ranks]
        for rank in ranks:
            assert_reduced(
                _out(rank, name, path).attn_out, partials, name=f"{name} {path} rank {rank['rank']}"
            )
        # Each partial alone is far from the sum: the reduce really added the other rank's half.
        with pytest.raises(AssertionError):
            assert_diff(partials[0], _out(ranks[0], name, path).attn_out, max_diff=TP_BUDGET["attn_out"])


@pytest.mark.parametrize("name", CLEAN)
def test_tp2_stays_within_budget_of_tp1(ranks, name):
    for path in PATHS:
        tp1 = outputs(ranks[0]["tp1"][name][path])
        assert_within_budget(_out(ranks[0], name, path), tp1, name=f"{name} {path}", budget=TP_BUDGET)


@pytest.mark.parametrize("name", CLEAN)
def test_tp2_matches_an_independent_float64_oracle(ranks, checkpoint, name):
    spec = next(c for c in CASES if c["name"] == name)
    state, cache = step_inputs(TINY, spec, torch.device("cpu"))
    expected = oracle_step(load_file(f"{checkpoint}/model.safetensors"), TINY, state, cache)
    bf16 = _out(ranks[0], name, "bf16")
    assert_within_budget(bf16, expected, name=f"{name} bf16 vs oracle", budget=ORACLE_BF16_BUDGET)
    assert_within_budget(_out(ranks[0], name, "fused"), expected, name=f"{name} fused vs oracle")
    assert_within_budget(_out(ranks[0], name, "fused"), bf16, name=f"{name} fused vs bf16", budget=BUDGET)


@pytest.mark.parametrize("name", [c["name"] for c in CASES])
def test_each_rank_witnessed_its_path_and_one_all_reduce_before_the_boundary(ranks, name):
    for rank in ranks:
        for path in PATHS:
            assert_tp_records(
                rank["records"][name][path], path=path, rank=rank["rank"], world=2, backend="gloo"
            )


def test_a_nan_token_stays_nan_on_both_ranks_and_never_passes(ranks):
    keep = torch.tensor([0, 1, 3])
    for rank in ranks:
        out, clean = _out(rank, "NaN", "fused"), _out(rank, "T=4", "fused")
        assert bool(out.attn_out[2].isnan().all()) and bool(out.y[2].isnan().any())
        assert_same_bits(out.attn_out[keep], clean.attn_out[keep], name="the other tokens")
    tp1 = outputs(ranks[0]["tp1"]["NaN"]["fused"])
    with pytest.raises(AssertionError, match="NaN"):
        assert_within_budget(_out(ranks[0], "NaN", "fused"), tp1, name="NaN", budget=TP_BUDGET)


def test_groups_that_do_not_match_the_shard_are_refused(ranks):
    for rank in ranks:
        refusals = rank["refusals"]
        assert set(refusals) == {"unsharded config", "other rank"}
        assert all(
            m is not None and "process_group must match the config's shard" in m for m in refusals.values()
        )
        assert f"this process is rank {rank['rank']}" in refusals["other rank"]
    with pytest.raises(TypeError, match="process_group must be a torch.distributed.ProcessGroup"):
        AttentionSublayer(TINY, process_group="gloo")
    with pytest.raises(TypeError, match="process_group must be a torch.distributed.ProcessGroup"):
        rank_config(TINY, object())
