"""The reader: one test file's `register(...)` call, read with `ast`, never by importing the file.

Every `tests/**/test_*.py` calls `gpumatrix.register(on=..., gpus=..., est_time=...)` once at module
top level with literal arguments (and, where it needs them, `suite=`, `disabled=`, `disabled_on=`,
`flaky=` and `gpu=`; `est_time` may give seconds per class). This module reads that call
(`gpumatrix.registry.source` reads the file as Python would, only as far as the call) and the tests'
`@pytest.mark.gpumatrix` refinements (`gpumatrix.registry.refine`), so the registry can be built on a
runner without torch, over a PR's tree read as data, and in well under a second for thousands of files.
What it gives is a `Registration` whose runners are not yet resolved, or the problems found, each with
its file and line. The rules are docs/registry.md's.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence

from gpumatrix.bounds import MAX_GPUS
from gpumatrix.config import DEFAULT_SUITE, MAX_SECONDS
from gpumatrix.problems import Problem
from gpumatrix.registry.model import FileReading, Registration
from gpumatrix.registry.refine import read_refinements
from gpumatrix.registry.source import (
    READ_LIMIT,
    SourceError,
    canonical_call,
    decode_source,
    parse_head,
    shown_literal,
)

__all__ = ["GPU_USES", "NOT_REGISTERED", "find_register_call", "read_registration"]

_KEYWORDS = ("on", "gpus", "est_time", "suite", "disabled", "disabled_on", "flaky", "gpu")
# `register(gpu=...)`: whether the file's tests may share a GPU with other tests (the runner's
# `workers_per_gpu`) or each holds its GPUs alone (timing, leases, memory-hungry tests).
GPU_USES = ("shared", "exclusive")
# A reason is shown in a pytest skip line, `gpumatrix list` and the bot's comments: one short line.
_REASON_LIMIT = 200
# Suite names travel into workflow inputs, like runner labels (ci/matrix.yaml checks declared ones so).
_SUITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def read_registration(source: str | bytes, path: str, *, size: int | None = None) -> FileReading:
    """Parse one file's `register(...)` call; returns the registration or the problems found.

    `source` is the file's bytes (decoded as Python decodes a module) or its text; `size` is the
    file's size when `source` holds only its first `READ_LIMIT` bytes.
    """
    if isinstance(source, bytes):
        if b"register" not in source:  # the pre-filter: no parse, no decode
            return None, [Problem(path, 1, _missing(size))]
        try:
            source = decode_source(source)
        except SourceError as exc:
            return None, [Problem(path, exc.line, exc.message)]
    plain = canonical_call(source)
    if plain is not None:  # the usual one-line form, read without a parser (gpumatrix.registry.source)
        gpus = plain.gpus if plain.gpus is not None else 1
        arg_lines = (
            ("on", plain.line),
            *((("gpus", plain.line),) if plain.gpus is not None else ()),
            ("est_time", plain.line),
        )
        return _with_refinements(
            Registration(
                path=path,
                line=plain.line,
                on=plain.on,
                gpus=gpus,
                est_time=plain.est_time,
                arg_lines=arg_lines,
            ),
            source,
        )
    try:
        body = parse_head(source, path)
    except SourceError as exc:
        return None, [Problem(path, exc.line, exc.message)]
    if body is None:
        return None, [Problem(path, 1, _missing(size))]
    names, modules = _register_aliases(body)
    calls: list[ast.Call] = []  # at module top level
    nested: list[ast.Call] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and _is_register(stmt.value.func, names, modules)
        ):
            calls.append(stmt.value)  # a call in its arguments is not a literal: _read_call says so
            continue
        nested.extend(
            node
            for node in ast.walk(stmt)
            if isinstance(node, ast.Call) and _is_register(node.func, names, modules)
        )
    problems = [
        Problem(
            path,
            call.lineno,
            "register(...) must be called at module top level, not inside a function, class or condition",
        )
        for call in nested
    ]
    if not calls:
        return None, problems or [Problem(path, 1, _missing(size))]
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
    if registration is None or problems or found:
        return None, problems + found
    return _with_refinements(registration, source)


def _with_refinements(registration: Registration, text: str) -> FileReading:
    """The registration with its refined tests (`gpumatrix.registry.refine`), or the problems of their markers."""
    found, problems = read_refinements(
        text, registration.path, file_on=registration.on, file_gpus=registration.gpus
    )
    if problems:
        return None, problems
    if not found:
        return registration, []
    refined = tuple((r.on, (), r.test, r.gpus, r.line) for r in found)
    return dataclasses.replace(registration, refined=refined), []


#: How the problem of a test file without a registration starts (`gpumatrix register --suggest` finds them so).
NOT_REGISTERED = "test file is not registered"
_MISSING = (
    f"{NOT_REGISTERED}: add `from gpumatrix import register` and, at module top level, "
    '`register(on=("cpu",), est_time=SECONDS)` naming the classes it runs on'
)


def _missing(size: int | None) -> str:
    if size is None or size <= READ_LIMIT:
        return _MISSING
    return (
        f"{_MISSING} (only the first {READ_LIMIT // 2**20} MiB of this {size / 2**20:.1f} MiB file are read: "
        f"put the call near the top)"
    )


def _register_aliases(body: Iterable[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names bound to `gpumatrix.register` and to the `gpumatrix` module by top-level imports."""
    names: set[str] = set()
    modules: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "gpumatrix" and stmt.level == 0:
            names.update(
                alias.asname or "register" for alias in stmt.names if alias.name in ("register", "*")
            )
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == "gpumatrix":
                    modules.add(alias.asname or alias.name)
                elif alias.name.startswith("gpumatrix.") and alias.asname is None:
                    modules.add("gpumatrix")  # `import gpumatrix.compare` binds `gpumatrix` too
    return names, modules


