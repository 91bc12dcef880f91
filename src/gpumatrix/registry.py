"""The static test registry: which test file runs on which runner, read by parsing, never importing.

Every `tests/**/test_*.py` calls `gpumatrix.register(on=..., gpus=..., est_time=...)` once at module
top level with literal arguments (and, where it needs them, `suite=`, `disabled=`, `disabled_on=` and `flaky=`;
`est_time` may give seconds per class). This module reads that call with `ast` (`gpumatrix.source` reads
the file as Python would, only as far as the call), so the registry can be built on a runner
without torch, over a PR's tree read as data, and in well under a second for thousands of files; a
tree on disk keeps what it read in a cache (`gpumatrix.registry_cache`), so a second run parses only
the files that changed (benchmarks/registry_discovery.py). The rules are docs/registry.md's.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumatrix.bounds import MAX_GPUS
from gpumatrix.config import (
    CPU_CLASS,
    DEFAULT_SUITE,
    DEFAULT_TEST_ROOTS,
    MAX_SECONDS,
    Matrix,
    Runner,
    load_matrix,
)
from gpumatrix.problems import Problem, ProblemsError
from gpumatrix.refine import read_refinements
from gpumatrix.registry_cache import CachedReading, RegistrationCache
from gpumatrix.source import (
    READ_LIMIT,
    SourceError,
    canonical_call,
    decode_source,
    parse_head,
    read_source_bytes,
    shown_literal,
)

__all__ = [
    "GPU_USES",
    "NOT_REGISTERED",
    "FileReading",
    "Registration",
    "Registry",
    "RegistryError",
    "build_registry",
    "discover",
    "find_register_call",
    "find_test_files",
    "load_tree",
    "read_registration",
    "reading_code_key",
]

_KEYWORDS = ("on", "gpus", "est_time", "suite", "disabled", "disabled_on", "flaky", "gpu")
# `register(gpu=...)`: whether the file's tests may share a GPU with other tests (the runner's
# `workers_per_gpu`) or each holds its GPUs alone (timing, leases, memory-hungry tests).
GPU_USES = ("shared", "exclusive")
# A reason is shown in a pytest skip line, `gpumatrix list` and the bot's comments: one short line.
_REASON_LIMIT = 200
# Suite names travel into workflow inputs, like runner labels (ci/matrix.yaml checks declared ones so).
_SUITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Part of the registry cache's key: raise it when a reading's stored shape changes without this
# module's or gpumatrix.source's code changing (2: suite, disabled, disabled_on and est_times joined).
_CACHE_FORMAT = 4  # 3: refined tests (`@pytest.mark.gpumatrix`) and own_runners; 4: exclusive


@dataclass(frozen=True)
class Registration:
    """One test file's registration, with the runner that serves each class it names.

    `est_time` is the file's estimate in seconds; when the file gives one per class (`est_times`),
    it is the largest of them, which is also the estimate of a class of `on` the mapping leaves out.
    """

    path: str  # repository-relative, '/'-separated: tests/kernels/test_quantize_mxfp8.py
    line: int
    on: tuple[str, ...]
    gpus: int
    est_time: float
    runners: tuple[str, ...] = ()  # runner labels, one per class of `on`, in the same order
    # (argument, line) of each argument given: problems found later name the argument's own line.
    arg_lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)
    suite: str = DEFAULT_SUITE
    disabled: str | None = None  # why the whole file is switched off, everywhere
    disabled_on: tuple[tuple[str, str], ...] = ()  # (class, why the file is switched off there)
    est_times: tuple[tuple[str, float], ...] = ()  # (class, seconds) as written; empty: est_time everywhere
    flaky: tuple[tuple[str, str], ...] = ()  # (class, why its tests may run again after a failure there)
    # Tests that narrow where they run (`gpumatrix.refine`), each (on, runners, test, gpus, line): a list
    # leads each entry so the cache reads it back as tuples. `runners` then serves them too, and
    # `own_runners` are the runners of the file's other tests.
    refined: tuple[tuple[tuple[str, ...], tuple[str, ...], str, int, int], ...] = ()
    own_runners: tuple[str, ...] = ()
    exclusive: bool = False  # register(gpu="exclusive"): each test holds its GPUs alone, never shared

    @property
    def base_runners(self) -> tuple[str, ...]:
        """The runners of the tests no marker refines."""
        return self.own_runners if self.refined else self.runners

    def refined_runners(self, test: str) -> tuple[str, ...] | None:
        """The runners of a refined test (`Class::test` or `test`); None when it is not refined."""
        for _, runners, name, _, _ in self.refined:
            if name == test:
                return runners
        return None

    @property
    def needs_gpu(self) -> bool:
        return any(name != CPU_CLASS for name in self.on)

    def estimate_for(self, class_name: str | None) -> float:
        """Seconds this file takes on a runner of `class_name`: its own estimate, else `est_time`."""
        for name, seconds in self.est_times:
            if name == class_name:
                return seconds
        return self.est_time

    def why_disabled(self, class_name: str | None = None) -> str | None:
        """`disabled: REASON` or `disabled on CLASS: REASON` when the file is off on `class_name`
        (None: wherever it runs), else None."""
        if self.disabled is not None:
            return f"disabled: {self.disabled}"
        for name, reason in self.disabled_on:
            if name == class_name:
                return f"disabled on {name}: {reason}"
        return None

    def why_flaky(self, class_name: str | None) -> str | None:
        """`flaky on CLASS: REASON` when the file's tests run again after a failure on `class_name`
        (`register(flaky=...)`, docs/flaky.md), else None: a file not registered flaky there never reruns."""
        for name, reason in self.flaky:
            if name == class_name:
                return f"flaky on {name}: {reason}"
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields (xdist workers get registrations so)."""
        return dict(zip(_FIELDS, self.to_values(), strict=True))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Registration:
        return cls(**{key: _frozen(value) for key, value in data.items()})

    def to_values(self) -> list[Any]:
        """The fields in declaration order (`_FIELDS`), as the registry cache stores them."""
        return [getattr(self, name) for name in _FIELDS]

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> Registration:
        """From `to_values()` read back from JSON: its lists become the tuples they were."""
        # strict: a list of another length (another code's cache) is a ValueError, never a half record.
        return _assembled(dict(zip(_FIELDS, map(_frozen, values), strict=True)))


