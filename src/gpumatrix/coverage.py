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
a recorded path that ci/paths.yaml does not declare. Reports are read as untrusted data (they come
from a run of the code under test): one that is not the expected shape is a `UsageError` naming the
file, never a silent zero. `merge_reports` is pure; `read_report` does the reading.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumatrix import UsageError
from gpumatrix.config import Matrix
from gpumatrix.paths import PathCatalog
from gpumatrix.registry import Registration

__all__ = [
    "CELL_STATES",
    "ClassColumn",
    "Coverage",
    "FileCell",
    "PathCell",
    "RunnerColumn",
    "RunnerReport",
    "merge_reports",
    "parse_report",
    "read_report",
]

#: Every state a path cell can have, with what it means (the page and the Markdown show these words).
CELL_STATES: dict[str, str] = {
    "passed": "exercised by a passing test",
    "failing": "exercised only by failing tests",
    "missing": "required here, not exercised",
    "not_required": "not required here",
    "not_reported": "no report from this class",
}
_OUTCOMES = ("passed", "failed", "errors")
_RANK = {"skipped": 0, "passed": 1, "errors": 2, "failed": 3}
_MAX_REPORT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RunnerReport:
    """One report, as read: where it ran, and per test what came of it."""

    source: str
    runner: str | None  # the --runner label the run was given, if any
    gpu_class: str
    gpus: int
    machine: str
    hardware_source: str
    outcomes: Mapping[str, tuple[str, str, str]]  # nodeid: (file, outcome, skip reason)
    durations: Mapping[str, float]  # file: measured seconds
    est_times: Mapping[str, float]  # file: registered est_time, as the run saw it
    witnessed: Mapping[str, tuple[str, str, tuple[str, ...]]]  # nodeid: (file, outcome, paths)
    note: str = ""


@dataclass(frozen=True)
class FileCell:
    """One test file on one runner."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: tuple[tuple[str, str], ...] = ()  # (nodeid, reason)
    duration: float | None = None

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors

    @property
    def state(self) -> str:
        if self.failed or self.errors:
            return "failed"
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
    notes: tuple[str, ...] = ()  # a faked machine, a constructed report


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

    @property
    def exit_code(self) -> int:
        return 1 if self.missing or self.undeclared else 0

    def problems(self) -> list[str]:
        """A sentence per failure, naming the path and the class (or the test)."""
        found = []
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


def read_report(path: Path) -> RunnerReport:
    """Read one JSON report; a `UsageError` naming the file when it cannot be read or is not a report."""
    try:
        with path.open("rb") as stream:
            data = stream.read(_MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read report {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_REPORT_BYTES:
        raise UsageError(
            f"report {path} is larger than {_MAX_REPORT_BYTES >> 20} MiB: not a gpumatrix report"
        )
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise UsageError(f"report {path} is not JSON: {exc}") from None
    return parse_report(document, source=str(path))


def parse_report(document: Any, *, source: str) -> RunnerReport:
    """A report from its JSON value (`RunReport.to_json`); a `UsageError` naming what is wrong."""

    def bad(what: str) -> UsageError:
        return UsageError(f"report {source} is not a gpumatrix report: {what}")

    if not isinstance(document, dict):
        raise bad("the top level is not an object")
    hardware, files = document.get("hardware"), document.get("files")
    if not isinstance(hardware, dict) or not isinstance(hardware.get("gpu_class"), str):
        raise bad("'hardware.gpu_class' is missing")
    count = hardware.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise bad("'hardware.count' is not a count of GPUs")
    if not isinstance(files, dict):
        raise bad("'files' is not an object")
    runner = document.get("runner")
    if runner is not None and not isinstance(runner, str):
        raise bad("'runner' is not a label")
    outcomes: dict[str, tuple[str, str, str]] = {}
    durations: dict[str, float] = {}
    est_times: dict[str, float] = {}
    for file, entry in files.items():
        if not isinstance(entry, dict):
            raise bad(f"files[{file!r}] is not an object")
        for kind in _OUTCOMES:
            ids = entry.get(kind, [])
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise bad(f"files[{file!r}].{kind} is not a list of node ids")
            outcomes.update((nodeid, (file, kind, "")) for nodeid in ids)
        skipped = entry.get("skipped", [])
        if not isinstance(skipped, list) or not all(
            isinstance(s, dict) and isinstance(s.get("nodeid"), str) for s in skipped
        ):
            raise bad(f"files[{file!r}].skipped is not a list of skipped tests")
        outcomes.update((s["nodeid"], (file, "skipped", str(s.get("reason", "")))) for s in skipped)
        for key, into in (("duration", durations), ("est_time", est_times)):
            value = entry.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                into[file] = float(value)
    witnessed: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    found = document.get("witnessed", {})
    if not isinstance(found, dict):
        raise bad("'witnessed' is not an object")
    for nodeid, entry in found.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("paths"), dict):
            raise bad(f"witnessed[{nodeid!r}] has no 'paths' object")
        file = entry.get("file") if isinstance(entry.get("file"), str) else nodeid.split("::", 1)[0]
        outcome = entry.get("outcome") if entry.get("outcome") in _RANK else "errors"
        witnessed[nodeid] = (file, outcome, tuple(str(p) for p in entry["paths"]))
    note = document.get("note")
    return RunnerReport(
        source=source,
        runner=runner,
        gpu_class=hardware["gpu_class"],
        gpus=count,
        machine=str(hardware.get("description") or hardware["gpu_class"]),
        hardware_source=str(hardware.get("source", "")),
        outcomes=outcomes,
        durations=durations,
        est_times=est_times,
        witnessed=witnessed,
        note=note if isinstance(note, str) else "",
    )


def _runner_label(report: RunnerReport, matrix: Matrix) -> str:
    """The report's --runner label; without one (a plain pytest run), the runner its machine is."""
    if report.runner:
        return report.runner
    same = [r for r in matrix.runners if r.gpu_class == report.gpu_class and r.gpus == report.gpus]
    return same[0].label if same else f"{report.gpus} x {report.gpu_class}"


