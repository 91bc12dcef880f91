"""The plugin and disabled or nightly files: skipped whole with the registered reason where they are off,
never imported there, marked `disabled` (never `hardware`) in the report; other suites deselected."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from gpumatrix_trees import run_pytest, write_tree
from repo_paths import TESTS

from gpumatrix import register
from gpumatrix.config import Runner
from gpumatrix.hardware.detection import Hardware
from gpumatrix.registry.model import Registration
from gpumatrix.registry.resolution import running_class
from gpumatrix.running.gating import FileDecision, decide_file, unplugged_skip_reason

register(on=("cpu",), est_time=25)

# Each file leaves a mark when it is imported, and has one test.
_BODY = """
    import os, pathlib
    pathlib.Path(os.environ["MARKS"], "imported-" + pathlib.Path(__file__).stem).touch()

    def test_a():
        pass
"""
OFF = "hangs since the runner image update; ask ops"
GB300_OFF = "NaN in split-K on sm_103, issue 123"


def _file(arguments: str) -> str:
    return f"from gpumatrix import register\n\nregister({arguments})\n" + textwrap.dedent(_BODY)


TREE = {
    "tests/test_off.py": _file(f'on=("cpu", "h100", "gb300"), est_time=1, disabled="{OFF}"'),
    "tests/test_gb300_off.py": _file(
        f'on=("h100", "gb300"), est_time=1, disabled_on={{"gb300": "{GB300_OFF}"}}'
    ),
    "tests/test_cpu.py": _file('on=("cpu",), est_time=1'),
    "tests/test_nightly.py": _file('on=("cpu",), est_time=1, suite="nightly"'),
}
PASSED = "passed"
DESELECTED = "deselected"


def _disabled(reason: str, path: str) -> tuple[str, ...]:
    return ("skipped", path, reason, "disabled")


def _hardware(reason: str, path: str) -> tuple[str, ...]:
    return ("skipped", path, reason, "hardware")


# (id, machine, pytest args, pytest's exit, {file: outcome}, files imported)
CASES = [
    (
        "cpu-machine",
        "cpu",
        (),
        0,
        {
            "tests/test_off.py": _disabled(f"disabled: {OFF}", "tests/test_off.py"),
            "tests/test_gb300_off.py": _hardware(
                "needs 1 x h100|gb300; this machine: cpu", "tests/test_gb300_off.py"
            ),
            "tests/test_cpu.py": PASSED,
            "tests/test_nightly.py": PASSED,
        },
        ["test_cpu", "test_nightly"],
    ),
    (
        "cpu-machine-xdist",
        "cpu",
        ("-n", "2"),
        0,
        {
            "tests/test_off.py": _disabled(f"disabled: {OFF}", "tests/test_off.py"),
            "tests/test_gb300_off.py": _hardware(
                "needs 1 x h100|gb300; this machine: cpu", "tests/test_gb300_off.py"
            ),
            "tests/test_cpu.py": PASSED,
            "tests/test_nightly.py": PASSED,
        },
        ["test_cpu", "test_nightly"],
    ),
    (
        "hopper-where-gb300-is-off",  # a class the file is not disabled on runs it
        "1xh100",
        (),
        0,
        {
            "tests/test_off.py": _disabled(f"disabled: {OFF}", "tests/test_off.py"),
            "tests/test_gb300_off.py": PASSED,
            "tests/test_cpu.py": PASSED,
            "tests/test_nightly.py": PASSED,
        },
        ["test_cpu", "test_gb300_off", "test_nightly"],
    ),
    (
        "gb300-runner-its-own-machine",  # matching machine: disabled skips are not hardware skips
        "4xgb300",
        ("--runner", "4-gpu-gb300"),
        5,  # pytest: no test ran
        {
            "tests/test_off.py": _disabled(f"disabled: {OFF}", "tests/test_off.py"),
            "tests/test_gb300_off.py": _disabled(
                f"disabled on gb300: {GB300_OFF}", "tests/test_gb300_off.py"
            ),
            "tests/test_cpu.py": DESELECTED,
            "tests/test_nightly.py": DESELECTED,
        },
        [],
    ),
    (
        "gb300-machine-without-runner",
        "4xgb300",
        (),
        0,
        {
            "tests/test_off.py": _disabled(f"disabled: {OFF}", "tests/test_off.py"),
            "tests/test_gb300_off.py": _disabled(
                f"disabled on gb300: {GB300_OFF}", "tests/test_gb300_off.py"
            ),
            "tests/test_cpu.py": PASSED,  # a CPU test on a class it does not name
            "tests/test_nightly.py": PASSED,
        },
        ["test_cpu", "test_nightly"],
    ),
    (
        "gb300-runner-include-disabled",
        "4xgb300",
        ("--runner", "4-gpu-gb300", "--include-disabled"),
        0,
        {
            "tests/test_off.py": PASSED,
            "tests/test_gb300_off.py": PASSED,
            "tests/test_cpu.py": DESELECTED,
            "tests/test_nightly.py": DESELECTED,
        },
        ["test_gb300_off", "test_off"],
    ),
    (
        "suite-pr",
        "cpu",
        ("--suite", "pr"),
        0,
        {
            "tests/test_off.py": _disabled(f"disabled: {OFF}", "tests/test_off.py"),
            "tests/test_gb300_off.py": _hardware(
                "needs 1 x h100|gb300; this machine: cpu", "tests/test_gb300_off.py"
            ),
            "tests/test_cpu.py": PASSED,
            "tests/test_nightly.py": DESELECTED,
        },
        ["test_cpu"],
    ),
    (
        "suite-nightly",
        "cpu",
        ("--suite", "nightly"),
        0,
        {
            "tests/test_off.py": DESELECTED,
            "tests/test_gb300_off.py": DESELECTED,
            "tests/test_cpu.py": DESELECTED,
            "tests/test_nightly.py": PASSED,
        },
        ["test_nightly"],
    ),
]


def _outcomes(report: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in paths:
        entry = report["files"].get(path)
        if entry is None:
            found[path] = DESELECTED
        elif entry["passed"] == [f"{path}::test_a"]:
            found[path] = PASSED
        else:
            (skip,) = entry["skipped"]
            kinds = [kind for kind in ("disabled", "hardware") if skip.get(kind)]
            found[path] = ("skipped", skip["nodeid"], skip["reason"], *kinds)
    return found


@pytest.mark.parametrize(
    ("machine", "args", "exit_code", "outcomes", "imported"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_disabled_and_suite_by_machine(
    tmp_path: Path,
    machine: str,
    args: tuple[str, ...],
    exit_code: int,
    outcomes: dict[str, Any],
    imported: list[str],
) -> None:
    write_tree(tmp_path, TREE)
    run = run_pytest(tmp_path, "-rs", *args, hardware=machine, env={"MARKS": str(tmp_path)})
    assert run.returncode == exit_code, run.output
    assert run.report is not None
    assert _outcomes(run.report, list(TREE)) == outcomes
    assert sorted(p.name.removeprefix("imported-") for p in tmp_path.glob("imported-*")) == imported
    skipped = {path: outcome for path, outcome in outcomes.items() if outcome not in (PASSED, DESELECTED)}
    for path, (_, _, reason, _) in skipped.items():
        assert f"SKIPPED [1] {path}: {reason}" in run.stdout  # the terminal shows every skip's reason
    assert run.report["totals"]["hardware_skipped"] == sum(o[-1] == "hardware" for o in skipped.values())
    assert run.report["totals"]["deselected"] == sum(o == DESELECTED for o in outcomes.values())


def test_an_unknown_suite_is_one_usage_error(tmp_path: Path) -> None:
    write_tree(tmp_path, TREE)
    run = run_pytest(tmp_path, "--suite", "weekly", hardware="cpu", env={"MARKS": str(tmp_path)})
    assert run.returncode == 4, run.output
    assert (
        "--suite 'weekly' is not a suite of" in run.stderr and "(suites: pr, nightly, or all)" in run.stderr
    )
    assert not list(tmp_path.glob("imported-*"))


def test_without_the_plugin_a_disabled_cpu_file_still_skips(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/conftest.py": (TESTS / "conftest.py").read_text(),
            "tests/test_off.py": TREE["tests/test_off.py"],
            "tests/test_cpu_off.py": _file(
                'on=("cpu", "h100"), est_time=1, disabled_on={"cpu": "slow without GPUs"}'
            ),
            "tests/test_cpu.py": TREE["tests/test_cpu.py"],
        },
    )
    run = run_pytest(
        tmp_path, "-rs", "-p", "no:gpumatrix", hardware=None, report=False, env={"MARKS": str(tmp_path)}
    )
    assert run.returncode == 0, run.output
    assert f"SKIPPED [1] tests/test_off.py: disabled: {OFF}" in run.stdout
    assert "SKIPPED [1] tests/test_cpu_off.py: disabled on cpu: slow without GPUs" in run.stdout
    assert [p.name for p in tmp_path.glob("imported-*")] == ["imported-test_cpu"]


# -- the decisions as plain functions -------------------------------------------------------------------------

_ON = ("cpu", "h100", "gb300")
OFF_EVERYWHERE = Registration(
    "tests/t.py", 2, _ON, 1, 1.0, ("cpu", "1-gpu-h100", "4-gpu-gb300"), disabled="x"
)
OFF_ON_GB300 = Registration(
    "tests/t.py", 2, _ON, 1, 1.0, ("cpu", "1-gpu-h100", "4-gpu-gb300"), disabled_on=(("gb300", "y"),)
)
NIGHTLY = Registration("tests/t.py", 2, _ON, 1, 1.0, ("cpu", "1-gpu-h100", "4-gpu-gb300"), suite="nightly")
CPU = Hardware("cpu", 0)
HOPPER = Hardware("h100", 1, ("NVIDIA H200",), ((9, 0),), "570", "nvml", ("GPU-a",))
GB300 = Hardware("gb300", 4, ("NVIDIA GB300",) * 4, ((10, 3),) * 4, "575", "nvml", ("0", "1", "2", "3"))
R_GB300 = Runner("4-gpu-gb300", "gb300", 4, ("x",), 30)
R_H100 = Runner("1-gpu-h100", "h100", 1, ("x",), 30)
SKIP_OFF = FileDecision("skip", reason="disabled: x", disabled=True)
SKIP_GB300 = FileDecision("skip", reason="disabled on gb300: y", disabled=True)
COLLECT = FileDecision("collect")

# (id, registration, hardware, runner, suite, include_disabled, decision)
DECISIONS = [
    ("off-on-a-cpu-machine", OFF_EVERYWHERE, CPU, None, None, False, SKIP_OFF),
    ("off-on-its-runner", OFF_EVERYWHERE, GB300, R_GB300, None, False, SKIP_OFF),
    ("off-included", OFF_EVERYWHERE, GB300, R_GB300, None, True, COLLECT),
    ("gb300-off-on-gb300", OFF_ON_GB300, GB300, None, None, False, SKIP_GB300),
    ("gb300-off-on-its-runner", OFF_ON_GB300, GB300, R_GB300, None, False, SKIP_GB300),
    ("gb300-off-runs-on-hopper", OFF_ON_GB300, HOPPER, R_H100, None, False, COLLECT),
    ("gb300-off-runs-on-cpu", OFF_ON_GB300, CPU, None, None, False, COLLECT),
    ("gb300-off-included", OFF_ON_GB300, GB300, R_GB300, None, True, COLLECT),
    (
        "nightly-in-a-pr-run",
        NIGHTLY,
        CPU,
        None,
        "pr",
        False,
        FileDecision("deselect", reason="in suite nightly, not pr"),
    ),
    ("nightly-in-a-nightly-run", NIGHTLY, CPU, None, "nightly", False, COLLECT),
    ("nightly-in-every-suite", NIGHTLY, CPU, None, None, False, COLLECT),
    (
        "other-suite-beats-disabled",
        OFF_EVERYWHERE,
        CPU,
        None,
        "nightly",
        False,
        FileDecision("deselect", reason="in suite pr, not nightly"),
    ),
    (
        "other-slice-beats-disabled",
        replace(OFF_EVERYWHERE, runners=("cpu",)),
        GB300,
        R_GB300,
        None,
        False,
        FileDecision("deselect", reason="not in runner 4-gpu-gb300's slice"),
    ),
]


@pytest.mark.parametrize(
    ("registration", "hardware", "runner", "suite", "include_disabled", "expected"),
    [row[1:] for row in DECISIONS],
    ids=[row[0] for row in DECISIONS],
)
def test_decide_file_with_suites_and_disabled_files(
    registration: Registration,
    hardware: Hardware,
    runner: Runner | None,
    suite: str | None,
    include_disabled: bool,
    expected: FileDecision,
) -> None:
    decision = decide_file(
        "tests/t.py",
        registration,
        (),
        hardware=hardware,
        runner=runner,
        suite=suite,
        include_disabled=include_disabled,
    )
    assert decision == expected


def test_a_hardware_skip_is_not_a_disabled_one() -> None:
    decision = decide_file("tests/t.py", replace(OFF_ON_GB300, on=("gb300",)), (), hardware=CPU, runner=None)
    assert (
        decision == FileDecision("skip", reason="needs 1 x gb300; this machine: cpu")
        and not decision.disabled
    )


@pytest.mark.parametrize(
    ("registration", "hardware", "runner", "expected"),
    [
        (OFF_ON_GB300, CPU, None, "cpu"),
        (OFF_ON_GB300, HOPPER, None, "h100"),
        (OFF_ON_GB300, GB300, None, "gb300"),
        (OFF_ON_GB300, GB300, R_H100, "h100"),  # the runner's class, which the run checked the machine is
        (replace(OFF_ON_GB300, on=("h100",)), CPU, None, None),
        (replace(OFF_ON_GB300, on=("cpu", "h100")), GB300, None, "cpu"),  # a CPU test on another class
    ],
)
def test_running_class(
    registration: Registration, hardware: Hardware, runner: Runner | None, expected: str | None
) -> None:
    assert running_class(registration, hardware, runner) == expected


@pytest.mark.parametrize(
    ("registration", "reason"),
    [
        (replace(OFF_EVERYWHERE, on=("cpu",)), "disabled: x"),
        (replace(OFF_ON_GB300, disabled_on=(("cpu", "z"),)), "disabled on cpu: z"),
        (OFF_ON_GB300, None),  # a CPU file, off only on gb300
        (replace(NIGHTLY, on=("cpu",)), None),
    ],
    ids=["off", "off-on-cpu", "off-elsewhere", "nightly"],
)
def test_unplugged_skip_reason_of_disabled_files(registration: Registration, reason: str | None) -> None:
    assert unplugged_skip_reason(registration) == reason
