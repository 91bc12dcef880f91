"""The gpumatrix pytest plugin, on throwaway trees run by pytest in a subprocess (fake hardware)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from gpumatrix_trees import (
    MATRIX_YAML,
    RESOLVING_CONFTEST,
    PytestRun,
    most_at_once,
    overlapping_leases,
    read_jsonl,
    registered,
    run_pytest,
    write_tree,
)

from gpumatrix import register
from gpumatrix.config import DEFAULT_WORKERS_PER_GPU
from gpumatrix.hardware.detection import Hardware
from gpumatrix.plugin import HardwareSkip, evaluate_hardware
from gpumatrix.registry.model import Registration

register(on=("cpu",), est_time=40)

H200 = Hardware("h100", 1, ("NVIDIA H200",), ((9, 0),), "570", "nvml", ("GPU-a",))
MACHINES = {
    "cpu": Hardware("cpu", 0),
    "1xh100": H200,
    "2xh100": Hardware("h100", 2, ("NVIDIA H200",) * 2, ((9, 0),) * 2, "570", "nvml", ("GPU-a", "GPU-b")),
    "4xb200": Hardware("b200", 4, ("NVIDIA B200",) * 4, ((10, 0),) * 4, "570", "nvml", ("0", "1", "2", "3")),
    "1xL4": Hardware("unknown", 1, ("NVIDIA L4",), ((8, 9),), "570", "nvml", ("GPU-l",)),
}


@pytest.mark.parametrize(
    ("on", "gpus", "machine", "reason"),
    [
        (("cpu",), 1, "cpu", None),
        (("cpu",), 1, "4xb200", None),
        (("cpu", "b200"), 4, "1xh100", None),
        (("h100",), 1, "cpu", "needs 1 x h100; this machine: cpu"),
        (("h100",), 1, "1xh100", None),
        (("h100",), 2, "1xh100", "needs 2 x h100; this machine: 1 x h100 (NVIDIA H200, sm_90)"),
        (("h100",), 2, "2xh100", None),
        (("h100",), 1, "2xh100", None),
        (("b200", "gb300"), 4, "1xh100", "needs 4 x b200|gb300; this machine: 1 x h100 (NVIDIA H200, sm_90)"),
        (("b200", "gb300"), 4, "4xb200", None),
        (("b200", "gb300"), 4, "2xh100", "needs 4 x b200|gb300; this machine: 2 x h100 (NVIDIA H200, sm_90)"),
        (("5090", "h100"), 1, "4xb200", "needs 1 x 5090|h100; this machine: 4 x b200 (NVIDIA B200, sm_100)"),
        (("h100",), 1, "1xL4", "needs 1 x h100; this machine: 1 x unknown (NVIDIA L4, sm_89)"),
    ],
    ids=[
        "cpu-on-cpu",
        "cpu-on-gpu",
        "cpu-or-gpu",
        "h100-on-cpu",
        "h100-on-h100",
        "two-on-one",
        "two-on-two",
        "one-on-two",
        "blackwell-on-hopper",
        "blackwell-on-b200",
        "four-on-two",
        "wrong-class",
        "unknown-class",
    ],
)
def test_evaluate_hardware(on: tuple[str, ...], gpus: int, machine: str, reason: str | None) -> None:
    registration = Registration("tests/kernels/test_x.py", 3, on, gpus, 10.0)
    expected = HardwareSkip(reason) if reason is not None else None
    assert evaluate_hardware(registration, MACHINES[machine]) == expected


# -- one tree, four machines ------------------------------------------------------------------------


def _gpu_test(on: tuple[str, ...], gpus: int, tests: int = 1) -> str:
    body = "import os\n" + "".join(
        f"\ndef test_{name}():\n    assert len(os.environ['CUDA_VISIBLE_DEVICES'].split(',')) == {gpus}\n"
        for name in "ab"[:tests]
    )
    return registered(on, gpus=gpus, body=body)


SKIP_TREE = {
    "tests/unit/test_cpu_only.py": registered(
        ("cpu",),
        body="""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_passes():
            pass

        def test_fails():
            assert 1 == 2

        def test_setup_error(broken):
            pass

        @pytest.mark.skip(reason="not today")
        def test_own_skip():
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            assert 1 == 2
    """,
    ),
    "tests/kernels/test_h100_one.py": _gpu_test(("h100",), 1),
    "tests/kernels/test_hopper_blackwell.py": _gpu_test(("h100", "b200", "gb300"), 1),
    "tests/e2e/test_h100_two.py": _gpu_test(("h100",), 2),
    "tests/e2e/test_blackwell_four.py": _gpu_test(("b200", "gb300"), 4, tests=2),
    "tests/kernels/test_cpu_or_5090.py": registered(("cpu", "5090"), body="def test_a():\n    pass\n"),
    "tests/kernels/test_5090.py": _gpu_test(("5090",), 1),
}
CPU_ONLY = "tests/unit/test_cpu_only.py::"
ALWAYS = [
    (CPU_ONLY + "test_passes", "passed", None),
    (CPU_ONLY + "test_fails", "failed", None),
    (CPU_ONLY + "test_setup_error", "errors", None),
    (CPU_ONLY + "test_own_skip", "skipped", "not today"),
    (CPU_ONLY + "test_xfail", "skipped", "xfail: known"),
    ("tests/kernels/test_cpu_or_5090.py::test_a", "passed", None),
]
# A file this machine cannot run is skipped whole, before it is imported: one entry, its path.
BY_MACHINE = {
    "cpu": [
        ("tests/kernels/test_h100_one.py", "hardware", "needs 1 x h100; this machine: cpu"),
        (
            "tests/kernels/test_hopper_blackwell.py",
            "hardware",
            "needs 1 x h100|b200|gb300; this machine: cpu",
        ),
        ("tests/e2e/test_h100_two.py", "hardware", "needs 2 x h100; this machine: cpu"),
        ("tests/e2e/test_blackwell_four.py", "hardware", "needs 4 x b200|gb300; this machine: cpu"),
        ("tests/kernels/test_5090.py", "hardware", "needs 1 x 5090; this machine: cpu"),
    ],
    "1xh100": [
        ("tests/kernels/test_h100_one.py::test_a", "passed", None),
        ("tests/kernels/test_hopper_blackwell.py::test_a", "passed", None),
        (
            "tests/e2e/test_h100_two.py",
            "hardware",
            "needs 2 x h100; this machine: 1 x h100 (fake h100, sm_90)",
        ),
        (
            "tests/e2e/test_blackwell_four.py",
            "hardware",
            "needs 4 x b200|gb300; this machine: 1 x h100 (fake h100, sm_90)",
        ),
        (
            "tests/kernels/test_5090.py",
            "hardware",
            "needs 1 x 5090; this machine: 1 x h100 (fake h100, sm_90)",
        ),
    ],
    "2xh100": [
        ("tests/kernels/test_h100_one.py::test_a", "passed", None),
        ("tests/e2e/test_h100_two.py::test_a", "passed", None),
        (
            "tests/e2e/test_blackwell_four.py",
            "hardware",
            "needs 4 x b200|gb300; this machine: 2 x h100 (fake h100, sm_90)",
        ),
    ],
    "4xb200": [
        (
            "tests/kernels/test_h100_one.py",
            "hardware",
            "needs 1 x h100; this machine: 4 x b200 (fake b200, sm_100)",
        ),
        ("tests/kernels/test_hopper_blackwell.py::test_a", "passed", None),
        (
            "tests/e2e/test_h100_two.py",
            "hardware",
            "needs 2 x h100; this machine: 4 x b200 (fake b200, sm_100)",
        ),
        ("tests/e2e/test_blackwell_four.py::test_a", "passed", None),
        ("tests/e2e/test_blackwell_four.py::test_b", "passed", None),
        (
            "tests/kernels/test_5090.py",
            "hardware",
            "needs 1 x 5090; this machine: 4 x b200 (fake b200, sm_100)",
        ),
    ],
}
TOTALS = {  # 12 tests in 7 files: 5 CPU-only tests, one CPU-or-5090 test, 6 GPU tests in 5 files
    "cpu": {
        "ran": 4,
        "passed": 2,
        "failed": 1,
        "errors": 1,
        "skipped": 7,
        "hardware_skipped": 5,
        "deselected": 0,
    },
    "1xh100": {
        "ran": 6,
        "passed": 4,
        "failed": 1,
        "errors": 1,
        "skipped": 5,
        "hardware_skipped": 3,
        "deselected": 0,
    },
    "2xh100": {
        "ran": 7,
        "passed": 5,
        "failed": 1,
        "errors": 1,
        "skipped": 4,
        "hardware_skipped": 2,
        "deselected": 0,
    },
    "4xb200": {
        "ran": 7,
        "passed": 5,
        "failed": 1,
        "errors": 1,
        "skipped": 5,
        "hardware_skipped": 3,
        "deselected": 0,
    },
}


@pytest.fixture(scope="module")
def run_on(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., PytestRun]:
    """One pytest run of SKIP_TREE per (machine, args), shared by this module's tests on every xdist worker."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this session's directory, common to its workers
    shared = shared / "gpumatrix-skip-tree"
    shared.mkdir(exist_ok=True)
    with FileLock(shared / "tree.lock"):
        tree = shared / "tree"
        if not tree.exists():
            write_tree(tree, SKIP_TREE)

    def run(machine: str, *args: str) -> PytestRun:
        key = hashlib.sha256(json.dumps([machine, *args]).encode()).hexdigest()[:16]
        with FileLock(shared / f"{key}.lock"):
            cached = shared / f"{key}.json"
            if not cached.exists():
                done = run_pytest(tree, "-rs", *args, hardware=machine)
                cached.write_text(json.dumps(dataclasses.asdict(done)), encoding="utf-8")
            return PytestRun(**json.loads(cached.read_text(encoding="utf-8")))

    return run


