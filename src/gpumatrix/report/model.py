"""The JSON test report as typed, frozen records, the one error a report raises, and the writer's JSON.

A report is what one pytest run (`--gpumatrix-report`, `gpumatrix run`) saw: the machine it ran on, the
`--runner` it was given, every test's outcome by file, each file's measured seconds beside its
registered estimate, the code paths each test recorded, each failed attempt of a test that ran again
(`register(flaky=...)`) and how many times each test was repeated (`--repeat N`). The pytest plugin is its one writer
(`gpumatrix.report.collect` builds a `Report`, `report_to_json` is its JSON); `gpumatrix.report.read` is
its one reader. docs/coverage.md lists the fields.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpumatrix import UsageError
from gpumatrix.hardware.detection import Hardware

__all__ = [
    "FORMAT",
    "OUTCOMES",
    "OUTCOME_RANK",
    "RAN",
    "PHASES",
    "READ_FORMATS",
    "FileResult",
    "PathRecord",
    "Report",
    "ReportError",
    "Rerun",
    "Skip",
    "Witnessed",
    "distinct_reports",
    "dump_report",
    "mixed_provenance",
    "report_digest",
    "report_to_json",
    "require_ran",
    "worse",
]

#: The version of the JSON this writer writes. 2 added `commit` and `suite`; the reader reads 1 too, as a
#: report whose commit and suite are not known (`Report.provenance_known`).
FORMAT = 2
#: The versions the reader reads.
READ_FORMATS = (1, 2)
#: A test's outcome, in the order reports and tables list them; `errors` is an error in setup or teardown.
OUTCOMES = ("passed", "failed", "errors", "skipped")
#: The outcomes of a test that ran, whatever came of it.
RAN = ("passed", "failed", "errors")
#: How bad an outcome is. A test reported more than once (its phases; two reports of one runner) keeps
#: the worst: a test that ran outranks one skipped, and a failure an error.
OUTCOME_RANK: Mapping[str, int] = MappingProxyType({"skipped": 0, "passed": 1, "errors": 2, "failed": 3})
#: The phases of a test, in order; a failed attempt that ran again names the one that failed.
PHASES = ("setup", "call", "teardown")


def worse(first: str, second: str) -> str:
    """The worse of two outcomes (`OUTCOME_RANK`); the first when they rank the same."""
    return second if OUTCOME_RANK[second] > OUTCOME_RANK[first] else first


class ReportError(UsageError):
    """A report that cannot be used, naming its file (`source`) and the field at fault.

    `contradiction` is set when every field has the right type but two of them disagree (a runner label
    and the hardware recorded, a witnessed test and the outcomes): a failure found (exit 1), never a
    green cell. Otherwise the report is unreadable or malformed (exit 2).
    """

    def __init__(
        self,
        source: str,
        field: str,
        problem: str,
        *,
        contradiction: bool = False,
        unreadable: bool = False,
        refused: bool = False,
    ) -> None:
        self.source, self.field, self.problem = source, field, problem
        self.contradiction = contradiction or refused  # a refused run's report is a failure found too
        if unreadable:
            message = f"cannot read report {source}: {problem}"
        elif refused:
            message = f"report {source} is of a run refused before any test: {problem}"
        else:
            what = "contradicts itself" if contradiction else "is not a gpumatrix report"
            message = f"report {source} {what}: " + (f"{field}: {problem}" if field else problem)
        super().__init__(message)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 1 if self.contradiction else 2


@dataclass(frozen=True)
class Skip:
    """A skipped test: why, and whether this machine's hardware or a `disabled=` registration was why."""

    nodeid: str
    reason: str
    hardware: bool = False
    disabled: bool = False


@dataclass(frozen=True)
class Rerun:
    """A failed attempt of a test that then ran again (a file registered `flaky=` on the class it ran as):
    which attempt (1: the first run), the phase that failed, and the first line of what it said. The test's
    outcome in its file is that of its last attempt."""

    nodeid: str
    attempt: int
    when: str  # one of PHASES
    message: str = ""


