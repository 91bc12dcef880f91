"""`gpumatrix coverage`, `estimate` and `flaky`: what runners' JSON reports add up to.

Reports are read through `gpumatrix.report`, as everywhere; each command computes its result in its own
package (`gpumatrix.coverage.merge`, `gpumatrix.estimate.proposals`, `gpumatrix.flaky.stats`) and draws it here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from gpumatrix.commands.options import root_option
from gpumatrix.console import console, find_root, render_problems
from gpumatrix.escape import terminal

__all__ = ["coverage", "estimate", "flaky"]

EXIT_OK, EXIT_FAILED = 0, 1


@click.command()
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
    from gpumatrix.coverage.merge import load_coverage
    from gpumatrix.coverage.page import render_coverage, render_html, render_markdown
    from gpumatrix.running.outputs import Output, append_output, check_append, check_output, write_output

    # Every output checked before any report is read: nothing is written over what gpumatrix did not write.
    for option, path, kind in (("--markdown", markdown, "markdown"), ("--html", html, "page")):
        if path is not None:
            check_output(Output(option, path, kind))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        check_append("GITHUB_STEP_SUMMARY", Path(os.environ["GITHUB_STEP_SUMMARY"]))
    merged = load_coverage(root or find_root(), list(reports), allow_mixed=allow_mixed)
    sources = [str(p) for p in reports]
    render_coverage(console(), console(stderr=True), merged)
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


@click.command()
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
    it ran, rounded to the nearest second; registrations off it by more than 2x are flagged. Exit 0: this
    proposes, it does not judge (a report that contradicts itself or is of a refused run exits 1). With
    --write, each registration further than --tolerance from its proposal gets it, per class, as a
    literal edit of its est_time= (exit 1 if a file could not be edited).
    """
    from gpumatrix.estimate.proposals import estimate_files, estimates_json, render_estimates
    from gpumatrix.registry.discovery import load_tree
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
        render_estimates(console(), found)
    if write:
        from rich.markup import escape

        from gpumatrix.estimate.write import DEFAULT_TOLERANCE, plan_edits, write_edits

        edits = plan_edits(found, tolerance=tolerance or DEFAULT_TOLERANCE)
        problems = write_edits(root, edits)
        output = console(stderr=as_json)
        for edit in edits:
            if edit.path not in problems:
                changes = ", ".join(
                    f"{name} {edit.registered[name]:g} -> {seconds}" for name, seconds in edit.seconds.items()
                )
                output.print(f"wrote est_time of {escape(edit.path)}: {changes}", highlight=False)
        output.print(f"{len(edits) - len(problems)} registration(s) rewritten", highlight=False)
        if problems:
            lines = [f"{path}: {why}" for path, why in problems.items()]
            render_problems(console(stderr=True), lines, summary="est_time not written")
            sys.exit(EXIT_FAILED)


@click.command()
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
    from gpumatrix.flaky.history import history_json, load_history, render_history

    history = load_history(root or find_root(), list(reports), every_test=every_test)
    if as_json:
        click.echo(json.dumps(history_json(history), indent=2))
    else:
        render_history(console(), history)
