"""`est_time` from history: each test file's measured seconds in JSON reports, against its registration.

A report gives, per file, the seconds its tests took (setup, call and teardown, added up: the time
one worker spends on the file, which is what `est_time` estimates and the shard planner adds up).
Every report in which a file ran at least one test is one sample for the report's GPU class, as a
registration estimates a file per class (`Registration.estimate_for`). Reports are those `gpumatrix
coverage` accepts, read the same way (`gpumatrix.report`), and a report given twice is one sample, as it
is one report there; durations are bounded there (at most a week), so no proposal is absurd. The proposal is the 90th
percentile of the samples (nearest rank), rounded to the nearest whole second (half up, at least 1):
the planner packs shards against a time budget, so a file's slow day matters more than its typical
one, and with few samples the nearest rank is simply the slowest. (Rounding up instead would make a
file of 1.01 s an estimate of 2 s, twice what was measured.) A registration off the proposal by more than 2x
either way is flagged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpumatrix.config import Matrix
from gpumatrix.coverage.merge import runner_label
from gpumatrix.registry.model import Registration
from gpumatrix.report import Report, distinct_reports
from gpumatrix.running.shard import Durations

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "OFF_BY",
    "FileEstimate",
    "estimate_files",
    "estimates_json",
    "measured_durations",
    "percentile",
    "render_estimates",
]

OFF_BY = 2.0


@dataclass(frozen=True)
class FileEstimate:
    """One file on one GPU class: its registered estimate there and what the reports measured."""

    path: str
    gpu_class: str
    registered: float | None  # None: the file is not registered for the class (renamed, moved since)
    samples: tuple[float, ...]  # seconds, one per report of the class in which the file ran a test
    runners: tuple[str, ...]

    @property
    def median(self) -> float | None:
        return percentile(self.samples, 50) if self.samples else None

    @property
    def p90(self) -> float | None:
        return percentile(self.samples, 90) if self.samples else None

    @property
    def proposed(self) -> int | None:
        return max(1, math.floor(self.p90 + 0.5)) if self.p90 is not None else None

    @property
    def off(self) -> bool:
        """The registration is more than 2x away from the proposal, either way."""
        if self.registered is None or self.proposed is None:
            return False
        ratio = self.registered / self.proposed
        return ratio > OFF_BY or ratio < 1 / OFF_BY


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank `q`th percentile (0 < q <= 100) of non-empty `samples`."""
    if not samples:
        raise ValueError("samples must not be empty")
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], got {q}")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def estimate_files(
    reports: Sequence[Report], registrations: Sequence[Registration], matrix: Matrix
) -> tuple[FileEstimate, ...]:
    """One estimate per (file, class) that is registered or measured, by path, then class."""
    samples: dict[tuple[str, str], list[float]] = {}
    runners: dict[tuple[str, str], dict[str, None]] = {}
    for report in distinct_reports(reports):
        for file, result in report.files.items():
            if result.ran:
                key = (file, report.hardware.gpu_class)
                samples.setdefault(key, []).append(result.duration)
                runners.setdefault(key, {})[runner_label(report, matrix)] = None
    registered = {(r.path, name): r.estimate_for(name) for r in registrations for name in r.on}
    return tuple(
        FileEstimate(*key, registered.get(key), tuple(samples.get(key, ())), tuple(runners.get(key, ())))
        for key in sorted(set(registered) | set(samples))
    )


def measured_durations(estimates: Sequence[FileEstimate]) -> Durations:
    """Seconds the shard planner packs by instead of the registered estimates: the proposal of every
    sampled file, by class (`gpumatrix.running.shard.Durations`)."""
    found: dict[str, dict[str, float]] = {}
    for e in estimates:
        if e.proposed is not None:
            found.setdefault(e.gpu_class, {})[e.path] = float(e.proposed)
    return found


def estimates_json(estimates: Sequence[FileEstimate]) -> list[dict[str, Any]]:
    return [
        {
            "path": e.path,
            "class": e.gpu_class,
            "registered": e.registered,
            "samples": len(e.samples),
            "median": e.median,
            "p90": e.p90,
            "proposed": e.proposed,
            "off_by_more_than_2x": e.off,
            "runners": list(e.runners),
        }
        for e in estimates
    ]


def render_estimates(console: Console, estimates: Sequence[FileEstimate]) -> None:
    from rich.table import Table

    from gpumatrix.escape import terminal

    table = Table(title="est_time from measured durations (seconds)")
    for column in ("file", "class", "registered", "samples", "median", "p90", "proposed", ""):
        table.add_column(column, justify="left" if column in ("file", "class", "") else "right")

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    for e in estimates:
        if e.registered is None:
            flag = "[yellow]not registered[/yellow]"
        elif not e.samples:
            flag = "no samples"
        else:
            flag = "[red]off by more than 2x[/red]" if e.off else ""
        table.add_row(  # file names are text, not markup
            terminal(e.path),
            terminal(e.gpu_class),
            "-" if e.registered is None else f"{e.registered:g}",
            str(len(e.samples)),
            shown(e.median),
            shown(e.p90),
            "-" if e.proposed is None else str(e.proposed),
            flag,
        )
    console.print(table)
    flagged = [terminal(f"{e.path} ({e.gpu_class})") for e in estimates if e.off]
    console.print(
        f"{len(flagged)} registration(s) off by more than 2x"
        + (": " + ", ".join(flagged) if flagged else ""),
        soft_wrap=True,
        highlight=False,
    )