def _outcome(report: dict[str, Any], nodeid: str) -> tuple[str, str | None]:
    """(outcome, skip reason) of a test, or of a whole file skipped before it was imported."""
    entry = report["files"][nodeid.split("::")[0]]
    for kind in ("passed", "failed", "errors"):
        if nodeid in entry[kind]:
            return kind, None
    (skip,) = [s for s in entry["skipped"] if s["nodeid"] == nodeid]
    return ("hardware" if skip["hardware"] else "skipped"), skip["reason"]


@pytest.mark.parametrize(
    ("machine", "nodeid", "outcome", "reason"),
    [(machine, *row) for machine, rows in BY_MACHINE.items() for row in ALWAYS + rows],
)
def test_outcome_and_skip_reason_by_machine(
    machine: str, nodeid: str, outcome: str, reason: str | None, run_on: Callable[..., PytestRun]
) -> None:
    report = run_on(machine).report
    assert _outcome(report, nodeid) == (outcome, reason)
    # Per file, "ran" lists exactly the tests that executed: passed, failed or errored, never skipped.
    ran = nodeid in report["files"][nodeid.split("::")[0]]["ran"]
    assert ran == (outcome in ("passed", "failed", "errors"))


@pytest.mark.parametrize("machine", list(TOTALS))
def test_report_totals_and_header(machine: str, run_on: Callable[..., PytestRun]) -> None:
    run = run_on(machine)
    assert run.returncode == 1  # test_fails
    assert run.report["totals"] == TOTALS[machine]
    assert (run.report["hardware"]["gpu_class"], run.report["hardware"]["source"], run.report["runner"]) == (
        machine.partition("x")[2] or "cpu",
        "override",
        None,
    )


