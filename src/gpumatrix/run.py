"""`gpumatrix run`: this machine's slice of the matrix, through pytest, with honest-signal guards.

A run fails, whatever pytest says, when it executed zero tests, or when a test was skipped for
hardware reasons on a machine that matches its runner: a mislabelled runner must not go green having
run nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpumatrix import GpumatrixError
from gpumatrix.config import CPU_CLASS, Matrix, Runner
from gpumatrix.registry import Registration

if TYPE_CHECKING:
    from rich.console import Console

    from gpumatrix.hardware import Hardware

__all__ = ["RunOptions", "RunSummary", "evaluate_report", "execute_run", "select_runner", "select_files"]


class RunError(GpumatrixError):
    exit_code = 2


@dataclass(frozen=True)
class RunOptions:
    label: str = "auto"
    shard: str | None = None
    workers: str | None = None
    tests_file: Path | None = None
    junit_xml: Path | None = None
    report: Path | None = None
    summary_md: Path | None = None
    preflight: bool = True
    pytest_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSummary:
    """What a finished run amounts to, and why it fails if it does."""

    runner: str
    executed: int
    passed: int
    failed: int
    errors: int
    skipped: int
    per_file: Mapping[str, Mapping[str, int]]
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def select_runner(matrix: Matrix, hardware: Hardware, label: str) -> tuple[Runner, dict[str, str]]:
    """The runner to run as, and environment changes that make this machine match it.

    `auto` picks the runner of this machine's class with exactly its GPU count; failing that, the
    largest runner of the class that fits, with CUDA_VISIBLE_DEVICES narrowed to that many GPUs.
    """
    if label != "auto":
        runner = matrix.runner(label)
        if runner is None:
            known = ", ".join(r.label for r in matrix.runners)
            raise RunError(f"--runner: unknown runner {label!r} (known: {known})")
        return runner, {}
    same_class = [r for r in matrix.runners if r.gpu_class == hardware.gpu_class]
    exact = [r for r in same_class if r.gpus == hardware.count]
    if exact:
        return exact[0], {}
    fitting = [r for r in same_class if 0 < r.gpus < hardware.count]
    if fitting:
        runner = max(fitting, key=lambda r: r.gpus)
        return runner, {"CUDA_VISIBLE_DEVICES": ",".join(hardware.device_ids[: runner.gpus])}
    raise RunError(
        f"--runner auto: no runner matches this machine ({hardware.describe()}); runners: "
        + ", ".join(f"{r.label} ({r.gpus} x {r.gpu_class})" for r in matrix.runners)
    )


def select_files(
    files: Sequence[Registration], *, shard: str | None, tests_file: Path | None, runner: Runner
) -> list[str]:
    """The pytest targets of this run: the runner's slice, one shard of it, or an explicit list."""
    from gpumatrix.shard import lpt_pack, parse_shard_spec

    slice_paths = {f.path for f in files}
    if tests_file is not None:
        try:
            lines = tests_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise RunError(f"--tests-file: cannot read {tests_file}: {exc.strerror}") from exc
        targets = [line.strip() for line in lines if line.strip()]
        foreign = [t for t in targets if t.split("::", 1)[0] not in slice_paths]
        if foreign:
            raise RunError(f"--tests-file: not registered for runner {runner.label}: {', '.join(foreign)}")
        if not targets:
            raise RunError(f"--tests-file: {tests_file} names no tests")
        return targets
    if shard is None:
        return sorted(slice_paths)
    try:
        index, count = parse_shard_spec(shard)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    bins = lpt_pack([(f.path, f.est_time) for f in files], count)
    return sorted(name for name, _ in bins[index - 1])


def evaluate_report(report: Mapping, *, runner: Runner, hardware_matches: bool) -> RunSummary:
    """Turn the plugin's JSON report into a summary and the guard failures."""
    per_file: dict[str, dict[str, int]] = {}
    hardware_skips: list[str] = []
    for path, outcome in sorted(report.get("files", {}).items()):
        counts = {key: len(outcome.get(key, [])) for key in ("passed", "failed", "errors", "skipped")}
        per_file[path] = counts
        hardware_skips.extend(
            f"{s['nodeid']}: {s['reason']}" for s in outcome.get("skipped", []) if s.get("hardware")
        )
    totals = {
        key: sum(c[key] for c in per_file.values()) for key in ("passed", "failed", "errors", "skipped")
    }
    executed = totals["passed"] + totals["failed"] + totals["errors"]
    problems: list[str] = []
    if executed == 0:
        problems.append(f"runner {runner.label} ran zero tests: a job that runs nothing must not pass")
    if hardware_matches and hardware_skips:
        shown = "; ".join(hardware_skips[:5]) + (" ..." if len(hardware_skips) > 5 else "")
        problems.append(
            f"{len(hardware_skips)} test(s) skipped for hardware reasons on a machine that matches "
            f"runner {runner.label}: {shown}"
        )
    return RunSummary(
        runner=runner.label, executed=executed, per_file=per_file, problems=tuple(problems), **totals
    )


