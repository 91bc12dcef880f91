"""`gpumatrix register --suggest`: a registration for each unregistered test file, from what it says.

A file is read as data (`gpumatrix.adopt.evidence`: `ast`, never imported) for the signs of where it can
run, each kept with its line as a reason, the helpers it imports from the tree's own modules
(`gpumatrix.adopt.local_helpers`) included.

Signs in module-level code (or in every test) make it a GPU file; signs in some tests only make it a
mixed file, registered for `cpu` and the GPU classes (the GPU tests skip themselves on a CPU runner).
The classes are the matrix's GPU classes of the vendors the signs name (a CUDA sign names NVIDIA and
AMD, whose ROCm builds of torch answer to it; a capability names NVIDIA, of that capability or later),
or all of them. A file with no sign gets the stated default (`--default`, `cpu` unless told `gpu`).

`insert_registration` puts `from gpumatrix import register` and the call after the file's docstring,
`__future__` imports and the imports that open it (so no later import follows a statement), adding
lines and changing none.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpumatrix import UsageError
from gpumatrix.adopt.evidence import GPU_ONLY_MODULES, Evidence, find_evidence, parse_test_file
from gpumatrix.adopt.local_helpers import LocalHelpers
from gpumatrix.config import CPU_CLASS, Matrix, load_matrix
from gpumatrix.problems import Problem
from gpumatrix.registry.discovery import find_test_files
from gpumatrix.registry.reader import NOT_REGISTERED, read_registration
from gpumatrix.registry.source import DEEP_NESTING, READ_LIMIT, deepest_line
from gpumatrix.regular_files import read_regular

__all__ = [
    "GPU_ONLY_MODULES",
    "Evidence",
    "SuggestOptions",
    "SuggestResult",
    "Suggestion",
    "apply_suggestions",
    "find_evidence",
    "insert_registration",
    "suggest_registration",
    "suggest_tree",
]


@dataclass(frozen=True)
class SuggestOptions:
    default_on: str = CPU_CLASS  # "cpu" or "gpu": where a file with no sign goes
    gpu_modules: tuple[str, ...] = ()  # more modules whose import needs a GPU (any vendor)
    est_time: float = 60


@dataclass(frozen=True)
class Suggestion:
    path: str
    on: tuple[str, ...]
    gpus: int
    est_time: float
    reasons: tuple[str, ...]
    call: str
    diff: str = ""
    new_text: str = field(default="", repr=False)
    encoding: str = "utf-8"


@dataclass(frozen=True)
class SuggestResult:
    suggestions: tuple[Suggestion, ...]
    problems: tuple[Problem, ...]


# -- deciding ----------------------------------------------------------------------------------------


def suggest_registration(
    evidence: Evidence, matrix: Matrix, options: SuggestOptions
) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    """(on, gpus, reasons) for a file with `evidence`; a `UsageError` when the signs name GPUs that no
    class of the matrix is."""
    signs = evidence.signs
    module_level = [s for s in signs if s.in_test is None]
    gpu_tests = {s.in_test for s in signs if s.in_test is not None}
    reasons = [f"line {s.line}: {s.what}" if s.line else s.what for s in signs]
    if not signs:
        if options.default_on == CPU_CLASS:
            return (CPU_CLASS,), 1, ("no sign of a GPU: the default, cpu (--default gpu to change it)",)
        gpu = tuple(name for name, c in matrix.classes.items() if not c.is_cpu)
        return gpu, 1, ("no sign of a GPU or of the CPU: the default, every GPU class (--default gpu)",)
    vendors: set[str] = set().union(*(s.vendors for s in signs))
    capabilities = [s.capability for s in signs if s.capability is not None]
    minimum = max(capabilities) if capabilities else None
    gpus = max(s.gpus for s in signs)
    classes = [
        c
        for c in matrix.classes.values()
        if not c.is_cpu
        and (not vendors or c.vendor in vendors)
        and (c.vendor != "nvidia" or minimum is None or any(cc >= minimum for cc in c.compute_capabilities))
    ]
    if not classes:
        wanted = ", ".join(sorted(vendors)) or "any"
        floor = f" of compute capability {minimum[0]}.{minimum[1]} or later" if minimum else ""
        raise UsageError(f"it needs a GPU ({wanted}{floor}), and {matrix.source} declares no such class")
    on = tuple(c.name for c in classes)
    mixed = not module_level and evidence.tests and len(gpu_tests) < len(evidence.tests)
    if mixed:
        on = (CPU_CLASS, *on)
        reasons.append(
            f"{len(gpu_tests)} of {len(evidence.tests)} tests show a GPU sign: the others run on the cpu "
            f"runner (the GPU ones skip themselves there)"
        )
    return on, gpus, tuple(reasons)


def render_call(on: Sequence[str], gpus: int, est_time: float) -> str:
    classes = ", ".join(f'"{name}"' for name in on) + ("," if len(on) == 1 else "")
    seconds = int(est_time) if float(est_time).is_integer() else est_time
    return f"register(on=({classes}){f', gpus={gpus}' if gpus > 1 else ''}, est_time={seconds})"


# -- writing -----------------------------------------------------------------------------------------


def insert_registration(text: str, tree: ast.Module, call: str) -> str:
    """`text` with `from gpumatrix import register` and `call` inserted after its docstring, its
    `__future__` imports and the imports (or try/if blocks of imports) that open it; nothing else
    changes. The line endings of the file are kept."""
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    after = _prologue_end(tree.body, lines)
    head, tail = lines[:after], lines[after:]
    if head and not head[-1].endswith(("\n", "\r")):
        head[-1] += newline
    block = ["from gpumatrix import register", "", call]
    if head:
        block.insert(0, "")  # a blank line after what opens the file
    if tail and tail[0].strip():
        block.append("")  # and one before what follows
    return "".join(head) + "".join(f"{line}{newline}" for line in block) + "".join(tail)


def _prologue_end(body: list[ast.stmt], lines: list[str]) -> int:
    """The number of lines the docstring, `__future__` imports and opening imports take (0: none;
    then the leading comments: a shebang, a coding line, a licence)."""
    end = 0
    index = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            end, index = body[0].end_lineno or 0, 1
    while index < len(body) and _is_import_block(body[index]):
        end = body[index].end_lineno or end
        index += 1
    if end == 0:
        while end < len(lines) and (lines[end].lstrip().startswith("#") or not lines[end].strip()):
            end += 1
        while end and not lines[end - 1].strip():
            end -= 1
    return end


def _is_import_block(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, ast.Try):
        parts = [*stmt.body, *stmt.orelse, *stmt.finalbody, *(s for h in stmt.handlers for s in h.body)]
    elif isinstance(stmt, ast.If):
        parts = [*stmt.body, *stmt.orelse]
    else:
        return False
    return all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or _is_import_block(s) for s in parts)


# -- the tree ----------------------------------------------------------------------------------------


def suggest_tree(root: str | Path, options: SuggestOptions, *, only: Sequence[Path] = ()) -> SuggestResult:
    """A suggestion for each unregistered test file under the test roots of `root` (or of `only`)."""
    root = Path(root)
    matrix = load_matrix(root / "ci" / "matrix.yaml")
    paths = find_test_files(root, roots=matrix.test_roots)
    if only:
        wanted = {Path(p).resolve() for p in only}
        paths = [p for p in paths if (root / p).resolve() in wanted]
    suggestions: list[Suggestion] = []
    problems: list[Problem] = []
    helpers = LocalHelpers(root)
    for path in paths:
        try:  # only a regular file, and never more of it than the registry reads
            data = read_regular(root / path, limit=READ_LIMIT)
        except OSError as exc:
            problems.append(Problem(path, 0, f"cannot read: {exc.strerror or exc}"))
            continue
        if len(data) > READ_LIMIT:
            problems.append(
                Problem(
                    path,
                    0,
                    f"no suggestion: the file is larger than {READ_LIMIT >> 20} MiB, more than the registry "
                    "reads of a test file; register it by hand, near its top",
                )
            )
            continue
        registration, found = read_registration(data, path)
        if registration is not None or not found or not found[0].message.startswith(NOT_REGISTERED):
            continue  # registered, or registered wrongly: check says what to fix
        try:
            suggestions.append(_suggest_file(path, data, matrix, options, helpers))
        except (UsageError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
            line = getattr(exc, "lineno", None) or 0
            problems.append(Problem(path, line, f"no suggestion: {exc}"))
        except (RecursionError, MemoryError):  # Python's parser (or a walk of what it gave) hit its limits
            problems.append(
                Problem(path, deepest_line(data.decode("utf-8", "replace")), f"no suggestion: {DEEP_NESTING}")
            )
    return SuggestResult(tuple(suggestions), tuple(problems))


def _suggest_file(
    path: str, data: bytes, matrix: Matrix, options: SuggestOptions, helpers: LocalHelpers
) -> Suggestion:
    encoding, text, tree = parse_test_file(data, path)
    evidence = find_evidence(tree, path, options.gpu_modules, helpers.helpers_for(tree, path))
    on, gpus, reasons = suggest_registration(evidence, matrix, options)
    call = render_call(on, gpus, options.est_time)
    new_text = insert_registration(text, tree, call)
    registration, found = read_registration(new_text, path)
    if registration is None or registration.on != on:  # what was inserted must read back as proposed
        raise ValueError(f"the inserted call does not read back ({'; '.join(p.message for p in found)})")
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), new_text.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )
    return Suggestion(path, on, gpus, options.est_time, reasons, call, diff, new_text, encoding)


def apply_suggestions(root: str | Path, suggestions: Iterable[Suggestion]) -> None:
    """Write each suggestion's file (in the encoding it was read in)."""
    for suggestion in suggestions:
        target = Path(root) / suggestion.path
        try:
            # newline="": the text keeps the file's own line endings.
            with open(target, "w", encoding=suggestion.encoding, newline="") as stream:
                stream.write(suggestion.new_text)
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
