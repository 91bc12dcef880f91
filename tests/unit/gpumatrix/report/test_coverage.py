"""Merging runner reports into the path x class matrix: states, exit status, duplicates, rejected reports.

Reports are built with the plugin's own writer (tests/support/coverage_reports.py), so reader and writer agree.
"""

from __future__ import annotations

from typing import Any

import pytest
from coverage_reports import PATHS_YAML, report_json
from gpumatrix_trees import MATRIX_YAML

from gpumatrix import register
from gpumatrix.config import parse_matrix
from gpumatrix.coverage.merge import merge_reports
from gpumatrix.coverage.paths import parse_paths
from gpumatrix.report import parse_report

register(on=("cpu",), est_time=1)

MATRIX = parse_matrix(MATRIX_YAML)
CATALOG = parse_paths(PATHS_YAML, MATRIX)


def merged(*documents: dict[str, Any]):
    reports = [parse_report(d, source=f"report-{i}.json", matrix=MATRIX) for i, d in enumerate(documents)]
    return merge_reports(reports, MATRIX, CATALOG)


CPU_OK = report_json(
    "cpu", "cpu", 0, {"tests/unit/test_r.py::t": "passed"}, {"tests/unit/test_r.py::t": ["ref.torch"]}
)
H100_OK = report_json(
    "1-gpu-h100",
    "h100",
    1,
    {"tests/kernels/test_k.py::pair": "passed", "tests/kernels/test_k.py::bf16": "passed"},
    {"tests/kernels/test_k.py::pair": ["k.pair"], "tests/kernels/test_k.py::bf16": ["k.bf16", "ref.torch"]},
)


def states(coverage, path: str) -> dict[str, str]:
    return {c.name: coverage.path_cells[(path, c.name)].state for c in coverage.classes}


def test_a_runner_that_never_reported_is_shown_so_and_never_green():
    coverage = merged(CPU_OK, H100_OK)
    assert states(coverage, "k.pair") == {
        "cpu": "not_required",
        "5090": "not_reported",
        "h100": "passed",
        "b200": "not_reported",  # required there, but b200 never reported: shown as such, not green
        "gb300": "not_reported",
    }
    assert coverage.path_cells[("k.pair", "b200")].required
    assert [r.label for r in coverage.runners if not r.reported] == [
        "1-gpu-5090",
        "2-gpu-h100",
        "4-gpu-b200",
        "4-gpu-gb300",
    ]
    (h100,) = [c for c in coverage.classes if c.name == "h100"]
    assert (h100.ran, h100.runners, h100.silent) == (True, ("1-gpu-h100",), ("2-gpu-h100",))
    assert coverage.missing == () and coverage.exit_code == 0


def test_a_path_exercised_only_by_failing_tests_fails_where_it_is_required():
    h100 = report_json(
        "1-gpu-h100",
        "h100",
        1,
        {"tests/kernels/test_k.py::pair": "failed", "tests/kernels/test_k.py::bf16": "passed"},
        {"tests/kernels/test_k.py::pair": ["k.pair"], "tests/kernels/test_k.py::bf16": ["k.bf16"]},
    )
    coverage = merged(CPU_OK, h100)
    cell = coverage.path_cells[("k.pair", "h100")]
    assert (cell.state, cell.passing, cell.failing) == (
        "failing",
        (),
        ("1-gpu-h100: tests/kernels/test_k.py::pair",),
    )
    assert coverage.missing == (("k.pair", "h100"),) and coverage.exit_code == 1
    assert coverage.problems() == [
        "path k.pair is required on h100, which ran, and only failing tests exercised it "
        "(1-gpu-h100: tests/kernels/test_k.py::pair)"
    ]


def test_a_required_path_missing_on_one_class_names_the_path_and_the_class():
    b200 = report_json(
        "4-gpu-b200",
        "b200",
        4,
        {"tests/kernels/test_k.py::bf16": "passed"},
        {"tests/kernels/test_k.py::bf16": ["k.bf16"]},
    )
    coverage = merged(CPU_OK, H100_OK, b200)
    assert states(coverage, "k.pair")["b200"] == "missing"
    assert states(coverage, "k.pair")["h100"] == "passed"
    assert states(coverage, "k.bf16")["b200"] == "passed"  # exercised where it is not required: still shown
    assert not coverage.path_cells[("k.bf16", "b200")].required
    assert coverage.missing == (("k.pair", "b200"),) and coverage.exit_code == 1
    assert coverage.problems() == ["path k.pair is required on b200, which ran, and no test exercised it"]


