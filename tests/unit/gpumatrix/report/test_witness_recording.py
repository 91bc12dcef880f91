"""Recording code paths per test: into the JSON report with the outcome, from xdist workers, from processes
a test starts and from the plugin's own child pytest; an undeclared path fails the test that recorded it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpumatrix_trees import FAKE_CUDA_CONFTEST, registered, run_pytest, write_tree
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=15)

PATHS_YAML = """\
paths:
  k.pair:
    required_on: [h100]
  ref.torch:
    required_on: [cpu]
"""
_RECORDS = """
import subprocess, sys
import pytest
from gpumatrix.report.witnesses import record

def test_records():
    record({"path": "ref.torch", "reason": "CPU tensors", "backend": "torch", "rows": 3})
    record({"path": "ref.torch", "reason": "CPU tensors"})

def test_fails_after_recording():
    record({"path": "k.pair", "reason": "fused"})
    assert False, "the numbers were wrong"

@pytest.fixture
def records_in_setup():
    record({"path": "k.pair", "reason": "from a fixture"})

def test_setup(records_in_setup):
    pass

def test_records_nothing():
    pass

def test_child_process():
    code = "from gpumatrix.report.witnesses import record; record({'path': 'k.pair', 'reason': 'in a child'})"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def _witnessed(report: dict) -> dict[str, tuple[str, dict]]:
    return {
        nodeid.rpartition("::")[2]: (entry["outcome"], entry["paths"])
        for nodeid, entry in report["witnessed"].items()
    }


def test_records_reach_the_report_with_the_outcome_runner_and_machine(tmp_path: Path) -> None:
    write_tree(
        tmp_path, {"ci/paths.yaml": PATHS_YAML, "tests/unit/test_r.py": registered(("cpu",), body=_RECORDS)}
    )
    run = run_pytest(tmp_path, "-p", "no:xdist", "--runner", "cpu", hardware="cpu")
    assert run.returncode == 1, run.output  # test_fails_after_recording
    assert run.report is not None and run.report["runner"] == "cpu"
    assert run.report["hardware"]["gpu_class"] == "cpu"
    assert _witnessed(run.report) == {
        "test_records": ("passed", {"ref.torch": {"count": 2, "reasons": ["CPU tensors"]}}),
        "test_fails_after_recording": ("failed", {"k.pair": {"count": 1, "reasons": ["fused"]}}),
        "test_setup": ("passed", {"k.pair": {"count": 1, "reasons": ["from a fixture"]}}),
        "test_child_process": ("passed", {"k.pair": {"count": 1, "reasons": ["in a child"]}}),
    }
    entry = run.report["files"]["tests/unit/test_r.py"]
    assert entry["est_time"] == 1 and entry["duration"] > 0


def test_records_from_xdist_workers_are_not_lost(tmp_path: Path) -> None:
    body = _RECORDS + (
        "\n@pytest.mark.parametrize('i', range(12))\n"
        "def test_many(i):\n    record({'path': 'ref.torch', 'reason': f'case {i}'})\n"
    )
    write_tree(
        tmp_path, {"ci/paths.yaml": PATHS_YAML, "tests/unit/test_r.py": registered(("cpu",), body=body)}
    )
    run = run_pytest(tmp_path, "-n", "3", hardware="cpu")
    assert run.report is not None, run.output
    witnessed = _witnessed(run.report)
    assert sorted(name for name in witnessed if name.startswith("test_many")) == sorted(
        f"test_many[{i}]" for i in range(12)
    )
    assert witnessed["test_child_process"] == ("passed", {"k.pair": {"count": 1, "reasons": ["in a child"]}})
    assert witnessed["test_fails_after_recording"][0] == "failed"


def test_an_undeclared_path_fails_the_test_that_recorded_it(tmp_path: Path) -> None:
    body = """
from gpumatrix.report.witnesses import record

def test_typo():
    record({"path": "k.pari", "reason": "fused"})

def test_fine():
    record({"path": "k.pair", "reason": "fused"})
"""
    write_tree(
        tmp_path, {"ci/paths.yaml": PATHS_YAML, "tests/unit/test_r.py": registered(("cpu",), body=body)}
    )
    run = run_pytest(tmp_path, "-p", "no:xdist", hardware="cpu")
    assert run.returncode == 1
    assert (
        "tests/unit/test_r.py::test_typo recorded path(s) not declared in ci/paths.yaml: k.pari; declare each "
        "with the classes it must run on, or correct the name" in run.stdout
    )
    assert run.report["files"]["tests/unit/test_r.py"]["failed"] == ["tests/unit/test_r.py::test_typo"]
    assert run.report["files"]["tests/unit/test_r.py"]["passed"] == ["tests/unit/test_r.py::test_fine"]


