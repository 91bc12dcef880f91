"""The `gpumatrix` command line: detect, list, check, matrix, run (and the bot's commands).

Each command gathers a result and a separate step renders it; `GpumatrixError` is caught in one place
and mapped to an exit code: 2 for invalid configuration or usage, 1 for a failed run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gpumatrix import GpumatrixError
from gpumatrix.bot.commands import bot, plan
from gpumatrix.config import MatrixError
from gpumatrix.registry import load_tree

__all__ = ["find_root", "main"]

EXIT_FAILED = 1
EXIT_USAGE = 2


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


class _Group(click.Group):
    """Maps gpumatrix's errors to exit codes in one place."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except MatrixError as exc:
            _console(stderr=True).print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
            sys.exit(EXIT_USAGE)
        except GpumatrixError as exc:
            _console(stderr=True).print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
            sys.exit(getattr(exc, "exit_code", EXIT_FAILED))


root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Tree holding ci/matrix.yaml and tests/ (default: the repository root).",
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mxfuse", prog_name="gpumatrix")
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
    from gpumatrix.commands import render_hardware

    render_hardware(_console(), hardware, matrix)


def _hardware_dict(hardware) -> dict:
    from dataclasses import asdict

    return {**asdict(hardware), "describe": hardware.describe()}


@main.command("list")
@click.option("--runner", "label", default=None, help="Only the files of this runner.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@root_option
def list_files(label: str | None, as_json: bool, root: Path | None) -> None:
    """List registered test files with their classes, GPU count, estimate and runners."""
    from gpumatrix.commands import check_runner_label, render_file_table

    matrix, registry = load_tree(root or find_root())
    files = registry.files
    if label is not None:
        check_runner_label(matrix, label)
        files = registry.for_runner(label)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "path": f.path,
                        "line": f.line,
                        "on": list(f.on),
                        "gpus": f.gpus,
                        "est_time": f.est_time,
                        "runners": list(f.runners),
                    }
                    for f in files
                ],
                indent=2,
            )
        )
    else:
        render_file_table(_console(), files, title=f"runner {label}" if label else "registered test files")
    if registry.problems:
        for problem in registry.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(EXIT_FAILED)


@main.command()
@root_option
def check(root: Path | None) -> None:
    """Validate ci/matrix.yaml and every test file's registration; exit non-zero on any problem."""
    from gpumatrix.commands import run_check

    sys.exit(run_check(_console(), root or find_root()))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="GitHub Actions `strategy.matrix` JSON.")
@click.option("--runner", "label", default=None, help="Only this runner's shards.")
@root_option
def matrix(as_json: bool, label: str | None, root: Path | None) -> None:
    """The runner x shard matrix: files packed longest-first into as few shards as each timeout allows."""
    from gpumatrix.commands import build_matrix_include, check_runner_label, render_matrix

    matrix_, registry = load_tree(root or find_root())
    if registry.problems:
        for problem in registry.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(EXIT_FAILED)
    if label is not None:
        check_runner_label(matrix_, label)
    include, plans = build_matrix_include(matrix_, registry, label=label)
    if as_json:
        click.echo(json.dumps({"include": include}))
    else:
        render_matrix(_console(), plans)


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
    "-n", "workers", default=None, help="pytest-xdist workers (default: one per GPU; 'auto' on CPU)."
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
    "--no-preflight", is_flag=True, help="Skip the check that the runner's GPUs are present and idle."
)
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
    no_preflight: bool,
    root: Path | None,
    pytest_args: tuple[str, ...],
) -> None:
    """Run this machine's slice through pytest (extra pytest arguments after `--`)."""
    from gpumatrix.commands import RunOptions, execute_run

    options = RunOptions(
        label=label,
        shard=shard,
        workers=workers,
        tests_file=tests_file,
        junit_xml=junit_xml,
        report=report,
        summary_md=summary_md,
        preflight=not no_preflight,
        pytest_args=tuple(pytest_args),
    )
    sys.exit(execute_run(_console(), root or find_root(), options))


main.add_command(bot)
main.add_command(plan)
