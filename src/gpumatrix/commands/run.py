"""`gpumatrix run`: this machine's slice of a suite through pytest, with its guards, JSON report and page.

The run is planned and judged by `gpumatrix.running.run`; this module starts pytest between the two
and draws what came of it (the terminal, and the Markdown of a GitHub step summary).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpumatrix import GpumatrixError
from gpumatrix.commands.options import durations_option, measured_durations, root_option, suite_option
from gpumatrix.config import CPU_CLASS, MAX_REPEAT
from gpumatrix.console import console, find_root, render_problems
from gpumatrix.escape import NAME_LIMIT, PROBLEM_LIMIT, markdown, terminal
from gpumatrix.report import OUTCOMES

if TYPE_CHECKING:
    from rich.console import Console

    from gpumatrix.registry.model import Registration
    from gpumatrix.running.run import RunPlan, RunResult, RunSummary

__all__ = [
    "RunOutputs",
    "render_gated",
    "render_run_result",
    "render_run_start",
    "run",
    "summary_markdown",
]


@dataclass(frozen=True)
class RunOutputs:
    """Where a run writes, as its options say (None: the default beside the runner's reports)."""

    junit_xml: Path | None = None
    report: Path | None = None
    summary_md: Path | None = None
    html: Path | None = None


_OUTPUT_OPTIONS = (
    click.option(
        "--junit-xml",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="JUnit XML output (default reports/junit-LABEL.xml).",
    ),
    click.option(
        "--report",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="JSON report output (default reports/gpumatrix-LABEL.json).",
    ),
    click.option(
        "--summary-md",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Append a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY).",
    ),
    click.option(
        "--html",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The report page (default beside the JSON report: reports/gpumatrix-LABEL.html).",
    ),
)


def _outputs_option(function):
    """The four output options, handed to the command as one `outputs: RunOutputs`."""

    @functools.wraps(function)
    def command(*, junit_xml, report, summary_md, html, **options):
        return function(outputs=RunOutputs(junit_xml, report, summary_md, html), **options)

    for option in reversed(_OUTPUT_OPTIONS):
        command = option(command)
    return command


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--runner",
    "label",
    default="auto",
    show_default=True,
    help="Runner label, or 'auto' for the runner matching this machine.",
)
@click.option("--shard", "shard", default=None, help="Run shard I of N (e.g. 1/2).")
@click.option(
    "-n",
    "workers",
    default=None,
    help="pytest-xdist workers (default: the runner's GPUs x its workers_per_gpu, at most one per CPU; "
    "one per CPU on a CPU runner).",
)
@click.option(
    "--tests-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Newline-separated registry paths or node ids to run instead of the whole slice.",
)
@_outputs_option
@click.option(
    "--no-preflight", is_flag=True, help="Skip the check that the runner's GPUs are present and idle."
)
@suite_option("pr")
@click.option(
    "--include-disabled",
    is_flag=True,
    help="Run files registered disabled= (or disabled_on= this runner's class) instead of skipping them.",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1, max=MAX_REPEAT),
    default=1,
    show_default=True,
    help="Run each test N times (pytest-repeat; no reruns then) and show each test's pass rate with its "
    "95% interval.",
)
@durations_option
@root_option
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def run(
    label: str,
    shard: str | None,
    workers: str | None,
    tests_file: Path | None,
    outputs: RunOutputs,
    no_preflight: bool,
    suite_name: str,
    include_disabled: bool,
    repeat: int,
    duration_reports: tuple[Path, ...],
    root: Path | None,
    pytest_args: tuple[str, ...],
) -> None:
    """Run this machine's slice of a suite through pytest (extra pytest arguments after `--`); a
    --tests-file runs the tests it names, whatever their suite.

    Writes a JUnit XML file, the JSON report and the report page of this runner's slice (the file x
    runner and path x class matrices, `gpumatrix coverage`'s page for one report)."""
    from gpumatrix.running.compile_cache import CacheUse, kernel_entries
    from gpumatrix.running.outputs import check_append
    from gpumatrix.running.pytest_failure import run_teed
    from gpumatrix.running.run import RunOptions, clean_outputs, finish_run, plan_run, prepare_outputs

    root = root or find_root()
    durations = None
    if duration_reports:
        from gpumatrix.registry.discovery import load_tree

        tree_matrix, registry = load_tree(root)
        durations = measured_durations(duration_reports, registry.files, tree_matrix)
    options = RunOptions(
        label=label,
        shard=shard,
        workers=workers,
        tests_file=tests_file,
        junit_xml=outputs.junit_xml,
        report=outputs.report,
        summary_md=outputs.summary_md,
        durations=durations,
        html=outputs.html,
        preflight=not no_preflight,
        pytest_args=tuple(pytest_args),
        suite=suite_name,
        include_disabled=include_disabled,
        repeat=repeat,
    )
    if outputs.summary_md is not None:  # before any test: never a FIFO the run ends waiting on
        check_append("--summary-md", outputs.summary_md)
    run_plan = plan_run(root, options)
    out = console()
    if run_plan.targets:
        cached = kernel_entries(run_plan.compile_cache.triton_dir) if run_plan.compile_cache else frozenset()
        render_run_start(out, run_plan, cached_kernels=len(cached))
        staged = prepare_outputs(run_plan)  # every output checked; pytest writes beside them
        try:
            pytest_exit, output = run_teed(staged.command, cwd=run_plan.root, env=run_plan.env)
        finally:
            clean_outputs(staged)
        result = finish_run(run_plan, pytest_exit, output)
        if run_plan.compile_cache is not None:
            added = kernel_entries(run_plan.compile_cache.triton_dir) - cached
            result = replace(result, cache_use=CacheUse(before=len(cached), compiled=len(added)))
    else:
        result = finish_run(run_plan, None)
    render_run_result(out, console(stderr=True), result)
    if outputs.summary_md is not None:
        from gpumatrix.running.outputs import append_output

        append_output("--summary-md", outputs.summary_md, summary_markdown(result))
    if run_plan.targets and run_plan.report_path.is_file() and run_plan.html_path is not None:
        _write_run_page(run_plan, out)  # a report that contradicts itself is named on it
    sys.exit(result.exit_code)


def _write_run_page(run_plan: RunPlan, out: Console) -> None:
    """The page of this run's own report; a page that cannot be made is said, and fails nothing."""
    from gpumatrix.coverage.merge import load_coverage
    from gpumatrix.coverage.page import render_html
    from gpumatrix.running.outputs import Output, write_output

    try:
        coverage = load_coverage(run_plan.root, [run_plan.report_path], require_paths=False)
        title = f"gpumatrix run on {run_plan.runner.label}" + (
            f", shard {run_plan.shard}" if run_plan.shard else ""
        )
        write_output(
            Output("--html", run_plan.html_path, "page"),
            render_html(coverage, title=title, sources=[run_plan.report_path.name]),
        )
    except GpumatrixError as exc:
        out.print(f"[yellow]warning:[/yellow] no report page: {terminal(str(exc))}", soft_wrap=True)
        return
    out.print(f"report page: {terminal(str(run_plan.html_path))}", soft_wrap=True, highlight=False)


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
            from gpumatrix.flaky.history import render_pass_rates

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
    from gpumatrix.flaky.stats import passed_after_reruns

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
            from gpumatrix.flaky.stats import passed_after_reruns

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
