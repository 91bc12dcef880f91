"""Suites, disabled files and per-class estimates through the CLI: `list` and `matrix --suite`, the shard
planner's estimates for the runner it plans, and `gpumatrix run`'s guards around disabled files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from coverage_reports import report_from_files
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.config import load_matrix
from gpumatrix.registry.discovery import build_registry
from gpumatrix.registry.model import Registration
from gpumatrix.running.run import evaluate_report
from gpumatrix.running.shard import budget_seconds, file_seconds, plan_matrix, plan_runner, split_shards

register(on=("cpu",), est_time=30)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
H100, B200, GB300 = (MATRIX.runner(label) for label in ("1-gpu-h100", "4-gpu-b200", "4-gpu-gb300"))
BODY = "def test_ok():\n    assert 1 + 1 == 2\n"


def _file(arguments: str, body: str = BODY) -> str:
    return f"from gpumatrix import register\nregister({arguments})\n\n{body}"


def _tree(root: Path, files: dict[str, str]) -> Path:
    (root / "ci").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "ci" / "matrix.yaml", root / "ci" / "matrix.yaml")
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def _invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


# -- the shard planner: each runner's own estimates ---------------------------------------------------------------

# Three kernel files of 12,000 worker-seconds each on an H100 and 4,000 on a B200; GB300 is left to the
# fallback (the largest). Their tests share a GPU: 8 at a time (`workers_per_gpu` of the h100 class and the
# default), so a file's wall share is its seconds over the runner's GPUs x 8 slots.
PER_CLASS = _file('on=("h100", "b200", "gb300"), est_time={"h100": 12000, "b200": 4000}')


def test_each_runner_is_planned_with_the_estimates_of_its_class() -> None:
    registry = build_registry({f"tests/k/test_{i}.py": PER_CLASS for i in range(3)}, MATRIX)
    plans = {plan.runner.label: plan for plan in plan_matrix(MATRIX, registry)}
    # 1-gpu-h100: 8 slots, 1,500 s of wall each; budget 45 min x 0.8 = 2,160 s: 4,500 s needs 3 shards.
    assert [shard.est_time for shard in plans["1-gpu-h100"].shards] == [1500.0, 1500.0, 1500.0]
    # 4-gpu-b200: 32 slots, 125 s each: one shard.
    assert [shard.est_time for shard in plans["4-gpu-b200"].shards] == [375.0]
    # 4-gpu-gb300 (no estimate of its own: 12,000 s each): 32 slots, 375 s each.
    assert [shard.est_time for shard in plans["4-gpu-gb300"].shards] == [1125.0]
    assert not plans["4-gpu-gb300"].over_budget and not plans["4-gpu-b200"].over_budget
    assert budget_seconds(B200) == 2880.0


def test_the_matrix_command_shards_each_runner_by_its_class(tmp_path: Path) -> None:
    _tree(tmp_path, {f"tests/k/test_{i}.py": PER_CLASS for i in range(3)})
    include = json.loads(_invoke("matrix", "--json", "--root", str(tmp_path)).output)["include"]
    shards = {entry["runner"]: entry["shards"] for entry in include}
    assert shards == {"1-gpu-h100": 3, "4-gpu-b200": 1, "4-gpu-gb300": 1}


def test_run_shard_splits_as_the_matrix_does_by_the_runners_class() -> None:
    """`gpumatrix run --shard` and `gpumatrix matrix` pack one runner's files by the same estimates."""
    files = [
        Registration(f"tests/test_{i}.py", 2, ("h100", "b200"), 1, h, est_times=(("h100", h), ("b200", b)))
        for i, (h, b) in enumerate([(100.0, 10.0), (90.0, 80.0), (80.0, 70.0), (70.0, 5.0)])
    ]
    on_h100 = split_shards(files, 2, gpu_class="h100")
    on_b200 = split_shards(files, 2, gpu_class="b200")
    assert [s.files for s in on_h100] == [
        ("tests/test_0.py", "tests/test_3.py"),
        ("tests/test_1.py", "tests/test_2.py"),
    ]
    assert [s.est_time for s in on_h100] == [170.0, 170.0]
    assert [s.files for s in on_b200] == [
        ("tests/test_1.py", "tests/test_3.py"),
        ("tests/test_0.py", "tests/test_2.py"),
    ]
    assert [s.est_time for s in on_b200] == [85.0, 80.0]
    assert plan_runner(B200, files).shards == split_shards(files, 1, gpu_class="b200")


def test_a_file_disabled_on_a_class_costs_that_runner_nothing_but_stays_in_a_shard() -> None:
    registry = build_registry(
        {
            "tests/k/test_long.py": _file(
                'on=("h100", "b200"), est_time=2000, disabled_on={"h100": "hangs"}'
            ),
            "tests/k/test_short.py": _file('on=("h100", "b200"), est_time=1500'),
        },
        MATRIX,
    )
    long = registry.get("tests/k/test_long.py")
    assert (file_seconds(long, "h100"), file_seconds(long, "b200")) == (0.0, 2000.0)
    plans = {plan.runner.label: plan for plan in plan_matrix(MATRIX, registry)}
    # 1,500 worker-seconds over 8 slots, the disabled file along for its report (0 s)
    (h100_shard,) = plans["1-gpu-h100"].shards
    assert (h100_shard.files, h100_shard.est_time) == (
        ("tests/k/test_long.py", "tests/k/test_short.py"),
        187.5,
    )
    assert [s.est_time for s in plans["4-gpu-b200"].shards] == [3500.0 / 32]  # both count on 4 x 8 slots


