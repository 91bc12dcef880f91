"""What every command shares: the terminal it writes to, the tree it works on, and how problems show.

`console()` is rich's console for stdout or stderr (160 columns where the stream is not a terminal: CI
logs would otherwise cut test paths at 80); `find_root()` the nearest directory holding ci/matrix.yaml.
Problems (a bad matrix, bad registrations) and the error a command stopped on are drawn by
`render_problems` and `render_error` alone, so every command shows them the same way. Text that came
from files, reports or GitHub goes through `gpumatrix.escape.terminal`, never to the terminal raw.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpumatrix import GpumatrixError
from gpumatrix.escape import terminal
from gpumatrix.problems import Problem, ProblemsError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["console", "find_root", "render_error", "render_problems"]


def find_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: cwd) holding ci/matrix.yaml."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "ci" / "matrix.yaml").is_file():
            return candidate
    return here


def console(*, stderr: bool = False) -> Console:
    """rich's console on stdout (or stderr), with no highlighting of what it prints."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # CI logs are not terminals and rich would assume 80 columns, cutting test paths short.
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, width=width)


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
