"""A runner group's result as GitHub shows it on the commit: the check run (or commit status) to publish.

One check run per dispatched runner group, on the pinned head SHA the group ran:

    name         rerun / <runner>                    (what branch protection can require)
    external_id  gpumatrix:<source comment>:<status comment>:<runner>
    details_url  the workflow run (the status comment when the dispatch failed)
    status       queued -> in_progress -> completed, following the run
    conclusion   success | failure | cancelled, or action_required when the dispatch itself failed

Its output summary says what ran and, once the run is over, how many tests passed, failed and were skipped,
and which failed, from the run's JSON reports; for `/rerun-test --repeat N`, once the base run is over too,
each test's head and base pass rates and its verdict (`gpumatrix.bot.repeat.check_comparison`). The summary
ends in a hidden marker recording the run, its attempt, whether the run had completed when its reports were
read, and what they held (a `ReportMark`, written by `gpumatrix.bot.state`), so later syncs neither download
the reports again nor lose what they said. Pure: `gpumatrix.bot.publish` does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpumatrix.bot.github import CheckRunInfo
from gpumatrix.bot.model import STATE_EMOJI, TERMINAL_STATES, GroupStatus, ReportMark, StatusComment
from gpumatrix.bot.repeat import check_comparison
from gpumatrix.bot.report import ReportSummary
from gpumatrix.bot.state import encode_check
from gpumatrix.escape import markdown

__all__ = [
    "CHECK_NAME_PREFIX",
    "CheckSpec",
    "StatusSpec",
    "Verdict",
    "check_name",
    "check_spec",
    "external_id",
    "judge",
    "status_spec",
]

CHECK_NAME_PREFIX = "rerun / "
# What a run's own state would conclude: shown beside the verdict when the reports say otherwise.
CHECK_CONCLUSION = {
    "passed": "success",
    "failed": "failure",
    "cancelled": "cancelled",
    "error": "action_required",
}
_CHECK_STATUS = {"queued": "queued", "running": "in_progress"}
# A commit status has no "cancelled", "action_required" or "queued": error and pending are GitHub's nearest.
_STATUS_STATE = {
    None: "pending",
    "success": "success",
    "failure": "failure",
    "cancelled": "error",
    "action_required": "error",
}
_LISTED_TESTS = 10
_DESCRIPTION_LIMIT = 140  # GitHub's limit for a commit status description


def check_name(label: str) -> str:
    return f"{CHECK_NAME_PREFIX}{label}"


def external_id(status: StatusComment, comment_id: int, label: str) -> str:
    """Ties a check run to the command (source comment), its status comment and the runner."""
    return f"gpumatrix:{status.source_comment_id}:{comment_id}:{label}"


@dataclass(frozen=True)
class Verdict:
    """What a group's check run (or commit status) concludes, and why: from the reports its run uploaded,
    never from the workflow's own conclusion alone. `conclusion` is None while the run is not over."""

    conclusion: str | None  # success | failure | cancelled | action_required
    words: str  # the title's first word(s): Passed, Failed, Cancelled, Queued, Running, Dispatch failed
    reason: str = ""  # why it is not a pass, when the counts do not say it


def judge(group: GroupStatus, mark: ReportMark | None) -> Verdict:
    """The verdict of a group: `success` only when its run completed with success and the reports it read
    say passed, with a count above zero; a run whose reports are missing, unreadable, another runner's or
    commit's, disagree, or ran nothing is a `failure` saying so, whatever the workflow concluded."""
    if group.state == "error":
        return Verdict("action_required", "Dispatch failed", group.error or "unknown error")
    if group.state not in TERMINAL_STATES:
        return Verdict(None, "Running" if group.state == "running" else "Queued")
    if group.state == "cancelled":
        return Verdict("cancelled", "Cancelled")
    report = mark.report if mark is not None else None
    if mark is None:
        return Verdict("failure", "Failed", "its test reports could not be read yet")
    if report is None or not report.reports and not report.uncounted:
        return Verdict("failure", "Failed", "the run uploaded no test report")
    if report.uncounted:
        return Verdict("failure", "Failed", f"{report.uncounted} report(s) could not be counted")
    if report.failed:
        return Verdict("failure", "Failed")
    if not report.passed:
        return Verdict("failure", "Failed", "no test passed: the reports ran nothing")
    if group.state != "passed":
        return Verdict("failure", "Failed", "the run failed, though its reports show no failure: see its log")
    return Verdict("success", "Passed")


@dataclass(frozen=True)
class CheckSpec:
    """The check run a group should have, as the fields of a create or update call."""

    name: str
    external_id: str
    status: str  # queued | in_progress | completed
    conclusion: str | None
    details_url: str | None
    title: str
    summary: str

    def fields(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "external_id": self.external_id,
            "status": self.status,
            "output": {"title": self.title, "summary": self.summary},
        }
        if self.conclusion is not None:
            body["conclusion"] = self.conclusion
        if self.details_url:
            body["details_url"] = self.details_url
        return body

    def shown_by(self, check: CheckRunInfo) -> bool:
        """True when `check` already shows exactly this."""
        return (check.status, check.conclusion, check.details_url or None, check.title, check.summary) == (
            self.status,
            self.conclusion,
            self.details_url or None,
            self.title,
            self.summary,
        )


@dataclass(frozen=True)
class StatusSpec:
    """The commit status standing in for a check run when the token may not write checks."""

    context: str
    state: str  # pending | success | failure | error
    description: str
    target_url: str | None


