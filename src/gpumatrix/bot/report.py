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
from typing import Any

from gpumatrix.config import Matrix
from gpumatrix.report import ReportError, parse_report_bytes

__all__ = ["MAX_FAILING", "MAX_PROBLEMS", "REPORT_ARTIFACT_PREFIX", "ReportSummary", "summarize_reports"]

REPORT_ARTIFACT_PREFIX = "gpumatrix-report-"
MAX_FAILING = 50  # failing ids kept for a check run's summary; the rest are counted
MAX_PROBLEMS = 5  # reasons kept for reports not counted
_MAX_NODEID = 300  # a failing id longer than this is counted, not shown
_MAX_PROBLEM = 300


@dataclass(frozen=True)
class ReportSummary:
    """The sum of a run's reports. `failed` counts errors too; `reports` is how many were read, and
    `problems` says why the `unreadable` ones were not."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failing: tuple[str, ...] = ()
    more_failing: int = 0  # failing ids beyond `failing`
    reports: int = 0
    unreadable: int = 0
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        problems = {"problems": list(self.problems)} if self.problems else {}  # markers before it had none
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "failing": list(self.failing),
            "more_failing": self.more_failing,
            "reports": self.reports,
            "unreadable": self.unreadable,
            **problems,
        }

    @classmethod
    def from_json(cls, data: Any) -> ReportSummary | None:
        """Read `to_json`'s output back (from a check run's hidden marker); None when it is not that. A
        marker written before `problems` existed has none."""
        if not isinstance(data, Mapping):
            return None
        counts = {
            key: data.get(key)
            for key in ("passed", "failed", "skipped", "more_failing", "reports", "unreadable")
        }
        if not all(_count(value) for value in counts.values()):
            return None
        failing, problems = data.get("failing"), data.get("problems", [])
        if not isinstance(failing, list) or not all(_node_id(item) for item in failing):
            return None
        if not isinstance(problems, list) or not all(_problem(item) for item in problems):
            return None
        return cls(failing=tuple(failing[:MAX_FAILING]), problems=tuple(problems[:MAX_PROBLEMS]), **counts)


def summarize_reports(documents: Iterable[tuple[str, bytes]], matrix: Matrix) -> ReportSummary:
    """Add up JSON reports, given as (name, bytes of the file), read against `matrix`."""
    passed = failed = skipped = reports = unreadable = 0
    failing: list[str] = []
    problems: list[str] = []
    for name, data in documents:
        try:
            report = parse_report_bytes(data, source=name, matrix=matrix)
        except ReportError as exc:
            unreadable += 1
            problems.append(_one_line(str(exc)))
            continue
        reports += 1
        problems += [_one_line(f"report {name}: the run was refused: {p}") for p in report.problems]
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
    )


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_PROBLEM else flat[: _MAX_PROBLEM - 1] + "…"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _node_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_NODEID and value.isprintable()


def _problem(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_PROBLEM and value.isprintable()
