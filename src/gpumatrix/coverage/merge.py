"""`gpumatrix coverage`: the JSON reports of many runners merged into a path x class matrix.

Each report (`--gpumatrix-report`, what `gpumatrix run` writes) says which runner and machine it
came from, every test's outcome by file, each file's measured seconds, and the code paths each test
recorded. Merged, a (path, GPU class) cell is one of

- `passed`: some passing test on a runner of that class exercised the path;
- `failing`: only failing (or erroring) tests exercised it;
- `missing`: ci/paths.yaml requires it there, the class ran, and no test exercised it;
- `not_required`: not required there and not exercised;
- `not_reported`: no report of that class ran a test: never green, whatever is required.

A required path that no passing test exercised on a class that ran fails the merge (exit 1), as does
a recorded path that ci/paths.yaml does not declare, and a report that counts for nothing: one that
contradicts itself, or one of a run refused before any test. Reports are read through
`gpumatrix.report` (untrusted data: they come from a run of the code under test); one that cannot be
read or is malformed is a `ReportError` (exit 2) naming the file and field. `merge_reports` is pure;
`load_coverage` does the reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpumatrix import GpumatrixError, UsageError
from gpumatrix.config import Matrix
from gpumatrix.coverage.paths import PathCatalog
from gpumatrix.registry.model import Registration
from gpumatrix.report import (
    OUTCOME_RANK,
    OUTCOMES,
    RAN,
    Report,
    ReportError,
    distinct_reports,
    mixed_provenance,
)

__all__ = [
    "CELL_STATES",
    "ClassColumn",
    "Coverage",
    "FileCell",
    "MixedReportsError",
    "PathCell",
    "RunnerColumn",
    "load_coverage",
    "merge_reports",
    "runner_label",
]

#: Every state a path cell can have, with what it means (the page and the Markdown show these words).
CELL_STATES: dict[str, str] = {
    "passed": "exercised by a passing test",
    "failing": "exercised only by failing tests",
    "missing": "required here, not exercised",
    "not_required": "not required here",
    "not_reported": "no report from this class",
}


@dataclass(frozen=True)
class FileCell:
    """One test file on one runner."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: tuple[tuple[str, str], ...] = ()  # (nodeid, reason)
    duration: float | None = None
    after_reruns: tuple[tuple[str, int], ...] = ()  # (nodeid, reruns) of passed tests that first failed

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors

    @property
    def state(self) -> str:
        """failed, flaky (nothing failed, but some test passed only after running again), passed, ..."""
        if self.failed or self.errors:
            return "failed"
        if self.after_reruns:
            return "flaky"
        return "passed" if self.passed else "skipped" if self.skipped else "empty"


@dataclass(frozen=True)
class PathCell:
    state: str  # a key of CELL_STATES
    required: bool
    passing: tuple[str, ...] = ()  # "runner: nodeid" of the passing tests that exercised it
    failing: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunnerColumn:
    label: str
    gpu_class: str
    reported: bool
    machines: tuple[str, ...] = ()
    reports: int = 0
    totals: Mapping[str, int] = field(default_factory=dict)  # passed, failed, errors, skipped
    notes: tuple[str, ...] = ()  # a faked machine, a report's note, a refused run


@dataclass(frozen=True)
class ClassColumn:
    name: str
    ran: bool  # some report of this class executed a test
    runners: tuple[str, ...]  # runners of this class that reported
    silent: tuple[str, ...] = ()  # runners of this class that did not