def test_skip_reasons_reach_the_terminal(run_on: Callable[..., PytestRun]) -> None:
    assert (
        "SKIPPED [1] tests/e2e/test_h100_two.py: needs 2 x h100; this machine: 1 x h100 (fake h100, sm_90)"
        in run_on("1xh100").stdout
    )


def test_the_report_is_the_same_under_xdist(run_on: Callable[..., PytestRun]) -> None:
    serial, parallel = run_on("2xh100"), run_on("2xh100", "-n", "2")

    def unmeasured(files: dict) -> dict:  # measured seconds differ from run to run; all else must not
        return {path: {k: v for k, v in entry.items() if k != "duration"} for path, entry in files.items()}

    assert unmeasured(parallel.report["files"]) == unmeasured(serial.report["files"])
    assert parallel.report["totals"] == serial.report["totals"]


# -- --runner ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "label", "args", "passed", "deselected"),
    [
        # Files outside the slice are deselected whole, never imported: "deselected" counts files.
        (
            "1xh100",
            "1-gpu-h100",
            (),
            ["tests/kernels/test_h100_one.py::test_a", "tests/kernels/test_hopper_blackwell.py::test_a"],
            5,
        ),
        (
            "1xh100",
            "1-gpu-h100",
            ("-n", "2"),
            ["tests/kernels/test_h100_one.py::test_a", "tests/kernels/test_hopper_blackwell.py::test_a"],
            5,
        ),
        ("2xh100", "2-gpu-h100", (), ["tests/e2e/test_h100_two.py::test_a"], 6),
        (
            "4xb200",
            "4-gpu-b200",
            (),
            [
                "tests/e2e/test_blackwell_four.py::test_a",
                "tests/e2e/test_blackwell_four.py::test_b",
                "tests/kernels/test_hopper_blackwell.py::test_a",
            ],
            5,
        ),
    ],
    ids=["1-gpu-h100", "1-gpu-h100-xdist", "2-gpu-h100", "4-gpu-b200"],
)
def test_runner_keeps_only_its_slice(
    machine: str,
    label: str,
    args: tuple[str, ...],
    passed: list[str],
    deselected: int,
    run_on: Callable[..., PytestRun],
) -> None:
    run = run_on(machine, "--runner", label, *args)
    assert run.returncode == 0, run.output
    ran = sorted(nodeid for entry in run.report["files"].values() for nodeid in entry["passed"])
    assert ran == passed
    assert run.report["totals"]["deselected"] == deselected
    assert run.report["totals"]["skipped"] == 0
    assert run.report["runner"] == label