def test_duplicate_records_across_xdist_workers_and_reports_count_once():
    nodeid = "tests/kernels/test_k.py::pair"
    # two reports of one runner (two shards given the same test, a report uploaded twice), the record
    # repeated within a test as xdist workers each forward what their process saw
    first = report_json("1-gpu-h100", "h100", 1, {nodeid: "passed"}, {nodeid: ["k.pair", "k.pair", "k.bf16"]})
    second = report_json("1-gpu-h100", "h100", 1, {nodeid: "passed"}, {nodeid: ["k.pair"]})
    coverage = merged(CPU_OK, first, second)
    assert coverage.path_cells[("k.pair", "h100")].passing == (f"1-gpu-h100: {nodeid}",)
    assert first["witnessed"][nodeid]["paths"]["k.pair"]["count"] == 2
    (h100,) = [r for r in coverage.runners if r.label == "1-gpu-h100"]
    assert (h100.reports, h100.totals["passed"]) == (2, 1)
    assert coverage.file_cells[("tests/kernels/test_k.py", "1-gpu-h100")].passed == 1


def test_a_test_seen_twice_keeps_its_worse_outcome():
    nodeid = "tests/kernels/test_k.py::pair"
    passed = report_json("1-gpu-h100", "h100", 1, {nodeid: "passed"}, {nodeid: ["k.pair"]})
    failed = report_json("1-gpu-h100", "h100", 1, {nodeid: "failed"}, {nodeid: ["k.pair"]})
    coverage = merged(CPU_OK, passed, failed)
    assert coverage.path_cells[("k.pair", "h100")].state == "failing"
    assert coverage.file_cells[("tests/kernels/test_k.py", "1-gpu-h100")].failed == 1


def test_two_runners_of_one_class_make_one_column_of_paths():
    one = report_json(
        "1-gpu-h100",
        "h100",
        1,
        {"tests/kernels/test_k.py::bf16": "passed"},
        {"tests/kernels/test_k.py::bf16": ["k.bf16"]},
    )
    two = report_json(
        "2-gpu-h100",
        "h100",
        2,
        {"tests/e2e/test_e.py::pair": "passed"},
        {"tests/e2e/test_e.py::pair": ["k.pair"]},
    )
    coverage = merged(CPU_OK, one, two)
    assert coverage.path_cells[("k.pair", "h100")].passing == ("2-gpu-h100: tests/e2e/test_e.py::pair",)
    assert coverage.exit_code == 0
    (h100,) = [c for c in coverage.classes if c.name == "h100"]
    assert h100.runners == ("1-gpu-h100", "2-gpu-h100") and h100.ran


def test_skipped_tests_exercise_nothing_and_a_class_that_ran_nothing_did_not_run():
    h100 = report_json(
        "1-gpu-h100",
        "h100",
        1,
        {"tests/kernels/test_k.py::pair": "skipped"},
        {"tests/kernels/test_k.py::pair": ["k.pair"]},
    )
    coverage = merged(CPU_OK, h100)
    assert states(coverage, "k.pair")["h100"] == "not_reported"
    # A report that ran no test fails the merge, naming it (issue 36: it must never pass for a run).
    assert coverage.exit_code == 1
    assert coverage.problems() == [
        "report report-1.json: runner 1-gpu-h100 ran zero tests: a report that ran nothing makes "
        "no path green"
    ]
    skipped = coverage.file_cells[("tests/kernels/test_k.py", "1-gpu-h100")]
    assert (skipped.state, skipped.skipped) == ("skipped", (("tests/kernels/test_k.py::pair", "needs b200"),))


def test_a_report_without_a_runner_label_is_the_runner_its_machine_is():
    plain = report_json(
        None, "cpu", 0, {"tests/unit/test_r.py::t": "passed"}, {"tests/unit/test_r.py::t": ["ref.torch"]}
    )
    coverage = merged(plain)
    assert [r.label for r in coverage.runners if r.reported] == ["cpu"]
    assert states(coverage, "ref.torch")["cpu"] == "passed"


def test_an_undeclared_path_fails_naming_the_test():
    h100 = report_json(
        "1-gpu-h100",
        "h100",
        1,
        {"tests/kernels/test_k.py::x": "passed"},
        {"tests/kernels/test_k.py::x": ["k.typo"]},
    )
    coverage = merged(CPU_OK, H100_OK, h100)
    assert coverage.undeclared == (("k.typo", "1-gpu-h100", "tests/kernels/test_k.py::x"),)
    assert coverage.exit_code == 1 and "k.typo" in coverage.paths
    assert coverage.problems() == [
        "tests/kernels/test_k.py::x on 1-gpu-h100 recorded path k.typo, which ci/paths.yaml does not declare"
    ]