def find_register_call(body: Sequence[ast.stmt]) -> ast.Call | None:
    """The `register(...)` call among a module's top-level statements (the first, if it has several)."""
    names, modules = _register_aliases(body)
    for stmt in body:
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and _is_register(stmt.value.func, names, modules)
        ):
            return stmt.value
    return None


def _is_register(func: ast.expr, names: set[str], modules: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in names
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "register"
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )


def _read_call(call: ast.Call, path: str) -> FileReading:
    problems: list[Problem] = []

    def bad(where: ast.AST | int, message: str) -> None:
        line = where if isinstance(where, int) else getattr(where, "lineno", call.lineno)
        problems.append(Problem(path, line, message))

    if call.args:
        bad(call.args[0], "register(...) takes keyword arguments only: on=..., gpus=..., est_time=...")
    values: dict[str, object] = {}
    nodes: dict[str, ast.expr] = {}  # the argument each value came from: problems name its line
    for keyword in call.keywords:
        if keyword.arg is None:
            bad(keyword.value, "register(...) cannot take **kwargs: write on=, gpus= and est_time= literally")
        elif keyword.arg not in _KEYWORDS:
            bad(
                keyword.value,
                f"register(...) got unknown argument {keyword.arg!r} (expected {', '.join(_KEYWORDS)})",
            )
        elif keyword.arg in nodes:  # ast parses it; Python refuses to compile it
            bad(keyword.value, f"register(...) repeats the argument {keyword.arg}=")
        else:
            nodes[keyword.arg] = keyword.value
            try:
                values[keyword.arg] = ast.literal_eval(keyword.value)
            # TypeError: a literal that cannot be built, such as a set of lists ({[]}).
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                bad(
                    keyword.value,
                    f"register({keyword.arg}=...) must be a literal, got "
                    f"`{_snippet(keyword.value)}`; the registry is read without importing the file",
                )

    on = values.get("on")
    if isinstance(on, str):
        on = (on,)
    classes: tuple[str, ...] | None = None  # the classes of a valid on=, which the mappings must name
    if "on" not in nodes:
        bad(call, "register(...) is missing on=(...): the GPU classes this file runs on")
    elif "on" in values and (
        not isinstance(on, (tuple, list)) or not on or not all(isinstance(c, str) for c in on)
    ):
        bad(
            nodes["on"],
            f"register(on=...) must be a non-empty tuple of class names, got {_shown_literal(on)}",
        )
    elif "on" in values and len(set(on)) != len(on):
        bad(nodes["on"], f"register(on=...) names a class twice: {_shown_literal(on)}")
    elif "on" in values:
        classes = tuple(on)

    gpus = values.get("gpus", 1)
    if "gpus" in values and (
        not isinstance(gpus, int) or isinstance(gpus, bool) or not 1 <= gpus <= MAX_GPUS
    ):
        bad(
            nodes["gpus"],
            f"register(gpus=...) must be a positive integer (at most {MAX_GPUS}), got {_shown_literal(gpus)}",
        )

    est_time = values.get("est_time")
    est_times: list[tuple[str, object]] = []
    if "est_time" not in nodes:
        bad(
            call,
            "register(...) is missing est_time=SECONDS (the file's run time on one runner, used for sharding)",
        )
    elif isinstance(est_time, dict):
        est_times = _class_mapping("est_time", est_time, nodes["est_time"], classes, _seconds_problem, bad)
        if est_times:
            est_time = max(seconds for _, seconds in est_times)  # type: ignore[type-var]
    elif "est_time" in values and _seconds_problem(est_time):
        bad(
            nodes["est_time"],
            f"register(est_time=...) must be a positive number of seconds (at most {MAX_SECONDS}, a week), "
            f'or seconds per class ({{"h100": 40, "b200": 15}}), got {_shown_literal(est_time)}',
        )

    suite = values.get("suite", DEFAULT_SUITE)
    if "suite" in values and not (isinstance(suite, str) and _SUITE_RE.match(suite)):
        bad(
            nodes["suite"],
            f'register(suite=...) must be a suite name such as "nightly", got {_shown_literal(suite)}',
        )

    disabled = values.get("disabled")
    if "disabled" in values:
        problem = _reason_problem(disabled)
        if problem:
            bad(nodes["disabled"], f"register(disabled=...) {problem}")

    disabled_on: list[tuple[str, object]] = []
    if "disabled_on" in values:
        if isinstance(values["disabled_on"], dict):
            disabled_on = _class_mapping(
                "disabled_on", values["disabled_on"], nodes["disabled_on"], classes, _reason_problem, bad
            )
        else:
            bad(
                nodes["disabled_on"],
                f'register(disabled_on=...) must map classes to reasons, such as {{"gb300": "why"}}, '
                f"got {_shown_literal(values['disabled_on'])}",
            )

    flaky: list[tuple[str, object]] = []
    if "flaky" in values:
        if isinstance(values["flaky"], dict):
            flaky = _class_mapping("flaky", values["flaky"], nodes["flaky"], classes, _reason_problem, bad)
        else:
            bad(
                nodes["flaky"],
                f'register(flaky=...) must map classes to reasons, such as {{"h100": "NCCL timeout, #45"}}, '
                f"got {_shown_literal(values['flaky'])}",
            )

    gpu = values.get("gpu", "shared")
    if "gpu" in values and gpu not in GPU_USES:
        bad(
            nodes["gpu"],
            f'register(gpu=...) must be "shared" (the default: tests may share a GPU) or "exclusive" '
            f"(each test holds its GPUs alone), got {_shown_literal(gpu)}",
        )

    if problems:
        return None, problems
    return Registration(
        path=path,
        line=call.lineno,
        on=tuple(on),
        gpus=int(gpus),
        est_time=float(est_time),
        arg_lines=tuple((name, node.lineno) for name, node in nodes.items()),
        suite=suite,
        disabled=disabled,
        disabled_on=tuple((name, str(reason)) for name, reason in disabled_on),
        est_times=tuple((name, float(seconds)) for name, seconds in est_times),  # type: ignore[arg-type]
        flaky=tuple((name, str(reason)) for name, reason in flaky),
        exclusive=gpu == "exclusive",
    ), []