def test_cpu_runner_runs_the_cpu_slice(run_on: Callable[..., PytestRun]) -> None:
    run = run_on("cpu", "--runner", "cpu")
    assert sorted(run.report["files"]) == ["tests/kernels/test_cpu_or_5090.py", "tests/unit/test_cpu_only.py"]
    assert run.report["totals"] == {
        "ran": 4,
        "passed": 2,
        "failed": 1,
        "errors": 1,
        "skipped": 2,
        "hardware_skipped": 0,
        "deselected": 5,
    }


@pytest.mark.parametrize(
    ("machine", "label", "message"),
    [
        (
            "1xh100",
            "2-gpu-h100",
            "runner '2-gpu-h100' claims 2 x h100; this machine: 1 x h100 (fake h100, sm_90)",
        ),
        (
            "2xh100",
            "1-gpu-h100",
            "runner '1-gpu-h100' claims 1 x h100; this machine: 2 x h100 (fake h100, sm_90) "
            "(narrow it with CUDA_VISIBLE_DEVICES to 1 device(s))",
        ),
        (
            "2xh100",
            "4-gpu-b200",
            "runner '4-gpu-b200' claims 4 x b200; this machine: 2 x h100 (fake h100, sm_90)",
        ),
        ("cpu", "1-gpu-5090", "runner '1-gpu-5090' claims 1 x 5090; this machine: cpu"),
    ],
    ids=["too-few", "too-many", "wrong-class", "no-gpu"],
)
def test_runner_on_the_wrong_machine_fails_before_running_anything(
    machine: str, label: str, message: str, run_on: Callable[..., PytestRun]
) -> None:
    run = run_on(machine, "--runner", label)
    assert run.returncode == 4
    assert f"ERROR: this machine cannot run runner '{label}':\n  - {message}" in run.stderr
    assert (run.report["problems"], run.report["files"]) == ([message], {})


@pytest.mark.parametrize(
    ("args", "hardware", "message"),
    [
        (("--runner", "8-gpu-h100"), "1xh100", "--runner '8-gpu-h100' is not a runner of "),
        ((), "1xh900", "GPUMATRIX_HARDWARE='1xh900' names unknown GPU class 'h900'"),
    ],
    ids=["unknown-runner", "bad-override"],
)
def test_bad_input_is_a_usage_error(
    args: tuple[str, ...], hardware: str, message: str, run_on: Callable[..., PytestRun]
) -> None:
    run = run_on(hardware, *args)
    assert run.returncode == 4
    assert message in run.stderr
    if args:
        assert "(labels: cpu, 1-gpu-5090, 1-gpu-h100, 2-gpu-h100, 4-gpu-b200, 4-gpu-gb300)" in run.stderr


# -- registration is enforced at collection ---------------------------------------------------------


