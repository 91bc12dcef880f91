"""`gpumatrix list`, `check` and `matrix`: the tree's registry, whether it holds, and the runner x shard matrix.

Each command computes a plain result (`check_tree`, `build_matrix_include`) and one renderer draws it
with rich, deciding nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpumatrix.commands.options import durations_option, measured_durations, root_option, suite_option
from gpumatrix.config import DEFAULT_SUITE, Matrix
from gpumatrix.console import console, find_root, render_problems
from gpumatrix.coverage.paths import PATHS_FILE, load_paths
from gpumatrix.escape import terminal
from gpumatrix.problems import Problem
from gpumatrix.registry.discovery import load_tree
from gpumatrix.registry.model import Registration, Registry, RegistryError
from gpumatrix.running.shard import Durations, ShardPlan, budget_seconds, plan_matrix

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CheckResult",
    "build_matrix_include",
    "check",
    "check_tree",
    "files_json",
    "list_files",
    "matrix",
    "render_check",
    "render_file_table",
    "render_matrix",
]

EXIT_OK, EXIT_FAILED = 0, 1


@click.command("list")
@click.option("--runner", "label", default=None, help="Only the files of this runner.")
@suite_option("all")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@root_option
def list_files(label: str | None, suite_name: str, as_json: bool, root: Path | None) -> None:
    """List registered test files with their classes, GPU count, estimates, suite, disabled state and runners."""
    matrix, registry = load_tree(root or find_root())
    suite = matrix.require_suite(suite_name)
    files = registry.for_runner(matrix.require_runner(label).label) if label is not None else registry.files
    files = tuple(f for f in files if suite is None or f.suite == suite)
    if as_json:
        click.echo(json.dumps(files_json(files), indent=2))
    else:
        title = f"runner {label}" if label else "registered test files"
        render_file_table(console(), files, title=title + (f", suite {suite}" if suite else ""))
    render_problems(console(stderr=True), registry.problems, summary=RegistryError.summary)
    sys.exit(EXIT_OK if registry.ok else EXIT_FAILED)


@click.command()
@root_option
def check(root: Path | None) -> None:
    """Validate ci/matrix.yaml and every test file's registration; exit non-zero on any problem."""
    result = check_tree(root or find_root())
    render_check(console(), console(stderr=True), result)
    sys.exit(result.exit_code)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="GitHub Actions `strategy.matrix` JSON.")
@click.option("--runner", "label", default=None, help="Only this runner's shards.")
@suite_option("pr")
@durations_option
@root_option
def matrix(
    as_json: bool, label: str | None, suite_name: str, duration_reports: tuple[Path, ...], root: Path | None
) -> None:
    """The runner x shard matrix of a suite: files packed longest-first, by their estimate on each
    runner's class (or their measured seconds there, with --durations), into as few shards as each
    timeout allows."""
    matrix_, registry = load_tree(root or find_root())
    if label is not None:
        matrix_.require_runner(label)
    suite = matrix_.require_suite(suite_name)
    durations = measured_durations(duration_reports, registry.files, matrix_)
    include, plans = build_matrix_include(
        matrix_, registry.require_ok(), label=label, suite=suite, durations=durations
    )
    if as_json:
        click.echo(json.dumps({"include": include}))
    else:
        render_matrix(console(), plans, suite=suite)


def files_json(files: Sequence[Registration]) -> list[dict[str, Any]]:
    """One object per file. The fields a registration may leave out appear only when it gives them, so
    plain registrations read as they always did: `suite` (absent: pr), `est_time_by_class` (seconds on
    each class of `on`, the fallback filled in), `disabled`, `disabled_on` and `flaky`."""
    rows = []
    for f in files:
        row: dict[str, Any] = {
            "path": f.path,
            "line": f.line,
            "on": list(f.on),
            "gpus": f.gpus,
            "est_time": f.est_time,
            "runners": list(f.runners),
        }
        if f.suite != DEFAULT_SUITE:
            row["suite"] = f.suite
        if f.est_times:
            row["est_time_by_class"] = {name: f.estimate_for(name) for name in f.on}
        if f.disabled is not None:
            row["disabled"] = f.disabled
        if f.disabled_on:
            row["disabled_on"] = dict(f.disabled_on)
        if f.flaky:
            row["flaky"] = dict(f.flaky)
        rows.append(row)
    return rows


def render_file_table(console: Console, files: Sequence[Registration], *, title: str) -> None:
    from rich.table import Table

    table = Table(title=terminal(f"{title} ({len(files)} files)"))
    for column in ("file", "classes", "GPUs", "est. s", "suite", "disabled", "runners"):
        table.add_column(column, justify="right" if column in ("GPUs", "est. s") else "left")
    for f in files:
        estimate = (
            ", ".join(f"{name} {f.estimate_for(name):g}" for name in f.on)
            if f.est_times
            else f"{f.est_time:g}"
        )
        if f.disabled is not None:
            disabled = f.disabled
        else:
            disabled = "; ".join(f"{name}: {reason}" for name, reason in f.disabled_on) or "-"
        table.add_row(  # file names and reasons are text a person wrote, not markup
            terminal(f.path),
            terminal(", ".join(f.on)),
            str(f.gpus) if f.needs_gpu else "-",
            terminal(estimate),
            terminal(f.suite),
            terminal(disabled),
            terminal(", ".join(f.runners)),
        )
    console.print(table)


