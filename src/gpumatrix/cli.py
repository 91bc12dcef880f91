"""The `gpumatrix` command line: detect, list, check, matrix, run, coverage, estimate, flaky (and the bot's commands).

Also `python -m gpumatrix` and `python -m gpumatrix.cli`.
Each command computes a result (`gpumatrix.results`, `gpumatrix.run`) and one renderer prints it.
`GpumatrixError` is caught in one place and its `exit_code` is the exit status, as EXIT_CODES says
(the bot's commands follow the same table).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gpumatrix import GpumatrixError, __version__
from gpumatrix.adopt_commands import init
from gpumatrix.adopt_commands import register as register_command
from gpumatrix.bot.commands import bot, plan
from gpumatrix.config import MAX_REPEAT

__all__ = ["EXIT_CODES", "console", "find_root", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: The exit status of every gpumatrix command (README.md shows the same table).
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done: the check found no problem, the run passed"),
    (
        EXIT_FAILED,
        "a failure found: a test failed or errored, a run guard tripped (zero tests ran, a hardware skip on "
        "the runner's own machine), nothing to run in the selection, test files with registration problems, a "
        "required code path exercised by no passing test on a class that ran or an undeclared one recorded "
        "(coverage), a JSON report that contradicts itself, is of a refused run or ran no test, reports of "
        "different commits or suites merged without --allow-mixed, a GitHub or git call failed (bot)",
    ),
    (
        EXIT_USAGE,
        "usage or configuration: a bad option or argument, an unknown runner, an invalid ci/matrix.yaml or "
        "ci/paths.yaml, a malformed GPUMATRIX_* variable, an unreadable or malformed input file (a report or "
        "an event included, and one that is not a regular file), an id out of range, an output path holding a "
        "file gpumatrix did not write, a machine that is not the runner asked for or whose GPUs are busy",
    ),
)


def find_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: cwd) holding ci/matrix.yaml."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "ci" / "matrix.yaml").is_file():
            return candidate
    return here


def _console(*, stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # CI logs are not terminals and rich would assume 80 columns, cutting test paths short.
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, width=width)


console = _console  # for the commands of other modules (gpumatrix.adopt_commands)


class _Group(click.Group):
    """Maps gpumatrix's errors to exit codes in one place."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except GpumatrixError as exc:
            from gpumatrix.results import render_error

            render_error(_console(stderr=True), exc)
            sys.exit(exc.exit_code)


def _exit_codes_epilog() -> str:
    import textwrap

    # \b keeps click from re-wrapping the table.
    rows = "\n".join(
        textwrap.fill(meaning, width=100, initial_indent=f"  {code}  ", subsequent_indent="     ")
        for code, meaning in EXIT_CODES
    )
    return f"\b\nExit codes (every command):\n{rows}"


durations_option = click.option(
    "--durations",
    "duration_reports",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A JSON report whose measured file durations pack the shards instead of est_time "
    "(repeatable; `matrix` and `run --shard` must be given the same ones).",
)

root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Tree holding ci/matrix.yaml and tests/ (default: the repository root).",
)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
    epilog=_exit_codes_epilog(),
)
@click.version_option(version=__version__, prog_name="gpumatrix")
def main() -> None:
    """Hardware-gated GPU test matrix: which test file runs on which runner, and running it."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@root_option
def detect(as_json: bool, root: Path | None) -> None:
    """Show this machine's GPU class, count, names, compute capability and driver."""
    from gpumatrix.config import load_matrix
    from gpumatrix.hardware import detect as detect_hardware

    # Outside a checkout (no --root, no ci/matrix.yaml above) the built-in classes name the GPUs.
    matrix_path = (root or find_root()) / "ci" / "matrix.yaml"
    matrix = load_matrix(matrix_path) if root is not None or matrix_path.is_file() else None
    hardware = detect_hardware(matrix)
    if as_json:
        click.echo(json.dumps(_hardware_dict(hardware), indent=2))
        return
    from gpumatrix.results import render_hardware

    render_hardware(_console(), hardware, matrix)


def _hardware_dict(hardware) -> dict:
    from dataclasses import asdict

    return {**asdict(hardware), "describe": hardware.describe()}