def test_unregistered_and_invalid_files_are_collection_errors_and_are_not_imported(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/unit/test_fine.py": registered(("cpu",), body="def test_a():\n    pass\n"),
            "tests/unit/test_unregistered.py": "open('imported-unregistered', 'w').close()\n\ndef test_a():\n    pass\n",
            "tests/kernels/test_bad_class.py": registered(
                ("h900",), body="open('imported-bad', 'w').close()\n"
            ),
            "other/test_outside_tests.py": "def test_a():\n    pass\n",
        },
    )
    run = run_pytest(tmp_path, "tests", "other", hardware="cpu")
    assert run.returncode == 2  # interrupted by collection errors
    assert "tests/unit/test_unregistered.py:1: test file is not registered" in run.stdout
    assert "tests/kernels/test_bad_class.py:3: register(on=...) names unknown class 'h900'" in run.stdout
    assert not (tmp_path / "imported-unregistered").exists() and not (tmp_path / "imported-bad").exists()
    assert {path: entry["errors"] for path, entry in run.report["files"].items()} == {
        "tests/kernels/test_bad_class.py": ["tests/kernels/test_bad_class.py"],
        "tests/unit/test_unregistered.py": ["tests/unit/test_unregistered.py"],
    }


def test_without_a_runner_matrix_the_plugin_stays_out_of_the_way(tmp_path: Path) -> None:
    write_tree(tmp_path, {"tests/test_plain.py": "def test_a():\n    pass\n"}, matrix=None)
    assert run_pytest(tmp_path, hardware="not-even-valid", report=False).returncode == 0
    run = run_pytest(tmp_path, "--runner", "cpu", hardware=None, report=False)
    assert run.returncode == 4
    assert f"--runner need(s) a runner matrix, and {tmp_path}/ci/matrix.yaml does not exist" in run.stderr


# -- leases -----------------------------------------------------------------------------------------

_RECORDING_TEST = """
    import json, os, time, pytest

    @pytest.mark.parametrize("i", range({count}))
    def test_{name}(i, request):
        start = time.monotonic()
        time.sleep(0.3)
        with open(os.environ["RECORDS"], "a") as stream:
            stream.write(json.dumps({{"nodeid": request.node.nodeid, "seen": os.environ["CUDA_VISIBLE_DEVICES"],
                                      "start": start, "end": time.monotonic()}}) + "\\n")
"""


def test_xdist_workers_share_one_gpu_tests_and_hold_several_gpus_alone(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/kernels/test_one.py": registered(
                ("h100",), body=_RECORDING_TEST.format(count=8, name="one")
            ),
            "tests/e2e/test_two.py": registered(
                ("h100",), gpus=2, body=_RECORDING_TEST.format(count=3, name="two")
            ),
        },
    )
    log, records_path = tmp_path / "lease.jsonl", tmp_path / "records.jsonl"
    run = run_pytest(
        tmp_path,
        "-n",
        "4",
        hardware="2xh100",
        env={"GPUMATRIX_LEASE_LOG": str(log), "RECORDS": str(records_path)},
    )
    assert run.returncode == 0, run.output
    leases, records = read_jsonl(log), {r["nodeid"]: r for r in read_jsonl(records_path)}
    assert sorted(lease["nodeid"] for lease in leases) == sorted(records) and len(records) == 11
    assert len({lease["worker"] for lease in leases}) > 1
    assert overlapping_leases(leases) == []  # no lease of whole GPUs beside another, no slot twice
    for lease in leases:
        assert records[lease["nodeid"]]["seen"] == ",".join(lease["devices"])
        two = "test_two" in lease["nodeid"]
        assert len(set(lease["devices"])) == (2 if two else 1)
        assert lease["share"] == (1 if two else DEFAULT_WORKERS_PER_GPU)
        assert set(lease["devices"]) <= {"0", "1"}
    singles = [lease for lease in leases if "test_one" in lease["nodeid"]]
    assert any(
        a is not b and a["acquired"] < b["released"] and b["acquired"] < a["released"]
        for a in singles
        for b in singles
    ), "no two 1-GPU tests ever ran at the same time"


def _matrix_sharing(per_gpu: int) -> str:
    """The test matrix with the 1-gpu-h100 runner running `per_gpu` tests on its GPU at a time."""
    runner = "{label: 1-gpu-h100, class: h100, gpus: 1,"
    assert runner in MATRIX_YAML
    return MATRIX_YAML.replace(runner, f"{runner} workers_per_gpu: {per_gpu},")