# -- suites in list and matrix ------------------------------------------------------------------------------------

SUITE_TREE = {
    "tests/test_pr.py": _file('on=("cpu",), est_time=1'),
    "tests/test_nightly.py": _file('on=("cpu", "gb300"), gpus=4, est_time=1200, suite="nightly"'),
    "tests/test_off.py": _file(
        'on=("h100", "gb300"), est_time={"h100": 40, "gb300": 15}, disabled_on={"gb300": "NaN"}'
    ),
}


def test_matrix_plans_one_suite(tmp_path: Path) -> None:
    _tree(tmp_path, SUITE_TREE)
    runners = {}
    for suite in ("pr", "nightly", "all"):
        include = json.loads(_invoke("matrix", "--json", "--suite", suite, "--root", str(tmp_path)).output)[
            "include"
        ]
        runners[suite] = sorted({entry["runner"] for entry in include})
    default = json.loads(_invoke("matrix", "--json", "--root", str(tmp_path)).output)["include"]
    assert (
        sorted({entry["runner"] for entry in default})
        == runners["pr"]
        == ["1-gpu-h100", "4-gpu-gb300", "cpu"]
    )
    assert runners["nightly"] == ["4-gpu-gb300", "cpu"]
    assert runners["all"] == ["1-gpu-h100", "4-gpu-gb300", "cpu"]
    table = _invoke("matrix", "--suite", "nightly", "--root", str(tmp_path)).output
    assert "runner x shard matrix, suite nightly" in table


def test_list_shows_and_filters_the_new_fields(tmp_path: Path) -> None:
    _tree(tmp_path, SUITE_TREE)
    rows = {row["path"]: row for row in json.loads(_invoke("list", "--json", "--root", str(tmp_path)).output)}
    assert sorted(rows) == ["tests/test_nightly.py", "tests/test_off.py", "tests/test_pr.py"]
    # Fields a registration leaves out stay out: a plain file reads as it always did.
    assert rows["tests/test_pr.py"] == {
        "path": "tests/test_pr.py",
        "line": 2,
        "on": ["cpu"],
        "gpus": 1,
        "est_time": 1.0,
        "runners": ["cpu"],
    }
    assert rows["tests/test_nightly.py"]["suite"] == "nightly"
    assert {
        key: rows["tests/test_off.py"][key] for key in ("est_time", "est_time_by_class", "disabled_on")
    } == {
        "est_time": 40.0,
        "est_time_by_class": {"h100": 40.0, "gb300": 15.0},
        "disabled_on": {"gb300": "NaN"},
    }
    nightly = json.loads(_invoke("list", "--json", "--suite", "nightly", "--root", str(tmp_path)).output)
    assert [row["path"] for row in nightly] == ["tests/test_nightly.py"]
    pr_gb300 = json.loads(
        _invoke("list", "--json", "--suite", "pr", "--runner", "4-gpu-gb300", "--root", str(tmp_path)).output
    )
    assert [row["path"] for row in pr_gb300] == ["tests/test_off.py"]
    table = _invoke("list", "--root", str(tmp_path)).output
    assert "gb300: NaN" in table and "h100 40, gb300 15" in table and "nightly" in table


@pytest.mark.parametrize("command", ["list", "matrix", "run"])
def test_an_unknown_suite_exits_2_naming_the_suites(tmp_path: Path, command: str) -> None:
    _tree(tmp_path, SUITE_TREE)
    result = CliRunner().invoke(
        main, [command, "--suite", "weekly", "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": "cpu"}
    )
    assert result.exit_code == 2, result.output
    assert (
        "--suite 'weekly' is not a suite of" in result.output
        and "(suites: pr, nightly, or all)" in result.output
    )


