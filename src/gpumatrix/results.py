"""The results of the `gpumatrix` commands, and the one renderer of each.

Commands compute plain results here (`check_tree`, `build_matrix_include`) or in `gpumatrix.run`;
the `render_*` functions draw them with rich and decide nothing. Problems (a bad matrix, bad
registrations, an error) are drawn by `render_problems` and `render_error` alone, so every command
shows them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumatrix import GpumatrixError
from gpumatrix.config import CPU_CLASS, DEFAULT_SUITE, Matrix
from gpumatrix.escape import NAME_LIMIT, PROBLEM_LIMIT, markdown, terminal
from gpumatrix.problems import Problem, ProblemsError
from gpumatrix.registry import Registration, Registry, RegistryError
from gpumatrix.report import OUTCOMES
from gpumatrix.shard import Durations, ShardPlan, budget_seconds, plan_matrix

if TYPE_CHECKING:
    from rich.console import Console

    from gpumatrix.hardware import Hardware
    from gpumatrix.run import RunPlan, RunResult, RunSummary

__all__ = [
    "CheckResult",
    "build_matrix_include",
    "check_tree",
    "files_json",
    "render_check",
    "render_error",
    "render_file_table",
    "render_gated",
    "render_hardware",
    "render_matrix",
    "render_problems",
    "render_run_result",
    "render_run_start",
    "summary_markdown",
]


# -- problems and errors ----------------------------------------------------------------------------


def render_problems(console: Console, problems: Sequence[Problem | str], *, summary: str) -> None:
    """`error: SUMMARY (N problem(s)):` and one indented line per problem; nothing when there are none."""
    if not problems:
        return
    console.print(
        f"[red]error:[/red] {terminal(summary)} ({len(problems)} problem(s)):",
        soft_wrap=True,
        highlight=False,
    )
    for problem in problems:
        console.print(f"  {terminal(str(problem))}", soft_wrap=True, highlight=False)


def render_error(console: Console, error: GpumatrixError) -> None:
    """The error a command stopped on; one that lists problems (a bad matrix, bad registrations)
    is drawn by `render_problems`, as `check` draws them."""
    if isinstance(error, ProblemsError):
        render_problems(console, error.problems, summary=error.summary)
    else:
        console.print(
            f"[red]error:[/red] {terminal(str(error), newlines=True)}", soft_wrap=True, highlight=False
        )


# -- detect, list -----------------------------------------------------------------------------------


def render_hardware(console: Console, hardware: Hardware, matrix: Matrix | None) -> None:
    from rich.table import Table

    # Device names and the driver come from NVML or nvidia-smi: text, not markup.
    table = Table(title=f"this machine: {terminal(hardware.describe())}", show_header=False)
    table.add_row("class", terminal(hardware.gpu_class))
    table.add_row("GPUs", str(hardware.count))
    for index, name in enumerate(hardware.names):
        capability = hardware.capabilities[index] if index < len(hardware.capabilities) else None
        cc = f"sm_{capability[0]}{capability[1]}" if capability else "?"
        table.add_row(f"GPU {index}", terminal(f"{name} ({cc})"))
    table.add_row("driver", terminal(hardware.driver or "-"))
    table.add_row("detected via", hardware.source)
    if matrix is None:
        table.add_row("matching runner", "no ci/matrix.yaml here (pass --root DIR)")
    else:
        matching = [
            r.label for r in matrix.runners if r.gpu_class == hardware.gpu_class and r.gpus == hardware.count
        ]
        table.add_row("matching runner", ", ".join(matching) or "none")
    console.print(table)


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


# -- check ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """`gpumatrix check`: the registry of a valid matrix, and what deserves a warning."""

    matrix: Matrix
    registry: Registry
    over_budget: tuple[ShardPlan, ...]
    idle_runners: tuple[str, ...]
    declared_paths: int | None = None  # None: the tree has no ci/paths.yaml
    # Test files the registry does not see (outside the test roots, behind links), roots that are not
    # there: `gpumatrix.tree_survey`.
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
    from gpumatrix.paths import PATHS_FILE, load_paths
    from gpumatrix.registry import load_tree
    from gpumatrix.tree_survey import survey_tree

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


# -- matrix -----------------------------------------------------------------------------------------


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
    for column in ("runner", "shard", "files", "est. s", "budget s"):
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


# -- run --------------------------------------------------------------------------------------------


def render_run_start(console: Console, plan: RunPlan, *, cached_kernels: int | None = None) -> None:
    """The run's header: runner, machine and targets; the workers it starts and why; the compile cache
    (`cached_kernels`: the kernels already in it, None when not looked at)."""
    console.print(
        f"[bold]runner {terminal(plan.runner.label)}[/bold] on {terminal(plan.hardware.describe())}: "
        f"{len(plan.targets)} target(s)" + (f", shard {terminal(plan.shard)}" if plan.shard else ""),
        highlight=False,
    )
    console.print(
        f"workers: {terminal(plan.workers.arg)} ({terminal(plan.workers.reason)})",
        soft_wrap=True,
        highlight=False,
    )
    if plan.compile_cache is not None and cached_kernels is not None:
        state = f"warm: {cached_kernels} kernels" if cached_kernels else "cold: no kernels yet"
        console.print(
            f"compile cache: {terminal(plan.compile_cache.describe())}; {state}",
            soft_wrap=True,
            highlight=False,
        )


def render_run_result(console: Console, errors: Console, result: RunResult) -> None:
    if result.summary is not None:
        _render_summary(console, result.summary)
        _render_after_reruns(console, result.summary)
        _render_disabled(console, result.summary)
        if result.summary.pass_rates:
            from gpumatrix.flaky_history import render_pass_rates

            title = (
                f"runner {result.summary.runner}: pass rates over {result.summary.repeat} runs of each test"
            )
            render_pass_rates(console, result.summary.pass_rates, title=title)
    if result.cache_use is not None:
        console.print(
            f"{result.cache_use.describe()} ({len(result.plan.targets)} file(s), "
            f"{result.plan.workers.arg} worker(s))",
            highlight=False,
        )
    render_gated(console, result.plan.gated)
    render_problems(errors, result.problems, summary=f"runner {result.plan.runner.label} failed")


def _render_summary(console: Console, summary: RunSummary) -> None:
    from rich.table import Table

    table = Table(title=terminal(f"runner {summary.runner}: {summary.executed} executed"))
    for column in ("file", *OUTCOMES):
        table.add_column(column, justify="left" if column == "file" else "right")
    after = _after_reruns_by_file(summary)
    for path, counts in summary.per_file.items():  # file names from the report: text, not markup
        cells = [str(counts[k]) for k in OUTCOMES]
        if after.get(path):  # never shown as a plain pass
            cells[0] += f" [yellow]({after[path]} after reruns)[/yellow]"
        table.add_row(terminal(path), *cells)
    table.add_row(
        "[bold]total[/bold]",
        str(summary.passed),
        str(summary.failed),
        str(summary.errors),
        str(summary.skipped),
    )
    console.print(table)


def _after_reruns_by_file(summary: RunSummary) -> dict[str, int]:
    """How many tests of each file passed only after running again."""
    counts: dict[str, int] = {}
    for nodeid, _ in summary.after_reruns:
        file = nodeid.split("::", 1)[0]
        counts[file] = counts.get(file, 0) + 1
    return counts


def _render_after_reruns(console: Console, summary: RunSummary) -> None:
    from gpumatrix.flaky import passed_after_reruns

    if summary.after_reruns:
        console.print(
            f"[yellow]passed only after running again ({len(summary.after_reruns)} test(s), registered flaky "
            "here):[/yellow]"
        )
    for nodeid, reruns in summary.after_reruns:
        console.print(f"  [yellow]{terminal(nodeid)}: {passed_after_reruns(reruns)}[/yellow]", soft_wrap=True)


def _render_disabled(console: Console, summary: RunSummary) -> None:
    if summary.disabled:
        console.print(f"disabled here ({len(summary.disabled)} file(s), skipped with their reason):")
    for nodeid, reason in summary.disabled:
        console.print(f"  {terminal(nodeid)}: {terminal(reason)}", soft_wrap=True, highlight=False)


def render_gated(console: Console, gated: Sequence[Registration]) -> None:
    if not gated:
        return
    from rich.table import Table

    table = Table(title=f"gated to other runners ({len(gated)} files, not run here)")
    table.add_column("file")
    table.add_column("needs")
    table.add_column("runners")
    for f in gated:
        needs = f"{f.gpus} x {'|'.join(c for c in f.on if c != CPU_CLASS)}" if f.needs_gpu else "cpu"
        table.add_row(terminal(f.path), terminal(needs), terminal(", ".join(f.runners)))
    console.print(table)


def summary_markdown(result: RunResult) -> str:
    """The run as GitHub step-summary Markdown."""
    summary = result.summary
    if summary is None:
        lines = [f"### ❌ gpumatrix run on {markdown(result.plan.runner.label, style='code')}", ""]
    else:
        icon = "✅" if result.exit_code == 0 else "❌"
        lines = [
            f"### {icon} gpumatrix run on {markdown(summary.runner, style='code')}",
            "",
            f"{summary.executed} executed: {summary.passed} passed, {summary.failed} failed, "
            f"{summary.errors} errors, {summary.skipped} skipped",
            "",
            "| file | passed | failed | errors | skipped |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        after = _after_reruns_by_file(summary)
        lines += [
            f"| {markdown(path, limit=NAME_LIMIT, in_table=True, style='code')} | {c['passed']}"
            + (f" (🟡 {after[path]} after reruns)" if after.get(path) else "")
            + f" | {c['failed']} | {c['errors']} | {c['skipped']} |"
            for path, c in summary.per_file.items()
        ]
        if summary.after_reruns:
            from gpumatrix.flaky import passed_after_reruns

            lines += [
                "",
                f"🟡 Passed only after running again ({len(summary.after_reruns)} test(s), registered flaky here):",
                "",
            ]
            lines += [
                f"- 🟡 {markdown(nodeid, limit=NAME_LIMIT, style='code')}: {passed_after_reruns(reruns)}"
                for nodeid, reruns in summary.after_reruns
            ]
        if summary.pass_rates:
            lines += ["", f"Pass rates over {summary.repeat} runs of each test (95% interval):", ""]
            lines += ["| test | class | passed | 95% interval |", "| --- | --- | ---: | --- |"]
            lines += [
                f"| {markdown(rate.test, limit=NAME_LIMIT, in_table=True, style='code')} | "
                f"{markdown(rate.gpu_class, in_table=True)} | "
                f"{rate.rate.passed}/{rate.rate.runs} | {rate.rate.interval.percent()} |"
                for rate in summary.pass_rates
            ]
        if summary.disabled:
            lines += ["", f"Disabled here ({len(summary.disabled)} file(s), skipped):", ""]
            lines += [
                f"- {markdown(nodeid, limit=NAME_LIMIT, style='code')}: {markdown(reason)}"
                for nodeid, reason in summary.disabled
            ]
    if result.cache_use is not None:
        lines += ["", f"Workers: {markdown(result.plan.workers.arg)}; {result.cache_use.describe()}."]
    lines += [f"- ❗ {markdown(problem, limit=PROBLEM_LIMIT)}" for problem in result.problems]
    return "\n".join(lines) + "\n\n"