def _suite_option(default: str):
    return click.option(
        "--suite",
        "suite_name",
        default=default,
        show_default=True,
        help="Only the files of this suite (ci/matrix.yaml suites), or 'all'.",
    )


@main.command("list")
@click.option("--runner", "label", default=None, help="Only the files of this runner.")
@_suite_option("all")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@root_option
def list_files(label: str | None, suite_name: str, as_json: bool, root: Path | None) -> None:
    """List registered test files with their classes, GPU count, estimates, suite, disabled state and runners."""
    from gpumatrix.registry import RegistryError, load_tree
    from gpumatrix.results import files_json, render_file_table, render_problems

    matrix, registry = load_tree(root or find_root())
    suite = matrix.require_suite(suite_name)
    files = registry.for_runner(matrix.require_runner(label).label) if label is not None else registry.files
    files = tuple(f for f in files if suite is None or f.suite == suite)
    if as_json:
        click.echo(json.dumps(files_json(files), indent=2))
    else:
        title = f"runner {label}" if label else "registered test files"
        render_file_table(_console(), files, title=title + (f", suite {suite}" if suite else ""))
    render_problems(_console(stderr=True), registry.problems, summary=RegistryError.summary)
    sys.exit(EXIT_OK if registry.ok else EXIT_FAILED)


@main.command()
@root_option
def check(root: Path | None) -> None:
    """Validate ci/matrix.yaml and every test file's registration; exit non-zero on any problem."""
    from gpumatrix.results import check_tree, render_check

    result = check_tree(root or find_root())
    render_check(_console(), _console(stderr=True), result)
    sys.exit(result.exit_code)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="GitHub Actions `strategy.matrix` JSON.")
@click.option("--runner", "label", default=None, help="Only this runner's shards.")
@_suite_option("pr")
@durations_option
@root_option
def matrix(
    as_json: bool, label: str | None, suite_name: str, duration_reports: tuple[Path, ...], root: Path | None
) -> None:
    """The runner x shard matrix of a suite: files packed longest-first, by their estimate on each
    runner's class (or their measured seconds there, with --durations), into as few shards as each
    timeout allows."""
    from gpumatrix.registry import load_tree
    from gpumatrix.results import build_matrix_include, render_matrix

    matrix_, registry = load_tree(root or find_root())
    if label is not None:
        matrix_.require_runner(label)
    suite = matrix_.require_suite(suite_name)
    durations = _measured_durations(duration_reports, registry.files, matrix_)
    include, plans = build_matrix_include(
        matrix_, registry.require_ok(), label=label, suite=suite, durations=durations
    )
    if as_json:
        click.echo(json.dumps({"include": include}))
    else:
        render_matrix(_console(), plans, suite=suite)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
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
@click.option(
    "--junit-xml",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JUnit XML output (default reports/junit-LABEL.xml).",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON report output (default reports/gpumatrix-LABEL.json).",
)
@click.option(
    "--summary-md",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY).",
)
@click.option(
    "--html",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The report page (default beside the JSON report: reports/gpumatrix-LABEL.html).",
)
@click.option(
    "--no-preflight", is_flag=True, help="Skip the check that the runner's GPUs are present and idle."
)
@_suite_option("pr")
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
    junit_xml: Path | None,
    report: Path | None,
    summary_md: Path | None,
    html: Path | None,
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
    from dataclasses import replace

    from gpumatrix.compile_cache import CacheUse, kernel_entries
    from gpumatrix.outputs import check_append
    from gpumatrix.pytest_failure import run_teed
    from gpumatrix.results import render_run_result, render_run_start, summary_markdown
    from gpumatrix.run import RunOptions, clean_outputs, finish_run, plan_run, prepare_outputs

    root = root or find_root()
    durations = None
    if duration_reports:
        from gpumatrix.registry import load_tree

        tree_matrix, registry = load_tree(root)
        durations = _measured_durations(duration_reports, registry.files, tree_matrix)
    options = RunOptions(
        label=label,
        shard=shard,
        workers=workers,
        tests_file=tests_file,
        junit_xml=junit_xml,
        report=report,
        summary_md=summary_md,
        durations=durations,
        html=html,
        preflight=not no_preflight,
        pytest_args=tuple(pytest_args),
        suite=suite_name,
        include_disabled=include_disabled,
        repeat=repeat,
    )
    if summary_md is not None:
        check_append("--summary-md", summary_md)  # before any test: never a FIFO the run ends waiting on
    run_plan = plan_run(root, options)
    console = _console()
    if run_plan.targets:
        cached = kernel_entries(run_plan.compile_cache.triton_dir) if run_plan.compile_cache else frozenset()
        render_run_start(console, run_plan, cached_kernels=len(cached))
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
    render_run_result(console, _console(stderr=True), result)
    if summary_md is not None:
        _append(summary_md, summary_markdown(result))
    if run_plan.targets and run_plan.report_path.is_file() and run_plan.html_path is not None:
        _write_run_page(run_plan, console)  # a report that contradicts itself is named on it
    sys.exit(result.exit_code)


