"""Per-test refinement: `@pytest.mark.gpumatrix(on=..., gpus=...)` narrows where one test of a file runs.

A registered file says where all its tests run; a test that needs less of that (fewer classes) or
more GPUs (a 2-GPU test in a 1-GPU file) says so with the marker, read like the registration itself:
statically, with literal arguments, on a test function, a method of a `Test*` class or the class.
Refining may only narrow: every class of `on` must be one of the file's, and `gpus` at least the
file's; anything else is a problem at the marker's line. The registry sends the file to the runners
its refined tests need too (`Registration.refined`), and the plugin runs each test only on the runners
of its own need, skipping it where the machine cannot meet that need with a hardware skip (which the
run guards count, as for files).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpumatrix.bounds import MAX_GPUS
from gpumatrix.problems import Problem
from gpumatrix.registry.source import DEEP_NESTING, deepest_line, shown_literal

__all__ = ["MARKER", "Refinement", "read_refinements", "refined_key"]

MARKER = "gpumatrix"
_MENTION = f"mark.{MARKER}"


@dataclass(frozen=True)
class Refinement:
    """The need of one test (`Class::test` or `test`): classes and GPU count, from the marker's line."""

    test: str
    on: tuple[str, ...]
    gpus: int
    line: int


def refined_key(cls_name: str | None, function_name: str) -> str:
    """How a refinement names a test: `TestX::test_y`, or `test_y` at module level."""
    return f"{cls_name}::{function_name}" if cls_name else function_name


def read_refinements(
    text: str, path: str, *, file_on: Sequence[str], file_gpus: int
) -> tuple[tuple[Refinement, ...], list[Problem]]:
    """The refinements of a file's tests, and the problems of its markers (not literal, widening).

    A file whose text never mentions `mark.gpumatrix` is not parsed.
    """
    if _MENTION not in text:
        return (), []
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return (), []  # pytest reports it when it imports the file
    except (RecursionError, MemoryError):  # Python's parser limits: pytest could not import it either
        return (), [Problem(path, deepest_line(text), DEEP_NESTING)]
    found: list[Refinement] = []
    problems: list[Problem] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test"):
            targets = [(refined_key(None, stmt.name), stmt.decorator_list)]
        elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            targets = [
                (refined_key(stmt.name, m.name), [*stmt.decorator_list, *m.decorator_list])
                for m in stmt.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")
            ]
        else:
            continue
        for test, decorators in targets:
            markers = [d for d in decorators if _is_marker(d)]
            if not markers:
                continue
            refinement, errors = _read_marker(test, markers[-1], path, file_on, file_gpus)
            problems.extend(errors)
            if refinement is not None:
                found.append(refinement)
    return tuple(found), problems


def _is_marker(node: ast.expr) -> bool:
    func = node.func if isinstance(node, ast.Call) else node
    return isinstance(func, ast.Attribute) and func.attr == MARKER and _dotted(func.value).endswith("mark")


def _dotted(node: ast.expr) -> str:
    """`a.b.c` of an attribute chain, walked without recursion (a chain may be thousands long)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(getattr(node, "id", ""))
    return ".".join(reversed(parts))


def _read_marker(
    test: str, node: ast.expr, path: str, file_on: Sequence[str], file_gpus: int
) -> tuple[Refinement | None, list[Problem]]:
    line = node.lineno
    usage = f"@pytest.mark.{MARKER}(on=(...), gpus=N) takes keyword arguments with literal values"
    if not isinstance(node, ast.Call) or node.args or not node.keywords:
        return None, [Problem(path, line, f"{test}: {usage}")]
    values: dict[str, object] = {}
    for keyword in node.keywords:
        if keyword.arg not in ("on", "gpus"):
            return None, [Problem(path, line, f"{test}: {usage}; got {keyword.arg or '**'}=")]
        try:
            values[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None, [Problem(path, line, f"{test}: {usage}; {keyword.arg}= is not a literal")]
    on = values.get("on", tuple(file_on))
    on = (on,) if isinstance(on, str) else on
    gpus = values.get("gpus", file_gpus)
    if not isinstance(on, (tuple, list)) or not on or not all(isinstance(c, str) for c in on):
        return None, [
            Problem(
                path, line, f"{test}: on= must be a non-empty tuple of class names, got {shown_literal(on)}"
            )
        ]
    if not isinstance(gpus, int) or isinstance(gpus, bool) or not 1 <= gpus <= MAX_GPUS:
        shown = shown_literal(gpus)
        return None, [
            Problem(path, line, f"{test}: gpus= must be a positive integer (at most {MAX_GPUS}), got {shown}")
        ]
    problems = [
        Problem(path, line, f"{test}: widens the file's registration: {why}")
        for why in _widening(on, gpus, file_on, file_gpus)
    ]
    return (None, problems) if problems else (Refinement(test, tuple(on), gpus, line), [])


def _widening(on: Iterable[str], gpus: int, file_on: Sequence[str], file_gpus: int) -> list[str]:
    found = [
        f"class {name!r} is not in the file's on={tuple(file_on)!r}" for name in on if name not in file_on
    ]
    if gpus < file_gpus:
        found.append(f"gpus={gpus} is fewer than the file's gpus={file_gpus}")
    return found
