"""The boundary's configuration table: how choose_config reads it, and how the sweep writes it."""

from __future__ import annotations

import json

import pytest

from benchmarks.hc_boundary_sweep import (
    candidates,
    latency_candidates,
    merged_entries,
    merged_source,
    table_entries,
)
from gpumatrix import register
from mxfuse.kernels.hc import HcConfig, HcSideStream, HcWorkspace, choose_config, default_config
from mxfuse.kernels.hc import config as hc_config

register(on=("cpu",), est_time=3)


ONE_ROW = HcConfig(1, 64, 1, 1, 32, 0, 4, 1, "fma", 1)
BLOCK16 = HcConfig(16, 16, 2, 16, 32, 0, 4, 2, "dot", 1)


@pytest.fixture
def table(tmp_path, monkeypatch):
    """Point the config module at a table written by the test (and forget the cached one before and after)."""

    def write(entries: list[dict]) -> None:
        path = tmp_path / "hc_configs.json"
        path.write_text(json.dumps({"source": "test", "entries": entries}))
        monkeypatch.setattr(hc_config, "_TABLE", path)
        hc_config._table.cache_clear()

    yield write
    hc_config._table.cache_clear()


def _entry(hidden: int, tokens: int, ordering: str, config: HcConfig) -> dict:
    return {"hidden": hidden, "tokens": tokens, "ordering": ordering, "config": config.to_json()}


def test_a_token_count_takes_its_power_of_two_bucket_and_its_ordering(table):
    table([_entry(5120, 1, "normal", ONE_ROW), _entry(5120, 16, "shifted", BLOCK16)])
    assert choose_config(1, 5120, shifted=False) == ONE_ROW
    assert choose_config(9, 5120, shifted=True) == BLOCK16  # bucket 16
    assert choose_config(16, 5120, shifted=True) == BLOCK16
    # No entry: the default, for another ordering, another H, another bucket, or another GPU's SM count.
    assert choose_config(1, 5120, shifted=True) == default_config(1, 5120)
    assert choose_config(1, 7168, shifted=False) == default_config(1, 7168)
    assert choose_config(17, 5120, shifted=True) == default_config(17, 5120)
    assert choose_config(1, 5120, shifted=False, sms=78) == default_config(1, 5120, sms=78)


def test_an_entry_that_does_not_fit_its_hidden_size_is_refused_when_read(table):
    table(
        [_entry(384, 1, "normal", HcConfig(1, 128, 2, 1, 32, 0, 4, 1, "fma", 1))]
    )  # 128 * 2 does not divide 384
    with pytest.raises(ValueError, match=r"block_h \* steps_a must divide H = 384"):
        choose_config(1, 384, shifted=False)


@pytest.mark.parametrize("tokens", [1, 3, 4, 16, 17, 64, 200, 2048])
@pytest.mark.parametrize("hidden", [5120, 7168])
def test_every_sweep_candidate_is_valid_and_the_default_comes_first(tokens, hidden):
    _assert_valid_grid(candidates(tokens, hidden), tokens, hidden, more_than=1)


def _assert_valid_grid(found: list[HcConfig], tokens: int, hidden: int, *, more_than: int) -> None:
    """The default first, no repeats, more than ``more_than`` candidates, each valid for ``hidden``."""
    assert found[0] == default_config(tokens, hidden)
    assert len(found) == len(set(found)) > more_than
    for config in found:
        config.check(hidden)
        if config.mix == "fma":
            assert config.block_t <= 16 and config.block_t * config.block_h <= 256


def test_the_table_takes_each_shapes_fastest_checked_config_and_fills_the_buckets_between():
    def row(tokens, ordering, config, us, check="ok"):
        return {"T": tokens, "H": 5120, "ordering": ordering, "config": config.to_json(), "check": check,
                "us": us, "final_us": us}  # fmt: skip

    rows = [
        row(1, "normal", ONE_ROW, 9.0),
        row(1, "normal", BLOCK16, 8.0),
        row(16, "normal", BLOCK16, 12.0),
        row(16, "normal", ONE_ROW, 11.0) | {"check": "fused y != unfused"},  # never timed again
    ]
    del rows[-1]["final_us"]
    entries = table_entries(rows, [1, 16])
    by_bucket = {e["tokens"]: e for e in entries}
    assert sorted(by_bucket) == [1, 8, 16]
    assert HcConfig(**by_bucket[1]["config"]) == BLOCK16 and by_bucket[1]["us"] == 8.0
    # The bucket below a measured T takes its winner, and says where it was measured; buckets further
    # below (2 and 4 here) take the default configuration.
    assert all(by_bucket[b]["measured_at"] == 16 for b in (8, 16))
    assert all(HcConfig(**by_bucket[b]["config"]) == BLOCK16 for b in (8, 16))