def test_without_a_paths_file_any_recorded_path_is_undeclared(tmp_path: Path) -> None:
    body = "from gpumatrix.report.witnesses import record\n\ndef test_a():\n    record({'path': 'k.pair'})\n"
    write_tree(tmp_path, {"tests/unit/test_r.py": registered(("cpu",), body=body)})
    run = run_pytest(tmp_path, "-p", "no:xdist", hardware="cpu", report=False)
    assert run.returncode == 1
    assert "not declared in ci/paths.yaml (which does not exist): k.pair" in run.stdout


def test_an_invalid_paths_file_is_a_usage_error_before_any_test(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "ci/paths.yaml": "paths:\n  k.pair:\n    required_on: [h900]\n",
            "tests/unit/test_r.py": registered(("cpu",), body="def test_a():\n    pass\n"),
        },
    )
    run = run_pytest(tmp_path, hardware="cpu", report=False)
    assert run.returncode == 4
    assert "ci/paths.yaml:3: path 'k.pair' required_on names unknown class 'h900'" in run.stderr


def test_records_from_the_plugins_child_pytest_are_replayed(tmp_path: Path) -> None:
    """A 2-GPU test after CUDA was bound to one GPU runs in a fresh pytest; its records come back."""
    write_tree(
        tmp_path,
        {
            "ci/paths.yaml": PATHS_YAML,
            "tests/conftest.py": FAKE_CUDA_CONFTEST,
            "tests/kernels/test_first.py": registered(
                ("h100",),
                body="from gpumatrix.report.witnesses import record\n\ndef test_first(cuda):\n"
                "    record({'path': 'ref.torch', 'reason': 'one GPU', 'pid': 0})\n",
            ),
            "tests/e2e/test_pair.py": registered(
                ("h100",),
                gpus=2,
                body="import os\nfrom gpumatrix.report.witnesses import record\n\ndef test_pair(cuda):\n"
                "    assert len(cuda) == 2\n"
                "    record({'path': 'k.pair', 'reason': f'child {os.getpid()}'})\n",
            ),
        },
    )
    run = run_pytest(tmp_path, "tests/kernels/test_first.py", "tests/e2e/test_pair.py", hardware="2xh100")
    assert run.returncode == 0, run.output
    witnessed = _witnessed(run.report)
    assert witnessed["test_first"] == ("passed", {"ref.torch": {"count": 1, "reasons": ["one GPU"]}})
    outcome, paths = witnessed["test_pair"]
    assert outcome == "passed" and list(paths) == ["k.pair"] and paths["k.pair"]["count"] == 1
    child_pid = int(paths["k.pair"]["reasons"][0].split()[1])
    assert child_pid != os.getpid()


def test_record_refuses_what_is_not_a_record() -> None:
    code = (
        "from gpumatrix.report.witnesses import record\n"
        "for bad, error in (([], TypeError), ({'reason': 'x'}, ValueError), ({'path': ''}, ValueError)):\n"
        "    try:\n        record(bad)\n    except error as exc:\n        print(exc)\n"
        "    else:\n        raise SystemExit(f'{bad!r} was accepted')\n"
        "record({'path': 'k.pair'})  # outside any test and without the file variable: nowhere, no error\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMATRIX_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "witness must be a mapping with a 'path'; got list",
        "witness must have a non-empty string 'path'; got None",
        "witness must have a non-empty string 'path'; got ''",
    ]


def test_this_suites_conftest_forwards_mxfuse_witnesses(tmp_path: Path) -> None:
    """The repository's own bridge: records mxfuse emits in a test reach the JSON report."""
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMATRIX_", "PYTEST_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "tests/unit/mxfuse/formats/test_witness.py::test_capture_collects_records_in_order_and_stops_after_the_block",
            "--gpumatrix-report",
            str(report),
        ],
        cwd=REPO_ROOT,
        env={**env, "GPUMATRIX_HARDWARE": "cpu"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (entry,) = json.loads(report.read_text())["witnessed"].values()
    assert entry["outcome"] == "passed"
    assert entry["paths"] == {
        "gemm.torch": {"count": 2, "reasons": ["first", "after the block"]},
        "linear.bf16": {"count": 1, "reasons": ["second"]},
    }


def test_records_go_nowhere_when_the_plugin_is_disabled(tmp_path: Path) -> None:
    body = "from gpumatrix.report.witnesses import record\n\ndef test_a():\n    record({'path': 'k.typo'})\n"
    write_tree(
        tmp_path, {"ci/paths.yaml": PATHS_YAML, "tests/unit/test_r.py": registered(("cpu",), body=body)}
    )
    run = run_pytest(tmp_path, "-p", "no:gpumatrix", "-p", "no:xdist", hardware="cpu", report=False)
    assert run.returncode == 0, run.output  # no recorder, so no undeclared-path failure either
    assert "1 passed" in run.stdout
