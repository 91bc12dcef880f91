"""The `gpumatrix` command line: the group, its exit codes, and the commands of `gpumatrix.commands`.

Also `python -m gpumatrix` and `python -m gpumatrix.cli`. Each command lives in its own module of
`gpumatrix.commands`, computes a result and has one renderer print it. `GpumatrixError` is caught here,
in one place, and its `exit_code` is the exit status, as EXIT_CODES says (the bot's commands follow the
same table).
"""

from __future__ import annotations

import sys

import click

from gpumatrix import GpumatrixError, __version__
from gpumatrix.commands.adopt import init
from gpumatrix.commands.adopt import register as register_command
from gpumatrix.commands.bot import bot, plan
from gpumatrix.commands.detect import detect
from gpumatrix.commands.reports import coverage, estimate, flaky
from gpumatrix.commands.run import run
from gpumatrix.commands.tree import check, list_files, matrix
from gpumatrix.console import console, render_error

__all__ = ["EXIT_CODES", "main"]

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


class _Group(click.Group):
    """Maps gpumatrix's errors to exit codes in one place."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except GpumatrixError as exc:
            render_error(console(stderr=True), exc)
            sys.exit(exc.exit_code)


def _exit_codes_epilog() -> str:
    import textwrap

    # \b keeps click from re-wrapping the table.
    rows = "\n".join(
        textwrap.fill(meaning, width=100, initial_indent=f"  {code}  ", subsequent_indent="     ")
        for code, meaning in EXIT_CODES
    )
    return f"\b\nExit codes (every command):\n{rows}"


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
    epilog=_exit_codes_epilog(),
)
@click.version_option(version=__version__, prog_name="gpumatrix")
def main() -> None:
    """Hardware-gated GPU test matrix: which test file runs on which runner, and running it."""


for command in (
    detect,
    list_files,
    check,
    matrix,
    run,
    coverage,
    estimate,
    flaky,
    bot,
    plan,
    init,
    register_command,
):
    main.add_command(command)


def _add_epilog(group: click.Group) -> None:
    """Every command's --help shows the exit-code table too."""
    for command in group.commands.values():
        command.epilog = command.epilog or _exit_codes_epilog()
        if isinstance(command, click.Group):
            _add_epilog(command)


_add_epilog(main)

if __name__ == "__main__":  # python -m gpumatrix.cli
    main(prog_name="gpumatrix")
