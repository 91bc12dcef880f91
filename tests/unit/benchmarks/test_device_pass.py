"""benchmarks/device_pass.sh, the shared part of the device passes: each step bounded by its own limit and
by what is left of the pass's budget, its output in the log, a failed or timed-out step failing the pass."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=5)

PASS = REPO_ROOT / "benchmarks" / "device_pass.sh"


def _pass(tmp_path: Path, body: str, budget: int = 60) -> subprocess.CompletedProcess[str]:
    """Run a pass script that sources device_pass.sh, with a python3 that installs nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text('#!/bin/sh\necho "python3 $*"\n')
    fake.chmod(0o755)
    script = tmp_path / "pass.sh"
    script.write_text(f"set -u\n. {PASS} pass.log {budget} 5\n{body}\necho status=$status\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    return subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )


def test_steps_run_in_order_and_their_output_reaches_the_log(tmp_path: Path) -> None:
    done = _pass(tmp_path, "run one 20 echo first\nrun two 20 echo second")
    assert done.returncode == 0, done.stderr
    assert "status=0" in done.stdout
    log = (tmp_path / "out" / "pass.log").read_text()
    assert "python3 -m pip install" in log  # the checkout is installed first
    assert log.index("first") < log.index("second")
    assert "=== one (up to 20s): echo first" in log


def test_a_failed_step_fails_the_pass_and_the_next_step_still_runs(tmp_path: Path) -> None:
    done = _pass(tmp_path, "run bad 20 false\nrun after 20 echo after")
    assert "=== bad: exit 1" in done.stdout
    assert "after" in (tmp_path / "out" / "pass.log").read_text()
    assert "status=1" in done.stdout


def test_a_step_past_its_limit_is_stopped_and_fails(tmp_path: Path) -> None:
    done = _pass(tmp_path, "run slow 11 sleep 30")
    assert "=== slow: exit 124" in done.stdout
    assert "status=1" in done.stdout


def test_a_step_never_runs_past_the_budget(tmp_path: Path) -> None:
    done = _pass(tmp_path, "run big 500 echo big", budget=40)
    assert "=== big (up to 40s)" in done.stdout or "=== big (up to 39s)" in done.stdout


def test_a_step_with_no_time_left_is_skipped_and_said(tmp_path: Path) -> None:
    done = _pass(tmp_path, "run none 500 echo none", budget=5)
    assert "=== none: skipped (no time left)" in done.stdout
    assert "=== none (up to" not in (tmp_path / "out" / "pass.log").read_text()  # never started
    assert "status=0" in done.stdout


def _gluon_pass(tmp_path: Path, budget: int) -> subprocess.CompletedProcess[str]:
    """benchmarks/gluon_gemm_check.sh with a python3 and a gpumatrix that print their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "gpumatrix"):
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*"\n')
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    script = REPO_ROOT / "benchmarks" / "gluon_gemm_check.sh"
    return subprocess.run(
        ["bash", str(script), str(budget)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )


def test_the_gluon_pass_checks_benchmarks_then_sweeps_within_its_budget(tmp_path: Path) -> None:
    done = _gluon_pass(tmp_path, 570)
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "gluon.log").read_text()
    steps = [
        line.split(" (up to")[0] for line in log.splitlines() if line.startswith("=== ") and "(up to" in line
    ]
    assert steps == ["=== smoke", "=== edge", "=== edge-probe", "=== tests", "=== bench", "=== sweep"]
    sweep = next(line for line in log.splitlines() if line.startswith("=== sweep"))
    limit = int(sweep.split("(up to ")[1].split("s)")[0])
    budget = int(sweep.split("--budget-s ")[1].split()[0])
    assert limit <= 570 and budget == limit - 45  # the sweep writes its table before the step is stopped
    assert "--kernel gluon" in sweep and f"--table {tmp_path / 'out' / 'gluon_configs_sweep.json'}" in sweep


def test_the_gluon_pass_skips_the_sweep_when_under_a_minute_is_left(tmp_path: Path) -> None:
    done = _gluon_pass(tmp_path, 100)
    assert "=== sweep: skipped" in done.stdout
    assert "mxfp8_gemm_sweep" not in (tmp_path / "out" / "gluon.log").read_text()


def test_finish_warns_when_more_files_than_a_device_machine_returns(tmp_path: Path) -> None:
    body = 'for i in 1 2 3 4 5 6 7 8; do echo x >"$out/f$i.json"; done\nfinish'
    done = _pass(tmp_path, body)  # pass.log plus 8 files: 9
    assert (
        f"=== warning: {tmp_path / 'out'} holds 9 files; a device machine returns at most 8:" in done.stdout
    )
    assert str(tmp_path / "out" / "f8.json") in done.stdout


def test_finish_counts_the_files_when_they_fit(tmp_path: Path) -> None:
    done = _pass(tmp_path, 'echo x >"$out/one.json"\necho y >"$scratch/side.xml"\nfinish')
    assert f"=== {tmp_path / 'out'} holds 2 file(s)" in done.stdout  # the log and one.json; scratch apart
    assert "warning" not in done.stdout


def test_the_gluon_pass_keeps_its_side_files_out_of_the_returned_folder(tmp_path: Path) -> None:
    done = _gluon_pass(tmp_path, 570)
    log = (tmp_path / "out" / "gluon.log").read_text()
    tests = next(line for line in log.splitlines() if line.startswith("=== tests"))
    out = tmp_path / "out"
    assert f"--report {out / 'gluon-tests.json'}" in tests
    for side in ("--tests-file ", "--junit-xml ", "--html "):
        assert side in tests and f"{side}{out}" not in tests
    assert f"=== {out} holds" in done.stdout and "warning" not in done.stdout


def _kernels_pass(tmp_path: Path, *steps: str) -> subprocess.CompletedProcess[str]:
    """benchmarks/kernels_check.sh with a python3, gpumatrix and nvidia-smi that print their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("python3", "gpumatrix", "nvidia-smi"):
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*"\n')
        fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "OUT": str(tmp_path / "out"),
        "BUDGET": "570",
    }
    script = REPO_ROOT / "benchmarks" / "kernels_check.sh"
    return subprocess.run(
        ["bash", str(script), *steps], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )


