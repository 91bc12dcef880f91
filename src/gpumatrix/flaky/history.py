"""`gpumatrix flaky REPORT...`: pass rates per test and GPU class over many JSON reports (nightly history).

Every run of a test is one trial: each repetition of a repeated run (`--repeat N`, the node ids pytest-repeat
numbers), and each attempt of a test that ran again after a failure (a failed attempt is a failed run, the
last attempt is the run's outcome). So a test that passed after 2 reruns counts 1 pass in 3 runs, never a
clean pass. A skipped test did not run. A test's class is the class it ran as (`gating.running_class`: a
CPU test on a GPU machine ran as `cpu`), the class its `flaky=` registration is looked up by.

Three lists come out, each with the 95% Wilson interval of the pass rate (`gpumatrix.flaky.stats`):
- `tests`: every test with a failed run, the flakiest (lowest pass rate) first;
- `unregistered`: those of them whose file is not registered `flaky=` on that class: nothing reruns them,
  and each failure failed a run;
- `steady`: files registered `flaky=` on a class where every run of every test passed in the reports:
  candidates to drop `flaky=` there.
Reports are read through `gpumatrix.report` (a report given twice counts once). Pure, except `load_history`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumatrix.config import Matrix
from gpumatrix.flaky.stats import PassRate, repeated_test
from gpumatrix.registry.model import Registration
from gpumatrix.registry.resolution import running_class
from gpumatrix.report import RAN, Report, distinct_reports

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "SteadyFile",
    "FlakyHistory",
    "PassRecord",
    "flaky_history",
    "history_json",
    "load_history",
    "render_history",
    "render_pass_rates",
    "report_tallies",
]


@dataclass(frozen=True)
class PassRecord:
    """One test on one GPU class over the reports: its runs, how many passed only after reruns, how many
    reports it ran in, and why its file may run again there (None: not registered flaky there)."""

    test: str  # the node id, without a repeated run's `[i-N]`
    file: str
    gpu_class: str
    rate: PassRate
    reports: int
    after_reruns: int = 0
    flaky: str | None = None


@dataclass(frozen=True)
class SteadyFile:
    """A file registered flaky on a class, and every run of its tests there."""

    file: str
    gpu_class: str
    reason: str
    rate: PassRate
    reports: int


@dataclass(frozen=True)
class FlakyHistory:
    reports: int
    tests: tuple[
        PassRecord, ...
    ]  # every test with a failed run (every test, with `every_test`), flakiest first
    unregistered: tuple[PassRecord, ...]  # failed somewhere its file is not registered flaky
    steady: tuple[SteadyFile, ...]  # registered flaky there, every run passed: candidates to drop flaky=


@dataclass
class _Tally:
    file: str
    passed: int = 0
    runs: int = 0
    after_reruns: int = 0
    reports: int = 0


def report_tallies(report: Report) -> dict[str, tuple[str, int, int, int]]:
    """{test: (file, passed, runs, passed after reruns)} of one report, every run a trial (module docstring)."""
    found: dict[str, _Tally] = {}
    for file, result in report.files.items():
        reruns = result.rerun_counts()
        for outcome in RAN:
            for nodeid in result.ids(outcome):
                test, _ = repeated_test(nodeid, report.repeat)
                tally = found.setdefault(test, _Tally(file))
                again = reruns.get(nodeid, 0)
                tally.runs += 1 + again
                tally.passed += outcome == "passed"
                tally.after_reruns += outcome == "passed" and again > 0
    return {test: (t.file, t.passed, t.runs, t.after_reruns) for test, t in found.items()}


def flaky_history(
    reports: Sequence[Report],
    registrations: Iterable[Registration],
    matrix: Matrix,
    *,
    every_test: bool = False,
) -> FlakyHistory:
    """The history of `reports` against the tree's registrations; `every_test` lists tests that never failed
    too (a repeated run's own table)."""
    by_path = {registration.path: registration for registration in registrations}
    tallies: dict[tuple[str, str], _Tally] = {}
    kept = [report for report in distinct_reports(reports) if not report.problems]
    for report in kept:
        runner = matrix.runner(report.runner) if report.runner else None
        for test, (file, passed, runs, after) in report_tallies(report).items():
            registration = by_path.get(file)
            ran_as = (
                running_class(registration, report.hardware, runner) if registration else None
            ) or report.hardware.gpu_class
            tally = tallies.setdefault((test, ran_as), _Tally(file))
            tally.passed, tally.runs, tally.after_reruns = (
                tally.passed + passed,
                tally.runs + runs,
                tally.after_reruns + after,
            )
            tally.reports += 1
    rates = [
        PassRecord(
            test,
            tally.file,
            gpu_class,
            PassRate(tally.passed, tally.runs),
            tally.reports,
            tally.after_reruns,
            by_path[tally.file].why_flaky(gpu_class) if tally.file in by_path else None,
        )
        for (test, gpu_class), tally in tallies.items()
    ]
    rates.sort(key=lambda r: (r.rate.rate, -r.rate.runs, r.test, r.gpu_class))
    failing = tuple(r for r in rates if r.rate.failed)
    return FlakyHistory(
        reports=len(kept),
        tests=tuple(rates) if every_test else failing,
        unregistered=tuple(r for r in failing if r.flaky is None),
        steady=_steady(rates, by_path),
    )


def _steady(rates: Sequence[PassRecord], by_path: Mapping[str, Registration]) -> tuple[SteadyFile, ...]:
    runs: dict[tuple[str, str], list[PassRecord]] = {}
    for rate in rates:
        registration = by_path.get(rate.file)
        if registration is not None and registration.why_flaky(rate.gpu_class) is not None:
            runs.setdefault((rate.file, rate.gpu_class), []).append(rate)
    records = []
    for (file, gpu_class), found in sorted(runs.items()):
        passed, total = sum(r.rate.passed for r in found), sum(r.rate.runs for r in found)
        if passed == total:
            reason = dict(by_path[file].flaky)[gpu_class]
            records.append(
                SteadyFile(file, gpu_class, reason, PassRate(passed, total), max(r.reports for r in found))
            )
    return tuple(records)


def load_history(root: Path, report_paths: Sequence[Path], *, every_test: bool = False) -> FlakyHistory:
    """Read the tree's matrix and registry and the reports at `report_paths` (a `ReportError` naming the
    first that cannot be used: a report that contradicts itself or is of a refused run is a failure, exit 1,
    never a pass rate)."""
    from gpumatrix.registry.discovery import load_tree
    from gpumatrix.report import read_report, require_ran

    matrix, registry = load_tree(root)
    reports = [require_ran(read_report(path, matrix)) for path in report_paths]  # a refused run: exit 1
    return flaky_history(reports, registry.files, matrix, every_test=every_test)


def _rate_json(rate: PassRecord) -> dict[str, Any]:
    interval = rate.rate.interval
    return {
        "test": rate.test,
        "file": rate.file,
        "class": rate.gpu_class,
        "passed": rate.rate.passed,
        "runs": rate.rate.runs,
        "interval": [round(interval.low, 4), round(interval.high, 4)],
        "reports": rate.reports,
        "passed_after_reruns": rate.after_reruns,
        "flaky": rate.flaky,
    }


def history_json(history: FlakyHistory) -> dict[str, Any]:
    """The `gpumatrix flaky --json` document."""
    return {
        "reports": history.reports,
        "tests": [_rate_json(rate) for rate in history.tests],
        "unregistered_failures": [_rate_json(rate) for rate in history.unregistered],
        "drop_flaky_candidates": [
            {
                "file": record.file,
                "class": record.gpu_class,
                "reason": record.reason,
                "runs": record.rate.runs,
                "reports": record.reports,
                "interval": [round(record.rate.interval.low, 4), round(record.rate.interval.high, 4)],
            }
            for record in history.steady
        ],
    }


def render_pass_rates(console: Console, rates: Sequence[PassRecord], *, title: str) -> None:
    """One row per test and class: passes of runs, the 95% interval, reports, passes after reruns."""
    from rich.table import Table

    from gpumatrix.escape import terminal

    table = Table(title=terminal(title))
    for column in ("test", "class", "passed", "95% interval", "reports", "after reruns", "flaky= here"):
        table.add_column(
            column, justify="right" if column in ("passed", "reports", "after reruns") else "left"
        )
    for rate in rates:  # node ids and reasons come from reports and files: text, not markup
        colour = "red" if not rate.rate.passed else "yellow" if rate.rate.failed else "green"
        table.add_row(
            terminal(rate.test),
            terminal(rate.gpu_class),
            f"[{colour}]{rate.rate.passed}/{rate.rate.runs}[/{colour}]",
            rate.rate.interval.percent(),
            str(rate.reports),
            f"[yellow]{rate.after_reruns}[/yellow]" if rate.after_reruns else "0",
            terminal(rate.flaky or "-"),
        )
    console.print(table)


def render_history(console: Console, history: FlakyHistory) -> None:
    from gpumatrix.escape import terminal

    if history.tests:
        render_pass_rates(
            console, history.tests, title=f"pass rates over {history.reports} report(s), flakiest first"
        )
    else:
        console.print(f"no test failed a run in {history.reports} report(s)")
    if history.unregistered:
        console.print(
            f"[red]failed and not registered flaky there[/red] ({len(history.unregistered)}): "
            "every failure failed its run"
        )
        for rate in history.unregistered:
            console.print(
                f"  {terminal(rate.test)} on {terminal(rate.gpu_class)}: {rate.rate.failed} of {rate.rate.runs} runs failed",
                soft_wrap=True,
                highlight=False,
            )
    if history.steady:
        console.print(
            f"[green]registered flaky and passed every run[/green] ({len(history.steady)}): candidates to drop flaky="
        )
        for record in history.steady:
            console.print(
                f"  {terminal(record.file)} on {terminal(record.gpu_class)}: {record.rate} in {record.reports} "
                f"report(s) (flaky=: {terminal(record.reason)})",
                soft_wrap=True,
                highlight=False,
            )