def _seconds_problem(value: object) -> str | None:
    # Bounded: a literal past a week is a mistake, and one past a float's range cannot even be converted.
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_SECONDS:
        return None
    return (
        f"must be a positive number of seconds (at most {MAX_SECONDS}, a week), got {_shown_literal(value)}"
    )


_shown_literal = shown_literal


def _reason_problem(value: object) -> str | None:
    """Why `value` is not a reason a person can act on, or None."""
    if not isinstance(value, str):
        return f"must be the reason, a string, got {_shown_literal(value)}"
    if not value.strip():
        return "gives an empty reason: say why (and who is on it)"
    if len(value) > _REASON_LIMIT or not value.isprintable():
        return f"must be one line of printable text of at most {_REASON_LIMIT} characters"
    return None


def _class_mapping(
    name: str,
    value: dict[object, object],
    node: ast.expr,
    classes: tuple[str, ...] | None,
    item_problem: Callable[[object], str | None],
    bad: Callable[[ast.AST | int, str], None],
) -> list[tuple[str, object]]:
    """The (class, value) entries of a `{class: value}` argument, as written; a problem, at the line of
    its entry, for each key that is not a class of `on` (when `on` is valid) and each bad value."""
    lines: dict[object, int] = {}
    if isinstance(node, ast.Dict):  # a literal mapping is a dict display: its keys have lines
        for key in node.keys:
            if isinstance(key, ast.Constant):
                if key.value in lines:  # literal_eval keeps the last silently
                    bad(key, f"register({name}=...) names class {_shown_literal(key.value)} twice")
                lines.setdefault(key.value, key.lineno)
    if not value:
        bad(node, f"register({name}=...) names no class; give at least one, or leave the argument out")
    entries: list[tuple[str, object]] = []
    for key, item in value.items():
        line = lines.get(key, node.lineno)
        if not isinstance(key, str):
            bad(line, f"register({name}=...) keys must be class names, got {_shown_literal(key)}")
            continue
        if classes is not None and key not in classes:
            bad(line, f"register({name}=...) names class {key!r}, which is not in on={classes!r}")
        problem = item_problem(item)
        if problem:
            bad(line, f"register({name}=...) for {key!r} {problem}")
        entries.append((key, item))
    return entries


def _snippet(node: ast.expr, limit: int = 80) -> str:
    try:
        text = ast.unparse(node)
    except (RecursionError, MemoryError):
        return "(an expression too deep to show)"
    return text if len(text) <= limit else text[: limit - 3] + "..."
