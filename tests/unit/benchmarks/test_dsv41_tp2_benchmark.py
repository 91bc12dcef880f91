"""`python -m benchmarks dsv41_tp2`: its orchestration on the CPU (--dry-run: two gloo ranks, tiny dims, eager steps).

The GPU run is unattended on a machine with two GPUs; this keeps the launcher, the ranks' lockstep
(checks, captures and timing in one order on both ranks), the gathers and the report working in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=12)

ROOT = REPO_ROOT


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "dsv41_tp2", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(tmp_path)},
    )


def test_a_dry_run_checks_times_and_reports_both_ranks(tmp_path):
    done = _run(tmp_path, "--dry-run", "--tokens", "1,4", "--replays", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in table[1:]] == ["1", "4"], done.stdout
    assert "dry run on the CPU" in done.stdout
    result = json.loads((tmp_path / "dsv41_tp2.json").read_text())
    meta, rows = result["meta"], result["rows"]
    # The ranks ran with NVLink multicast off, on the tiny dims, and both timed every TP=2 variant.
    assert meta["env"] == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    assert (meta["config"], meta["replays"]) == ("tiny", 3)
    for row in rows:
        assert set(row["us"]) == {"TP=1 fused", "TP=1 unfused", "TP=2 fused", "TP=2 unfused", "all-reduce"}
        assert all(len(times) == 2 for times in row["us_per_rank"].values())
        assert row["paths"]["fused"] == ["linear.pair_consumed"] * 3 + ["tp.all_reduce"]
        assert set(row["calc_diff_tp2_vs_tp1"]) == {"attn_out", "y", "residual"}


def test_a_sharded_config_is_refused(tmp_path):
    done = _run(tmp_path, "--dry-run", "--config", "flash-tp2")
    assert done.returncode == 1 and "--config must name an unsharded config" in done.stderr
