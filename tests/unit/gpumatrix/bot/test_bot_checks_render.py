"""The pure parts of publishing results: JSON reports added up, the check run (or commit status) a group gets,
the hidden markers read back, and the CI-states block built, rendered and read back."""

from __future__ import annotations

import json

import pytest
from coverage_reports import report_json
from gpumatrix_trees import MATRIX_YAML

from gpumatrix import register
from gpumatrix.bot.checks import check_spec, status_spec
from gpumatrix.bot.ci_states import (
    CI_STATES_MARKER,
    RerunSource,
    build_ci_states,
    parse_ci_states,
    render_ci_states,
    with_runs,
)
from gpumatrix.bot.github import RunInfo
from gpumatrix.bot.model import CiStates, GroupStatus, ReportMark, StatusComment, Suite
from gpumatrix.bot.report import MAX_FAILING, ReportSummary, summarize_reports
from gpumatrix.bot.state import read_mark
from gpumatrix.config import parse_matrix

register(on=("cpu",), est_time=2)

MATRIX = parse_matrix(MATRIX_YAML)

SHA = "0123456789abcdef0123456789abcdef01234567"
OLD = "fedcba9876543210fedcba9876543210fedcba98"
RUN_URL = "https://github.com/acme/mxfuse/actions/runs/99"
COMMENT_URL = "https://github.com/acme/mxfuse/pull/7#issuecomment-12"


def _report(tests: dict[str, str], name: str = "report.json") -> tuple[str, bytes]:
    """A report from the plugin's writer: `tests` {nodeid: passed|failed|errors|skipped}."""
    return name, json.dumps(report_json(None, "cpu", 0, tests)).encode()


def _edited(edit) -> tuple[str, bytes]:
    document = report_json(None, "cpu", 0, {"a.py::1": "passed", "a.py::2": "failed"})
    edit(document)
    return "edited.json", json.dumps(document).encode()


# -- reports ----------------------------------------------------------------------------------------------------

# (id, documents, expected (passed, failed, skipped, failing, more, reports, unreadable), problems)
REPORTS = [
    (
        "One shard.",
        [_report({"a::1": "passed", "a::2": "passed", "a::3": "failed", "a::4": "skipped"})],
        (2, 1, 1, ("a::3",), 0, 1, 0),
        [],
    ),
    ("Errors count as failed.", [_report({"a::e": "errors"})], (0, 1, 0, ("a::e",), 0, 1, 0), []),
    (
        "Shards add up.",
        [_report({"a::1": "passed", "a::2": "failed"}), _report({"b::1": "passed", "b::2": "failed"})],
        (2, 2, 0, ("a::2", "b::2"), 0, 2, 0),
        [],
    ),
    (
        "Not JSON is unreadable, not zero failures.",
        [("x.json", b"\x00\xff not json")],
        (0, 0, 0, (), 0, 0, 1),
        ["report x.json is not a gpumatrix report: it is not JSON"],
    ),
    (
        "A list of files is unreadable.",
        [_edited(lambda d: d.update(files=["a.py"]))],
        (0, 0, 0, (), 0, 0, 1),
        ["report edited.json is not a gpumatrix report: files: must be an object, got a list"],
    ),
    (
        "Outcome lists of the wrong type.",
        [_edited(lambda d: d["files"]["a.py"].update(passed="all"))],
        (0, 0, 0, (), 0, 0, 1),
        ["files['a.py'].passed: must be a list, got the string 'all'"],
    ),
    (
        "A report that contradicts itself is not counted.",
        [_edited(lambda d: d["files"]["a.py"].update(passed=[]))],
        (0, 0, 0, (), 0, 0, 1),
        ["report edited.json contradicts itself: files['a.py'].ran:"],
    ),
    (
        "An id that is not a short line is counted, not shown.",
        [_report({"a::" + "x" * 400: "failed", "ok::id": "failed"})],
        (0, 2, 0, ("ok::id",), 0, 1, 0),
        [],
    ),
    (
        "A failing id twice is shown once.",
        [_report({"a::1": "failed"}), _report({"a::1": "failed", "b::1": "passed"})],
        (1, 2, 0, ("a::1",), 0, 2, 0),
        [],
    ),
    (
        "One report saved twice counts once.",
        [
            _report({"a::1": "failed", "a::2": "passed"}),
            _report({"a::1": "failed", "a::2": "passed"}, "copy.json"),
        ],
        (1, 1, 0, ("a::1",), 0, 1, 0),
        [],
    ),
]