@dataclass(frozen=True)
class Coverage:
    """The merged matrices, and what fails them."""

    classes: tuple[ClassColumn, ...]
    paths: tuple[str, ...]
    path_cells: Mapping[tuple[str, str], PathCell]  # (path, class)
    runners: tuple[RunnerColumn, ...]
    files: tuple[str, ...]
    file_cells: Mapping[tuple[str, str], FileCell]  # (file, runner label); absent: no result there
    served: Mapping[tuple[str, str], bool]  # (file, runner label): registered for that runner
    est_times: Mapping[str, float]  # file: its registered est_time
    class_estimates: Mapping[tuple[str, str], float]  # (file, class): its estimate on that class
    missing: tuple[tuple[str, str], ...]  # (path, class): required, the class ran, no passing test
    undeclared: tuple[tuple[str, str, str], ...]  # (path, runner, nodeid)
    descriptions: Mapping[str, str]
    # Reports that count for nothing, each a failure: one that contradicts itself, a run refused before
    # any test. A sentence each, naming the report.
    rejected: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return 1 if self.missing or self.undeclared or self.rejected else 0

    def failed(self, *, warn_only: bool = False) -> bool:
        """Whether the merge fails; `warn_only` lets required paths go missing (a partial run), nothing else."""
        return bool(self.undeclared or self.rejected or (self.missing and not warn_only))

    def problems(self) -> list[str]:
        """A sentence per failure, naming the report, or the path and the class (or the test)."""
        found = list(self.rejected)
        for path, class_name in self.missing:
            cell = self.path_cells[(path, class_name)]
            how = (
                f"only failing tests exercised it ({', '.join(cell.failing[:3])})"
                if cell.failing
                else "no test exercised it"
            )
            found.append(f"path {path} is required on {class_name}, which ran, and {how}")
        found += [
            f"{nodeid} on {runner} recorded path {path}, which ci/paths.yaml does not declare"
            for path, runner, nodeid in self.undeclared
        ]
        return found


def runner_label(report: Report, matrix: Matrix) -> str:
    """The report's --runner label; without one (a plain pytest run), the runner its machine is."""
    if report.runner:
        return report.runner
    hardware = report.hardware
    same = [r for r in matrix.runners if (r.gpu_class, r.gpus) == (hardware.gpu_class, hardware.count)]
    return same[0].label if same else f"{hardware.count} x {hardware.gpu_class}"


class MixedReportsError(GpumatrixError):
    """Reports of different commits or suites given to one merge without `--allow-mixed` (exit 1)."""