def test_a_winner_fills_its_own_bucket_and_the_one_below_only():
    """T = 2048's winner (blocks of 64 tokens) took 223 us at T = 256 against 44 for the default: a large
    T's winner does not reach the buckets far below it."""
    rows = [{"T": t, "H": 5120, "ordering": "shifted", "config": c.to_json(), "check": "ok", "us": us,
             "final_us": us} for t, c, us in ((64, ONE_ROW, 19.5), (2048, BLOCK16, 272.3))]  # fmt: skip
    entries = table_entries(rows, [64, 2048])
    assert sorted(e["tokens"] for e in entries) == [32, 64, 1024, 2048]
    assert {e["tokens"]: e["measured_at"] for e in entries} == {32: 64, 64: 64, 1024: 2048, 2048: 2048}


def test_a_run_at_one_t_leaves_the_buckets_an_earlier_run_measured_below_it():
    """A sweep of T = 16 alone fills buckets 8 and 16 only: buckets 1 to 4 keep the checked-in winners
    measured at T = 1 and 4 (a run that filled them from T = 16 once replaced them)."""
    rows = [{"T": 16, "H": 5120, "ordering": "shifted", "config": BLOCK16.to_json(), "check": "ok", "us": 15.3,
             "final_us": 15.3}]  # fmt: skip
    kept = [
        {"hidden": 5120, "tokens": b, "ordering": "shifted", "config": ONE_ROW.to_json(), "measured_at": m}
        for b, m in ((1, 1), (2, 4), (4, 4))
    ] + [{"hidden": 5120, "tokens": 16, "ordering": "normal", "config": ONE_ROW.to_json(), "measured_at": 16}]
    entries = table_entries(rows, [16], kept)
    assert sorted(e["tokens"] for e in entries) == [8, 16]
    assert all(e["measured_at"] == 16 and e["ordering"] == "shifted" for e in entries)
    merged = merged_entries(entries, kept)
    shifted = {e["tokens"]: e for e in merged if e["ordering"] == "shifted"}
    assert [shifted[b]["measured_at"] for b in (1, 2, 4, 8, 16)] == [1, 4, 4, 16, 16]
    # Without an earlier table the same run fills the same two buckets: the rest take the default.
    assert sorted(e["tokens"] for e in table_entries(rows, [16])) == [8, 16]


@pytest.mark.parametrize("tokens", [1, 2, 4, 16])
@pytest.mark.parametrize("hidden", [5120, 7168])
def test_the_latency_grid_tries_one_and_two_launches_and_one_row_sinkhorn_items(tokens, hidden):
    found = latency_candidates(tokens, hidden)
    _assert_valid_grid(found, tokens, hidden, more_than=8)
    assert {c.launches for c in found} == {1, 2}
    assert {c.words_n for c in found} == {1, 2}
    one_row = [c for c in found if c.rows_s == 1]
    assert {c.launches for c in one_row} == {1, 2}
    if tokens > 1:
        assert any(c.rows_s == c.block_t for c in found)


def test_a_sweep_of_some_shapes_keeps_the_checked_in_entries_of_the_others():
    def entry(hidden, tokens, ordering, us):
        return {
            "hidden": hidden,
            "tokens": tokens,
            "ordering": ordering,
            "config": ONE_ROW.to_json(),
            "us": us,
        }

    old = [entry(5120, 1, "normal", 9.0), entry(5120, 1, "shifted", 9.5), entry(7168, 16, "shifted", 20.0)]
    new = [entry(5120, 1, "shifted", 7.0), entry(5120, 2, "shifted", 7.5)]
    merged = merged_entries(new, old)
    assert [(e["hidden"], e["ordering"], e["tokens"], e["us"]) for e in merged] == [
        (5120, "normal", 1, 9.0),
        (5120, "shifted", 1, 7.0),
        (5120, "shifted", 2, 7.5),
        (7168, "shifted", 16, 20.0),
    ]
    source = merged_source("run B", new, merged, "run A")
    assert (
        source
        == "run B: H = 5120 shifted bucket T = 1, H = 5120 shifted bucket T = 2. The other entries: run A"
    )
    assert merged_source("run B", new, new, "run A") == "run B"  # nothing of run A is left
    assert merged_source("run B", new, merged, None) == "run B"


def test_the_sweeps_side_mode_alternates_two_streams_and_joins_them(monkeypatch):
    """``--side``: consecutive calls alternate between two side streams, each with its own workspace (a
    call's Sinkhorn launch reads records the next call would otherwise overwrite), and every run of the
    calls ends by joining both (a CUDA graph capture must)."""
    from benchmarks import hc_boundary_sweep as sweep

    seen = {}

    def fake_bench(fns, *, target_ms, replays, after):
        seen["calls"] = [(f.keywords["side"], f.keywords["workspace"]) for f in fns]
        seen["after"] = after
        return 1.0

    monkeypatch.setattr(sweep, "bench_us", fake_bench)
    monkeypatch.setattr(sweep, "kernel_args", lambda s: ())
    streams = (HcSideStream("cpu"), HcSideStream("cpu"))
    workspaces = (HcWorkspace("cpu"), HcWorkspace("cpu"))
    side = sweep.SideStreams(streams, workspaces)
    assert sweep.time_config([{}] * 4, [None] * 4, BLOCK16, side=side) == 1.0
    pairs = list(zip(streams, workspaces, strict=True))
    assert seen["calls"] == [pairs[0], pairs[1], pairs[0], pairs[1]]
    assert seen["after"] == side.join
