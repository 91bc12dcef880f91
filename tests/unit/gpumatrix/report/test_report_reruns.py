"""The JSON report's records of failed attempts that ran again (`reruns`) and of repeated runs (`repeat`):
what the writer writes reads back, and every misuse names the field, as a malformed report (exit 2) or one
that contradicts itself (exit 1)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from coverage_reports import report_json
from gpumatrix_trees import MATRIX_YAML

from gpumatrix import register
from gpumatrix.config import parse_matrix
from gpumatrix.hardware.detection import Hardware
from gpumatrix.report import Report, ReportError, Rerun, parse_report, report_to_json
from gpumatrix.report.collect import RunOutcomes

register(on=("cpu",), est_time=2)

MATRIX = parse_matrix(MATRIX_YAML)
F = "tests/unit/test_f.py"
BASE = report_json(
    "cpu", "cpu", 0, {f"{F}::test_a": "passed", f"{F}::test_b": "failed", f"{F}::test_c": "skipped"}
)


def read(document: Any) -> Report:
    return parse_report(document, source="r.json", matrix=MATRIX)


def with_reruns(*entries: dict[str, Any], repeat: Any = None) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["files"][F]["reruns"] = list(entries)
    if repeat is not None:
        document["repeat"] = repeat
    return document


def rerun(nodeid: str = f"{F}::test_a", attempt: Any = 1, when: Any = "call", message: Any = "boom") -> dict:
    return {"nodeid": nodeid, "attempt": attempt, "when": when, "message": message}


def test_reruns_and_repeat_read_back() -> None:
    report = read(
        with_reruns(rerun(attempt=1), rerun(attempt=2, when="setup"), rerun(f"{F}::test_b"), repeat=5)
    )
    result = report.files[F]
    assert result.reruns == (
        Rerun(f"{F}::test_a", 1, "call", "boom"),
        Rerun(f"{F}::test_a", 2, "setup", "boom"),
        Rerun(f"{F}::test_b", 1, "call", "boom"),
    )
    assert result.rerun_counts() == {f"{F}::test_a": 2, f"{F}::test_b": 1}
    assert result.passed_after_reruns() == ((f"{F}::test_a", 2),)  # test_b failed after its rerun
    assert report.repeat == 5
    assert (
        report_to_json(report)["files"][F]["reruns"]
        == with_reruns(rerun(attempt=1), rerun(attempt=2, when="setup"), rerun(f"{F}::test_b"))["files"][F][
            "reruns"
        ]
    )


def test_a_report_without_them_reads_as_before() -> None:
    report = read(BASE)
    assert (report.files[F].reruns, report.repeat) == ((), 1)
    assert "reruns" not in report_to_json(report)["files"][F] and "repeat" not in report_to_json(report)


# (id, document, field named, problem fragment)
MALFORMED = [
    (
        "reruns not a list",
        with_reruns() | {"files": {F: {**BASE["files"][F], "reruns": {}}}},
        f"files['{F}'].reruns",
        "must be a list",
    ),
    (
        "a key missing",
        with_reruns({"nodeid": f"{F}::test_a", "attempt": 1, "when": "call"}),
        "reruns[0]",
        "is missing 'message'",
    ),
    ("an unknown key", with_reruns(rerun() | {"outcome": "failed"}), "reruns[0]", "unknown key 'outcome'"),
    (
        "an unknown phase",
        with_reruns(rerun(when="body")),
        "reruns[0].when",
        "must be one of setup, call, teardown",
    ),
    ("attempt not a count", with_reruns(rerun(attempt="1")), "reruns[0].attempt", "must be a count"),
    ("attempt too large", with_reruns(rerun(attempt=101)), "reruns[0].attempt", "must be at most 100"),
    ("a message of two lines", with_reruns(rerun(message="a\nb")), "reruns[0].message", "one line"),
    ("an empty node id", with_reruns(rerun(nodeid="")), "reruns[0].nodeid", "must not be empty"),
    ("repeat 1", with_reruns(repeat=1), "repeat", "only for a run repeated 2 to 1000 times"),
    ("repeat too large", with_reruns(repeat=1001), "repeat", "must be at most 1000"),
    ("repeat not a count", with_reruns(repeat=True), "repeat", "must be a count"),
]


@pytest.mark.parametrize(
    ("document", "field", "problem"), [r[1:] for r in MALFORMED], ids=[r[0] for r in MALFORMED]
)
def test_a_malformed_record_names_its_field(document: dict, field: str, problem: str) -> None:
    with pytest.raises(ReportError) as caught:
        read(document)
    assert field in caught.value.field and problem in caught.value.problem, str(caught.value)
    assert caught.value.exit_code == 2


CONTRADICTIONS = [
    (
        "a test that did not run",
        with_reruns(rerun(f"{F}::test_c")),
        "ran again, but has no outcome among the tests that ran",
    ),
    (
        "a test of another file",
        with_reruns(rerun("tests/unit/test_g.py::t")),
        "has no outcome among the tests that ran",
    ),
    (
        "attempts skip one",
        with_reruns(rerun(attempt=1), rerun(attempt=3)),
        "failed attempts go 1, 2, ... in order",
    ),
    ("attempts start at 2", with_reruns(rerun(attempt=2)), "is 2;"),
    ("attempt 0", with_reruns(rerun(attempt=0)), "is 0;"),
    ("an attempt twice", with_reruns(rerun(attempt=1), rerun(attempt=1)), "is 1;"),
]


@pytest.mark.parametrize(
    ("document", "problem"), [r[1:] for r in CONTRADICTIONS], ids=[r[0] for r in CONTRADICTIONS]
)
def test_a_rerun_that_contradicts_the_outcomes_is_a_failure(document: dict, problem: str) -> None:
    with pytest.raises(ReportError) as caught:
        read(document)
    assert caught.value.contradiction and problem in str(caught.value), str(caught.value)
    assert caught.value.exit_code == 1


class _Phase:
    """A pytest test report as pytest-rerunfailures leaves it, as much of one as the collector reads."""

    def __init__(
        self, nodeid: str, when: str, outcome: str, *, rerun: int | None = None, message: str = ""
    ) -> None:
        self.nodeid, self.when, self.outcome, self.duration = nodeid, when, outcome, 0.25
        self.failed, self.skipped = outcome == "failed", outcome == "skipped"
        self.longrepr, self.longreprtext = None, message
        if rerun is not None:
            self.rerun = rerun


@pytest.mark.parametrize(
    ("phases", "expected_outcome", "expected_reruns"),
    [
        (
            [
                _Phase("t.py::x", "call", "rerun", rerun=0, message="AssertionError: 1\nmore"),
                _Phase("t.py::x", "teardown", "rerun", rerun=0, message="second failure of attempt 1"),
                _Phase("t.py::x", "setup", "rerun", rerun=1, message="fixture broke"),
                _Phase("t.py::x", "call", "passed", rerun=2),
            ],
            "passed",
            [Rerun("t.py::x", 1, "call", "AssertionError: 1"), Rerun("t.py::x", 2, "setup", "fixture broke")],
        ),
        (  # without rerunfailures' attempt index they count in order
            [
                _Phase("t.py::x", "call", "rerun", message="a"),
                _Phase("t.py::x", "call", "rerun", message="b"),
                _Phase("t.py::x", "call", "failed"),
            ],
            "failed",
            [Rerun("t.py::x", 1, "call", "a"), Rerun("t.py::x", 2, "call", "b")],
        ),
        (  # the run stopped after a failed attempt: an error, never a test without an outcome
            [_Phase("t.py::x", "call", "rerun", rerun=0, message="x\x1b[31m")],
            "errors",
            [Rerun("t.py::x", 1, "call", "x\\x1b[31m")],
        ),
    ],
    ids=["two attempts, then a pass", "counted in order", "interrupted"],
)
def test_the_writer_records_failed_attempts(
    phases: list[_Phase], expected_outcome: str, expected_reruns: list[Rerun]
) -> None:
    outcomes = RunOutcomes()
    for phase in phases:
        outcomes.add_test_report(phase, "t.py")
    report = outcomes.to_report(hardware=Hardware("cpu", 0), runner="cpu", repeat=1)
    result = read(report_to_json(report)).files["t.py"]
    assert result.ids(expected_outcome) == ("t.py::x",)
    assert list(result.reruns) == expected_reruns
    assert result.duration == 0.25 * len(phases)  # failed attempts took time too