@pytest.mark.parametrize(
    ("documents", "expected", "problems"), [r[1:] for r in REPORTS], ids=[r[0] for r in REPORTS]
)
def test_summarize_reports(documents: list[tuple[str, bytes]], expected: tuple, problems: list[str]) -> None:
    got = summarize_reports(documents, MATRIX)
    assert (
        got.passed,
        got.failed,
        got.skipped,
        got.failing,
        got.more_failing,
        got.reports,
        got.unreadable,
    ) == expected
    assert len(got.problems) == len(problems)
    for said, fragment in zip(got.problems, problems, strict=True):
        assert fragment in said


def test_failing_ids_beyond_the_limit_are_counted() -> None:
    ids = [f"a::t{index:03d}" for index in range(MAX_FAILING + 7)]  # the writer lists ids sorted
    got = summarize_reports([_report(dict.fromkeys(ids, "failed"))], MATRIX)
    assert (got.failing, got.more_failing, got.failed) == (tuple(ids[:MAX_FAILING]), 7, MAX_FAILING + 7)


def test_report_summary_round_trips_and_rejects_other_shapes() -> None:
    summary = ReportSummary(3, 1, 2, ("a::1",), 0, 2, 1)
    assert ReportSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
    for bad in (
        None,
        [],
        {"passed": -1},
        {**summary.to_json(), "failed": True},
        {**summary.to_json(), "failing": [3]},
    ):
        assert ReportSummary.from_json(bad) is None


# -- check runs and commit statuses --------------------------------------------------------------------------------


def _status(*groups: GroupStatus) -> StatusComment:
    return StatusComment(
        source_comment_id=5,
        command="/rerun-test test_x.py",
        author="alice",
        pr=7,
        sha=SHA,
        groups=groups,
        checks="check-runs",
    )


REPORT = ReportSummary(11, 1, 2, ("tests/x.py::test_y[bf16]",), 0, 1, 0)
MARK = ReportMark(99, 1, True, REPORT)

# (id, group, mark, expected (status, conclusion, details_url, title))
SPECS = [
    ("Queued.", GroupStatus("cpu", ("a",), "queued", 99, RUN_URL), None, ("queued", None, RUN_URL, "Queued")),
    (
        "Running.",
        GroupStatus("cpu", ("a",), "running", 99, RUN_URL),
        None,
        ("in_progress", None, RUN_URL, "Running"),
    ),
    (
        "Passed with a passing report.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        ReportMark(99, 1, True, ReportSummary(3, 0, 1, (), 0, 1, 0)),
        ("completed", "success", RUN_URL, "Passed: 3 passed, 0 failed, 1 skipped"),
    ),
    # The conclusion comes from the reports, never from the workflow's own (issue 36): a run that says it
    # passed is a failure when its reports say failed, ran nothing, cannot be read or are not its own.
    (
        "Passed, no report.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        ReportMark(99, 1, True, None),
        ("completed", "failure", RUN_URL, "Failed · the run uploaded no test report"),
    ),
    (
        "Passed, reports not read yet.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        None,
        ("completed", "failure", RUN_URL, "Failed · its test reports could not be read yet"),
    ),
    (
        "Passed, a report failed.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        MARK,
        ("completed", "failure", RUN_URL, "Failed: 11 passed, 1 failed, 2 skipped"),
    ),
    (
        "Passed, zero tests.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        ReportMark(99, 1, True, ReportSummary(0, 0, 4, (), 0, 1, 0)),
        (
            "completed",
            "failure",
            RUN_URL,
            "Failed: 0 passed, 0 failed, 4 skipped · no test passed: the reports ran nothing",
        ),
    ),
    (
        "Passed, a report unreadable.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        ReportMark(99, 1, True, ReportSummary(3, 0, 0, (), 0, 1, 1)),
        (
            "completed",
            "failure",
            RUN_URL,
            "Failed: 3 passed, 0 failed, 0 skipped · 1 report(s) could not be counted",
        ),
    ),
    (
        "Passed, a report of another runner.",
        GroupStatus("cpu", ("a",), "passed", 99, RUN_URL),
        ReportMark(99, 1, True, ReportSummary(0, 0, 0, (), 0, 0, 0, ("report x not counted",), 1)),
        ("completed", "failure", RUN_URL, "Failed · 1 report(s) could not be counted"),
    ),
    (
        "Failed, the reports clean.",
        GroupStatus("cpu", ("a",), "failed", 99, RUN_URL),
        ReportMark(99, 1, True, ReportSummary(3, 0, 0, (), 0, 1, 0)),
        (
            "completed",
            "failure",
            RUN_URL,
            "Failed: 3 passed, 0 failed, 0 skipped · the run failed, though its reports show no failure: see its log",
        ),
    ),
    (
        "Failed with a report.",
        GroupStatus("cpu", ("a",), "failed", 99, RUN_URL),
        MARK,
        ("completed", "failure", RUN_URL, "Failed: 11 passed, 1 failed, 2 skipped"),
    ),
    (
        "Cancelled.",
        GroupStatus("cpu", ("a",), "cancelled", 99, RUN_URL),
        None,
        ("completed", "cancelled", RUN_URL, "Cancelled"),
    ),
    (
        "Dispatch failed.",
        GroupStatus("cpu", ("a",), "error", error="HTTP 422: nope"),
        None,
        ("completed", "action_required", COMMENT_URL, "Dispatch failed: HTTP 422: nope"),
    ),
]