@dataclass(frozen=True)
class FileResult:
    """One test file in one run: its tests by outcome, and the seconds they took beside its estimate."""

    passed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    skipped: tuple[Skip, ...] = ()
    duration: float = 0.0  # setup, call and teardown of its tests, added up (failed attempts too)
    est_time: float | None = None  # its registered estimate on the class it ran as; None: not registered
    reruns: tuple[Rerun, ...] = ()  # failed attempts of its tests that ran again, by test and attempt

    def ids(self, outcome: str) -> tuple[str, ...]:
        """The node ids of one outcome."""
        if outcome == "skipped":
            return tuple(skip.nodeid for skip in self.skipped)
        return getattr(self, outcome)

    @property
    def ran(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.errors)

    def rerun_counts(self) -> dict[str, int]:
        """{nodeid: how many times it ran again} of every test that did."""
        counts: dict[str, int] = {}
        for rerun in self.reruns:
            counts[rerun.nodeid] = counts.get(rerun.nodeid, 0) + 1
        return counts

    def passed_after_reruns(self) -> tuple[tuple[str, int], ...]:
        """(nodeid, reruns) of each test that passed only after running again: never a plain pass."""
        counts = self.rerun_counts()
        return tuple((nodeid, counts[nodeid]) for nodeid in self.passed if nodeid in counts)


@dataclass(frozen=True)
class PathRecord:
    """One code path a test recorded: how many times, and up to three distinct reasons."""

    count: int
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Witnessed:
    """The code paths one test recorded, with its file and outcome (those of `Report.files`)."""

    file: str
    outcome: str
    paths: Mapping[str, PathRecord]