def test_file_cells_carry_durations_and_registered_estimates():
    cpu = report_json(
        "cpu",
        "cpu",
        0,
        {"tests/unit/test_r.py::a": "passed", "tests/unit/test_r.py::b": "passed"},
        durations={"tests/unit/test_r.py::a": 2.5, "tests/unit/test_r.py::b": 0.5},
    )
    cpu["files"]["tests/unit/test_r.py"]["est_time"] = 8
    coverage = merged(cpu)
    assert coverage.file_cells[("tests/unit/test_r.py", "cpu")].duration == 3.0
    assert coverage.est_times["tests/unit/test_r.py"] == 8.0


# (id, gpus of a machine that ran plain pytest, without --runner: the runner column it lands in)
PLAIN = [
    ("one-gpu", 1, "1-gpu-h100"),
    ("two-gpus", 2, "2-gpu-h100"),  # not the first runner of its class
    ("eight-gpus", 8, "8 x h100"),  # no runner has 8: a column of its own, still of class h100
]


@pytest.mark.parametrize(("gpus", "label"), [p[1:] for p in PLAIN], ids=[p[0] for p in PLAIN])
def test_a_report_without_a_runner_lands_in_the_runner_of_its_class_and_count(gpus: int, label: str):
    nodeid = "tests/e2e/test_e.py::pair"
    coverage = merged(report_json(None, "h100", gpus, {nodeid: "passed"}, {nodeid: ["k.pair"]}))
    assert [(r.label, r.gpu_class) for r in coverage.runners if r.reported] == [(label, "h100")]
    assert coverage.path_cells[("k.pair", "h100")].passing == (f"{label}: {nodeid}",)


def test_a_path_exercised_by_a_passing_and_a_failing_test_is_passed_listing_both():
    h100 = report_json(
        "1-gpu-h100",
        "h100",
        1,
        {"tests/kernels/test_k.py::a": "passed", "tests/kernels/test_k.py::b": "failed"},
        {"tests/kernels/test_k.py::a": ["k.pair"], "tests/kernels/test_k.py::b": ["k.pair"]},
    )
    cell = merged(CPU_OK, h100).path_cells[("k.pair", "h100")]
    assert (cell.state, cell.passing, cell.failing) == (
        "passed",
        ("1-gpu-h100: tests/kernels/test_k.py::a",),
        ("1-gpu-h100: tests/kernels/test_k.py::b",),
    )


# (id, the test's outcome in one report, in another report of the same runner, the path's cell)
TWICE = [
    ("skipped-then-passed", "skipped", "passed", "passed"),
    ("passed-then-skipped", "passed", "skipped", "passed"),
    ("passed-then-errors", "passed", "errors", "failing"),
    ("errors-then-passed", "errors", "passed", "failing"),
    ("failed-then-passed", "failed", "passed", "failing"),
]


@pytest.mark.parametrize(("first", "second", "state"), [t[1:] for t in TWICE], ids=[t[0] for t in TWICE])
def test_a_test_in_two_reports_of_a_runner_counts_with_its_worse_outcome(first: str, second: str, state: str):
    nodeid = "tests/kernels/test_k.py::pair"
    one, two = (
        report_json("1-gpu-h100", "h100", 1, {nodeid: o}, {nodeid: ["k.pair"]}) for o in (first, second)
    )
    coverage = merged(CPU_OK, one, two)
    assert coverage.path_cells[("k.pair", "h100")].state == state
    (column,) = [r for r in coverage.runners if r.label == "1-gpu-h100"]
    assert sum(column.totals.values()) == 1


def test_a_refused_run_counts_for_nothing_and_fails_naming_its_runner():
    refused = report_json("1-gpu-h100", "h100", 1, {})
    refused["problems"] = ["this machine cannot run runner '1-gpu-h100'"]
    coverage = merged(CPU_OK, refused)
    said = (
        "report report-1.json: runner 1-gpu-h100 refused to run: this machine cannot run runner '1-gpu-h100'"
    )
    assert coverage.rejected == (said,) and coverage.problems()[0] == said and coverage.exit_code == 1
    (column,) = [r for r in coverage.runners if r.label == "1-gpu-h100"]
    assert (column.reported, column.reports, column.notes) == (False, 0, (said,))
    assert coverage.failed(warn_only=True)