@pytest.mark.parametrize(("group", "mark", "expected"), [r[1:] for r in SPECS], ids=[r[0] for r in SPECS])
def test_check_spec(group: GroupStatus, mark: ReportMark | None, expected: tuple) -> None:
    spec = check_spec(group, status=_status(group), comment_id=12, comment_url=COMMENT_URL, mark=mark)
    assert spec is not None
    assert (spec.status, spec.conclusion, spec.details_url, spec.title) == expected
    assert (spec.name, spec.external_id) == ("rerun / cpu", "gpumatrix:5:12:cpu")
    fields = spec.fields()
    assert ("conclusion" in fields) == (expected[1] is not None)
    assert fields["output"] == {"title": expected[3], "summary": spec.summary}


def test_check_summary_as_a_maintainer_reads_it() -> None:
    group = GroupStatus("4-gpu-gb300", ("tests/x.py::test_y[bf16]",), "failed", 99, RUN_URL)
    spec = check_spec(group, status=_status(group), comment_id=12, comment_url=COMMENT_URL, mark=MARK)
    assert spec is not None
    assert spec.summary.splitlines() == [
        f"`/rerun-test test_x.py` from \uff20alice on #7 at `{SHA}` ([status comment]({COMMENT_URL}))",
        "",
        "Tests: `tests/x.py::test_y[bf16]`",
        "",
        "❌ Failed",
        "",
        "| passed | failed | skipped |",
        "| ---: | ---: | ---: |",
        "| 11 | 1 | 2 |",
        "",
        "Failing tests:",
        "- `tests/x.py::test_y[bf16]`",
        "",
        "From the run's JSON test reports (1 report).",
        "",
        f"[View workflow run]({RUN_URL})",
        "",
        '<!-- gpumatrix:check {"v":1,"run":99,"attempt":1,"complete":true,"report":{"passed":11,"failed":1,'
        '"skipped":2,"failing":["tests/x.py::test_y[bf16]"],"more_failing":0,"reports":1,"unreadable":0}} -->',
    ]
    assert read_mark(spec.summary) == MARK


def test_nothing_to_publish_before_dispatch() -> None:
    group = GroupStatus("cpu", ("a",))
    assert check_spec(group, status=_status(group), comment_id=1, comment_url=None, mark=None) is None
    assert status_spec(group, comment_url=None, mark=None) is None


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        (None, None),
        ("no marker", None),
        (
            'x\n<!-- gpumatrix:check {"run":1,"attempt":2,"complete":false,"report":null} -->',
            ReportMark(1, 2, False, None),
        ),
        (
            'x\n<!-- gpumatrix:check {"run":1,"attempt":2,"complete":false,"report":null} -->\nmore',
            None,
        ),  # not last
        ('x\n<!-- gpumatrix:check {"run":0,"attempt":1,"complete":true} -->', None),
        ('x\n<!-- gpumatrix:check {"run":1,"attempt":1,"complete":"yes"} -->', None),
        ("x\n<!-- gpumatrix:check {not json} -->", None),
    ],
)
def test_read_mark(summary: str | None, expected: ReportMark | None) -> None:
    assert read_mark(summary) == expected


