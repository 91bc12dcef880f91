"""`gpumatrix register --suggest`: a registration for each unregistered test file, from what it says.

A file is read as data (`ast`, never imported) for the signs of where it can run, each kept with its
line as a reason:

- skips and checks on GPU availability (`torch.cuda.is_available()`, `torch.xpu.is_available()`,
  `torch.version.hip`), on compute capability (`get_device_capability() >= (9, 0)`) and on the
  device count (`device_count() < 2`: two GPUs);
- device strings and calls (`"cuda"`, `.cuda()`, `"xpu"`);
- imports of GPU-only libraries (`GPU_ONLY_MODULES`, and the modules `--gpu-module` names);
- its name (`_sm90`, `sm100`, `_hopper`, `_mi300`, `_xpu`, `_multi_gpu`, `_cpu`).

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
import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpumatrix import UsageError
from gpumatrix.config import CPU_CLASS, Matrix, load_matrix
from gpumatrix.problems import Problem
from gpumatrix.registry import NOT_REGISTERED, find_test_files, read_registration
from gpumatrix.regular_files import read_regular
from gpumatrix.source import DEEP_NESTING, READ_LIMIT, deepest_line

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

# Libraries that cannot be imported, or do nothing, without a GPU of that vendor (None: any vendor).
GPU_ONLY_MODULES: dict[str, str | None] = {
    "cupy": "nvidia",
    "pycuda": "nvidia",
    "cuda": "nvidia",  # cuda-python
    "deep_gemm": "nvidia",
    "flashinfer": "nvidia",
    "flash_attn": "nvidia",
    "transformer_engine": "nvidia",
    "cutlass": "nvidia",
    "tensorrt": "nvidia",
    "apex": "nvidia",
    "aiter": "amd",
    "intel_extension_for_pytorch": "intel",
    "dpctl": "intel",
}
_CUDA_VENDORS = frozenset({"nvidia", "amd"})  # ROCm builds of torch answer to torch.cuda and "cuda"
_NAME_HINTS: tuple[tuple[str, dict], ...] = (
    (r"sm_?90a?|hopper|h100|h200", {"vendors": {"nvidia"}, "capability": (9, 0)}),
    (r"sm_?100a?|blackwell|b200", {"vendors": {"nvidia"}, "capability": (10, 0)}),
    (r"sm_?103|gb300|b300", {"vendors": {"nvidia"}, "capability": (10, 3)}),
    (r"sm_?120|5090", {"vendors": {"nvidia"}, "capability": (12, 0)}),
    (r"sm_?80|ampere|a100", {"vendors": {"nvidia"}, "capability": (8, 0)}),
    (r"mi300x?|mi325x?|mi355x?|rocm|hip|amd", {"vendors": {"amd"}}),
    (r"xpu|intel|pvc", {"vendors": {"intel"}}),
    (r"cuda|gpu", {"vendors": set()}),
    (r"multi_?gpu|2_?gpus?", {"vendors": set(), "gpus": 2}),
)


@dataclass(frozen=True)
class SuggestOptions:
    default_on: str = CPU_CLASS  # "cpu" or "gpu": where a file with no sign goes
    gpu_modules: tuple[str, ...] = ()  # more modules whose import needs a GPU (any vendor)
    est_time: float = 60


@dataclass(frozen=True)
class Sign:
    line: int
    what: str  # what was seen, as a person reads it
    vendors: frozenset[str] = frozenset()  # empty: any GPU
    capability: tuple[int, int] | None = None  # this or later (NVIDIA)
    gpus: int = 1
    in_test: str | None = None  # the test it was seen in; None: module-level


@dataclass(frozen=True)
class Evidence:
    """The signs of a file and its tests' names."""

    signs: tuple[Sign, ...]
    tests: tuple[str, ...]


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


# -- reading a file ----------------------------------------------------------------------------------


def find_evidence(tree: ast.Module, path: str, gpu_modules: Iterable[str] = ()) -> Evidence:
    """The signs of needing a GPU in a parsed test file, and its tests."""
    extra = dict.fromkeys(gpu_modules)
    signs: list[Sign] = []
    tests: list[str] = []
    for stmt in tree.body:
        for test, node in _scopes(stmt, tests):
            signs.extend(_signs(node, test, extra))
    stem = Path(path).stem.lower()
    for pattern, hint in _NAME_HINTS:
        if re.search(rf"(?:^|_)(?:{pattern})(?:_|$)", stem):
            signs.append(
                Sign(
                    0,
                    f"its name ({Path(path).name})",
                    frozenset(hint["vendors"]),
                    hint.get("capability"),
                    hint.get("gpus", 1),
                )
            )
    return Evidence(tuple(signs), tuple(tests))