@pytest.mark.parametrize(
    ("per_gpu", "environ", "most"), [(3, {}, 3), (1, {}, 1), (8, {"GPUMATRIX_WORKERS_PER_GPU": "2"}, 2)]
)
def test_a_gpu_runs_at_most_workers_per_gpu_tests_at_once(
    per_gpu: int, environ: dict[str, str], most: int, tmp_path: Path
) -> None:
    write_tree(
        tmp_path,
        {
            "tests/kernels/test_one.py": registered(
                ("h100",), body=_RECORDING_TEST.format(count=12, name="one")
            )
        },
        matrix=_matrix_sharing(per_gpu),
    )
    log, records_path = tmp_path / "lease.jsonl", tmp_path / "records.jsonl"
    run = run_pytest(
        tmp_path,
        "-n",
        "4",
        hardware="1xh100",
        env={"GPUMATRIX_LEASE_LOG": str(log), "RECORDS": str(records_path), **environ},
    )
    assert run.returncode == 0, run.output
    leases = read_jsonl(log)
    assert len(leases) == 12 and overlapping_leases(leases) == []
    assert {lease["share"] for lease in leases} == {most}
    assert all(lease["slot"] is None if most == 1 else 0 <= lease["slot"] < most for lease in leases)
    # four workers, twelve tests of 0.3 s: the limit is reached, and never passed
    assert most_at_once(leases, "0") == most


_SHARED_AND_EXCLUSIVE = """
    import json, os, time, pytest

    def _record(request):
        start = time.monotonic()
        time.sleep(0.3)
        with open(os.environ["RECORDS"], "a") as stream:
            stream.write(json.dumps({"nodeid": request.node.nodeid, "start": start, "end": time.monotonic()}) + "\\n")

    @pytest.mark.parametrize("i", range(6))
    def test_shared(i, request):
        _record(request)

    @pytest.mark.exclusive_gpu
    @pytest.mark.parametrize("i", range(2))
    def test_marked(i, request):
        _record(request)
"""


def test_exclusive_tests_hold_their_gpu_alone(tmp_path: Path) -> None:
    exclusive_file = (
        'from gpumatrix import register\n\nregister(on=("h100",), est_time=1, gpu="exclusive")\n'
        + textwrap.dedent(_RECORDING_TEST.format(count=3, name="whole"))
    )
    write_tree(
        tmp_path,
        {
            "tests/kernels/test_mixed.py": registered(("h100",), body=_SHARED_AND_EXCLUSIVE),
            "tests/kernels/test_whole.py": exclusive_file,
        },
        matrix=_matrix_sharing(4),
    )
    log, records_path = tmp_path / "lease.jsonl", tmp_path / "records.jsonl"
    run = run_pytest(
        tmp_path,
        "-n",
        "4",
        hardware="1xh100",
        env={"GPUMATRIX_LEASE_LOG": str(log), "RECORDS": str(records_path)},
    )
    assert run.returncode == 0, run.output
    leases = {lease["nodeid"]: lease for lease in read_jsonl(log)}
    assert len(leases) == 11 and overlapping_leases(list(leases.values())) == []
    alone = {nodeid for nodeid, lease in leases.items() if lease["share"] == 1}
    assert alone == {n for n in leases if "test_marked" in n or "test_whole" in n} and len(alone) == 5
    assert {leases[n]["share"] for n in leases.keys() - alone} == {4}
    assert most_at_once(list(leases.values()), "0") > 1  # the shared ones did share


_FAKE_CUDA_CONFTEST = """
import json, os, pytest
import gpumatrix.running.leases

# Stands in for CUDA: the first use fixes the visible devices of the process, as cuInit does.
_BOUND = []
gpumatrix.running.leases.cuda_initialized = lambda **_: bool(_BOUND)

@pytest.fixture
def cuda(request):
    if not _BOUND:
        _BOUND.append(os.environ["CUDA_VISIBLE_DEVICES"])
    with open(os.environ["RECORDS"], "a") as stream:
        stream.write(json.dumps({"nodeid": request.node.nodeid, "pid": os.getpid(), "cuda": _BOUND[0],
                                 "env": os.environ["CUDA_VISIBLE_DEVICES"]}) + "\\n")
    return _BOUND[0].split(",")
"""