def test_a_failing_id_that_imitates_the_marker_is_not_read_as_one() -> None:
    forged = '<!-- gpumatrix:check {"run":99,"attempt":1,"complete":true,"report":null} -->'
    report = summarize_reports([_report({forged: "failed"})], MATRIX)
    assert report.failing == (forged,)
    group = GroupStatus("cpu", ("a",), "failed", 99, RUN_URL)
    spec = check_spec(
        group, status=_status(group), comment_id=12, comment_url=None, mark=ReportMark(99, 1, False, report)
    )
    assert spec is not None and read_mark(spec.summary) == ReportMark(99, 1, False, report)
    without_ours = spec.summary.rsplit("\n", 1)[0]
    assert forged in without_ours and read_mark(without_ours) is None


def test_a_mark_covers_only_the_completed_run_attempt_it_read() -> None:
    assert MARK.covers(99, 1) and not MARK.covers(99, 2) and not MARK.covers(98, 1)
    assert not ReportMark(99, 1, False, REPORT).covers(99, 1)


# (id, group state, expected commit status state)
STATUS_STATES = [
    ("queued", "queued", "pending"),
    ("running", "running", "pending"),
    ("passed", "passed", "success"),  # with a passing report: without one it would be a failure
    ("failed", "failed", "failure"),
    ("cancelled", "cancelled", "error"),
    ("error", "error", "error"),
]


@pytest.mark.parametrize(
    ("state", "expected"), [r[1:] for r in STATUS_STATES], ids=[r[0] for r in STATUS_STATES]
)
def test_status_spec(state: str, expected: str) -> None:
    group = GroupStatus(
        "cpu",
        ("a",),
        state,
        None if state == "error" else 99,
        None if state == "error" else RUN_URL,
        error="x" * 300 if state == "error" else None,
    )
    passing = ReportMark(99, 1, True, ReportSummary(3, 0, 0, (), 0, 1, 0))
    spec = status_spec(
        group, comment_url=COMMENT_URL, mark=passing if state in ("passed", "failed") else None
    )
    assert spec is not None and (spec.context, spec.state) == ("rerun / cpu", expected)
    assert len(spec.description) <= 140
    assert spec.target_url == (COMMENT_URL if state == "error" else RUN_URL)


# -- the CI-states block ---------------------------------------------------------------------------------------------


def _run(
    run_id: int,
    name: str,
    sha: str,
    status: str,
    conclusion: str | None = None,
    *,
    event: str = "pull_request",
    workflow_id: int = 1,
    number: int = 1,
) -> RunInfo:
    return RunInfo(
        run_id,
        status,
        conclusion,
        f"https://github.com/acme/mxfuse/actions/runs/{run_id}",
        name=name,
        workflow_id=workflow_id,
        run_number=number,
        event=event,
        head_sha=sha,
    )


def _rerun(comment_id: int, sha: str, *groups: GroupStatus) -> RerunSource:
    status = StatusComment(
        source_comment_id=comment_id - 1, command="/rerun-test x", author="a", pr=7, sha=sha, groups=groups
    )
    return RerunSource(comment_id, f"https://github.com/acme/mxfuse/pull/7#issuecomment-{comment_id}", status)


def test_block_as_a_maintainer_reads_it() -> None:
    runs = [
        _run(41, "CI", SHA, "completed", "success", number=41),
        _run(40, "CI", SHA, "completed", "failure", number=40),  # an older run of the same workflow
        _run(52, "PR GPU tests", SHA, "completed", "success", workflow_id=2, number=3),
        _run(53, "PR GPU tests", SHA, "completed", "skipped", workflow_id=2, number=4),  # a label it ignores
        _run(60, "Rerun tests", SHA, "completed", "success", event="issue_comment", workflow_id=3),
    ]
    reruns = [
        _rerun(
            12,
            SHA,
            GroupStatus("4-gpu-gb300", ("a",), "running", 70, RUN_URL),
            GroupStatus("1-gpu-5090", ("a",), "error", error="HTTP 422"),
        ),
        _rerun(20, SHA, GroupStatus("4-gpu-gb300", ("a",), "failed", 71, RUN_URL)),  # a later command wins
        _rerun(8, OLD, GroupStatus("1-gpu-h100", ("a",), "passed", 69, RUN_URL)),
    ]
    previous = CiStates(
        7, OLD, (Suite("Lint", "failed", OLD, "https://x/1", 1, 9), Suite("CI", "passed", OLD))
    )
    states = build_ci_states(7, SHA, runs=runs, reruns=reruns, previous=previous)
    comment = "https://github.com/acme/mxfuse/pull/7#issuecomment-"
    assert render_ci_states(states).splitlines()[:-1] == [
        CI_STATES_MARKER,
        "**CI states** of #7 at `0123456789ab` (the head), each suite's latest run:",
        "",
        "| suite | state | run |",
        "| --- | --- | --- |",
        "| CI | ✅ passed | [Run #41](https://github.com/acme/mxfuse/actions/runs/41) |",
        "| PR GPU tests | ✅ passed | [Run #3](https://github.com/acme/mxfuse/actions/runs/52) |",
        f"| rerun / 1-gpu-5090 | ❗ dispatch failed | [status comment]({comment}12) |",
        f"| rerun / 4-gpu-gb300 | ❌ failed | [View run]({RUN_URL}) · [status comment]({comment}20) |",
        "",
        "**Stale**: ran on an earlier head, not yet on `0123456789ab`:",
        "",
        "| suite | state | head | run |",
        "| --- | --- | --- | --- |",
        "| Lint | ❌ failed | `fedcba987654` | [Run #9](https://x/1) |",
        f"| rerun / 1-gpu-h100 | ✅ passed | `fedcba987654` | [View run]({RUN_URL}) · [status comment]({comment}8) |",
        "",
    ]
    assert parse_ci_states(render_ci_states(states)) == states


