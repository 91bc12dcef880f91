"""Results and renderings behind `gpumatrix detect | list | check | matrix`.

Functions here compute plain results; the `render_*` functions draw them with rich. `gpumatrix run`
lives in `gpumatrix.run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpumatrix import GpumatrixError
from gpumatrix.config import Matrix, MatrixError
from gpumatrix.registry import Registration, Registry
from gpumatrix.run import RunOptions, execute_run
from gpumatrix.shard import ShardPlan, budget_seconds, plan_matrix

if TYPE_CHECKING:
    from rich.console import Console

    from gpumatrix.hardware import Hardware

__all__ = [
    "RunOptions",
    "UsageError",
    "build_matrix_include",
    "check_runner_label",
    "execute_run",
    "render_file_table",
    "render_hardware",
    "render_matrix",
    "run_check",
]


class UsageError(GpumatrixError):
    exit_code = 2


def check_runner_label(matrix: Matrix, label: str) -> None:
    if matrix.runner(label) is None:
        known = ", ".join(r.label for r in matrix.runners)
        raise UsageError(f"--runner: unknown runner {label!r} (known: {known})")


def render_hardware(console: Console, hardware: Hardware, matrix: Matrix | None) -> None:
    from rich.table import Table

    table = Table(title=f"this machine: {hardware.describe()}", show_header=False)
    table.add_row("class", hardware.gpu_class)
    table.add_row("GPUs", str(hardware.count))
    for index, name in enumerate(hardware.names):
        capability = hardware.capabilities[index] if index < len(hardware.capabilities) else None
        cc = f"sm_{capability[0]}{capability[1]}" if capability else "?"
        table.add_row(f"GPU {index}", f"{name} ({cc})")
    table.add_row("driver", hardware.driver or "-")
    table.add_row("detected via", hardware.source)
    if matrix is None:
        table.add_row("matching runner", "no ci/matrix.yaml here (pass --root DIR)")
    else:
        matching = [
            r.label for r in matrix.runners if r.gpu_class == hardware.gpu_class and r.gpus == hardware.count
        ]
        table.add_row("matching runner", ", ".join(matching) or "none")
    console.print(table)


def render_file_table(console: Console, files: Sequence[Registration], *, title: str) -> None:
    from rich.table import Table

    table = Table(title=f"{title} ({len(files)} files)")
    for column in ("file", "classes", "GPUs", "est. s", "runners"):
        table.add_column(column, justify="right" if column in ("GPUs", "est. s") else "left")
    for f in files:
        table.add_row(
            f.path,
            ", ".join(f.on),
            str(f.gpus) if f.needs_gpu else "-",
            f"{f.est_time:g}",
            ", ".join(f.runners),
        )
    console.print(table)


def run_check(console: Console, root: Path) -> int:
    """Validate the matrix and every registration; 0 clean, 1 registry problems, 2 invalid matrix."""
    from gpumatrix.config import load_matrix
    from gpumatrix.registry import discover

    try:
        matrix = load_matrix(root / "ci" / "matrix.yaml")
    except MatrixError as exc:
        for problem in exc.problems:
            console.print(f"[red]error[/red] {problem}", soft_wrap=True)
        return 2
    with console.status("reading test registrations"):
        registry = discover(root, matrix)
    for problem in registry.problems:
        console.print(f"[red]error[/red] {problem}", soft_wrap=True)
    plans = plan_matrix(matrix, registry)
    for plan in plans:
        if plan.over_budget:
            longest = max(s.est_time for s in plan.shards)
            console.print(
                f"[yellow]warning[/yellow] runner {plan.runner.label}: the longest of its "
                f"{plan.count} shard(s) is estimated at {longest:.0f} s, over its budget of "
                f"{budget_seconds(plan.runner):.0f} s; raise max_shards or the timeout",
                soft_wrap=True,
            )
    idle = [r.label for r in matrix.runners if not registry.for_runner(r.label)]
    status = "[green]ok[/green]" if registry.ok else f"[red]{len(registry.problems)} problem(s)[/red]"
    console.print(
        f"{status}: {len(matrix.runners)} runners, {len(registry.files)} registered test files"
        + (f"; runners with no files: {', '.join(idle)}" if idle else "")
    )
    return 0 if registry.ok else 1


def build_matrix_include(
    matrix: Matrix, registry: Registry, *, label: str | None = None
) -> tuple[list[dict], list[ShardPlan]]:
    """GitHub Actions `strategy.matrix.include` entries, one per runner shard."""
    plans = [p for p in plan_matrix(matrix, registry) if label is None or p.runner.label == label]
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


def render_matrix(console: Console, plans: Sequence[ShardPlan]) -> None:
    from rich.table import Table

    table = Table(title="runner x shard matrix")
    for column in ("runner", "shard", "files", "est. s", "budget s"):
        table.add_column(column, justify="left" if column == "runner" else "right")
    for plan in plans:
        for shard in plan.shards:
            table.add_row(
                plan.runner.label,
                f"{shard.index}/{plan.count}",
                str(len(shard.files)),
                f"{shard.est_time:.0f}",
                f"{budget_seconds(plan.runner):.0f}" + (" (over)" if plan.over_budget else ""),
            )
    console.print(table)