@dataclass(frozen=True)
class Report:
    """One run's report. `problems` non-empty: the run was refused before any test (it ran nothing).

    `source` is where it was read from and `digest` a hash of what was read (the same report given
    twice has one digest); both are empty for a report built in memory.
    """

    hardware: Hardware
    runner: str | None
    files: Mapping[str, FileResult]
    witnessed: Mapping[str, Witnessed] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    deselected: int = 0
    finished: str = ""
    note: str = ""
    source: str = ""
    digest: str = ""
    repeat: int = 1  # each test ran this many times (pytest-repeat's --count; `gpumatrix run --repeat`)
    commit: str | None = None  # the commit checked out where it ran (`git rev-parse HEAD`); None: no git tree
    suite: str | None = None  # the suite it ran (`--suite`); None: every suite, or tests named explicitly
    format_version: int = FORMAT  # 1: written before commit and suite were recorded

    @property
    def provenance_known(self) -> bool:
        """Whether the report says its commit and suite (format 2 on): an older report's are unknown."""
        return self.format_version >= 2

    def provenance(self) -> str:
        """Its commit and suite in words (`commit 0123abcd, suite pr`), saying what is unknown."""
        if not self.provenance_known:
            return f"commit and suite unknown (a format-{self.format_version} report records neither)"
        commit = f"commit {self.commit[:12]}" if self.commit else "no commit (not run in a git tree)"
        return (
            f"{commit}, suite {self.suite}"
            if self.suite
            else f"{commit}, no suite (every suite or named tests)"
        )

    @property
    def ran(self) -> int:
        """How many tests ran (passed, failed or errored)."""
        return sum(result.ran for result in self.files.values())

    @property
    def only_disabled(self) -> bool:
        """Whether the report ran nothing and every test it lists was skipped as disabled (a run of disabled
        files, which passes saying so)."""
        skips = [skip for result in self.files.values() for skip in result.skipped]
        return not self.ran and bool(skips) and all(skip.disabled for skip in skips)

    def outcomes(self) -> dict[str, tuple[str, str, str]]:
        """{nodeid: (file, outcome, skip reason)} of every test."""
        found: dict[str, tuple[str, str, str]] = {}
        for file, result in self.files.items():
            for outcome in RAN:
                found.update((nodeid, (file, outcome, "")) for nodeid in result.ids(outcome))
            found.update((skip.nodeid, (file, "skipped", skip.reason)) for skip in result.skipped)
        return found

    def totals(self) -> dict[str, int]:
        """Tests by outcome, those that ran, hardware skips, and files deselected (the JSON's `totals`)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        hardware = 0
        for result in self.files.values():
            for outcome in OUTCOMES:
                counts[outcome] += len(result.ids(outcome))
            hardware += sum(skip.hardware for skip in result.skipped)
        ran = sum(counts[outcome] for outcome in RAN)
        return {"ran": ran, **counts, "hardware_skipped": hardware, "deselected": self.deselected}


def require_ran(report: Report) -> Report:
    """`report`, unless it is of a run refused before any test (it lists problems and ran nothing): then a
    `ReportError` (exit 1) naming it. What measures tests (estimate, flaky, --durations) has nothing to
    measure in such a report, and must not say it measured a run."""
    if report.problems:
        raise ReportError(report.source, "problems", "; ".join(report.problems), refused=True)
    return report


def distinct_reports(reports: Iterable[Report]) -> tuple[Report, ...]:
    """`reports` with each report given more than once kept once (by digest; one built in memory is
    always kept), in order."""
    seen: set[str] = set()
    kept = []
    for report in reports:
        if report.digest and report.digest in seen:
            continue
        seen.add(report.digest)
        kept.append(report)
    return tuple(kept)


def mixed_provenance(reports: Iterable[Report]) -> str | None:
    """Why `reports` are not of one commit and one suite (a sentence naming each group's reports), or None
    when they are. A report that does not record them (format 1) among others cannot be shown to match."""
    kept = distinct_reports(reports)
    if len(kept) < 2:
        return None
    groups: dict[str, list[str]] = {}
    for report in kept:
        groups.setdefault(report.provenance(), []).append(report.source or "a report")
    if len(groups) == 1 and all(report.provenance_known for report in kept):
        return None
    shown = "; ".join(
        f"{what}: {', '.join(sources[:3])}" + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
        for what, sources in groups.items()
    )
    return f"the reports are not of one commit and suite ({shown})"


def report_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def report_to_json(report: Report) -> dict[str, Any]:
    """The JSON of `report`, as the plugin writes it (`--gpumatrix-report`)."""
    files = {}
    for path, result in sorted(report.files.items()):
        ran = sorted(result.passed + result.failed + result.errors)
        files[path] = {
            "ran": ran,
            "passed": list(result.passed),
            "failed": list(result.failed),
            "errors": list(result.errors),
            "skipped": [_skip_json(skip) for skip in result.skipped],
            "duration": result.duration,
            "est_time": result.est_time,
        }
        if result.reruns:  # present only when a test ran again: other files read as they always did
            files[path]["reruns"] = [
                {"nodeid": r.nodeid, "attempt": r.attempt, "when": r.when, "message": r.message}
                for r in result.reruns
            ]
    document: dict[str, Any] = {
        "format": FORMAT,
        "hardware": report.hardware.to_dict(),
        "runner": report.runner,
        "commit": report.commit,
        "suite": report.suite,
        "finished": report.finished,
        "problems": list(report.problems),
        "files": files,
        "totals": report.totals(),
        "witnessed": {
            nodeid: {
                "file": entry.file,
                "outcome": entry.outcome,
                "paths": {
                    name: {"count": record.count, "reasons": list(record.reasons)}
                    for name, record in sorted(entry.paths.items())
                },
            }
            for nodeid, entry in sorted(report.witnessed.items())
        },
    }
    if report.note:
        document["note"] = report.note
    if report.repeat > 1:
        document["repeat"] = report.repeat
    return document


def _skip_json(skip: Skip) -> dict[str, Any]:
    data: dict[str, Any] = {"nodeid": skip.nodeid, "reason": skip.reason, "hardware": skip.hardware}
    if skip.disabled:
        data["disabled"] = True  # present only when true: other skips read as they always did
    return data


def dump_report(report: Report) -> str:
    """The report file's text."""
    return json.dumps(report_to_json(report), indent=2) + "\n"