def test_the_kernels_pass_runs_the_steps_named_in_their_order(tmp_path: Path) -> None:
    done = _kernels_pass(tmp_path, "wo_a", "job", "gemm")
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "kernels.log").read_text()
    steps = [
        line.split(" (up to")[0] for line in log.splitlines() if line.startswith("=== ") and "(up to" in line
    ]
    assert steps == ["=== wo_a", "=== job", "=== gemm"]
    job = next(line for line in log.splitlines() if line.startswith("=== job"))
    assert (
        "gpumatrix run --runner 1-gpu-h100" in job and f"--report {tmp_path / 'out' / 'gpu-job.json'}" in job
    )


def test_the_kernels_pass_refuses_an_unknown_step_by_name(tmp_path: Path) -> None:
    done = _kernels_pass(tmp_path, "gemm", "benchmark-everything")
    assert done.returncode == 2
    assert "unknown step benchmark-everything" in done.stdout


def test_the_boundary_step_sweeps_then_times_the_boundary_with_the_new_table(tmp_path: Path) -> None:
    done = _kernels_pass(tmp_path, "boundary", "step")
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "kernels.log").read_text()
    starts = [line for line in log.splitlines() if line.startswith("=== ") and "(up to" in line]
    assert [line.split(" (up to")[0] for line in starts] == ["=== boundary-sweep", "=== boundary", "=== step"]
    sweep, boundary, step = starts
    assert "hc_boundary_sweep" in sweep and "--latency" in sweep and "--orderings shifted" in sweep
    assert f"--write {tmp_path / 'out' / 'hc_configs.json'}" in sweep
    assert "hc_boundary --hiddens 5120" in boundary and "--outputs" in boundary
    assert "dsv41_decode" in step and "--variants pdl,base" in step


def test_the_step_tables_step_times_the_step_without_then_with_stand_ins(tmp_path: Path) -> None:
    done = _kernels_pass(tmp_path, "step-tables")
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "kernels.log").read_text()
    starts = [line for line in log.splitlines() if line.startswith("=== ") and "(up to" in line]
    assert [line.split(" (up to")[0] for line in starts] == ["=== step-defaults", "=== step-standins"]
    defaults, standins = starts
    assert "MXFUSE_TABLE_STANDINS=0 python3 -m benchmarks dsv41_decode" in defaults
    assert "MXFUSE_TABLE_STANDINS" not in standins and "dsv41_decode" in standins
    assert "--json" in defaults and "dsv41_defaults.json" in defaults and "dsv41_standins.json" in standins


def test_the_boundary_sweep_takes_its_token_counts_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("BOUNDARY_TOKENS", "16")
    done = _kernels_pass(tmp_path, "boundary")
    assert done.returncode == 0, done.stdout + done.stderr
    sweep = next(
        line
        for line in (tmp_path / "out" / "kernels.log").read_text().splitlines()
        if line.startswith("=== boundary-sweep")
    )
    assert "--tokens 16 " in sweep


def test_the_wo_a_sweep_puts_its_table_in_place_for_the_steps_after_it(tmp_path: Path) -> None:
    target = tmp_path / "src" / "mxfuse" / "kernels" / "grouped_wo_a" / "gluon_configs.json"
    target.parent.mkdir(parents=True)
    target.write_text("checked in\n")
    done = _kernels_pass(tmp_path, "sweep-wo-a", "step")
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "kernels.log").read_text()
    starts = [line for line in log.splitlines() if line.startswith("=== ") and "(up to" in line]
    assert [line.split(" (up to")[0] for line in starts] == ["=== sweep-wo-a", "=== step"]
    sweep = starts[0]
    assert "grouped_wo_a --ts  --gs 8,2 --gluon-sweep" in sweep
    assert f"--table {tmp_path / 'out' / 'wo_a_gluon_configs.json'}" in sweep
    assert target.read_text() == "checked in\n"  # the fake sweep wrote no table: nothing replaced

    (tmp_path / "out" / "wo_a_gluon_configs.json").write_text("swept\n")
    done = _kernels_pass(tmp_path, "sweep-wo-a")
    assert done.returncode == 0, done.stdout + done.stderr
    assert target.read_text() == "swept\n"