def check_spec(
    group: GroupStatus,
    *,
    status: StatusComment,
    comment_id: int,
    comment_url: str | None,
    mark: ReportMark | None,
) -> CheckSpec | None:
    """The check run for `group`; None when there is nothing to show yet (not dispatched)."""
    if group.state == "pending" or (group.run_id is None and group.state != "error"):
        return None
    terminal = group.state in TERMINAL_STATES
    report = mark.report if mark is not None and terminal else None
    verdict = judge(group, mark)
    lines = [_header(status, comment_url), "", _tests_line(group.tests), ""]
    if group.include_disabled:
        lines += ["Tests registered as disabled on this runner run too (`--include-disabled`).", ""]
    if group.state == "error":
        lines += [f"❗ The dispatch failed: {markdown(group.error or 'unknown error')}", ""]
    else:
        emoji = {"success": "✅", "failure": "❌"}.get(verdict.conclusion or "", STATE_EMOJI[group.state])
        lines += [
            f"{emoji} {verdict.words}" + (f": {markdown(verdict.reason)}" if verdict.reason else ""),
            "",
        ]
        if terminal and verdict.conclusion != CHECK_CONCLUSION.get(group.state, verdict.conclusion):
            lines += [f"(The workflow run itself ended {markdown(group.state)}.)", ""]
    suffix, comparison = check_comparison(status, group) if terminal else ("", [])
    lines += comparison
    if report is not None:
        lines += _report_lines(report)
    elif terminal and group.state != "error":
        lines += [
            "The run uploaded no test report: its log says what ran."
            if mark is not None
            else "The run's test reports could not be read yet.",
            "",
        ]
    if group.url:
        lines += [f"[View workflow run]({group.url})", ""]
    if mark is not None and terminal:
        lines.append(encode_check(mark))
    return CheckSpec(
        name=check_name(group.label),
        external_id=external_id(status, comment_id, group.label),
        status=_CHECK_STATUS.get(group.state, "completed"),
        conclusion=verdict.conclusion,
        details_url=group.url or comment_url,
        title=_title(verdict, report) + suffix,
        summary="\n".join(lines).rstrip("\n"),
    )


def status_spec(group: GroupStatus, *, comment_url: str | None, mark: ReportMark | None) -> StatusSpec | None:
    """The commit status for `group`, with the check run's title as its description."""
    if group.state == "pending" or (group.run_id is None and group.state != "error"):
        return None
    report = mark.report if mark is not None and group.state in TERMINAL_STATES else None
    verdict = judge(group, mark)
    description = _title(verdict, report)
    if len(description) > _DESCRIPTION_LIMIT:
        description = description[: _DESCRIPTION_LIMIT - 1] + "…"
    return StatusSpec(
        check_name(group.label), _STATUS_STATE[verdict.conclusion], description, group.url or comment_url
    )


def _title(verdict: Verdict, report: ReportSummary | None) -> str:
    """One line: the verdict, the counts when there are reports, and why it is not a pass when the
    counts do not say it."""
    if verdict.conclusion == "action_required":
        return f"Dispatch failed: {' '.join(verdict.reason.split())}"[:200]
    title = verdict.words + (f": {_counts(report)}" if report is not None and report.reports else "")
    return f"{title} · {' '.join(verdict.reason.split())}"[:200] if verdict.reason else title


def _counts(report: ReportSummary) -> str:
    return f"{report.passed} passed, {report.failed} failed, {report.skipped} skipped"


def _header(status: StatusComment, comment_url: str | None) -> str:
    parts = [markdown(status.command, style="code"), f"from {markdown('@' + status.author)}"]
    if status.pr is not None:
        parts.append(f"on #{status.pr}")
    if status.sha:
        parts.append(f"at {markdown(status.sha, style='code')}")
    if comment_url:
        parts.append(f"([status comment]({comment_url}))")
    return " ".join(parts)


def _tests_line(tests: tuple[str, ...]) -> str:
    shown = ", ".join(markdown(test, style="code") for test in tests[:_LISTED_TESTS])
    more = f" and {len(tests) - _LISTED_TESTS} more" if len(tests) > _LISTED_TESTS else ""
    return f"Tests: {shown}{more}" if tests else "Tests: the runner's whole slice"


def _report_lines(report: ReportSummary) -> list[str]:
    lines = [
        "| passed | failed | skipped |",
        "| ---: | ---: | ---: |",
        f"| {report.passed} | {report.failed} | {report.skipped} |",
        "",
    ]
    if report.failing:
        total = len(report.failing) + report.more_failing
        heading = (
            "Failing tests:"
            if not report.more_failing
            else f"Failing tests (first {len(report.failing)} of {total}):"
        )
        lines += [heading, *(f"- {markdown(nodeid, style='code')}" for nodeid in report.failing), ""]
    elif report.failed:
        lines += ["The reports counted failures without naming them: see the run's log.", ""]
    read = f"{report.reports} report{'s' if report.reports != 1 else ''}"
    if report.unreadable:
        read += f"; {report.unreadable} unreadable, not counted"
    if report.rejected:
        read += f"; {report.rejected} of another runner, commit or kind, not counted"
    lines += [f"From the run's JSON test reports ({read}).", ""]
    if report.problems:
        lines += ["What is wrong with the reports:", *(f"- {markdown(p)}" for p in report.problems), ""]
    return lines