_FIELDS = tuple(field.name for field in dataclasses.fields(Registration))


def _assembled(fields: dict[str, Any]) -> Registration:
    """The registration holding `fields` (every field, already frozen), built without `__init__`.

    A frozen dataclass's `__init__` sets each of its 11 fields through `object.__setattr__`: 2.3 us,
    against 0.4 us for filling the instance's dict (timeit). Discovery builds a registration twice per
    file, from the cache and with its runners, and a warm run of 5,000 files is 80 ms in all.
    """
    registration = object.__new__(Registration)
    registration.__dict__.update(fields)
    return registration


def _frozen(value: Any) -> Any:
    """A field read back from JSON: lists become tuples (of tuples, for lists of lists like arg_lines)."""
    if value.__class__ is not list:
        return value
    # Fields hold lists of one kind, so the first item tells; 5,000 registrations a warm run read this.
    return tuple(map(_frozen, value)) if value and value[0].__class__ is list else tuple(value)


# What reading one file gave: its registration (runners not yet resolved) or the problems found.
FileReading = tuple[Registration | None, list[Problem]]


class RegistryError(ProblemsError):
    """Test files with registration problems (exit 1): `problems` lists each with file and line."""

    summary = "test files with registration problems"


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

    def for_runner(self, label: str, *, suite: str | None = None) -> tuple[Registration, ...]:
        """The files `label` runs: of every suite, or of `suite` only."""
        return tuple(r for r in self.files if label in r.runners and (suite is None or r.suite == suite))

    def require_ok(self) -> Registry:
        """This registry; `RegistryError` listing its problems when it has any."""
        if self.problems:
            raise RegistryError(self.problems)
        return self