@dataclass(frozen=True)
class CheckResult:
    """`gpumatrix check`: the registry of a valid matrix, and what deserves a warning."""

    matrix: Matrix
    registry: Registry
    over_budget: tuple[ShardPlan, ...]
    idle_runners: tuple[str, ...]
    declared_paths: int | None = None  # None: the tree has no ci/paths.yaml
    # Test files the registry does not see (outside the test roots, behind links), roots that are not
    # there: `gpumatrix.adopt.tree_survey`.
    unseen: tuple[Problem, ...] = ()

    @property
    def problems(self) -> tuple[Problem, ...]:
        return (*self.unseen, *self.registry.problems)

    @property
    def exit_code(self) -> int:
        return 0 if not self.problems else 1


def check_tree(root: Path) -> CheckResult:
    """Validate the matrix (a `MatrixError` when invalid), ci/paths.yaml where there is one (a
    `PathsError`), and every registration; plan every suite."""
    from gpumatrix.adopt.tree_survey import survey_tree

    matrix, registry = load_tree(root)
    paths_file = Path(root) / PATHS_FILE
    declared = len(load_paths(paths_file, matrix).paths) if paths_file.is_file() else None
    plans = [plan for suite in matrix.suites for plan in plan_matrix(matrix, registry, suite=suite)]
    idle = tuple(r.label for r in matrix.runners if not registry.for_runner(r.label))
    unseen = survey_tree(root, matrix).problems
    return CheckResult(matrix, registry, tuple(p for p in plans if p.over_budget), idle, declared, unseen)


def render_check(console: Console, errors: Console, result: CheckResult) -> None:
    render_problems(errors, result.problems, summary=RegistryError.summary)
    for plan in result.over_budget:
        longest = max(shard.est_time for shard in plan.shards)
        console.print(
            f"[yellow]warning:[/yellow] runner {terminal(plan.runner.label)}, suite {terminal(plan.suite)}: the longest of its "
            f"{plan.count} shard(s) is estimated at {longest:.0f} s, over its budget of "
            f"{budget_seconds(plan.runner):.0f} s; raise max_shards or the timeout",
            soft_wrap=True,
        )
    registry = result.registry
    status = "[green]ok[/green]" if not result.problems else f"[red]{len(result.problems)} problem(s)[/red]"
    suites = {name: sum(f.suite == name for f in registry.files) for name in result.matrix.suites}
    disabled = sum(f.disabled is not None or bool(f.disabled_on) for f in registry.files)
    console.print(
        f"{status}: {len(result.matrix.runners)} runners, {len(registry.files)} registered test files ("
        + ", ".join(f"{count} {terminal(name)}" for name, count in suites.items())
        + (f"; {disabled} disabled somewhere" if disabled else "")
        + f") under {', '.join(terminal(r) for r in result.matrix.test_roots)}"
        + (f", {result.declared_paths} declared code paths" if result.declared_paths is not None else "")
        + (
            f"; runners with no files: {terminal(', '.join(result.idle_runners))}"
            if result.idle_runners
            else ""
        )
    )


def build_matrix_include(
    matrix: Matrix,
    registry: Registry,
    *,
    label: str | None = None,
    suite: str | None = DEFAULT_SUITE,
    durations: Durations | None = None,
) -> tuple[list[dict[str, Any]], list[ShardPlan]]:
    """GitHub Actions `strategy.matrix.include` entries, one per runner shard of `suite` (None: all),
    packed by measured `durations` where given, else by the registered estimates."""
    plans = [
        p
        for p in plan_matrix(matrix, registry, suite=suite, durations=durations)
        if label is None or p.runner.label == label
    ]
    include = [
        {
            "runner": plan.runner.label,
            "runs_on": list(plan.runner.runs_on),
            "shard": shard.index,
            "shards": plan.count,
            "timeout_minutes": plan.runner.timeout_minutes,
        }
        for plan in plans
        for shard in plan.shards
    ]
    return include, plans


def render_matrix(console: Console, plans: Sequence[ShardPlan], *, suite: str | None = DEFAULT_SUITE) -> None:
    from rich.table import Table

    table = Table(title=f"runner x shard matrix, suite {terminal(suite or 'all')}")
    for column in ("runner", "shard", "files", "est. wall s", "budget s"):
        table.add_column(column, justify="left" if column == "runner" else "right")
    for plan in plans:
        for shard in plan.shards:
            table.add_row(
                terminal(plan.runner.label),
                f"{shard.index}/{plan.count}",
                str(len(shard.files)),
                f"{shard.est_time:.0f}",
                f"{budget_seconds(plan.runner):.0f}" + (" (over)" if plan.over_budget else ""),
            )
    console.print(table)