def test_block_escapes_a_workflow_name_from_the_pr() -> None:
    states = build_ci_states(7, SHA, runs=[_run(1, "@team <b>x</b> | y", SHA, "queued")], reruns=[])
    row = render_ci_states(states).splitlines()[5]
    assert row.startswith("| \uff20team &lt;b&gt;x&lt;/b&gt; \\| y | ⏳ queued |")
    assert "@" not in render_ci_states(states).replace("<!-- gpumatrix:ci-states -->", "")


def test_block_without_runs() -> None:
    body = render_ci_states(CiStates(7, SHA))
    assert "No run on this head yet." in body.splitlines() and "**Stale**" not in body


def test_with_runs_moves_unfinished_suites_only() -> None:
    states = CiStates(
        7, SHA, (Suite("CI", "running", SHA, run_id=1), Suite("rerun / cpu", "failed", SHA, run_id=2))
    )
    moved = with_runs(
        states, {1: _run(1, "CI", SHA, "completed", "success"), 2: _run(2, "x", SHA, "in_progress")}
    )
    assert [(s.name, s.state) for s in moved.suites] == [("CI", "passed"), ("rerun / cpu", "failed")]
    assert states.unfinished() == [1] and moved.unfinished() == []


@pytest.mark.parametrize(
    "body",
    [
        "",
        "just text",
        f"{CI_STATES_MARKER}\nno state",
        f'{CI_STATES_MARKER}\n<!-- gpumatrix:ci-states-state {{"pr": 7}} -->',
        f'{CI_STATES_MARKER}\n<!-- gpumatrix:ci-states-state {{"pr":7,"head":"a","suites":[{{"name":"x","state":"odd",'
        f'"sha":"a"}}],"stale":[]}} -->',
        f'not first\n{CI_STATES_MARKER}\n<!-- gpumatrix:ci-states-state {{"pr":7,"head":"a","suites":[],"stale":[]}} -->',
    ],
)
def test_parse_ci_states_refuses_what_it_did_not_write(body: str) -> None:
    assert parse_ci_states(body) is None


# -- the status comment says where results were published ----------------------------------------------------------


@pytest.mark.parametrize(
    ("checks", "note", "line"),
    [
        ("check-runs", None, f"☑️ Each runner's result is also a check run `rerun / <runner>` on `{SHA}`."),
        (
            "commit-statuses",
            "HTTP 403: Resource not accessible by integration",
            f"☑️ Each runner's result is also a commit status `rerun / <runner>` on `{SHA}` (check runs could not be "
            "written: HTTP 403: Resource not accessible by integration).",
        ),
    ],
)
def test_status_comment_says_which_was_used(checks: str, note: str | None, line: str) -> None:
    from gpumatrix.bot.render import render_status_comment
    from gpumatrix.bot.state import parse_status_comment

    status = StatusComment(
        5,
        "/rerun-test x",
        "alice",
        7,
        SHA,
        (GroupStatus("cpu", ("a",), "queued", 9, RUN_URL),),
        checks=checks,
        checks_note=note,
    )
    body = render_status_comment(status)
    assert line in body.splitlines()
    assert parse_status_comment(body) == status


def test_status_comment_checks_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="checks must be one of"):
        StatusComment(5, "/rerun-test x", "alice", checks="statuses")
