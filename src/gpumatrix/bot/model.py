"""The values the bot keeps on GitHub: a status comment and its runner groups, a check run's record of its
reports, the CI-states block; and the words for where a run stands.

Plain frozen values, checked where they are built. `gpumatrix.bot.state` writes them into hidden markers
and reads them back; `render`, `checks` and `ci_states` draw them; nothing here does I/O.

A `/rerun-test --repeat N` comment has two groups per runner, one on the head and one on the base
(`commit`), and once a run is over, its group's `Tally` of its reports (`gpumatrix.bot.repeat`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumatrix.bot.report import ReportSummary
from gpumatrix.bot.resolve import Refusal
from gpumatrix.flaky.stats import PassRate

__all__ = [
    "BASE",
    "CHECK_KINDS",
    "HEAD",
    "STATE_EMOJI",
    "TERMINAL_STATES",
    "CiStates",
    "GroupStatus",
    "ReportMark",
    "StatusComment",
    "Suite",
    "Tally",
    "partner",
    "run_state",
]

# pending: planned, not dispatched yet (or a dry run). error: the dispatch itself failed.
STATE_EMOJI = {
    "pending": "⏳",
    "queued": "⏳",
    "running": "🔄",
    "passed": "✅",
    "failed": "❌",
    "cancelled": "⚠️",
    "error": "❗",
}
TERMINAL_STATES = frozenset({"passed", "failed", "cancelled", "error"})
# Where each run's result is also published on the commit: GitHub check runs, or commit statuses when the
# token may not write checks (see gpumatrix.bot.publish).
CHECK_KINDS = ("check-runs", "commit-statuses")
# The commit a group runs at: the PR head, or (`/rerun-test --repeat`) the merge base with its base branch.
HEAD, BASE = "head", "base"


def run_state(status: str | None, conclusion: str | None) -> str:
    """Map a workflow run's `status`/`conclusion` to a comment state; never `passed` unless `success`."""
    if status != "completed":
        return "running" if status == "in_progress" else "queued"
    if conclusion == "success":
        return "passed"
    if conclusion in ("cancelled", "skipped", "neutral", "stale"):
        return "cancelled"
    return "failed"  # failure, timed_out, startup_failure, action_required, and anything new


@dataclass(frozen=True)
class Tally:
    """Each test's passes of its runs in one run's reports; `complete` when the run had completed as they
    were read (they will not change). `omitted` tests (each passed every run) and `unreadable` reports are
    counted, not kept."""

    complete: bool
    tests: tuple[tuple[str, int, int], ...] = ()  # (test, passed, runs), those with a failed run first
    omitted: int = 0
    reports: int = 0
    unreadable: int = 0

    def rates(self) -> dict[str, PassRate]:
        return {test: PassRate(passed, runs) for test, passed, runs in self.tests}

    def to_json(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "tests": [list(entry) for entry in self.tests],
            "omitted": self.omitted,
            "reports": self.reports,
            "unreadable": self.unreadable,
        }

    @classmethod
    def from_json(cls, data: Any) -> Tally:
        """Read `to_json`'s output back from the hidden state; a `TypeError` or `ValueError` when it is not."""
        if not isinstance(data, Mapping) or not isinstance(data.get("complete"), bool):
            raise TypeError("a tally is an object with a boolean 'complete'")
        tests = []
        for test, passed, runs in data.get("tests", ()):
            rate = PassRate(passed, runs)  # checks the counts
            tests.append((str(test), rate.passed, rate.runs))
        counts = [data.get(key, 0) for key in ("omitted", "reports", "unreadable")]
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise ValueError("tally counts must be integers >= 0")
        return cls(data["complete"], tuple(tests), *counts)


@dataclass(frozen=True)
class GroupStatus:
    """One runner group of a status comment and where its run stands."""

    label: str
    tests: tuple[str, ...]
    state: str = "pending"
    run_id: int | None = None
    url: str | None = None
    error: str | None = None  # why the dispatch failed: "HTTP 422: ..."
    include_disabled: bool = False  # the run runs tests disabled on this runner (--include-disabled)
    commit: str = HEAD  # `base`: a --repeat command's run on the PR's merge base
    tally: Tally | None = None  # a --repeat command's run, once over: its tests' passes of their runs

    def __post_init__(self) -> None:
        if self.state not in STATE_EMOJI:
            raise ValueError(f"state must be one of {', '.join(STATE_EMOJI)}, got {self.state!r}")
        if self.commit not in (HEAD, BASE):
            raise ValueError(f"commit must be {HEAD!r} or {BASE!r}, got {self.commit!r}")


@dataclass(frozen=True)
class StatusComment:
    source_comment_id: int
    command: str  # the command line as written
    author: str
    pr: int | None = None
    sha: str | None = None
    groups: tuple[GroupStatus, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    problem: str | None = None  # the whole command is refused
    checks: str | None = None  # one of CHECK_KINDS once the runs' results were published on the commit
    checks_note: str | None = None  # why commit statuses were used instead of check runs
    repeat: int | None = None  # --repeat N: every test N times on the head and N times on the base
    base_sha: str | None = None  # the merge base of the head with `base_ref`, pinned at plan time
    base_ref: str | None = None
    new_tests: tuple[str, ...] = ()  # selections the base does not have (the PR adds their files)

    def __post_init__(self) -> None:
        if self.checks is not None and self.checks not in CHECK_KINDS:
            raise ValueError(f"checks must be one of {', '.join(CHECK_KINDS)} or None, got {self.checks!r}")

    def with_groups(self, groups: Sequence[GroupStatus]) -> StatusComment:
        return replace(self, groups=tuple(groups))


def partner(groups: Sequence[GroupStatus], group: GroupStatus) -> GroupStatus | None:
    """The group of the same runner on the other commit."""
    other = BASE if group.commit == HEAD else HEAD
    return next((g for g in groups if g.label == group.label and g.commit == other), None)


@dataclass(frozen=True)
class ReportMark:
    """What a check run's summary recorded about its run's reports."""

    run_id: int
    attempt: int
    complete: bool  # the run had completed when its reports were read: they will not change
    report: ReportSummary | None  # None: the run uploaded no readable report

    def covers(self, run_id: int, attempt: int) -> bool:
        """True when these are the final reports of that run attempt: nothing to download again."""
        return self.complete and (self.run_id, self.attempt) == (run_id, attempt)


@dataclass(frozen=True)
class Suite:
    """The latest run of one suite on one head."""

    name: str
    state: str  # a key of STATE_EMOJI
    sha: str
    url: str | None = None  # the workflow run
    run_id: int | None = None
    number: int | None = None  # the run number, for workflow suites
    comment_url: str | None = None  # the status comment, for reruns

    def __post_init__(self) -> None:
        if self.state not in STATE_EMOJI:
            raise ValueError(f"state must be one of {', '.join(STATE_EMOJI)}, got {self.state!r}")


@dataclass(frozen=True)
class CiStates:
    pr: int
    head: str
    suites: tuple[Suite, ...] = ()  # on `head`
    stale: tuple[Suite, ...] = ()  # on an earlier head, for suites with no run on `head` yet

    def unfinished(self) -> list[int]:
        """Run ids shown as not yet over (current and stale): what a writer reads again after writing."""
        return [
            s.run_id
            for s in (*self.suites, *self.stale)
            if s.run_id is not None and s.state in ("pending", "queued", "running")
        ]
