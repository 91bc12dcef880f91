"""Resolution: which runner serves each class a registration names, and the class a file runs as here.

A file's runner on a class is the runner of that class with the fewest GPUs that is still `>= gpus`
(`Matrix.runner_for`); a refined test (`@pytest.mark.gpumatrix`) is placed by its own need, and the file
goes to the runners of every need. A class no runner serves, or a need no runner of the class meets, is a
problem at the argument's line. The rules are docs/registry.md's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpumatrix.config import CPU_CLASS, Matrix, Runner
from gpumatrix.problems import Problem
from gpumatrix.registry.model import FileReading, Registration, Registry, assembled

if TYPE_CHECKING:
    from gpumatrix.hardware.detection import Hardware

__all__ = ["resolve_registry", "running_class"]

BRACKETS = (
    "pytest cannot be given a path holding '[' or ']' (it reads them as a test's parameters), so no "
    "runner could run this file: rename it"
)


def resolve_registry(readings: Mapping[str, FileReading], matrix: Matrix) -> Registry:
    """The registry of files already read: each registration with the runner of every class it names."""
    files: list[Registration] = []
    problems: list[Problem] = []
    runners: dict[tuple[str, int], Runner | None] = {}  # (class, gpus): its runner, looked up once
    for path in sorted(readings):
        registration, found = readings[path]
        problems.extend(found)
        if registration is None:
            continue
        if "[" in path or "]" in path:  # pytest refuses the file as an argument ("[] parametrization")
            problems.append(Problem(path, 0, BRACKETS))
            continue
        resolved, found = _resolve_runners(registration, matrix, runners)
        problems.extend(found)
        if resolved is not None:
            files.append(resolved)
    return Registry(tuple(files), tuple(problems))


def running_class(registration: Registration, hardware: Hardware, runner: Runner | None) -> str | None:
    """The class the file runs as here, which its `disabled_on` and `flaky=` are looked up by: the runner's;
    else this machine's GPU class when the file names it, else `cpu` when it names that (the rules of
    `gpumatrix.running.gating.evaluate_hardware`); None when it names neither."""
    if runner is not None:
        return runner.gpu_class
    if hardware.count and hardware.gpu_class in registration.on:
        return hardware.gpu_class
    return CPU_CLASS if CPU_CLASS in registration.on else None


def _resolve_runners(
    registration: Registration, matrix: Matrix, runners: dict[tuple[str, int], Runner | None]
) -> FileReading:
    problems: list[Problem] = []
    lines = dict(registration.arg_lines)
    on_line = lines.get("on", registration.line)
    if registration.suite not in matrix.suites:
        problems.append(
            Problem(
                registration.path,
                lines.get("suite", registration.line),
                f"register(suite=...) names unknown suite {registration.suite!r} "
                f"(known: {', '.join(matrix.suites)}); declare it under suites: in {matrix.source}",
            )
        )
    needs = [(registration.on, registration.gpus, on_line)]
    needs += [(on, gpus, line) for on, _, _, gpus, line in registration.refined]
    by_need: list[list[str]] = []
    for need_on, need_gpus, need_line in needs:
        labels: list[str] = []
        by_need.append(labels)
        problems.extend(_need_runners(registration, matrix, runners, need_on, need_gpus, need_line, labels))
    if problems:
        return None, problems
    if not registration.refined:
        return assembled({**vars(registration), "runners": tuple(by_need[0])}), []
    refined = tuple(
        (on, tuple(labels), test, gpus, line)
        for (on, _, test, gpus, line), labels in zip(registration.refined, by_need[1:], strict=True)
    )
    union = tuple(dict.fromkeys(label for labels in by_need for label in labels))
    return assembled(
        {**vars(registration), "runners": union, "own_runners": tuple(by_need[0]), "refined": refined}
    ), []


def _need_runners(
    registration: Registration,
    matrix: Matrix,
    runners: dict[tuple[str, int], Runner | None],
    on: tuple[str, ...],
    gpus: int,
    on_line: int,
    labels: list[str],
) -> list[Problem]:
    """The problems of one need (the file's, or a refined test's): its runners are added to `labels`."""
    problems: list[Problem] = []
    lines = dict(registration.arg_lines)
    for class_name in on:
        if class_name not in matrix.classes:
            problems.append(
                Problem(
                    registration.path,
                    on_line,
                    f"register(on=...) names unknown class {class_name!r} "
                    f"(known: {', '.join(matrix.classes)})",
                )
            )
            continue
        key = (class_name, gpus)
        if key not in runners:
            runners[key] = matrix.runner_for(class_name, gpus)
        runner = runners[key]
        if runner is not None:
            labels.append(runner.label)
            continue
        offered = sorted({r.gpus for r in matrix.runners_of(class_name)})
        if not offered:
            problems.append(
                Problem(
                    registration.path,
                    on_line,
                    f"register(on=...) names class {class_name!r}, which no runner of "
                    f"{matrix.source} serves: add a runner of that class or drop it from on=",
                )
            )
        else:
            problems.append(
                Problem(
                    registration.path,
                    lines.get("gpus", on_line)
                    if (on, gpus) == (registration.on, registration.gpus)
                    else on_line,
                    f"needs {gpus} x {class_name}, but no runner of class "
                    f"{class_name!r} has that many GPUs (its runners have "
                    f"{', '.join(map(str, offered))} GPU(s))",
                )
            )
    return problems
