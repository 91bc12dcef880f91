"""`python -m benchmarks dsv41_decode` on the CPU (--dry-run: the tiny config, eager steps, host times).

The GPU run measures; this keeps the script, its per-stage attribution (the model's profiler ranges) and
the per-stage byte floors working in CI, and checks the floors against bytes counted independently here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=40)

ROOT = REPO_ROOT
COMMAND = [sys.executable, "-m", "benchmarks", "dsv41_decode"]
STAGES = ["boundary_in", "wqkv_a", "wq_b", "attention", "wo_a", "wo_b", "boundary_out"]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path_factory.mktemp("dsv41_decode")
    done = subprocess.run(
        [
            *COMMAND,
            "--dry-run",
            "--tokens",
            "1,4",
            "--stage-tokens",
            "4",
            "--replays",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(out)},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads((out / "dsv41_decode.json").read_text())


def test_every_stage_of_every_path_has_a_time_and_a_floor(dry_run):
    done, result = dry_run
    assert "dry run on the CPU" in done.stdout
    (row,) = result["stages"]
    assert row["tokens"] == 4
    for path in ("fused", "unfused", "bf16"):
        assert list(row["us"][path]) == STAGES and list(row["floor_us"][path]) == STAGES
        # Host time of a stage that ran is positive: each range saw its stage.
        assert all(row["us"][path][s] > 0 for s in STAGES), row["us"][path]
        assert all(row["floor_us"][path][s] > 0 for s in STAGES)
    table = [
        line for line in done.stdout.splitlines() if line.startswith(("| boundary", "| wq", "| wo", "| att"))
    ]
    assert [line.split("|")[1].strip() for line in table] == STAGES


def test_stage_floors_count_the_bytes_each_path_moves(dry_run):
    """The floors against bytes counted here from the tiny config: the fused path's MXFP8 pairs
    (1 + 1/32 bytes an element) where the unfused path also reads y and writes and reads its pair,
    and the bf16 path reads bf16 weights."""
    _, result = dry_run
    bandwidth = result["meta"]["copy_bandwidth"]
    floors = {
        p: {s: us * bandwidth / 1e6 for s, us in v.items()}
        for p, v in result["stages"][0]["floor_us"].items()
    }
    t, h = 4, 256  # the tiny config's hidden size
    pair, bf16 = t * h + t * h // 32, 2 * t * h
    # boundary_in writes the pair on the fused path and y on the others; everything else is the same.
    assert floors["unfused"]["boundary_in"] - floors["fused"]["boundary_in"] == pytest.approx(
        bf16 - pair, rel=1e-9
    )
    assert floors["bf16"]["boundary_in"] == pytest.approx(floors["unfused"]["boundary_in"], rel=1e-9)
    # wqkv_a's input: the unfused path reads y, writes the pair and reads it back (the quantize kernel).
    assert floors["unfused"]["wqkv_a"] - floors["fused"]["wqkv_a"] == pytest.approx(bf16 + pair, rel=1e-9)
    # wq_b's producer (q_norm) writes the pair or y, and wq_b reads it as wqkv_a does; its MXFP8 weight
    # (1 + 1/32 bytes an element) against bf16 on the bf16 path. q_lora_rank 128, heads x head_dim 256.
    qp, qb = t * 128 + t * 128 // 32, 2 * t * 128
    assert floors["unfused"]["wq_b"] - floors["fused"]["wq_b"] == pytest.approx(
        (qb - qp) + (qb + qp), rel=1e-9
    )
    weight_mx, weight_bf16 = 256 * 128 + 256 * 128 // 32, 2 * 256 * 128
    assert floors["bf16"]["wq_b"] - floors["fused"]["wq_b"] == pytest.approx(
        weight_bf16 - weight_mx + 2 * (qb - qp), rel=1e-9
    )
    # The attention writes wo_a's pair (fused) or bf16 o (heads x head_dim = 256 columns), which wo_a
    # quantizes on the unfused path (o read, the pair written and read back).
    op, ob = t * 256 + t * 256 // 32, 2 * t * 256
    assert floors["unfused"]["attention"] - floors["fused"]["attention"] == pytest.approx(ob - op, rel=1e-9)
    assert floors["bf16"]["attention"] == pytest.approx(floors["unfused"]["attention"], rel=1e-9)
    # wo_a's output z (2 groups x o_lora_rank 128): its pair (fused) or bf16 z.
    zp, zb = t * 256 + t * 256 // 32, 2 * t * 256
    assert floors["unfused"]["wo_a"] - floors["fused"]["wo_a"] == pytest.approx(
        (ob + 2 * op) - op + (zb - zp), rel=1e-9
    )
    # The boundary after attention moves the same bytes on every path.
    assert floors["fused"]["boundary_out"] == pytest.approx(floors["bf16"]["boundary_out"], rel=1e-9)
    # The attention floor holds the KV the four sequences read (KV 64 on the dry run, head_dim 64, bf16).
    assert floors["fused"]["attention"] > t * 64 * 64 * 2


def test_targets_are_reported_for_every_row(dry_run):
    done, _ = dry_run
    targets = [line for line in done.stdout.splitlines() if line.startswith("target ")]
    # T = 1 and 4: 1.05x unfused and 1.2x bf16 (T <= 16), never slower than unfused, and the floor at T = 1.
    assert len(targets) == 7, targets
    assert all(line.endswith((" met", " MISSED")) for line in targets)


def _event(name, start, end, *, self_device=0.0, thread=1, device="cpu"):
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
    kind = DeviceType.CPU if device == "cpu" else DeviceType.CUDA
    return SimpleNamespace(name=name, time_range=span, thread=thread, device_type=kind,
                           self_device_time_total=self_device)  # fmt: skip


def test_stage_times_are_the_host_ranges_of_a_cpu_profile():
    """The dry run's attribution on synthetic events: each ``dsv41.<stage>`` host range's time, summed
    over the steps; device-side copies of a range and other events do not count."""
    from benchmarks.dsv41_decode import stage_times

    events = [
        _event("dsv41.boundary_in", 0, 100),
        _event("aten::mm", 10, 30, self_device=7.0),
        _event("dsv41.boundary_in", 0, 400, self_device=999.0, device="cuda"),  # the range on the GPU
        _event("dsv41.attention", 120, 200, self_device=3.0),
        _event("dsv41.not_a_stage", 200, 300),
        _event("dsv41.boundary_in", 500, 600),  # the second step
    ]
    times = stage_times(events, steps=2)
    assert times["boundary_in"] == (100 + 100) / 2 and times["attention"] == 80 / 2
    assert times["wo_b"] == 0.0 and set(times) == set(STAGES)


def test_stage_event_times_take_each_stages_median_step():
    """On CUDA a stage's time in a step is the span between its start and end events (summed when it runs
    twice); the figure is the median over the steps, so one step whose host fell behind does not move it."""
    from types import SimpleNamespace

    from benchmarks.dsv41_decode import stage_event_times

    def mark(ms):
        return SimpleNamespace(elapsed_time=lambda other: other.t - ms, t=ms)

    def one_step(t0, wq_b_us, attention_us):
        return [("wq_b", mark(t0), mark(t0 + wq_b_us / 1e3)), ("attention", mark(t0 + 0.1), mark(t0 + 0.1 + attention_us / 1e3)),
                ("wq_b", mark(t0 + 0.2), mark(t0 + 0.2 + 1e-3))]  # fmt: skip

    log = one_step(0.0, 20.0, 14.0) + one_step(1.0, 22.0, 16.0) + one_step(2.0, 1500.0, 15.0)
    times = stage_event_times(log, steps=3)
    assert abs(times["wq_b"] - 23.0) < 1e-6 and abs(times["attention"] - 15.0) < 1e-6  # not the mean 515
    assert times["wo_a"] == 0.0 and set(times) == set(STAGES)
    with pytest.raises(ValueError, match="unknown stage 'lm_head'"):
        stage_event_times([("lm_head", mark(0.0), mark(1.0))], steps=1)
    with pytest.raises(ValueError, match="do not split into steps = 2"):
        stage_event_times(log, steps=2)
    with pytest.raises(ValueError, match="step 1 runs 'attention' where the first step ran 'wq_b'"):
        stage_event_times(log[:3] + log[4:5] + log[3:4] + log[5:6], steps=2)


def test_stage_events_records_nothing_outside_its_block():
    """``stage_events`` fills its list only while open, and only on CUDA (the CPU has no events)."""
    import torch

    from mxfuse.models.dsv41.model import _stage, stage_events

    with stage_events() as log:
        with _stage("wq_b"):
            pass
    assert log == [] if not torch.cuda.is_available() else [name for name, *_ in log] == ["wq_b"]
    with _stage("wq_b"):
        pass
    assert len(log) == (1 if torch.cuda.is_available() else 0)


def test_kernel_sequence_averages_each_launch_position_over_the_steps():
    """One step's kernels in launch order, each position's device time averaged over the steps; host
    events ignored; steps that launched different kernels give no sequence."""
    from benchmarks.dsv41_decode import kernel_sequence

    gpu = [("_hc_kernel", 0, 6), ("_hc_kernel", 10, 20), ("gemm", 21, 25),
           ("_hc_kernel", 100, 108), ("_hc_kernel", 110, 122), ("gemm", 122, 128)]  # fmt: skip
    events = [_event(n, a, b, device="cuda") for n, a, b in reversed(gpu)] + [_event("aten::mm", 0, 500)]
    seq = kernel_sequence(events, steps=2)
    assert [k["name"] for k in seq] == ["_hc_kernel", "_hc_kernel", "gemm"]
    assert [k["us"] for k in seq] == [7.0, 11.0, 5.0]
    assert kernel_sequence(events[:-2], steps=2) == []  # 5 kernels: not two equal steps
    swapped = [_event(n, a, b, device="cuda") for n, a, b in gpu[:3] + [("gemm", 100, 108)] + gpu[4:]]
    assert kernel_sequence(swapped, steps=2) == []


def test_the_timeline_cuts_kernels_into_replays_in_start_order():
    """benchmarks.dsv41_timeline: kernel events of several replays (any order) -> one list per replay of
    (name, start, end), sorted by start; a trailing partial replay is dropped."""
    from benchmarks.dsv41_timeline import replays_of

    gpu = [("a", 0, 4), ("b", 2, 9), ("a", 20, 23), ("b", 21, 30), ("a", 40, 41)]
    events = [_event(n, s, e, device="cuda") for n, s, e in reversed(gpu)]
    reps = replays_of(events, 2)
    assert [[(n, s, e) for n, s, e in r] for r in reps] == [
        [("a", 0, 4), ("b", 2, 9)],
        [("a", 20, 23), ("b", 21, 30)],
    ]


def test_unknown_launch_variants_are_refused():
    done = subprocess.run(
        [*COMMAND, "--dry-run", "--tokens", "1", "--variants", "pdl,fast"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "--variants: unknown ['fast']" in done.stderr
