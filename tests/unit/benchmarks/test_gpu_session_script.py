"""benchmarks/gpu_session.sh exits non-zero when a step did not end as it must (fake GPU tools on PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=3)

# Stands in for python3 and nvidia-smi: exits with $FAKE_EXIT_<n> for the nth call whose arguments
# contain $FAKE_MATCH_<n>, else 2 for the refused runner (as gpumatrix does), else 0.
_FAKE = """#!/usr/bin/env bash
args="$*"
for n in 1 2; do
  match="FAKE_MATCH_$n"; code="FAKE_EXIT_$n"
  if [ -n "${!match:-}" ] && [[ "$args" == *"${!match}"* ]]; then exit "${!code}"; fi
done
[[ "$args" == *"4-gpu-b200"* ]] && exit 2
exit 0
"""


def _session(tmp_path: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "nvidia-smi"):
        (bin_dir / name).write_text(_FAKE)
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:{os.path.dirname(shutil.which('bash') or '/bin/bash')}:/usr/bin:/bin"
    return subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_session.sh"), *args],
        cwd=tmp_path,
        env={"PATH": path, "OUT": str(tmp_path / "out"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "exit_code", "verdict"),
    [
        ({}, 0, None),
        ({"FAKE_MATCH_1": "-n 2", "FAKE_EXIT_1": "1"}, 1, "leases-n2      rc=1   FAILED (expected exit 0)"),
        (
            {"FAKE_MATCH_1": "run --runner auto", "FAKE_EXIT_1": "5"},
            1,
            "run-auto       rc=5   FAILED (expected exit 0)",
        ),
        (
            {"FAKE_MATCH_1": "4-gpu-b200", "FAKE_EXIT_1": "0"},
            1,
            "mismatch       rc=0   FAILED (expected exit 2)",
        ),
        (
            {"FAKE_MATCH_1": "benchmarks lease_log", "FAKE_EXIT_1": "1"},
            1,
            "lease-log      rc=1   FAILED (expected exit 0)",
        ),
    ],
    ids=[
        "all-as-expected",
        "a-test-step-fails",
        "a-run-fails",
        "the-refusal-did-not-happen",
        "a-lease-overlap",
    ],
)
def test_gpu_session_exit_status(
    tmp_path: Path, env: dict[str, str], exit_code: int, verdict: str | None
) -> None:
    done = _session(tmp_path, ["--no-bench"], env)
    assert done.returncode == exit_code, done.stdout + done.stderr
    assert "mismatch       rc=" in done.stdout
    if verdict is not None:
        assert verdict in done.stdout
    else:
        assert "FAILED" not in done.stdout


@pytest.mark.parametrize(
    ("args", "ran", "left_out"),
    [
        ([], ["run-1gpu", "run-auto", "lease-log", "bench-leases", "bench-tp2"], []),
        (["--no-bench", "--skip-1gpu"], ["run-auto", "lease-log"], ["run-1gpu", "bench-leases", "bench-tp2"]),
    ],
    ids=["everything", "the-2-gpu-work-only"],
)
def test_gpu_session_steps(tmp_path: Path, args: list[str], ran: list[str], left_out: list[str]) -> None:
    done = _session(tmp_path, args, {})
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.split("=== summary", 1)[1]
    assert all(f"{name} " in summary for name in ran), summary
    assert not any(f"{name} " in summary for name in left_out), summary
    if "bench-tp2" in ran:
        assert "-m benchmarks dsv41_tp2" in done.stdout


def test_gpu_session_refuses_an_unknown_option(tmp_path: Path) -> None:
    done = _session(tmp_path, ["--no-bnech"], {})
    assert done.returncode == 2 and "unknown option --no-bnech" in done.stdout