def test_a_file_in_two_reports_of_a_runner_shows_the_longer_duration():
    nodeid = "tests/kernels/test_k.py::pair"
    short, long = (
        report_json("1-gpu-h100", "h100", 1, {nodeid: "passed"}, durations={nodeid: seconds})
        for seconds in (4.0, 9.0)
    )
    for order in ((short, long), (long, short)):
        assert merged(*order).file_cells[("tests/kernels/test_k.py", "1-gpu-h100")].duration == 9.0


# -- issue 36: no false green from what the reports are -------------------------------------------------------

SHA_A, SHA_B = "a" * 40, "b" * 40


def _with(document: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**document, **fields}


def _reports(*documents: dict[str, Any]) -> list:
    return [parse_report(d, source=f"report-{i}.json", matrix=MATRIX) for i, d in enumerate(documents)]


def test_reports_that_ran_no_test_make_nothing_green_and_fail_the_merge():
    """Before, coverage of such reports exited 0 saying every required path was exercised."""
    skipped = report_json("cpu", "cpu", 0, {"tests/unit/test_r.py::t": "skipped"})
    empty = report_json("1-gpu-h100", "h100", 1, {})
    coverage = merged(skipped, empty)
    assert coverage.exit_code == 1 and coverage.failed(warn_only=True)
    assert coverage.problems()[-1] == "none of the 2 report(s) ran a test: nothing was exercised anywhere"
    assert all(cell.state != "passed" for cell in coverage.path_cells.values())


def test_a_report_of_disabled_files_only_fails_no_merge_but_cannot_be_one_alone():
    disabled = report_json("cpu", "cpu", 0, {"tests/unit/test_off.py": "skipped"})
    disabled["files"]["tests/unit/test_off.py"]["skipped"][0]["disabled"] = True
    assert merged(CPU_OK, disabled).exit_code == 0
    assert merged(disabled).problems() == [
        "none of the 1 report(s) ran a test: nothing was exercised anywhere"
    ]


def test_passes_of_a_file_not_registered_for_the_reports_runner_count_for_nothing():
    """Before, a cpu report's pass in a file registered for h100 only made ref.torch green on cpu."""
    from gpumatrix.registry.model import Registration

    registrations = [
        Registration("tests/unit/test_r.py", 1, ("h100",), 1, 1.0, runners=("1-gpu-h100",)),
    ]
    coverage = merge_reports(_reports(CPU_OK), MATRIX, CATALOG, registrations=registrations)
    assert states(coverage, "ref.torch")["cpu"] != "passed"
    assert coverage.exit_code == 1
    assert coverage.problems()[0] == (
        "report report-0.json: 1 test(s) of tests/unit/test_r.py ran on runner cpu, which it is not registered "
        "for: they count for nothing"
    )
    served = [Registration("tests/unit/test_r.py", 1, ("cpu",), 1, 1.0, runners=("cpu",))]
    assert states(merge_reports(_reports(CPU_OK), MATRIX, CATALOG, registrations=served), "ref.torch")[
        "cpu"
    ] == ("passed")


@pytest.mark.parametrize(
    ("first", "second", "says"),
    [
        (
            {"commit": SHA_A},
            {"commit": SHA_B},
            "commit aaaaaaaaaaaa, suite pr: report-0.json; commit bbbbbbbbbbbb",
        ),
        (
            {"suite": "pr"},
            {"suite": "nightly"},
            "suite pr: report-0.json; commit aaaaaaaaaaaa, suite nightly",
        ),
        ({}, {"format": 1}, "commit and suite unknown (a format-1 report records neither): report-1.json"),
    ],
    ids=["commits", "suites", "an-older-report"],
)
def test_reports_of_different_commits_or_suites_are_refused_unless_allowed(first, second, says):
    from gpumatrix.coverage.merge import MixedReportsError

    base = {"commit": SHA_A, "suite": "pr"}
    one = _with(CPU_OK, **{**base, **first})
    other = _with(H100_OK, **{**base, **second})
    if other.get("format") == 1:
        other.pop("commit"), other.pop("suite")
    with pytest.raises(MixedReportsError, match="the reports are not of one commit and suite") as raised:
        merge_reports(_reports(one, other), MATRIX, CATALOG)
    assert says in str(raised.value) and "--allow-mixed" in str(raised.value)
    assert merge_reports(_reports(one, other), MATRIX, CATALOG, allow_mixed=True).exit_code == 0


def test_an_older_report_alone_is_read_and_says_what_is_unknown():
    older = _with(CPU_OK, format=1)
    older.pop("commit"), older.pop("suite")
    coverage = merged(older)
    assert coverage.exit_code == 0
    (column,) = [r for r in coverage.runners if r.reported]
    assert "report-0.json: commit and suite unknown (a format-1 report records neither)" in column.notes
