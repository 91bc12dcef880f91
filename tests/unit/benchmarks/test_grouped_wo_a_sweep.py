"""The Gluon grouped wo_a sweep (``benchmarks/grouped_wo_a.py --gluon-sweep --table``): what it screens and
the table it writes, read back by the launcher's own reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.grouped_wo_a import K, N, gluon_candidates, gluon_wins_table, write_gluon_table
from gpumatrix import register
from mxfuse.kernels.gemm.configs import device_entries
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, effective_split_k, parse_gluon_table
from mxfuse.kernels.grouped_wo_a import gluon_launch as wo_a_gluon
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

    # A second device's run keeps the first's entry; the same device's run of one G replaces that
    # shape's buckets (here none: Triton won) and keeps the other G's.
    write_gluon_table(
        path, gluon_wins_table([_row(8, 64, 75.0, 30.0)], {**ENV, "gpu": "Other GPU"}), "Other GPU"
    )
    write_gluon_table(path, gluon_wins_table([_row(8, 16, 10.0, 30.0)], ENV), ENV["gpu"])
    data = json.loads(path.read_text())
    checked_in = set(
        json.loads(Path(wo_a_gluon.__file__).with_name("gluon_configs.json").read_text())["devices"]
    )
    assert set(data["devices"]) == checked_in | {"Some GPU", "Other GPU"}
    mine = data["devices"]["Some GPU"]
    assert big not in mine["shapes"] and mine["swept"][big] == [16]
    assert [(b["m_min"], b["m_max"]) for b in mine["shapes"][small]] == [(17, 64)] and mine["swept"][
        small
    ] == [4, 16, 64]
    assert f"({big}); the other shapes: " in mine["source"]
    assert parse_gluon_table(data, source="test")["Other GPU"][(8 * N, K)][0][:2] == (64, 64)


def test_a_table_the_launcher_cannot_read_is_not_written(tmp_path):
    path = tmp_path / "table.json"
    entry = gluon_wins_table([_row(8, 16, 40.0, 25.0)], ENV)
    entry["shapes"][f"{8 * N}x{K}"][0]["config"]["block_n"] = 96
    with pytest.raises(ValueError, match="block_n"):
        write_gluon_table(path, entry, ENV["gpu"])
    assert not path.exists()


class _CpuSets:
    """``Sets`` on the CPU: two operand sets, the torch reference standing in for every kernel."""

    def __init__(self, t, groups):
        import torch

        from mxfuse.einsum import prepare_wo_a_weight
        from mxfuse.formats import MxTensor
        from mxfuse.kernels import quantize_mxfp8

        self.t, self.groups, self.count = t, groups, 2
        g = torch.Generator().manual_seed(0)
        self.w = [prepare_wo_a_weight(torch.randn(groups, N, K, generator=g).mul_(0.05).bfloat16())] * 2
        x = torch.randn(t, groups * K, generator=g).bfloat16()
        self.a = [quantize_mxfp8(x, scale_layout="deepgemm")] * 2
        self.z = [torch.empty(t, groups, N, dtype=torch.bfloat16) for _ in range(2)]
        self.pair = [MxTensor.empty(t, groups * N, scale_layout="deepgemm", device="cpu") for _ in range(2)]

    def calls(self, name):
        return [lambda: None] * self.count


def _on_the_cpu(monkeypatch, bench_us, *, wrong=None, raising=None) -> list:
    """The sweep's GPU calls replaced for a CPU run: ``_CpuSets``, ``bench_us``, and a launcher that writes
    the torch reference (``raising`` raises, ``wrong`` corrupts its pair). Returns the configurations the
    launcher ran, in order."""
    import torch

    from benchmarks import grouped_wo_a as bench
    from mxfuse.einsum import grouped_wo_a_reference
    from mxfuse.kernels import quantize_mxfp8

    launched: list = []

    def fake_launch(a, w, *, z=None, pair=None, config=None):
        launched.append(config)
        if config == raising:
            raise RuntimeError("out of resources")
        ref = grouped_wo_a_reference(a, w)
        if z is not None:
            z.copy_(ref)
        if pair is not None:
            quantize_mxfp8(ref.view(a.shape[0], -1), out=pair)
            if config == wrong:
                pair.data.view(torch.uint8)[:, :64] ^= 0x7F

    monkeypatch.setattr(bench, "Sets", _CpuSets)
    monkeypatch.setattr(bench._gluon, "launch_grouped_wo_a_gluon", fake_launch)
    monkeypatch.setattr(bench, "bench_us", bench_us)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda _: type("P", (), {"multi_processor_count": 132})
    )
    return launched


def test_the_sweep_times_only_checked_candidates_and_confirms_the_fastest(monkeypatch):
    """The sweep's control flow on the CPU: a candidate whose pair is wrong is not timed, one that raises
    is recorded, the fastest checked one is confirmed against the Triton kernel in interleaved rounds."""
    from benchmarks import grouped_wo_a as bench

    t, groups = 4, 2
    candidates = gluon_candidates(t, groups, 132)
    wrong, raising, fastest = candidates[1], candidates[2], candidates[3]
    timed = []

    def fake_bench(fns, **kwargs):
        launched.clear()
        fns[0]()
        config = launched[-1] if launched else None  # None: a variant that is not the Gluon launcher
        timed.append(config)
        return 5.0 if config == fastest else 9.0

    launched = _on_the_cpu(monkeypatch, fake_bench, wrong=wrong, raising=raising)
    row = bench.gluon_sweep(t, groups, bandwidth=3e12, deadline=float("inf"))
    by_config = {GluonConfig(**e["config"]): e for e in row["screened"]}
    assert len(by_config) == len(candidates)
    assert by_config[wrong]["ok"] is False and "us" not in by_config[wrong]
    assert "out of resources" in by_config[raising]["error"] and "us" not in by_config[raising]
    assert wrong not in timed and raising not in timed
    assert row["gluon_config"] == fastest.to_json()
    assert row["gluon_pair_equals_quantized_z"] and row["gluon_z_calc_diff_vs_reference"] <= 1e-6
    assert row["rounds"] == 3 and len(row["triton_rounds_us"]) == 3 and len(row["gluon_rounds_us"]) == 3


def test_the_sweep_screens_the_default_even_past_its_deadline(monkeypatch):
    from benchmarks import grouped_wo_a as bench

    _on_the_cpu(monkeypatch, lambda fns, **kw: 7.0)
    row = bench.gluon_sweep(4, 2, bandwidth=3e12, deadline=0.0)
    assert [e["config"] for e in row["screened"]] == [gluon_candidates(4, 2, 132)[0].to_json()]
    assert "gluon_us" in row