def test_a_test_needing_more_gpus_than_cuda_is_bound_to_runs_in_a_child(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/conftest.py": _FAKE_CUDA_CONFTEST,
            "tests/kernels/test_first.py": registered(
                ("h100",), body="def test_first(cuda):\n    assert len(cuda) == 1\n"
            ),
            "tests/e2e/test_pair.py": registered(
                ("h100",),
                gpus=2,
                body="""
            def test_pair(cuda):
                assert len(set(cuda)) == 2

            def test_pair_fails(cuda):
                assert cuda == ["replayed"]
        """,
            ),
            "tests/kernels/test_later.py": registered(
                ("h100",), body="def test_later(cuda):\n    assert len(cuda) == 1\n"
            ),
        },
    )
    log, records_path = tmp_path / "lease.jsonl", tmp_path / "records.jsonl"
    run = run_pytest(
        tmp_path,
        "tests/kernels/test_first.py",
        "tests/e2e/test_pair.py",
        "tests/kernels/test_later.py",
        hardware="2xh100",
        env={"GPUMATRIX_LEASE_LOG": str(log), "RECORDS": str(records_path)},
    )
    records = {r["nodeid"].rpartition("::")[2]: r for r in read_jsonl(records_path)}
    leases = {lease["nodeid"].rpartition("::")[2]: lease for lease in read_jsonl(log)}
    first, pair, later = records["test_first"], records["test_pair"], records["test_later"]
    assert pair["pid"] != first["pid"] and records["test_pair_fails"]["pid"] not in (
        first["pid"],
        pair["pid"],
    )
    assert later["pid"] == first["pid"]
    assert later["cuda"] == later["env"] == first["cuda"]  # leased exactly what CUDA was bound to
    assert sorted(pair["cuda"].split(",")) == ["0", "1"] and pair["env"] == pair["cuda"]
    assert {name: lease["pid"] for name, lease in leases.items()} == dict.fromkeys(records, first["pid"])
    assert leases["test_later"]["devices"] == leases["test_first"]["devices"] == [first["cuda"]]
    assert overlapping_leases(list(leases.values())) == []
    # the child's outcomes are this run's outcomes, tracebacks included
    assert run.returncode == 1
    assert run.report["files"]["tests/e2e/test_pair.py"]["passed"] == ["tests/e2e/test_pair.py::test_pair"]
    assert run.report["files"]["tests/e2e/test_pair.py"]["failed"] == [
        "tests/e2e/test_pair.py::test_pair_fails"
    ]
    assert (
        "assert ['0', '1'] == ['replayed']" in run.stdout or "assert ['1', '0'] == ['replayed']" in run.stdout
    )


def test_the_child_of_a_test_needing_more_gpus_is_handed_the_plan(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "conftest.py": RESOLVING_CONFTEST,
            "tests/conftest.py": _FAKE_CUDA_CONFTEST,
            "tests/kernels/test_first.py": registered(("h100",), body="def test_first(cuda):\n    pass\n"),
            "tests/e2e/test_pair.py": registered(
                ("h100",), gpus=2, body="def test_pair(cuda):\n    assert len(set(cuda)) == 2\n"
            ),
        },
    )
    resolved = tmp_path / "resolved.jsonl"
    run = run_pytest(
        tmp_path,
        "tests/kernels/test_first.py",
        "tests/e2e/test_pair.py",
        hardware="2xh100",
        env={"RECORDS": str(tmp_path / "records.jsonl"), "RESOLVED": str(resolved)},
    )
    assert run.returncode == 0, run.output
    assert {r["nodeid"] for r in read_jsonl(tmp_path / "records.jsonl")} >= {
        "tests/e2e/test_pair.py::test_pair"
    }
    # the parent resolved once; its child, narrowed to the two GPUs it leased, resolved nothing
    assert read_jsonl(resolved) == [
        {"call": "detect", "worker": None, "child": False},
        {"call": "discover", "worker": None, "child": False},
    ]


_CHILD_COLLECTS_NOTHING = (
    _FAKE_CUDA_CONFTEST
    + """
def pytest_collection_modifyitems(config, items):
    if os.environ.get("GPUMATRIX_HELD_LEASE"):  # the child: it loses the test it was started for
        items.clear()
"""
)


def test_a_child_that_reports_no_test_fails_the_test(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/conftest.py": _CHILD_COLLECTS_NOTHING,
            "tests/kernels/test_first.py": registered(("h100",), body="def test_first(cuda):\n    pass\n"),
            "tests/e2e/test_pair.py": registered(("h100",), gpus=2, body="def test_pair(cuda):\n    pass\n"),
        },
    )
    run = run_pytest(
        tmp_path,
        "tests/kernels/test_first.py",
        "tests/e2e/test_pair.py",
        hardware="2xh100",
        env={"RECORDS": str(tmp_path / "records.jsonl")},
    )
    assert run.returncode == 1, run.output
    assert run.report is not None
    assert run.report["files"]["tests/e2e/test_pair.py"]["errors"] == ["tests/e2e/test_pair.py::test_pair"]
    assert "the child pytest running tests/e2e/test_pair.py::test_pair on GPUs " in run.stdout
    assert "reported no test (exit 5)" in run.stdout


