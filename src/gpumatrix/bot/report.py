"""What a run's JSON test reports add up to: passed, failed and skipped counts and the failing test ids.

Each shard of a `gpu-tests.yml` run uploads the JSON report `gpumatrix run --report` writes (the pytest
plugin's `RunReport`) as an artifact named `gpumatrix-report-<runner>-shard-<i>-of-<n>`. The reports come from
a run of the code under test, so they are read as untrusted data: any shape, any size. A report that is not
the expected shape counts as unreadable, never as zero failures; node ids are kept only when they are short
single-line strings, and only the first `MAX_FAILING` are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_FAILING", "REPORT_ARTIFACT_PREFIX", "ReportSummary", "summarize_reports"]

REPORT_ARTIFACT_PREFIX = "gpumatrix-report-"
MAX_FAILING = 50  # failing ids kept for a check run's summary; the rest are counted
_MAX_NODEID = 300
_MAX_REPORT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ReportSummary:
    """The sum of a run's reports. `failed` counts errors too; `reports` is how many were read."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failing: tuple[str, ...] = ()
    more_failing: int = 0  # failing ids beyond `failing`
    reports: int = 0
    unreadable: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "failing": list(self.failing),
            "more_failing": self.more_failing,
            "reports": self.reports,
            "unreadable": self.unreadable,
        }

    @classmethod
    def from_json(cls, data: Any) -> ReportSummary | None:
        """Read `to_json`'s output back (from a check run's hidden marker); None when it is not that."""
        if not isinstance(data, Mapping):
            return None
        counts = {
            key: data.get(key)
            for key in ("passed", "failed", "skipped", "more_failing", "reports", "unreadable")
        }
        if not all(_count(value) for value in counts.values()):
            return None
        failing = data.get("failing")
        if not isinstance(failing, list) or not all(_node_id(item) for item in failing):
            return None
        return cls(failing=tuple(failing[:MAX_FAILING]), **counts)


def summarize_reports(documents: Iterable[bytes]) -> ReportSummary:
    """Add up JSON reports (the bytes of each `report.json`)."""
    passed = failed = skipped = reports = unreadable = 0
    failing: list[str] = []
    for document in documents:
        read = _read_report(document)
        if read is None:
            unreadable += 1
            continue
        reports += 1
        passed += read[0]
        failed += read[1]
        skipped += read[2]
        failing += read[3]
    kept = tuple(dict.fromkeys(failing))  # one id once, in report order
    return ReportSummary(
        passed, failed, skipped, kept[:MAX_FAILING], max(0, len(kept) - MAX_FAILING), reports, unreadable
    )


def _read_report(document: bytes) -> tuple[int, int, int, list[str]] | None:
    if len(document) > _MAX_REPORT_BYTES:
        return None
    try:
        data = json.loads(document)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    files = data.get("files") if isinstance(data, Mapping) else None
    if not isinstance(files, Mapping):
        return None
    passed = failed = skipped = 0
    failing: list[str] = []
    for outcome in files.values():
        if not isinstance(outcome, Mapping):
            return None
        lists = {key: outcome.get(key, []) for key in ("passed", "failed", "errors", "skipped")}
        if not all(isinstance(value, list) for value in lists.values()):
            return None
        passed += len(lists["passed"])
        skipped += len(lists["skipped"])
        for nodeid in lists["failed"] + lists["errors"]:
            failed += 1
            if _node_id(nodeid):
                failing.append(nodeid)
    return passed, failed, skipped, failing


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _node_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_NODEID and value.isprintable()