def merge_reports(
    reports: Sequence[Report],
    matrix: Matrix,
    catalog: PathCatalog,
    *,
    registrations: Sequence[Registration] | None = None,
    rejected: Sequence[str] = (),
    allow_mixed: bool = False,
) -> Coverage:
    """Merge runner reports (read against `matrix`) into the path x class and runner x file matrices.

    A report given twice counts once; a test seen twice on one runner (the same test from two xdist
    workers or shards) counts once, with the worse of its outcomes. A report of a refused run adds its
    problems to `rejected` (sentences naming reports that count for nothing) and nothing else; so does a
    report that ran no test (unless every test it lists was skipped as disabled: a run of disabled files),
    and a merge in which no report ran a test fails. Given the tree's `registrations`, the tests of a file
    not registered for a report's runner count for nothing there, and each such file is a failure. Reports
    of different commits or suites raise `MixedReportsError` naming them, unless `allow_mixed`.
    """
    kept = distinct_reports(reports)
    mixed = mixed_provenance(kept)
    if mixed is not None and not allow_mixed:
        raise MixedReportsError(f"{mixed}: merge them with --allow-mixed, or give the reports of one run")
    served_labels = (
        None if registrations is None else {(r.path, label) for r in registrations for label in r.runners}
    )
    by_runner: dict[str, list[Report]] = {}
    refused: dict[str, list[str]] = {}
    failures = list(rejected)
    for report in kept:
        label = runner_label(report, matrix)
        if report.problems:
            said = f"report {report.source}: runner {label} refused to run: {'; '.join(report.problems)}"
            failures.append(said)
            refused.setdefault(label, []).append(said)
            continue
        if not report.ran and not report.only_disabled:
            failures.append(
                f"report {report.source}: runner {label} ran zero tests: a report that ran nothing makes "
                "no path green"
            )
        if served_labels is not None:
            report, strays = _registered_only(report, label, served_labels)
            failures += strays
        by_runner.setdefault(label, []).append(report)
    if kept and not any(report.ran for group in by_runner.values() for report in group):
        failures.append(f"none of the {len(kept)} report(s) ran a test: nothing was exercised anywhere")

    # nodeid outcomes per runner, the worst of duplicates
    tests: dict[str, dict[str, tuple[str, str, str]]] = {}
    for label, group in by_runner.items():
        merged: dict[str, tuple[str, str, str]] = {}
        for report in group:
            for nodeid, outcome in report.outcomes().items():
                if nodeid not in merged or OUTCOME_RANK[outcome[1]] > OUTCOME_RANK[merged[nodeid][1]]:
                    merged[nodeid] = outcome
        tests[label] = merged

    runners = _runner_columns(matrix, by_runner, tests, refused)
    class_of = {column.label: column.gpu_class for column in runners}
    classes = tuple(
        ClassColumn(
            name,
            ran=any(sum(c.totals.get(k, 0) for k in RAN) for c in runners if c.gpu_class == name),
            runners=tuple(c.label for c in runners if c.gpu_class == name and c.reported),
            silent=tuple(c.label for c in runners if c.gpu_class == name and not c.reported),
        )
        for name in matrix.classes
    )
    ran = {column.name for column in classes if column.ran}

    exercised: dict[tuple[str, str], tuple[set[str], set[str]]] = {}  # (path, class): (passing, failing)
    undeclared: set[tuple[str, str, str]] = set()
    for label, group in by_runner.items():
        for report in group:
            for nodeid, entry in report.witnessed.items():
                final = tests[label][nodeid][1]  # the reader saw to it that every witnessed test has one
                for path in entry.paths:
                    if not catalog.declares(path):
                        undeclared.add((path, label, nodeid))
                    passing, failing = exercised.setdefault((path, class_of[label]), (set(), set()))
                    if final == "passed":
                        passing.add(f"{label}: {nodeid}")
                    elif final in ("failed", "errors"):
                        failing.add(f"{label}: {nodeid}")

    path_names = tuple(catalog.paths) + tuple(sorted({p for p, _, _ in undeclared} - set(catalog.paths)))
    cells: dict[tuple[str, str], PathCell] = {}
    missing: list[tuple[str, str]] = []
    for path in path_names:
        for column in classes:
            required = catalog.required(path, column.name)
            passing, failing = exercised.get((path, column.name), (set(), set()))
            if column.name not in ran:
                state = "not_reported"
            elif passing:
                state = "passed"
            elif failing:
                state = "failing"
            else:
                state = "missing" if required else "not_required"
            cells[(path, column.name)] = PathCell(
                state, required, tuple(sorted(passing)), tuple(sorted(failing))
            )
            if required and column.name in ran and not passing:
                missing.append((path, column.name))

    file_cells = _file_cells(by_runner, tests)
    est_times: dict[str, float] = {}
    class_estimates: dict[tuple[str, str], float] = {}
    for (
        group
    ) in by_runner.values():  # what each run registered, as its class saw it, unless the tree says now
        for report in group:
            registered = {f: r.est_time for f, r in report.files.items() if r.est_time is not None}
            est_times.update(registered)
            class_estimates.update(((f, report.hardware.gpu_class), est) for f, est in registered.items())
    registered = registrations or ()
    est_times.update({r.path: r.est_time for r in registered})
    class_estimates.update(((r.path, name), r.estimate_for(name)) for r in registered for name in r.on)
    served = {(r.path, label): True for r in registered for label in r.runners}
    files = tuple(sorted({f for f, _ in file_cells} | {f for f, _ in served}))
    return Coverage(
        classes=classes,
        paths=path_names,
        path_cells=cells,
        runners=runners,
        files=files,
        file_cells=file_cells,
        served=served,
        est_times=est_times,
        class_estimates=class_estimates,
        missing=tuple(missing),
        undeclared=tuple(sorted(undeclared)),
        descriptions={name: d.description for name, d in catalog.paths.items()},
        rejected=tuple(failures),
    )


def _registered_only(report: Report, label: str, served: set[tuple[str, str]]) -> tuple[Report, list[str]]:
    """`report` without the files not registered for runner `label` (their tests, witnessed or not), and
    a sentence for each such file that had a test: a pass there is not this runner's to count."""
    strays = [path for path in report.files if (path, label) not in served]
    if not strays:
        return report, []
    said = [
        f"report {report.source}: {result.ran} test(s) of {path} ran on runner {label}, which it is not "
        f"registered for: they count for nothing"
        for path, result in sorted(report.files.items())
        if path in strays and result.ran
    ]
    files = {path: result for path, result in report.files.items() if path not in strays}
    witnessed = {nodeid: entry for nodeid, entry in report.witnessed.items() if entry.file not in strays}
    return replace(report, files=MappingProxyType(files), witnessed=MappingProxyType(witnessed)), said