# The child gets the run's -p, -o, -W and -x, in whatever spelling they were given: its test sees each.
_PLUGIN_MODULE = "import pytest\n\n@pytest.fixture\ndef from_plugin():\n    return 7\n"
_SEES_THE_OPTIONS = """
def test_pair(cuda, from_plugin, request):
    option = request.config.option
    assert from_plugin == 7  # -p extra_plugin
    assert request.config.getini("xfail_strict") is True  # -o xfail_strict=true
    assert option.pythonwarnings == ["error::UserWarning"]  # -W error::UserWarning
    assert option.maxfail == 1  # -x
"""


@pytest.mark.parametrize(
    "args",
    [
        ("-p", "extra_plugin", "-o", "xfail_strict=true", "-W", "error::UserWarning", "-x"),
        ("-pextra_plugin", "--override-ini=xfail_strict=true", "-Werror::UserWarning", "--exitfirst"),
    ],
    ids=["separate", "attached"],
)
def test_the_child_gets_the_runs_options(tmp_path: Path, args: tuple[str, ...]) -> None:
    write_tree(
        tmp_path,
        {
            "extra_plugin.py": _PLUGIN_MODULE,
            "tests/conftest.py": _FAKE_CUDA_CONFTEST,
            "tests/kernels/test_first.py": registered(("h100",), body="def test_first(cuda):\n    pass\n"),
            "tests/e2e/test_pair.py": registered(("h100",), gpus=2, body=_SEES_THE_OPTIONS),
        },
    )
    run = run_pytest(
        tmp_path,
        *args,
        "tests/kernels/test_first.py",
        "tests/e2e/test_pair.py",
        hardware="2xh100",
        env={"RECORDS": str(tmp_path / "records.jsonl"), "PYTHONPATH": str(tmp_path)},
    )
    assert run.report is not None, run.output
    assert run.report["files"]["tests/e2e/test_pair.py"]["passed"] == ["tests/e2e/test_pair.py::test_pair"], (
        run.output
    )
    records = {r["nodeid"].rpartition("::")[2]: r["pid"] for r in read_jsonl(tmp_path / "records.jsonl")}
    assert records["test_pair"] != records["test_first"]  # it did run in a child


_FOREIGN_PROTOCOL_CONFTEST = (
    _FAKE_CUDA_CONFTEST
    + """
from _pytest.runner import runtestprotocol

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):  # as pytest-rerunfailures does
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    runtestprotocol(item, nextitem=nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""
)


def test_tests_are_leased_when_another_plugin_runs_their_protocol(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/conftest.py": _FOREIGN_PROTOCOL_CONFTEST,
            "tests/kernels/test_first.py": registered(
                ("h100",), body="def test_first(cuda):\n    assert len(cuda) == 1\n"
            ),
            "tests/e2e/test_pair.py": registered(("h100",), gpus=2, body="def test_pair(cuda):\n    pass\n"),
        },
    )
    log, records_path = tmp_path / "lease.jsonl", tmp_path / "records.jsonl"
    run = run_pytest(
        tmp_path,
        "tests/kernels/test_first.py",
        "tests/e2e/test_pair.py",
        hardware="2xh100",
        env={"GPUMATRIX_LEASE_LOG": str(log), "RECORDS": str(records_path)},
    )
    (lease,) = read_jsonl(log)
    (record,) = read_jsonl(records_path)
    assert (lease["nodeid"], lease["devices"]) == ("tests/kernels/test_first.py::test_first", [record["env"]])
    # CUDA is now bound to one GPU and only gpumatrix's protocol can start a fresh process: say so
    assert run.report["files"]["tests/e2e/test_pair.py"]["errors"] == ["tests/e2e/test_pair.py::test_pair"]
    assert "needs 2 GPU(s) but CUDA in this process is bound to " in run.stdout
    assert "only gpumatrix's own test protocol can move it to a fresh process" in run.stdout