def find_test_files(root: str | Path, *, roots: Sequence[str] = DEFAULT_TEST_ROOTS) -> list[str]:
    """Repository-relative paths of every `test_*.py` under the test `roots` of `root`, sorted.

    Symbolic links are not followed, a root that is one included: git and the bot read the tree as
    stored, and the plugin names a file by its real path, so a linked file would be registered under a
    name nothing else uses (`gpumatrix check` names such links: `gpumatrix.tree_survey`).
    """
    root = Path(root)
    found: list[str] = []
    for test_root in roots:
        if os.path.islink(root / test_root):
            continue
        # os.walk + string checks: about 3x faster than Path.rglob on a 5,000-file tree.
        for dirpath, dirnames, filenames in os.walk(root / test_root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            found.extend(
                f"{rel}/{name}"
                for name in filenames
                if name.startswith("test_")
                and name.endswith(".py")
                and not os.path.islink(f"{dirpath}/{name}")
            )
    return sorted(found)


def discover(root: str | Path, matrix: Matrix, *, cache: bool = True) -> Registry:
    """Build the registry of a tree on disk: the test files under the matrix's test roots.

    With `cache`, what each file gave is kept in `root/.gpumatrix/` keyed by path, size and
    modification time, and only new or changed files are read again.
    """
    root = Path(root)
    store = RegistrationCache.open(root, key=reading_code_key()) if cache else None
    readings: dict[str, FileReading] = {}
    for path in find_test_files(root, roots=matrix.test_roots):
        full = os.path.join(root, path)
        try:
            stat = os.stat(full)
            reading = _from_cache(path, store.get(path, stat)) if store is not None else None
            if reading is None:
                data, size = read_source_bytes(full, size=stat.st_size)
                reading = read_registration(data, path, size=size)
                if store is not None:
                    store.put(path, stat, _to_cache(reading))
        except OSError as exc:
            reading = (None, [Problem(path, 0, f"cannot read test file: {exc.strerror or exc}")])
        readings[path] = reading
    if store is not None:
        store.save()
    return resolve_registry(readings, matrix)


def reading_code_key() -> str:
    """A hash of the code that decides what reading a file gives (this module and gpumatrix.source): the
    registry cache keeps readings only under the key of the code that made them."""
    import gpumatrix.source

    digest = hashlib.sha256(str(_CACHE_FORMAT).encode())
    for module_file in (__file__, gpumatrix.source.__file__):
        digest.update(Path(module_file or "").read_bytes())
    return digest.hexdigest()[:16]


def _to_cache(reading: FileReading) -> CachedReading:
    registration, problems = reading
    values = registration.to_values() if registration is not None else None
    return values, [(p.line, p.message) for p in problems]


def _from_cache(path: str, cached: CachedReading | None) -> FileReading | None:
    """A reading back from the cache; None (read the file again) for an entry this code cannot rebuild."""
    if cached is None:
        return None
    values, problems = cached
    try:
        registration = Registration.from_values(values) if values is not None else None
    except (TypeError, ValueError):  # another code's fields (a length or type this one lacks)
        return None
    return registration, [Problem(path, line, message) for line, message in problems]


def load_tree(root: str | Path) -> tuple[Matrix, Registry]:
    """The matrix (`root/ci/matrix.yaml`, raising `MatrixError` when invalid) and the registry of `root`."""
    matrix = load_matrix(Path(root) / "ci" / "matrix.yaml")
    return matrix, discover(root, matrix)


def build_registry(sources: Mapping[str, str | bytes], matrix: Matrix) -> Registry:
    """Build a registry from `{repository-relative path: source}` — files read as data.

    Bytes are decoded as Python decodes a module; text is taken as already decoded.
    """
    return resolve_registry({path: read_registration(sources[path], path) for path in sources}, matrix)


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
            problems.append(Problem(path, 0, _BRACKETS))
            continue
        resolved, found = _resolve_runners(registration, matrix, runners)
        problems.extend(found)
        if resolved is not None:
            files.append(resolved)
    return Registry(tuple(files), tuple(problems))


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
    if plain is not None:  # the usual one-line form, read without a parser (gpumatrix.source)
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
    """The registration with its refined tests (`gpumatrix.refine`), or the problems of their markers."""
    found, problems = read_refinements(
        text, registration.path, file_on=registration.on, file_gpus=registration.gpus
    )
    if problems:
        return None, problems
    if not found:
        return registration, []
    refined = tuple((r.on, (), r.test, r.gpus, r.line) for r in found)
    return dataclasses.replace(registration, refined=refined), []


_BRACKETS = (
    "pytest cannot be given a path holding '[' or ']' (it reads them as a test's parameters), so no "
    "runner could run this file: rename it"
)
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
        return _assembled({**vars(registration), "runners": tuple(by_need[0])}), []
    refined = tuple(
        (on, tuple(labels), test, gpus, line)
        for (on, _, test, gpus, line), labels in zip(registration.refined, by_need[1:], strict=True)
    )
    union = tuple(dict.fromkeys(label for labels in by_need for label in labels))
    return _assembled(
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