def _write_run_page(run_plan, console) -> None:
    """The page of this run's own report; a page that cannot be made is said, and fails nothing."""
    from gpumatrix.coverage import load_coverage
    from gpumatrix.escape import terminal
    from gpumatrix.outputs import Output, write_output
    from gpumatrix.page import render_html

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
        console.print(f"[yellow]warning:[/yellow] no report page: {terminal(str(exc))}", soft_wrap=True)
        return
    console.print(f"report page: {terminal(str(run_plan.html_path))}", soft_wrap=True, highlight=False)


def _measured_durations(reports: tuple[Path, ...], registrations, matrix):
    """--durations: the proposals of `gpumatrix estimate`, by class and file; None without reports."""
    if not reports:
        return None
    from gpumatrix.estimate import estimate_files, measured_durations
    from gpumatrix.report import read_report, require_ran

    found = [require_ran(read_report(p, matrix)) for p in reports]  # a refused run measured nothing: exit 1
    return measured_durations(estimate_files(found, registrations, matrix))


@main.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--markdown", type=click.Path(dir_okay=False, path_type=Path), help="Write the matrices as Markdown."
)
@click.option("--html", type=click.Path(dir_okay=False, path_type=Path), help="Write the report page.")
@click.option(
    "--title", default="gpumatrix coverage", show_default=True, help="Title of the page and summary."
)
@click.option(
    "--warn-only",
    is_flag=True,
    help="A required path not exercised is shown but does not fail (exit 0): for a run of part of a "
    "class's tests, such as one runner of several or a /rerun-test of named tests.",
)
@click.option(
    "--allow-mixed",
    is_flag=True,
    help="Merge reports of different commits or suites (refused otherwise, naming them).",
)
@root_option
def coverage(
    reports: tuple[Path, ...],
    markdown: Path | None,
    html: Path | None,
    title: str,
    warn_only: bool,
    allow_mixed: bool,
    root: Path | None,
) -> None:
    """Merge runners' JSON reports into the path x GPU-class matrix checked against ci/paths.yaml.

    Exit 1, naming each, when a path ci/paths.yaml requires on a class that reported was exercised by
    no passing test there, or a test recorded an undeclared path; when a report ran no test, or tests
    of a file not registered for its runner; and when the reports are of different commits or suites
    (unless --allow-mixed). Classes that did not report are shown as such, never green. Markdown of the
    matrices also goes to $GITHUB_STEP_SUMMARY when set.
    """
    import os

    from gpumatrix.coverage import load_coverage
    from gpumatrix.escape import terminal
    from gpumatrix.outputs import Output, append_output, check_append, check_output, write_output
    from gpumatrix.page import render_coverage, render_html, render_markdown

    # Every output checked before any report is read: nothing is written over what gpumatrix did not write.
    for option, path, kind in (("--markdown", markdown, "markdown"), ("--html", html, "page")):
        if path is not None:
            check_output(Output(option, path, kind))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        check_append("GITHUB_STEP_SUMMARY", Path(os.environ["GITHUB_STEP_SUMMARY"]))
    merged = load_coverage(root or find_root(), list(reports), allow_mixed=allow_mixed)
    sources = [str(p) for p in reports]
    render_coverage(_console(), _console(stderr=True), merged)
    text = render_markdown(merged, title=title)
    if markdown is not None:
        write_output(Output("--markdown", markdown, "markdown"), text)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        append_output("GITHUB_STEP_SUMMARY", Path(step_summary), text)
    if html is not None:
        write_output(Output("--html", html, "page"), render_html(merged, title=title, sources=sources))
        click.echo(f"report page: {terminal(html, markup=False)}")
    sys.exit(EXIT_FAILED if merged.failed(warn_only=warn_only) else EXIT_OK)