def test_check_counts_suites_and_disabled_files(tmp_path: Path) -> None:
    _tree(tmp_path, SUITE_TREE)
    result = _invoke("check", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "3 registered test files (2 pr, 1 nightly; 1 disabled somewhere)" in result.output


# -- gpumatrix run: the guards around disabled files -------------------------------------------------------------

# (id, the report's files, whether the machine matches, the problems expected)
GUARDS = [
    (
        "only-disabled-files-pass",
        {
            "tests/a.py": {
                "skipped": [
                    {"nodeid": "tests/a.py", "reason": "disabled: x", "hardware": False, "disabled": True}
                ]
            }
        },
        True,
        [],
    ),
    (
        "disabled-plus-a-file-that-ran-nothing-fails",
        {
            "tests/a.py": {
                "skipped": [
                    {"nodeid": "tests/a.py", "reason": "disabled: x", "hardware": False, "disabled": True}
                ]
            },
            "tests/b.py": {
                "skipped": [{"nodeid": "tests/b.py::t", "reason": "not today", "hardware": False}]
            },
        },
        True,
        ["ran zero tests"],
    ),
    (
        "a-disabled-skip-is-no-hardware-skip",
        {
            "tests/a.py": {
                "skipped": [
                    {
                        "nodeid": "tests/a.py",
                        "reason": "disabled on h100: x",
                        "hardware": False,
                        "disabled": True,
                    }
                ]
            },
            "tests/b.py": {"passed": ["tests/b.py::t"]},
        },
        True,
        [],
    ),
    ("nothing-at-all-still-fails", {}, True, ["ran zero tests"]),
]


@pytest.mark.parametrize(
    ("files", "matches", "problems"), [g[1:] for g in GUARDS], ids=[g[0] for g in GUARDS]
)
def test_guards_with_disabled_files(files: dict, matches: bool, problems: list[str]) -> None:
    summary = evaluate_report(report_from_files(files), runner=H100, hardware_matches=matches)
    assert len(summary.problems) == len(problems), summary.problems
    for problem, fragment in zip(summary.problems, problems, strict=True):
        assert fragment in problem
    expected = [
        (s["nodeid"], s["reason"])
        for entry in files.values()
        for s in entry.get("skipped", [])
        if s.get("disabled")
    ]
    assert list(summary.disabled) == expected


def test_a_target_the_report_does_not_list_is_no_disabled_file() -> None:
    """A file collected with no test is absent from the report: the run had more than disabled files."""
    only_off = {
        "tests/a.py": {
            "skipped": [
                {"nodeid": "tests/a.py", "reason": "disabled: x", "hardware": False, "disabled": True}
            ]
        }
    }
    for targets, problems in ((["tests/a.py"], 0), (["tests/a.py", "tests/empty.py"], 1)):
        summary = evaluate_report(
            report_from_files(only_off), runner=H100, hardware_matches=True, targets=targets
        )
        assert len(summary.problems) == problems, (targets, summary.problems)


def _run(root: Path, *args: str, hardware: str):
    return CliRunner().invoke(
        main,
        ["run", "-n", "0", "--root", str(root), *args],
        env={"GPUMATRIX_HARDWARE": hardware, "GPUMATRIX_LEASE_DIR": str(root / ".leases")},
    )


def test_a_runner_whose_files_are_all_disabled_passes_and_says_so(tmp_path: Path) -> None:
    _tree(tmp_path, SUITE_TREE)
    summary = tmp_path / "summary.md"
    result = _run(tmp_path, "--runner", "4-gpu-gb300", "--summary-md", str(summary), hardware="4xgb300")
    assert result.exit_code == 0, result.output
    assert "disabled here (1 file(s), skipped with their reason):" in result.output
    assert "tests/test_off.py: disabled on gb300: NaN" in result.output
    assert "- `tests/test_off.py`: disabled on gb300: NaN" in summary.read_text()
    report = json.loads((tmp_path / "reports" / "gpumatrix-4-gpu-gb300.json").read_text())
    assert set(report["files"]) == {"tests/test_off.py"}  # the nightly file is another suite's


def test_include_disabled_runs_them(tmp_path: Path) -> None:
    _tree(tmp_path, SUITE_TREE)
    result = _run(tmp_path, "--runner", "4-gpu-gb300", "--include-disabled", hardware="4xgb300")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "reports" / "gpumatrix-4-gpu-gb300.json").read_text())
    assert report["files"]["tests/test_off.py"]["passed"] == ["tests/test_off.py::test_ok"]


def test_a_disabled_file_does_not_hide_a_file_that_ran_nothing(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "tests/test_off.py": _file('on=("cpu",), est_time=1, disabled="broken"'),
            "tests/test_empty.py": _file('on=("cpu",), est_time=1', body="# no tests yet\n"),
        },
    )
    result = _run(tmp_path, "--runner", "cpu", hardware="cpu")
    assert result.exit_code == 1, result.output
    assert "ran zero tests" in result.output


def test_run_runs_one_suite_and_named_tests_of_any(tmp_path: Path) -> None:
    _tree(tmp_path, SUITE_TREE)
    ran = {}
    for args in (("--suite", "pr"), ("--suite", "nightly"), ("--suite", "all")):
        assert _run(tmp_path, "--runner", "cpu", *args, hardware="cpu").exit_code == 0
        report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
        ran[args[1]] = sorted(path for path, entry in report["files"].items() if entry["passed"])
    assert ran == {
        "pr": ["tests/test_pr.py"],
        "nightly": ["tests/test_nightly.py"],
        "all": ["tests/test_nightly.py", "tests/test_pr.py"],
    }
    named = tmp_path / "tests.txt"
    named.write_text("tests/test_nightly.py\n")
    result = _run(
        tmp_path, "--runner", "cpu", "--tests-file", str(named), hardware="cpu"
    )  # suite pr by default
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
    assert report["files"]["tests/test_nightly.py"]["passed"] == ["tests/test_nightly.py::test_ok"]
