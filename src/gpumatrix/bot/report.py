"""What a run's JSON test reports add up to: passed, failed and skipped counts and the failing test ids.

Each shard of a `gpu-tests.yml` run uploads the JSON report `gpumatrix run --report` writes as an artifact
named `gpumatrix-report-<runner>-shard-<i>-of-<n>`. Reports are read through `gpumatrix.report`, as every
command reads them (they come from a run of the code under test): one that cannot be read, is malformed or
contradicts itself counts as unreadable, never as zero failures, and what is wrong with it is kept (the
first `MAX_PROBLEMS`, one line each). Only the first `MAX_FAILING` failing ids are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpumatrix.config import Matrix

if TYPE_CHECKING:  # the report reader loads when reports are summed, not with the bot's values
    from gpumatrix.report import Report

__all__ = ["MAX_FAILING", "MAX_PROBLEMS", "REPORT_ARTIFACT_PREFIX", "ReportSummary", "summarize_reports"]

REPORT_ARTIFACT_PREFIX = "gpumatrix-report-"
MAX_FAILING = 50  # failing ids kept for a check run's summary; the rest are counted
MAX_PROBLEMS = 5  # reasons kept for reports not counted
_MAX_NODEID = 300  # a failing id longer than this is counted, not shown
_MAX_PROBLEM = 300


@dataclass(frozen=True)
class ReportSummary:
    """The sum of a run's reports. `failed` counts errors too; `reports` is how many were read and counted;
    `unreadable` could not be read, `rejected` were read and not counted (another runner's, another
    commit's, a refused run's, declared hardware, or reports that disagree on their commit or suite);
    `problems` says why."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failing: tuple[str, ...] = ()
    more_failing: int = 0  # failing ids beyond `failing`
    reports: int = 0
    unreadable: int = 0
    problems: tuple[str, ...] = ()
    rejected: int = 0

    @property
    def uncounted(self) -> int:
        """Reports that could not be counted, whatever the reason: none of them may pass for a pass."""
        return self.unreadable + self.rejected

    def to_json(self) -> dict[str, Any]:
        problems = {"problems": list(self.problems)} if self.problems else {}  # markers before it had none
        rejected = {"rejected": self.rejected} if self.rejected else {}
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "failing": list(self.failing),
            "more_failing": self.more_failing,
            "reports": self.reports,
            "unreadable": self.unreadable,
            **problems,
            **rejected,
        }

    @classmethod
    def from_json(cls, data: Any) -> ReportSummary | None:
        """Read `to_json`'s output back (from a check run's hidden marker); None when it is not that. A
        marker written before `problems` existed has none."""
        if not isinstance(data, Mapping):
            return None
        counts = {
            key: data.get(key, 0 if key == "rejected" else None)
            for key in ("passed", "failed", "skipped", "more_failing", "reports", "unreadable", "rejected")
        }
        if not all(_count(value) for value in counts.values()):
            return None
        failing, problems = data.get("failing"), data.get("problems", [])
        if not isinstance(failing, list) or not all(_node_id(item) for item in failing):
            return None
        if not isinstance(problems, list) or not all(_problem(item) for item in problems):
            return None
        return cls(failing=tuple(failing[:MAX_FAILING]), problems=tuple(problems[:MAX_PROBLEMS]), **counts)


def summarize_reports(
    documents: Iterable[tuple[str, bytes]],
    matrix: Matrix,
    *,
    runner: str | None = None,
    commit: str | None = None,
) -> ReportSummary:
    """Add up JSON reports, given as (name, bytes of the file), read against `matrix`. A report saved more
    than once counts once. Given the `runner` the run was dispatched to and the `commit` it was pinned to,
    a report of another runner or commit is not counted (`rejected`, with why), and neither is a refused
    run's, one whose hardware was declared rather than probed, nor any when they disagree on their commit
    or suite."""
    from gpumatrix.report import ReportError, mixed_provenance, parse_report_bytes

    passed = failed = skipped = reports = unreadable = rejected = 0
    failing: list[str] = []
    problems: list[str] = []
    seen: set[str] = set()
    counted: list[Report] = []
    for name, data in documents:
        try:
            report = parse_report_bytes(data, source=name, matrix=matrix)
        except ReportError as exc:
            unreadable += 1
            problems.append(_one_line(str(exc)))
            continue
        if report.digest in seen:
            continue  # the same report twice (two artifacts, two copies): once
        seen.add(report.digest)
        why = _not_counted(report, runner=runner, commit=commit)
        if why:
            rejected += 1
            problems.append(_one_line(f"report {name} not counted: {'; '.join(why)}"))
            continue
        counted.append(report)
    mixed = mixed_provenance(counted)
    if mixed is not None:  # shards of one run are of one commit and suite; these are not
        rejected += len(counted)
        problems.append(_one_line(f"no report counted: {mixed}"))
        counted = []
    for report in counted:
        reports += 1
        for result in report.files.values():
            passed += len(result.passed)
            skipped += len(result.skipped)
            failed += len(result.failed) + len(result.errors)
            failing += [nodeid for nodeid in result.failed + result.errors if _node_id(nodeid)]
    kept = tuple(dict.fromkeys(failing))  # one id once, in report order
    return ReportSummary(
        passed,
        failed,
        skipped,
        kept[:MAX_FAILING],
        max(0, len(kept) - MAX_FAILING),
        reports,
        unreadable,
        tuple(problems[:MAX_PROBLEMS]),
        rejected,
    )


def _not_counted(report: Report, *, runner: str | None, commit: str | None) -> list[str]:
    """Why a readable report cannot count for the run it came from (empty: it can)."""
    why = [f"the run was refused: {problem}" for problem in report.problems]
    if runner is not None and report.runner != runner:
        why.append(f"it ran as runner {report.runner or '(none)'}, not {runner}")
    if commit is not None and report.provenance_known and report.commit != commit:
        why.append(f"it ran at {report.commit[:12] if report.commit else 'no commit'}, not {commit[:12]}")
    if report.hardware.source == "override":
        why.append("its hardware was declared (GPUMATRIX_HARDWARE), not probed")
    return why


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_PROBLEM else flat[: _MAX_PROBLEM - 1] + "…"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _node_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_NODEID and value.isprintable()


def _problem(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_PROBLEM and value.isprintable()
