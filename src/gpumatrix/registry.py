"""The static test registry: which test file runs on which runner, read by parsing, never importing.

Every `tests/**/test_*.py` calls `gpumatrix.register(on=..., gpus=..., est_time=...)` once at module
top level with literal arguments. This module reads that call with `ast`, so the registry can be built
on a runner without torch, over a PR's tree read as data, and in well under a second for thousands of
files (benchmarks/registry_discovery.py).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpumatrix.config import CPU_CLASS, Matrix, Problem, load_matrix

__all__ = [
    "Registration",
    "Registry",
    "build_registry",
    "discover",
    "find_test_files",
    "load_tree",
    "read_registration",
]

_KEYWORDS = ("on", "gpus", "est_time")


@dataclass(frozen=True)
class Registration:
    """One test file's registration, with the runner that serves each class it names."""

    path: str  # repository-relative, '/'-separated: tests/kernels/test_quantize_mxfp8.py
    line: int
    on: tuple[str, ...]
    gpus: int
    est_time: float
    runners: tuple[str, ...] = ()  # runner labels, one per class of `on`, in the same order

    @property
    def needs_gpu(self) -> bool:
        return any(name != CPU_CLASS for name in self.on)


@dataclass(frozen=True)
class Registry:
    files: tuple[Registration, ...]
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def get(self, path: str) -> Registration | None:
        for registration in self.files:
            if registration.path == path:
                return registration
        return None

    def for_runner(self, label: str) -> tuple[Registration, ...]:
        return tuple(r for r in self.files if label in r.runners)


def find_test_files(root: str | Path, *, tests_dir: str = "tests") -> list[str]:
    """Repository-relative paths of every `test_*.py` under `root/tests_dir`, sorted."""
    root = Path(root)
    found: list[str] = []
    # os.walk + string checks: about 3x faster than Path.rglob on a 5,000-file tree.
    for dirpath, dirnames, filenames in os.walk(root / tests_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        found.extend(
            f"{rel}/{name}" for name in filenames if name.startswith("test_") and name.endswith(".py")
        )
    return sorted(found)


def discover(root: str | Path, matrix: Matrix, *, tests_dir: str = "tests") -> Registry:
    """Build the registry of a tree on disk."""
    root = Path(root)
    sources: dict[str, str] = {}
    problems: list[Problem] = []
    for path in find_test_files(root, tests_dir=tests_dir):
        try:
            sources[path] = (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(path, 0, f"cannot read test file: {exc}"))
    registry = build_registry(sources, matrix)
    return Registry(registry.files, tuple(problems) + registry.problems)


def load_tree(root: str | Path) -> tuple[Matrix, Registry]:
    """The matrix (`root/ci/matrix.yaml`, raising `MatrixError` when invalid) and the registry of `root`."""
    matrix = load_matrix(Path(root) / "ci" / "matrix.yaml")
    return matrix, discover(root, matrix)


def build_registry(sources: Mapping[str, str], matrix: Matrix) -> Registry:
    """Build a registry from `{repository-relative path: source text}` — files read as data."""
    files: list[Registration] = []
    problems: list[Problem] = []
    for path in sorted(sources):
        registration, found = read_registration(sources[path], path)
        problems.extend(found)
        if registration is None:
            continue
        resolved, found = _resolve_runners(registration, matrix)
        problems.extend(found)
        if resolved is not None:
            files.append(resolved)
    return Registry(tuple(files), tuple(problems))


def read_registration(source: str, path: str) -> tuple[Registration | None, list[Problem]]:
    """Parse one file's `register(...)` call; returns the registration or the problems found."""
    if "register" not in source:  # fast path: most of a large tree's cost is ast.parse
        return None, [Problem(path, 1, _MISSING)]
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return None, [Problem(path, exc.lineno or 0, f"cannot parse test file: {exc.msg}")]
    names, modules = _register_aliases(tree.body)
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _is_register(node.func, names, modules)
    ]
    top_level = {id(stmt.value) for stmt in tree.body if isinstance(stmt, ast.Expr)}
    nested = [call for call in calls if id(call) not in top_level]
    problems = [
        Problem(
            path,
            call.lineno,
            "register(...) must be called at module top level, not inside a function, class or condition",
        )
        for call in nested
    ]
    calls = [call for call in calls if id(call) in top_level]
    if not calls:
        return None, problems or [Problem(path, 1, _MISSING)]
    if len(calls) > 1:
        lines = ", ".join(str(call.lineno) for call in calls)
        return None, [
            *problems,
            Problem(
                path,
                calls[1].lineno,
                f"register(...) is called {len(calls)} times (lines {lines}); call it exactly once",
            ),
        ]
    registration, found = _read_call(calls[0], path)
    return (registration if not problems and not found else None), problems + found