def merge_reports(
    reports: Sequence[RunnerReport],
    matrix: Matrix,
    catalog: PathCatalog,
    *,
    registrations: Sequence[Registration] = (),
) -> Coverage:
    """Merge runner reports into the path x class and runner x file matrices.

    A test seen twice on one runner (a report given twice, the same test from two xdist workers or
    shards) counts once, with the worse of its outcomes.
    """
    unknown = sorted(
        {f"{r.source} (class {r.gpu_class!r})" for r in reports if r.gpu_class not in matrix.classes}
    )
    if unknown:
        raise UsageError(
            f"report(s) from a class that {matrix.source} does not define: {', '.join(unknown)}; "
            f"its classes are {', '.join(matrix.classes)}"
        )
    by_runner: dict[str, list[RunnerReport]] = {}
    for report in reports:
        by_runner.setdefault(_runner_label(report, matrix), []).append(report)

    # nodeid outcomes per runner, the worst of duplicates
    tests: dict[str, dict[str, tuple[str, str, str]]] = {}
    for label, group in by_runner.items():
        merged: dict[str, tuple[str, str, str]] = {}
        for report in group:
            for nodeid, outcome in report.outcomes.items():
                if nodeid not in merged or _RANK[outcome[1]] > _RANK[merged[nodeid][1]]:
                    merged[nodeid] = outcome
        tests[label] = merged

    runners = _runner_columns(matrix, by_runner, tests)
    class_of = {column.label: column.gpu_class for column in runners}
    classes = tuple(
        ClassColumn(
            name,
            ran=any(sum(c.totals.get(k, 0) for k in _OUTCOMES) for c in runners if c.gpu_class == name),
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
            for nodeid, (_, outcome, paths) in report.witnessed.items():
                final = tests[label].get(nodeid, ("", outcome, ""))[1]
                for path in paths:
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
    for report in reports:  # what each run registered, as its class saw it, unless the tree says now
        est_times.update(report.est_times)
        class_estimates.update(((file, report.gpu_class), est) for file, est in report.est_times.items())
    est_times.update({r.path: r.est_time for r in registrations})
    class_estimates.update(((r.path, name), r.estimate_for(name)) for r in registrations for name in r.on)
    served = {(r.path, label): True for r in registrations for label in r.runners}
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
    )


def _runner_columns(
    matrix: Matrix, by_runner: Mapping[str, list[RunnerReport]], tests: Mapping[str, Mapping[str, tuple]]
) -> tuple[RunnerColumn, ...]:
    labels = [r.label for r in matrix.runners] + sorted(set(by_runner) - {r.label for r in matrix.runners})
    columns = []
    for label in labels:
        group = by_runner.get(label, [])
        runner = matrix.runner(label)
        gpu_class = runner.gpu_class if runner is not None else group[0].gpu_class
        totals = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
        for _, kind, _ in tests.get(label, {}).values():
            totals[kind] += 1
        notes = [f"{r.source}: {r.note}" for r in group if r.note]
        notes += [
            f"{r.source}: hardware from the GPUMATRIX_HARDWARE override, not probed"
            for r in group
            if r.hardware_source == "override"
        ]
        notes += [
            f"{r.source}: a {r.gpu_class} machine reported as runner {label} of class {gpu_class}"
            for r in group
            if r.gpu_class != gpu_class
        ]
        columns.append(
            RunnerColumn(
                label=label,
                gpu_class=gpu_class,
                reported=bool(group),
                machines=tuple(dict.fromkeys(r.machine for r in group)),
                reports=len(group),
                totals=totals,
                notes=tuple(notes),
            )
        )
    return tuple(columns)


def _file_cells(
    by_runner: Mapping[str, list[RunnerReport]], tests: Mapping[str, Mapping[str, tuple[str, str, str]]]
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
    for label, group in by_runner.items():
        for report in group:  # a file in two reports of one runner (a report given twice): the longer
            for file, seconds in report.durations.items():
                durations[(file, label)] = max(seconds, durations.get((file, label), 0.0))
    return {
        key: FileCell(
            passed=entry["passed"],
            failed=entry["failed"],
            errors=entry["errors"],
            skipped=tuple(entry["skipped"]),
            duration=durations.get(key),
        )
        for key, entry in counts.items()
    }


def load_coverage(root: Path, report_paths: Sequence[Path], *, require_paths: bool = True) -> Coverage:
    """Read the tree's matrix, path declarations and registry, and merge the reports at `report_paths`.

    Without ci/paths.yaml the path matrix is empty when `require_paths` is false (a run's own page in
    a tree that declares no paths); otherwise that is a `UsageError`.
    """
    from gpumatrix.config import load_matrix
    from gpumatrix.paths import PATHS_FILE, load_paths
    from gpumatrix.registry import discover

    matrix = load_matrix(root / "ci" / "matrix.yaml")
    paths_file = root / PATHS_FILE
    if paths_file.is_file():
        catalog = load_paths(paths_file, matrix)
    elif require_paths:
        raise UsageError(f"{paths_file} does not exist: declare the code paths coverage checks there")
    else:
        catalog = PathCatalog(paths={})
    reports = [read_report(path) for path in report_paths]
    # Registration problems are `gpumatrix check`'s to report; the valid files still name their runners.
    return merge_reports(reports, matrix, catalog, registrations=discover(root, matrix).files)