def _scopes(stmt: ast.stmt, tests: list[str]) -> Iterable[tuple[str | None, ast.AST]]:
    """(test name or None, node) for the parts of a top-level statement: each test function (with its
    decorators) on its own, everything else as module-level."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test"):
        tests.append(stmt.name)
        yield stmt.name, stmt
    elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
        methods = [
            s
            for s in stmt.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name.startswith("test")
        ]
        for method in methods:
            name = f"{stmt.name}::{method.name}"
            tests.append(name)
            yield name, method
            for decorator in stmt.decorator_list:  # a class's marks apply to each of its tests
                yield name, decorator
        for other in stmt.body:
            if other not in methods:
                yield None, other
    else:
        yield None, stmt


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _signs(root: ast.AST, test: str | None, extra: dict[str, None]) -> Iterable[Sign]:
    for node in ast.walk(root):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".", 1)[0]
                if top in GPU_ONLY_MODULES or top in extra or name in extra:
                    vendor = GPU_ONLY_MODULES.get(top)
                    vendors = frozenset({vendor}) if vendor else frozenset()
                    yield Sign(line, f"imports {name}, a GPU-only library", vendors, in_test=test)
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted.endswith("cuda.is_available"):
                yield Sign(line, "checks torch.cuda.is_available()", _CUDA_VENDORS, in_test=test)
            elif dotted.endswith("xpu.is_available"):
                yield Sign(line, "checks torch.xpu.is_available()", frozenset({"intel"}), in_test=test)
            elif dotted.endswith("version.hip"):
                yield Sign(line, "checks torch.version.hip", frozenset({"amd"}), in_test=test)
        elif isinstance(node, ast.Compare):
            yield from _compare_signs(node, test)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
            if not node.args and _dotted(node.func.value) not in ("torch", "torch.backends"):
                yield Sign(line, "moves a tensor to the GPU (.cuda())", _CUDA_VENDORS, in_test=test)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"cuda(:\d+)?", node.value):
                yield Sign(line, f'uses the device "{node.value}"', _CUDA_VENDORS, in_test=test)
            elif re.fullmatch(r"xpu(:\d+)?", node.value):
                yield Sign(line, f'uses the device "{node.value}"', frozenset({"intel"}), in_test=test)


def _compare_signs(node: ast.Compare, test: str | None) -> Iterable[Sign]:
    if len(node.ops) != 1:
        return
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if _call_named(right, ("get_device_capability", "device_count")):  # (9, 0) <= cap: flip it
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    strict = isinstance(op, (ast.Gt, ast.LtE))  # `> X` and `<= X` (skip) need more than X
    if _call_named(left, ("get_device_capability",)) or (
        isinstance(left, ast.Subscript) and _call_named(left.value, ("get_device_capability",))
    ):
        value = _literal(right)
        if isinstance(value, int):
            value = (value, 0)
        if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
            capability = (value[0], value[1] + 1) if strict else value
            kind = "exactly" if isinstance(op, (ast.Eq, ast.NotEq)) else "at least"
            yield Sign(
                node.lineno,
                f"checks the compute capability against {value[0]}.{value[1]} ({kind} that)",
                frozenset({"nvidia"}),
                capability,
                in_test=test,
            )
    elif _call_named(left, ("device_count",)):
        value = _literal(right)
        if isinstance(value, int) and value > 1 - strict:
            gpus = value + 1 if strict else value
            yield Sign(
                node.lineno, f"checks the device count against {value} ({gpus} GPUs)", gpus=gpus, in_test=test
            )


def _call_named(node: ast.AST, names: Sequence[str]) -> bool:
    return isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] in names


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


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
            suggestions.append(_suggest_file(path, data, matrix, options))
        except (UsageError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
            line = getattr(exc, "lineno", None) or 0
            problems.append(Problem(path, line, f"no suggestion: {exc}"))
        except (RecursionError, MemoryError):  # Python's parser (or a walk of what it gave) hit its limits
            problems.append(
                Problem(path, deepest_line(data.decode("utf-8", "replace")), f"no suggestion: {DEEP_NESTING}")
            )
    return SuggestResult(tuple(suggestions), tuple(problems))


def _suggest_file(path: str, data: bytes, matrix: Matrix, options: SuggestOptions) -> Suggestion:
    encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    text = data.decode(encoding)
    tree = ast.parse(text, filename=path)
    evidence = find_evidence(tree, path, options.gpu_modules)
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
