"""What the pytest plugin collects during a run, and the `Report` it becomes.

`RunOutcomes` takes pytest's collect and test reports (duck-typed: nothing here imports pytest) from the
controller, xdist workers and the plugin's child pytest alike: a test's outcome is its worst phase
(`OUTCOME_RANK`), its seconds add up over its phases, and the code paths it recorded travel on its
reports (`gpumatrix.report.witnesses`). A report pytest-rerunfailures marks `rerun` is a failed attempt of a test
that then runs again (`register(flaky=...)`): it is recorded as such, never as an outcome. `to_report` turns them into the records the reader would return, so
what the writer writes always reads back: text is cut to the reader's limits, durations kept finite.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpumatrix.config import MAX_SECONDS
from gpumatrix.hardware.detection import Hardware
from gpumatrix.report.model import OUTCOME_RANK, FileResult, PathRecord, Report, Rerun, Skip, Witnessed
from gpumatrix.report.witnesses import REPORT_ATTRIBUTE, witness_summary

__all__ = ["HARDWARE_SKIP_ATTRIBUTE", "RunOutcomes"]

_MAX_TEXT = 4096  # the reader's limit on a skip reason or a problem
#: Set by the plugin on the report of a test skipped for this machine's hardware on its own (a refined
#: test, gpumatrix.registry.refine): it travels with the report from xdist workers and the plugin's child pytest.
HARDWARE_SKIP_ATTRIBUTE = "gpumatrix_hardware_skip"
_MAX_SHORT = 200  # on a path name


@dataclass
class RunOutcomes:
    """Outcomes by test (its worst phase wins), collection errors by file, deselections, seconds and
    recorded paths by test."""

    outcomes: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # nodeid: (file, kind, reason)
    deselected: set[str] = field(default_factory=set)
    durations: dict[str, float] = field(default_factory=dict)  # nodeid: seconds, all phases
    witnessed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # nodeid: its records
    files: dict[str, str] = field(default_factory=dict)  # nodeid: file, of every test seen
    # Tests skipped for this machine's hardware one by one (a refined test: gpumatrix.registry.refine).
    hardware_skipped: set[str] = field(default_factory=set)
    reruns: dict[str, dict[int, tuple[str, str]]] = field(
        default_factory=dict
    )  # nodeid: {attempt: (when, msg)}

    def add(self, nodeid: str, file: str, kind: str, reason: str = "") -> None:
        self.files.setdefault(nodeid, file)
        previous = self.outcomes.get(nodeid)
        if previous is None or OUTCOME_RANK[kind] > OUTCOME_RANK[previous[1]]:
            self.outcomes[nodeid] = (file, kind, reason)

    def add_collect_report(self, report: Any, file: str) -> None:
        """A whole file that failed to collect, or was skipped before it was imported."""
        if report.failed:
            self.add(report.nodeid, file, "errors")
        elif report.skipped:
            self.add(report.nodeid, file, "skipped", skip_reason(report))

    def add_test_report(self, report: Any, file: str) -> None:
        self.files.setdefault(report.nodeid, file)
        seconds = float(report.duration or 0)
        if math.isfinite(seconds) and seconds > 0:
            self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + seconds
        records = getattr(report, REPORT_ATTRIBUTE, None)
        if isinstance(records, list):  # a plain list of dicts, from this process, a worker or a child
            self.witnessed.setdefault(report.nodeid, []).extend(
                r for r in records if isinstance(r, dict) and isinstance(r.get("path"), str) and r["path"]
            )
        # A failed attempt: the test runs again (pytest-rerunfailures), and its last attempt is its outcome.
        if getattr(report, "outcome", None) == "rerun":
            self.add_rerun(report)
            return
        if report.when == "call":
            kind = "failed" if report.failed else "skipped" if report.skipped else "passed"
        elif report.failed:
            kind = "errors"
        elif report.skipped:
            kind = "skipped"
        else:
            return  # a passing setup or teardown says nothing the call does not
        reason = ""
        if kind == "skipped" and getattr(report, HARDWARE_SKIP_ATTRIBUTE, False):
            self.hardware_skipped.add(report.nodeid)
        if kind == "skipped":
            wasxfail = getattr(report, "wasxfail", None)
            reason = f"xfail: {wasxfail}" if wasxfail is not None else skip_reason(report)
        self.add(report.nodeid, file, kind, reason)

    def add_rerun(self, report: Any) -> None:
        """A failed attempt: which one (pytest-rerunfailures numbers them from 0 as `rerun`), the phase that
        failed first, and the first line of what it said."""
        attempts = self.reruns.setdefault(report.nodeid, {})
        index = getattr(report, "rerun", None)
        attempt = index + 1 if isinstance(index, int) and index >= 0 else len(attempts) + 1
        if attempt not in attempts:  # a later phase of the same attempt failed too: the first one is why
            attempts[attempt] = (report.when, _first_line(report))

    def to_report(
        self,
        *,
        hardware: Hardware,
        runner: str | None,
        problems: Sequence[str] = (),
        hardware_skips: Mapping[str, str] | None = None,
        disabled_skips: Mapping[str, str] | None = None,
        est_times: Mapping[str, float] | None = None,
        repeat: int = 1,
        commit: str | None = None,
        suite: str | None = None,
    ) -> Report:
        """The report of what was collected. A test that recorded paths or failed an attempt but never
        reported an outcome (a run stopped in its middle) is an error: never a test without an outcome."""
        outcomes = dict(self.outcomes)
        for nodeid, records in (*self.witnessed.items(), *self.reruns.items()):
            if records and nodeid not in outcomes:
                outcomes[nodeid] = (self.files.get(nodeid, nodeid.split("::", 1)[0]), "errors", "")
        by_file: dict[str, dict[str, list]] = {}
        seconds: dict[str, float] = {}
        for nodeid, (file, kind, reason) in sorted(outcomes.items()):
            lists = by_file.setdefault(file, {"passed": [], "failed": [], "errors": [], "skipped": []})
            seconds[file] = seconds.get(file, 0.0) + self.durations.get(nodeid, 0.0)
            if kind != "skipped":
                lists[kind].append(nodeid)
                continue
            reason = reason[:_MAX_TEXT]
            disabled = bool(disabled_skips) and disabled_skips.get(file) == reason  # type: ignore[union-attr]
            by_hardware = not disabled and (
                (hardware_skips or {}).get(file) == reason or nodeid in self.hardware_skipped
            )
            lists["skipped"].append(Skip(nodeid, reason, hardware=by_hardware, disabled=disabled))
        files = {
            file: FileResult(
                passed=tuple(lists["passed"]),
                failed=tuple(lists["failed"]),
                errors=tuple(lists["errors"]),
                skipped=tuple(lists["skipped"]),
                duration=min(round(seconds[file], 3), float(MAX_SECONDS)),
                est_time=(est_times or {}).get(file),
                reruns=tuple(
                    Rerun(nodeid, number, when, message)
                    for nodeid in sorted(lists["passed"] + lists["failed"] + lists["errors"])
                    for number, (_, (when, message)) in enumerate(
                        sorted(self.reruns.get(nodeid, {}).items()), 1
                    )
                ),
            )
            for file, lists in by_file.items()
        }
        witnessed = {
            nodeid: Witnessed(
                outcomes[nodeid][0],
                outcomes[nodeid][1],
                MappingProxyType(
                    {
                        _printable(name)[:_MAX_SHORT]: PathRecord(
                            entry["count"], tuple(reason[:_MAX_SHORT] for reason in entry["reasons"])
                        )
                        for name, entry in witness_summary(records).items()
                    }
                ),
            )
            for nodeid, records in sorted(self.witnessed.items())
            if records
        }
        return Report(
            hardware=hardware,
            runner=runner,
            files=MappingProxyType(files),
            witnessed=MappingProxyType(witnessed),
            problems=tuple(problem[:_MAX_TEXT] for problem in problems),
            deselected=len(self.deselected),
            finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            repeat=repeat,
            commit=commit,
            suite=suite,
        )


def skip_reason(report: Any) -> str:
    """The reason of a skipped pytest report, as `-rs` shows it."""
    if isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
        return text.removeprefix("Skipped: ")
    return str(report.longrepr)


def _first_line(report: Any) -> str:
    """The first line of why an attempt failed (its crash message), one line of printable text."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = str(getattr(crash, "message", "") or report.longreprtext or "")
    return _printable(text.strip().split("\n", 1)[0])[:_MAX_SHORT]


def _printable(text: str) -> str:
    """`text` with each character that is not printable shown as its escape (a path name is one line)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
