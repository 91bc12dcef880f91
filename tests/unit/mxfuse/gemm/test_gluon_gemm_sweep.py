"""The Gluon decode GEMM's sweep on the CPU (``mxfp8_gemm_sweep --kernel gluon``, benchmarks/gluon_gemm_sweep.py)
and the merge of its table (benchmarks/merge_gemm_table.py --kernel gluon).

* Candidates: valid GluonConfig only, the token tile holding M at M = 1, 4, 16, 64, split counts as the
  launcher runs them, every field's choices present, the probe's design screened first.
* The rule: a bucket is written only where Gluon's confirmed median beat Triton's, with the numbers in
  its ``measured``, covering M down to past the previous M measured; what the launcher could not read
  is refused.
* A wrong candidate is never timed; the merge drops buckets where a new sweep found Gluon losing.
* The whole flow on tiny shapes (``--cpu-smoke``: Triton interpreted, the torch backend standing in for
  the Gluon kernel), and its argument handling.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register
from mxfuse.kernels.gemm import gluon_launch
from mxfuse.kernels.gemm.configs import GemmConfig
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, effective_split_k, parse_gluon_table, token_tile

register(on=("cpu",), est_time=40)

SHAPES = ((1792, 5120), (5120, 2048), (5120, 8192), (2048, 7168), (7168, 16384))
H200 = "NVIDIA H200"
ENV = {"date": "2026-12-01", "gpu": H200, "torch": "t", "triton": "3.6.0"}
TRITON = GemmConfig("stream", 1, 4, 128, 1, 4, 1)


def _sweep():
    return importlib.import_module("benchmarks.gluon_gemm_sweep")


def _merge():
    return importlib.import_module("benchmarks.merge_gemm_table")


# --- candidates ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("m", (1, 4, 16, 64))
def test_candidates_are_valid_gluon_configs_for_the_m_bucket(m, n, k):
    found = _sweep().candidates(m, n, k, num_sms=132)
    configs = [c for _, c in found]
    assert len(configs) == len(set(configs)), "a configuration screened twice"
    assert [t for t, _ in found] == sorted(t for t, _ in found) and found[0][0] == 0
    for tier, config in found:
        assert isinstance(config, GluonConfig)
        assert config.block_t == token_tile(m) and config.block_t >= m
        assert effective_split_k(config, k) == config.split_k, "a split the launcher would not run"
        steps = -(-k // config.block_k)
        assert config.split_k == 1 or steps // config.split_k >= 2, config
        assert 0 <= tier <= 3
    assert {c.block_n for c in configs} == {64, 128}
    assert {c.block_k for c in configs} == {128}
    assert {c.num_stages for c in configs} == {2, 3, 4, 6}
    assert {c.overlap for c in configs} == {False}
    assert {c.producer for c in configs} == {False, True}
    assert len({c.split_k for c in configs}) >= 2, "split-K is swept"
    design = [c for t, c in found if t == 0]
    assert all((c.block_n, c.block_k, c.num_stages, c.producer) == (64, 128, 4, False) for c in design)


def test_the_plan_screens_tier_0_of_every_problem_first():
    shapes = {"pro wo_b": (7168, 16384), "v41 wqkv_a": (1792, 5120)}
    items = _sweep().plan(shapes, (1, 4, 16, 64), 132, 1)
    tiers = [t for *_, t in items]
    assert tiers == sorted(tiers) and set(tiers) == {0, 1}
    first = {(name, m) for name, m, _, t in items if t == 0}
    assert first == {(s, m) for s in shapes for m in (1, 4, 16, 64)}


# --- the rule ------------------------------------------------------------------------------------------


def _outcome(m, gluon_us, triton_us, *, rounds=3, gluon=True, n=7168, k=16384):
    config = GluonConfig(block_t=token_tile(m), split_k=4) if gluon else None
    return _sweep().Outcome("pro wo_b", m, n, k, config, gluon_us, TRITON, triton_us, 30.0, rounds)


RULE = [  # (id, outcomes as (m, gluon_us, triton_us, kwargs), min_speedup, expected [(m_min, m_max)])
    ("gluon wins everywhere", [(1, 9, 10, {}), (4, 9, 10, {}), (16, 9, 10, {}), (64, 9, 10, {})], 1.0,
     [(1, 1), (2, 4), (5, 16), (17, 64)]),
    ("triton keeps M <= 4", [(1, 11, 10, {}), (4, 10, 10, {}), (16, 9, 10, {}), (64, 8, 10, {})], 1.0,
     [(5, 16), (17, 64)]),
    ("a loss between wins", [(1, 9, 10, {}), (4, 12, 10, {}), (16, 9, 10, {})], 1.0, [(1, 1), (5, 16)]),
    ("a tie is no win", [(16, 10, 10, {})], 1.0, []),
    ("inside the margin", [(16, 9.9, 10, {}), (64, 9, 10, {})], 1.05, [(17, 64)]),
    ("not confirmed in rounds", [(16, 5, 10, {"rounds": 0})], 1.0, []),
    ("no gluon passed its checks", [(16, None, 10, {"gluon": False})], 1.0, []),
    ("triton not timed", [(16, 5, None, {})], 1.0, []),
    ("first measured M covers itself only", [(16, 9, 10, {}), (64, 9, 10, {})], 1.0, [(16, 16), (17, 64)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("outcomes", "min_speedup", "expected"), [c[1:] for c in RULE], ids=[c[0] for c in RULE]
)
def test_a_bucket_is_written_only_where_gluon_beat_triton(outcomes, min_speedup, expected):
    rows = [_outcome(m, g, t, **kw) for m, g, t, kw in outcomes]
    table = _sweep().wins_table(rows, ENV, min_speedup=min_speedup)
    entry = table["devices"][H200]
    assert entry["swept"] == {"7168x16384": [m for m, *_ in outcomes]}
    buckets = entry["shapes"].get("7168x16384", [])
    assert [(b["m_min"], b["m_max"]) for b in buckets] == expected
    by_m = {m: (g, t) for m, g, t, _ in outcomes}
    for b in buckets:
        got = b["measured"]
        gluon_us, triton_us = by_m[b["m_max"]]
        assert (got["gluon_us"], got["triton_us"], got["bf16_us"], got["rounds"]) == (
            gluon_us,
            triton_us,
            30.0,
            3,
        )
        assert got["x_triton"] == round(triton_us / gluon_us, 3) > min_speedup
        assert got["triton_config"] == TRITON.to_json() and got["M"] == b["m_max"]
        assert b["config"] == GluonConfig(block_t=token_tile(b["m_max"]), split_k=4).to_json()
    parse_gluon_table(json.loads(json.dumps(table)), source="sweep output")


def test_the_launcher_reads_the_table_and_keeps_triton_where_gluon_lost(monkeypatch):
    rows = [_outcome(1, 11, 10), _outcome(4, 11, 10), _outcome(16, 9, 10), _outcome(64, 8, 10)]
    table = parse_gluon_table(_sweep().wins_table(rows, ENV), source="sweep output")
    monkeypatch.setattr(gluon_launch, "gluon_table", lambda: table)
    for m, wins in ((1, False), (4, False), (5, True), (16, True), (64, True), (65, False)):
        assert (gluon_launch.measured_gluon_win(H200, 7168, 16384, m) is not None) is wins, m


def test_a_table_the_launcher_could_not_read_is_refused():
    twice = [_outcome(16, 9, 10), _outcome(16, 8, 10)]  # one M measured twice: m_max would not increase
    with pytest.raises(ValueError, match="the Gluon sweep's table"):
        _sweep().wins_table(twice, ENV)


# --- a wrong candidate ---------------------------------------------------------------------------------


def test_a_wrong_candidate_is_refused_by_its_checks_and_never_timed():
    sweep = _sweep()
    base = importlib.import_module("benchmarks.mxfp8_gemm_sweep")
    weights = base.make_weights(128, 512, "cpu")
    p = base.make_problem("smoke a", 4, 128, 512, weights, "cpu")
    good, bad = GluonConfig(block_t=8, split_k=2), GluonConfig(block_t=8, split_k=2, num_stages=3)

    def launcher(problem, i, config):
        sweep.torch_stand_in(problem, i, config)
        if config == bad:  # one element off by 4 (the outputs' rms is about 22)
            problem.outs[i][0, 0] += 4.0

    rows = {c: sweep.screen(p, c, launcher, "cpu", {}) for c in (good, bad)}
    assert rows[good]["ok"] and rows[good]["edge_ok"] and rows[good]["us"] > 0
    assert "us" not in rows[bad] and rows[bad]["close"] is False and not rows[bad]["ok"]
    assert rows[bad]["name"] == "gluon 64x8x128 split 2 s3"  # reported by name


# --- the merge -----------------------------------------------------------------------------------------


def _bucket(m_min, m_max, **measured):
    return {"m_min": m_min, "m_max": m_max, "config": GluonConfig().to_json(), **measured}


def _table(buckets, *, swept=None):
    entry = {"source": "s", "shapes": {"7168x16384": buckets} if buckets else {}}
    if swept is not None:
        entry["swept"] = {"7168x16384": swept}
    return {"format": 1, "devices": {H200: entry}}


MERGES = [  # (id, table buckets, sweep buckets, swept Ms, expected (m_min, m_max) after)
    ("into an empty table", [], [(5, 16), (17, 64)], [1, 4, 16, 64], [(5, 16), (17, 64)]),
    ("gluon lost where it had won", [(5, 16), (17, 64)], [(17, 64)], [16, 64], [(17, 64)]),
    ("lost everywhere: the shape goes", [(1, 64)], [], [1, 4, 16, 64], None),
    ("buckets not measured stay", [(1, 1), (5, 16)], [(17, 64)], [64], [(1, 1), (5, 16), (17, 64)]),
    ("an overlapped bucket goes", [(5, 16)], [(2, 64)], [1, 64], [(2, 64)]),
]


@pytest.mark.parametrize(
    ("old", "new", "swept", "expected"), [c[1:] for c in MERGES], ids=[c[0] for c in MERGES]
)
def test_a_gluon_sweep_merges_m_by_m(old, new, swept, expected):
    table = _table([_bucket(lo, hi) for lo, hi in old])
    sweep = _table([_bucket(lo, hi, measured={"M": hi}) for lo, hi in new], swept=swept)
    merged = _merge().merge_gluon(table, sweep)
    shapes = merged["devices"][H200]["shapes"]
    got = [(b["m_min"], b["m_max"]) for b in shapes["7168x16384"]] if "7168x16384" in shapes else None
    assert got == expected
    assert "swept" not in merged["devices"][H200] and "7168x16384 M" in merged["devices"][H200]["source"]
    parse_gluon_table(merged, source="merged")
    assert table == _table([_bucket(lo, hi) for lo, hi in old]), "the input was changed"


def test_a_kept_bucket_keeps_its_implicit_lower_bound():
    table = _table([{"m_max": 4, "config": {}}, {"m_max": 16, "config": {}}])  # (1, 4) and (5, 16)
    merged = _merge().merge_gluon(table, _table([], swept=[4]))
    assert [(b["m_min"], b["m_max"]) for b in merged["devices"][H200]["shapes"]["7168x16384"]] == [(5, 16)]


def test_the_merge_refuses_a_table_the_launcher_cannot_read():
    with pytest.raises(ValueError, match="sweep"):
        _merge().merge_gluon(_table([]), {"format": 2})
    with pytest.raises(ValueError, match="table: .*m_min"):
        _merge().merge_gluon(_table([_bucket(0, 4)]), _table([]))


def test_the_merge_command_takes_the_kernel_flag(tmp_path):
    into = tmp_path / "gluon.json"
    into.write_text(json.dumps({"format": 1, "devices": {}}))
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(_table([_bucket(5, 16)], swept=[4, 16])))
    assert _merge().main([str(sweep), "--kernel", "gluon", "--into", str(into)]) == 0
    table = parse_gluon_table(json.loads(into.read_text()), source="merged")
    assert [(lo, hi) for lo, hi, _ in table[H200][(7168, 16384)]] == [(5, 16)]


# --- the whole flow on the CPU ----------------------------------------------------------------------------


def _run(tmp_path, *args):
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "OUT": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "mxfp8_gemm_sweep", *args],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO_ROOT,
    )  # fmt: skip


def test_the_smoke_run_checks_times_and_writes_a_table_the_launcher_reads(tmp_path):
    into = tmp_path / "checked_in.json"
    into.write_text(json.dumps({"format": 1, "devices": {}}))
    done = _run(
        tmp_path, "--kernel", "gluon", "--cpu-smoke", "--shapes", "smoke a", "--ms", "1,16",
        "--budget-s", "60", "--max-tier", "0", "--merge-into", str(into),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gluon_gemm_sweep.json").read_text())
    assert result["env"]["kernel"] == "gluon" and "standing in for Gluon" in result["env"]["gpu"]
    assert sorted(result["problems"]) == ["smoke a M=1", "smoke a M=16"]
    for problem in result["problems"].values():
        assert problem["confirm_rounds"] >= 1
        assert {"bf16", "triton"} <= set(problem["confirm_us"])
        assert any(label.startswith("gluon") for label in problem["confirm_us"])
        assert all(row["tier"] == 0 and "us" in row for row in problem["screen"])
    raw = json.loads((tmp_path / "gluon_configs_sweep.json").read_text())
    (entry,) = raw["devices"].values()
    assert entry["swept"] == {"128x512": [1, 16]}
    for bucket in entry["shapes"].get("128x512", []):
        assert bucket["measured"]["gluon_us"] < bucket["measured"]["triton_us"]
    parse_gluon_table(raw, source="smoke table")
    parse_gluon_table(json.loads(into.read_text()), source="merged")
    assert "Gluon configurations failed to compile or check" in done.stdout


def test_an_unknown_kernel_is_a_usage_error(tmp_path):
    done = _run(tmp_path, "--kernel", "cutlass", "--cpu-smoke")
    assert (
        done.returncode == 2 and "invalid choice: 'cutlass'" in done.stderr and "Traceback" not in done.stderr
    )
