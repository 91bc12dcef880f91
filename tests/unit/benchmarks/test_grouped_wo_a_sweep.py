"""The Gluon grouped wo_a sweep (``benchmarks/grouped_wo_a.py --gluon-sweep --table``): what it screens and
the table it writes, read back by the launcher's own reader."""

from __future__ import annotations

import json

import pytest

from benchmarks.grouped_wo_a import K, N, gluon_candidates, gluon_wins_table, write_gluon_table
from gpumatrix import register
from mxfuse.kernels.gemm.configs import device_entries
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, effective_split_k, parse_gluon_table
from mxfuse.kernels.grouped_wo_a.gluon_launch import check_wo_a_gluon_config, default_wo_a_gluon_config

register(on=("cpu",), est_time=2)

ENV = {"date": "2026-12-05", "gpu": "Some GPU", "torch": "2.11", "triton": "3.6.0"}


@pytest.mark.parametrize("t", [1, 4, 16, 64])
@pytest.mark.parametrize("groups", [2, 8])
def test_candidates_are_launchable_and_start_with_the_default(t, groups):
    found = gluon_candidates(t, groups, 132)
    default = default_wo_a_gluon_config(t, groups, N, K, num_sms=132)
    assert found[0] == GluonConfig(**{**default.to_json(), "split_k": effective_split_k(default, K)})
    assert len(found) == len(set(found)) > 4
    for config in found:
        check_wo_a_gluon_config(config, groups=groups, n=N, k=K)
        assert config.block_t >= min(t, 64) and config.split_k == effective_split_k(config, K)


def _row(groups, t, triton_us, gluon_us=None, block_n=64):
    row = {"G": groups, "T": t, "triton_us": triton_us, "bmm_bf16_us": 20.0, "rounds": 3}
    if gluon_us is not None:
        row["gluon_us"] = gluon_us
        row["gluon_config"] = GluonConfig(block_n, 16 if t <= 16 else 64, 128, 4, 3, False, True).to_json()
    return row


def test_the_table_holds_only_the_tokens_gluon_won_and_the_launcher_reads_it(tmp_path):
    rows = [
        _row(8, 4, 20.0, 22.0),  # Triton faster: no bucket
        _row(8, 16, 40.0, 25.0),
        _row(8, 64, 75.0, 30.0, block_n=128),
        _row(2, 4, 9.0),  # no Gluon configuration passed its checks
        _row(2, 16, 18.0, 18.0),  # even: Triton keeps it
        _row(2, 64, 31.0, 12.0),
    ]
    entry = gluon_wins_table(rows, ENV)
    big, small = f"{8 * N}x{K}", f"{2 * N}x{K}"
    assert entry["swept"] == {small: [4, 16, 64], big: [4, 16, 64]}
    path = tmp_path / "table.json"
    write_gluon_table(path, entry, ENV["gpu"])
    data = json.loads(path.read_text())
    parsed = parse_gluon_table(data, source="test")
    buckets = device_entries(parsed, ENV["gpu"])
    assert [(lo, hi) for lo, hi, _ in buckets[(8 * N, K)]] == [(5, 16), (17, 64)]
    assert [(lo, hi) for lo, hi, _ in buckets[(2 * N, K)]] == [(17, 64)]
    assert buckets[(8 * N, K)][1][2].block_n == 128
    measured = data["devices"][ENV["gpu"]]["shapes"][big][0]["measured"]
    assert measured["x_triton"] == pytest.approx(1.6) and measured["T"] == 16

    # A second device's run keeps the first's entry; the same device's replaces it.
    write_gluon_table(
        path, gluon_wins_table([_row(8, 64, 75.0, 30.0)], {**ENV, "gpu": "Other GPU"}), "Other GPU"
    )
    write_gluon_table(path, gluon_wins_table([_row(8, 16, 10.0, 30.0)], ENV), ENV["gpu"])
    data = json.loads(path.read_text())
    assert set(data["devices"]) == {"Some GPU", "Other GPU"}
    assert data["devices"]["Some GPU"]["shapes"] == {}
    assert parse_gluon_table(data, source="test")["Other GPU"][(8 * N, K)][0][:2] == (64, 64)


def test_a_table_the_launcher_cannot_read_is_not_written(tmp_path):
    path = tmp_path / "table.json"
    entry = gluon_wins_table([_row(8, 16, 40.0, 25.0)], ENV)
    entry["shapes"][f"{8 * N}x{K}"][0]["config"]["block_n"] = 96
    with pytest.raises(ValueError, match="block_n"):
        write_gluon_table(path, entry, ENV["gpu"])
    assert not path.exists()
