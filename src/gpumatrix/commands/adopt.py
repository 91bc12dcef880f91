"""The commands that set a repository up for gpumatrix: `gpumatrix init` and `gpumatrix register`.

Each computes a plan (`gpumatrix.adopt.init`, `gpumatrix.adopt.suggest`) and prints it; `GpumatrixError`s
reach the group's one handler in `gpumatrix.cli`, which maps them to exit codes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpumatrix import UsageError
from gpumatrix.console import console, find_root
from gpumatrix.escape import terminal

__all__ = ["init", "register"]


def _default_root(root: Path | None) -> Path:
    from gpumatrix.bot.tree import git_toplevel

    return root or git_toplevel(Path.cwd()) or Path.cwd()


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _counts(value: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    try:
        counts = tuple(int(part) for part in _split(value))
    except ValueError:
        counts = ()
    if not counts or any(count < 1 for count in counts):
        raise UsageError(f"--gpus {value!r}: expected GPU counts such as 1 or 1,2")
    return counts


@click.command()
@click.option(
    "--classes",
    default=None,
    help="GPU classes to declare, comma-separated (e.g. h100,mi300x,pvc); default: those the "
    "workflows' runner labels name and those the test files need (read as data), else h100.",
)
@click.option(
    "--gpus",
    default=None,
    help="GPU counts of every class's runners (e.g. 1,2); default: 1 and each count a test file needs.",
)
@click.option(
    "--test-root",
    "test_roots",
    multiple=True,
    help="A directory holding test files (repeatable); default: pytest's testpaths, else the directories "
    "holding test_*.py files.",
)
@click.option("--force", is_flag=True, help="Overwrite a ci/matrix.yaml that differs from what init writes.")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The repository (default: the git work tree here).",
)
def init(
    classes: str | None, gpus: str | None, test_roots: tuple[str, ...], force: bool, root: Path | None
) -> None:
    """Write ci/matrix.yaml, the -p no:gpumatrix fallback in each test root's conftest.py and the
    .gitignore entries, from what the repository says; print the next steps. Running it again changes
    nothing."""
    from gpumatrix.adopt.init import InitOptions, apply_init, plan_init, survey_repository

    root = _default_root(root)
    survey = survey_repository(root)
    options = InitOptions(
        classes=_split(classes),
        gpus=_counts(gpus),
        test_roots=tuple(r.strip().rstrip("/") for r in test_roots),
        force=force,
    )

    def read(path: str) -> str | None:
        full = root / path
        return full.read_text(encoding="utf-8") if full.is_file() else None

    plan = plan_init(survey, options, read=read)
    apply_init(root, plan)
    out = console()
    for reason in plan.reasons:
        out.print(terminal(reason), soft_wrap=True)
    for planned in plan.files:
        why = f" ({planned.why})" if planned.why else ""
        out.print(f"{planned.action:>9}  {terminal(planned.path)}{terminal(why)}", soft_wrap=True)
    out.print("next:")
    for step in plan.next_steps:
        out.print(f"  {terminal(step)}", soft_wrap=True)


@click.command()
@click.option(
    "--suggest", is_flag=True, required=True, help="Propose a registration for each unregistered file."
)
@click.option(
    "--write", is_flag=True, help="Insert the proposed registrations (default: print them as a diff)."
)
@click.option(
    "--default",
    "default_on",
    type=click.Choice(["cpu", "gpu"]),
    default="cpu",
    show_default=True,
    help="Where a file that shows no sign of needing a GPU is registered: cpu, or every GPU class.",
)
@click.option(
    "--gpu-module",
    "gpu_modules",
    multiple=True,
    help="A module whose import means the file needs a GPU (repeatable; GPU-only libraries such as "
    "flash_attn, deep_gemm or cupy are known already).",
)
@click.option(
    "--est-time", type=click.FloatRange(min=1), default=60, show_default=True, help="Seconds per file."
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Tree holding ci/matrix.yaml and its test roots (default: the repository root).",
)
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
def register(
    suggest: bool,
    write: bool,
    default_on: str,
    gpu_modules: tuple[str, ...],
    est_time: float,
    root: Path | None,
    paths: tuple[Path, ...],
) -> None:
    """Propose where each unregistered test file runs, from what it already says (its skips on GPU
    availability, compute capability and device count, its imports of GPU-only libraries, its name),
    as a diff; --write inserts each after the file's docstring and imports, touching nothing else."""
    del suggest  # the one mode there is; required, so that the command says what it does
    from gpumatrix.adopt.suggest import SuggestOptions, apply_suggestions, suggest_tree

    root = root or find_root()
    options = SuggestOptions(default_on=default_on, gpu_modules=gpu_modules, est_time=est_time)
    result = suggest_tree(root, options, only=tuple(paths))
    out, errors = console(), console(stderr=True)
    for suggestion in result.suggestions:
        out.print(f"{terminal(suggestion.path)}: {terminal(suggestion.call)}", soft_wrap=True)
        for reason in suggestion.reasons:
            out.print(f"    {terminal(reason)}", soft_wrap=True)
        if not write:
            sys.stdout.write(terminal(suggestion.diff, newlines=True, markup=False))
    for problem in result.problems:
        errors.print(f"[red]error:[/red] {terminal(str(problem))}", soft_wrap=True)
    if write:
        apply_suggestions(root, result.suggestions)
    verb = "registered" if write else "to register (--write inserts them)"
    out.print(f"{len(result.suggestions)} file(s) {verb}; {len(result.problems)} problem(s)")
    sys.exit(1 if result.problems else 0)