def execute_run(console: Console, root: Path, options: RunOptions) -> int:
    from gpumatrix.hardware import detect, preflight
    from gpumatrix.registry import load_tree

    # pytest runs in `root`: relative paths given here must not be read again from there.
    root = Path(root).resolve()
    matrix, registry = load_tree(root)
    if registry.problems:
        for problem in registry.problems:
            console.print(f"[red]error[/red] {problem}", soft_wrap=True)
        return 2
    hardware = detect(matrix)
    runner, env_changes = select_runner(matrix, hardware, options.label)
    env = {**os.environ, **env_changes}
    if env_changes:
        hardware = detect(matrix, environ=env)
    matches = hardware.gpu_class == runner.gpu_class and hardware.count == runner.gpus
    if not matches:
        raise RunError(
            f"this machine ({hardware.describe()}) is not runner {runner.label} "
            f"({runner.gpus} x {runner.gpu_class}): refusing to run rather than skip everything"
        )
    if options.preflight and runner.gpu_class != CPU_CLASS and hardware.source != "override":
        problems = preflight(hardware, runner)
        if problems:
            for problem in problems:
                console.print(f"[red]error[/red] {problem}", soft_wrap=True)
            raise RunError(f"the GPUs runner {runner.label} claims are not all present and idle")

    files = registry.for_runner(runner.label)
    targets = select_files(files, shard=options.shard, tests_file=options.tests_file, runner=runner)
    gated = [f for f in registry.files if runner.label not in f.runners]
    if not targets:
        console.print(f"[red]error[/red] runner {runner.label} has no test files in this selection")
        _render_gated(console, gated)
        return 1

    reports_dir = root / "reports"
    junit = options.junit_xml or reports_dir / f"junit-{runner.label}.xml"
    report_path = (options.report or reports_dir / f"gpumatrix-{runner.label}.json").resolve()
    junit = junit.resolve()
    for path in (junit, report_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    report_path.unlink(missing_ok=True)
    workers = options.workers or ("auto" if runner.gpu_class == CPU_CLASS else str(runner.gpus))
    # --rootdir and --gpumatrix-root: a tree nested in another project's pytest config keeps its own
    # matrix, registry and root-relative node ids.
    command = [
        sys.executable,
        "-m",
        "pytest",
        *targets,
        "--runner",
        runner.label,
        "--rootdir",
        str(root),
        "--gpumatrix-root",
        str(root),
        "--gpumatrix-report",
        str(report_path),
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
    ]
    if workers not in ("0", "1"):
        command += ["-n", workers]
    if env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        command += ["-p", "gpumatrix.plugin"]
    command += list(options.pytest_args)
    console.print(
        f"[bold]runner {runner.label}[/bold] on {hardware.describe()}: {len(targets)} target(s)"
        + (f", shard {options.shard}" if options.shard else "")
    )
    returncode = subprocess.call(command, cwd=root, env=env)
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        console.print(f"[red]error[/red] pytest (exit {returncode}) wrote no report to {report_path}")
        return returncode or 1
    summary = evaluate_report(report, runner=runner, hardware_matches=matches)
    _render_summary(console, summary)
    _render_gated(console, gated)
    if options.summary_md is not None:
        with options.summary_md.open("a", encoding="utf-8") as out:
            out.write(summary_markdown(summary))
    for problem in summary.problems:
        console.print(f"[red]error[/red] {problem}", soft_wrap=True)
    if returncode:
        return returncode
    return 0 if summary.ok else 1


def summary_markdown(summary: RunSummary) -> str:
    icon = "✅" if summary.ok and not summary.failed and not summary.errors else "❌"
    lines = [
        f"### {icon} gpumatrix run on `{summary.runner}`",
        "",
        f"{summary.executed} executed: {summary.passed} passed, {summary.failed} failed, "
        f"{summary.errors} errors, {summary.skipped} skipped",
        "",
        "| file | passed | failed | errors | skipped |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| `{path}` | {c['passed']} | {c['failed']} | {c['errors']} | {c['skipped']} |"
        for path, c in summary.per_file.items()
    ]
    lines += [f"- ❗ {problem}" for problem in summary.problems]
    return "\n".join(lines) + "\n\n"


def _render_summary(console: Console, summary: RunSummary) -> None:
    from rich.table import Table

    table = Table(title=f"runner {summary.runner}: {summary.executed} executed")
    for column in ("file", "passed", "failed", "errors", "skipped"):
        table.add_column(column, justify="left" if column == "file" else "right")
    for path, counts in summary.per_file.items():
        table.add_row(path, *(str(counts[k]) for k in ("passed", "failed", "errors", "skipped")))
    table.add_row(
        "[bold]total[/bold]",
        str(summary.passed),
        str(summary.failed),
        str(summary.errors),
        str(summary.skipped),
    )
    console.print(table)


def _render_gated(console: Console, gated: Sequence[Registration]) -> None:
    if not gated:
        return
    from rich.table import Table

    table = Table(title=f"gated to other runners ({len(gated)} files, not run here)")
    table.add_column("file")
    table.add_column("needs")
    table.add_column("runners")
    for f in gated:
        needs = f"{f.gpus} x {'|'.join(c for c in f.on if c != CPU_CLASS)}" if f.needs_gpu else "cpu"
        table.add_row(f.path, needs, ", ".join(f.runners))
    console.print(table)