@main.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--write",
    is_flag=True,
    help="Write the proposals into the registrations' est_time= literals (only that literal changes).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=1.0, max=100.0),
    default=None,
    help="With --write: leave registrations within this factor of their proposal (default 1.25).",
)
@root_option
def estimate(
    reports: tuple[Path, ...], as_json: bool, write: bool, tolerance: float | None, root: Path | None
) -> None:
    """Propose each test file's est_time from the durations measured in JSON reports.

    The proposal is the 90th percentile (nearest rank) of a file's samples, one per report in which
    it ran, rounded up to a second; registrations off it by more than 2x are flagged. Exit 0: this
    proposes, it does not judge (a report that contradicts itself or is of a refused run exits 1). With
    --write, each registration further than --tolerance from its proposal gets it, per class, as a
    literal edit of its est_time= (exit 1 if a file could not be edited).
    """
    from gpumatrix.estimate import estimate_files, estimates_json, render_estimates
    from gpumatrix.registry import load_tree
    from gpumatrix.report import read_report, require_ran

    if tolerance is not None and not write:
        raise click.UsageError("--tolerance applies to --write only")
    root = root or find_root()
    tree_matrix, registry = load_tree(root)
    read = [
        require_ran(read_report(p, tree_matrix)) for p in reports
    ]  # a refused run measured nothing: exit 1
    found = estimate_files(read, registry.files, tree_matrix)
    if as_json:
        click.echo(json.dumps(estimates_json(found), indent=2))
    else:
        render_estimates(_console(), found)
    if write:
        from rich.markup import escape

        from gpumatrix.est_time_write import DEFAULT_TOLERANCE, plan_edits, write_edits
        from gpumatrix.results import render_problems

        edits = plan_edits(found, tolerance=tolerance or DEFAULT_TOLERANCE)
        problems = write_edits(root, edits)
        output = _console(stderr=as_json)
        for edit in edits:
            if edit.path not in problems:
                changes = ", ".join(
                    f"{name} {edit.registered[name]:g} -> {seconds}" for name, seconds in edit.seconds.items()
                )
                output.print(f"wrote est_time of {escape(edit.path)}: {changes}", highlight=False)
        output.print(f"{len(edits) - len(problems)} registration(s) rewritten", highlight=False)
        if problems:
            lines = [f"{path}: {why}" for path, why in problems.items()]
            render_problems(_console(stderr=True), lines, summary="est_time not written")
            sys.exit(EXIT_FAILED)


@main.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--all", "every_test", is_flag=True, help="List every test, those that never failed too.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@root_option
def flaky(reports: tuple[Path, ...], every_test: bool, as_json: bool, root: Path | None) -> None:
    """Pass rates per test and GPU class over JSON reports (nightly history), the flakiest first, each with
    its 95% interval; the tests that failed and are not registered flaky there; and the files registered
    flaky= that passed every run (candidates to drop flaky=).

    Every run counts: each repetition of a repeated run, and each failed attempt of a test that ran again.
    Exit 0: this reports, it does not judge (a report that contradicts itself exits 1, as everywhere).
    """
    from gpumatrix.flaky_history import history_json, load_history, render_history

    history = load_history(root or find_root(), list(reports), every_test=every_test)
    if as_json:
        click.echo(json.dumps(history_json(history), indent=2))
    else:
        render_history(_console(), history)


def _append(path: Path, text: str) -> None:
    from gpumatrix.outputs import append_output

    append_output("--summary-md", path, text)


main.add_command(bot)
main.add_command(plan)
main.add_command(init)
main.add_command(register_command)


def _add_epilog(group: click.Group) -> None:
    """Every command's --help shows the exit-code table too."""
    for command in group.commands.values():
        command.epilog = command.epilog or _exit_codes_epilog()
        if isinstance(command, click.Group):
            _add_epilog(command)


_add_epilog(main)

if __name__ == "__main__":  # python -m gpumatrix.cli
    main(prog_name="gpumatrix")