_MISSING = (
    "test file is not registered: add `from gpumatrix import register` and, at module top level, "
    '`register(on=("cpu",), est_time=SECONDS)` naming the classes it runs on'
)


def _register_aliases(body: Iterable[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names bound to `gpumatrix.register` and to the `gpumatrix` module by top-level imports."""
    names: set[str] = set()
    modules: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "gpumatrix" and stmt.level == 0:
            names.update(alias.asname or alias.name for alias in stmt.names if alias.name == "register")
        elif isinstance(stmt, ast.Import):
            modules.update(alias.asname or alias.name for alias in stmt.names if alias.name == "gpumatrix")
    return names, modules


def _is_register(func: ast.expr, names: set[str], modules: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in names
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "register"
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )


def _read_call(call: ast.Call, path: str) -> tuple[Registration | None, list[Problem]]:
    problems: list[Problem] = []

    def bad(node: ast.AST, message: str) -> None:
        problems.append(Problem(path, getattr(node, "lineno", call.lineno), message))

    if call.args:
        bad(call.args[0], "register(...) takes keyword arguments only: on=..., gpus=..., est_time=...")
    values: dict[str, object] = {}
    seen: set[str] = set()
    for keyword in call.keywords:
        if keyword.arg is None:
            bad(keyword.value, "register(...) cannot take **kwargs: write on=, gpus= and est_time= literally")
        elif keyword.arg not in _KEYWORDS:
            bad(
                keyword.value,
                f"register(...) got unknown argument {keyword.arg!r} (expected {', '.join(_KEYWORDS)})",
            )
        elif keyword.arg in seen:  # ast parses it; Python refuses to compile it
            bad(keyword.value, f"register(...) repeats the argument {keyword.arg}=")
        else:
            seen.add(keyword.arg)
            try:
                values[keyword.arg] = ast.literal_eval(keyword.value)
            # TypeError: a literal that cannot be built, such as a set of lists ({[]}).
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                bad(
                    keyword.value,
                    f"register({keyword.arg}=...) must be a literal, got "
                    f"`{ast.unparse(keyword.value)}`; the registry is read without importing the file",
                )

    on = values.get("on")
    if isinstance(on, str):
        on = (on,)
    if "on" not in values and not any(k.arg == "on" for k in call.keywords):
        bad(call, "register(...) is missing on=(...): the GPU classes this file runs on")
    elif "on" in values and (
        not isinstance(on, (tuple, list)) or not on or not all(isinstance(c, str) for c in on)
    ):
        bad(call, f"register(on=...) must be a non-empty tuple of class names, got {values['on']!r}")
    elif "on" in values and len(set(on)) != len(on):
        bad(call, f"register(on=...) names a class twice: {values['on']!r}")

    gpus = values.get("gpus", 1)
    if "gpus" in values and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1):
        bad(call, f"register(gpus=...) must be a positive integer, got {gpus!r}")

    est_time = values.get("est_time")
    if "est_time" not in values and not any(k.arg == "est_time" for k in call.keywords):
        bad(
            call,
            "register(...) is missing est_time=SECONDS (the file's run time on one runner, used for sharding)",
        )
    elif "est_time" in values and (
        not isinstance(est_time, (int, float))
        or isinstance(est_time, bool)
        or not est_time > 0
        or est_time == float("inf")
    ):
        bad(call, f"register(est_time=...) must be a positive number of seconds, got {est_time!r}")

    if problems:
        return None, problems
    return Registration(
        path=path, line=call.lineno, on=tuple(on), gpus=int(gpus), est_time=float(est_time)
    ), []


def _resolve_runners(registration: Registration, matrix: Matrix) -> tuple[Registration | None, list[Problem]]:
    problems: list[Problem] = []
    labels: list[str] = []
    for class_name in registration.on:
        if class_name not in matrix.classes:
            problems.append(
                Problem(
                    registration.path,
                    registration.line,
                    f"register(on=...) names unknown class {class_name!r} "
                    f"(known: {', '.join(matrix.classes)})",
                )
            )
            continue
        runner = matrix.runner_for(class_name, registration.gpus)
        if runner is None:
            offered = sorted({r.gpus for r in matrix.runners_of(class_name)})
            detail = (
                f"its runners have {', '.join(map(str, offered))} GPU(s)"
                if offered
                else "no runner serves that class"
            )
            problems.append(
                Problem(
                    registration.path,
                    registration.line,
                    f"needs {registration.gpus} x {class_name}, but no runner of class "
                    f"{class_name!r} has that many GPUs ({detail})",
                )
            )
            continue
        labels.append(runner.label)
    if problems:
        return None, problems
    return Registration(
        registration.path,
        registration.line,
        registration.on,
        registration.gpus,
        registration.est_time,
        tuple(labels),
    ), []