def _runner_columns(
    matrix: Matrix,
    by_runner: Mapping[str, list[Report]],
    tests: Mapping[str, Mapping[str, tuple]],
    refused: Mapping[str, list[str]],
) -> tuple[RunnerColumn, ...]:
    labels = [r.label for r in matrix.runners] + sorted(set(by_runner) - {r.label for r in matrix.runners})
    columns = []
    for label in labels:
        group = by_runner.get(label, [])
        runner = matrix.runner(label)
        gpu_class = runner.gpu_class if runner is not None else group[0].hardware.gpu_class
        totals = dict.fromkeys(OUTCOMES, 0)
        for _, kind, _ in tests.get(label, {}).values():
            totals[kind] += 1
        notes = [f"{r.source}: {r.note}" for r in group if r.note]
        notes += [
            f"{r.source}: hardware from the GPUMATRIX_HARDWARE override, not probed"
            for r in group
            if r.hardware.source == "override"
        ]
        notes += [f"{r.source}: {r.provenance()}" for r in group if not r.provenance_known]
        notes += refused.get(label, [])
        columns.append(
            RunnerColumn(
                label=label,
                gpu_class=gpu_class,
                reported=bool(group),
                machines=tuple(dict.fromkeys(r.hardware.describe() for r in group)),
                reports=len(group),
                totals=totals,
                notes=tuple(notes),
            )
        )
    return tuple(columns)


def _file_cells(
    by_runner: Mapping[str, list[Report]], tests: Mapping[str, Mapping[str, tuple[str, str, str]]]
) -> dict[tuple[str, str], FileCell]:
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    for label, merged in tests.items():
        for nodeid, (file, kind, reason) in sorted(merged.items()):
            entry = counts.setdefault((file, label), {"passed": 0, "failed": 0, "errors": 0, "skipped": []})
            if kind == "skipped":
                entry["skipped"].append((nodeid, reason))
            else:
                entry[kind] += 1
    durations: dict[tuple[str, str], float] = {}
    after: dict[tuple[str, str], dict[str, int]] = {}  # passed only after reruns, where that is the outcome
    for label, group in by_runner.items():
        for report in group:  # a file in two reports of one runner (two runs given together): the longer
            for file, result in report.files.items():
                durations[(file, label)] = max(result.duration, durations.get((file, label), 0.0))
                for nodeid, reruns in result.passed_after_reruns():
                    if tests[label][nodeid][1] == "passed":
                        found = after.setdefault((file, label), {})
                        found[nodeid] = max(reruns, found.get(nodeid, 0))
    return {
        key: FileCell(
            passed=entry["passed"],
            failed=entry["failed"],
            errors=entry["errors"],
            skipped=tuple(entry["skipped"]),
            duration=durations.get(key),
            after_reruns=tuple(sorted(after.get(key, {}).items())),
        )
        for key, entry in counts.items()
    }


def load_coverage(
    root: Path, report_paths: Sequence[Path], *, require_paths: bool = True, allow_mixed: bool = False
) -> Coverage:
    """Read the tree's matrix, path declarations and registry, and merge the reports at `report_paths`
    (`merge_reports`: of one commit and suite unless `allow_mixed`).

    Without ci/paths.yaml the path matrix is empty when `require_paths` is false (a run's own page in
    a tree that declares no paths); otherwise that is a `UsageError`.
    """
    from gpumatrix.config import load_matrix
    from gpumatrix.coverage.paths import PATHS_FILE, load_paths
    from gpumatrix.registry.discovery import discover
    from gpumatrix.report import read_report

    matrix = load_matrix(root / "ci" / "matrix.yaml")
    paths_file = root / PATHS_FILE
    if paths_file.is_file():
        catalog = load_paths(paths_file, matrix)
    elif require_paths:
        raise UsageError(f"{paths_file} does not exist: declare the code paths coverage checks there")
    else:
        catalog = PathCatalog(paths={})
    reports, rejected = [], []
    for path in report_paths:
        try:
            reports.append(read_report(path, matrix))
        except ReportError as exc:
            if not exc.contradiction:
                raise
            rejected.append(str(exc))
    # Registration problems are `gpumatrix check`'s to report; the valid files still name their runners.
    registrations = discover(root, matrix).files
    return merge_reports(
        reports, matrix, catalog, registrations=registrations, rejected=rejected, allow_mixed=allow_mixed
    )
