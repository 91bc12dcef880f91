"""What a test file says about where it can run, read as data: the signs `register --suggest` and
`gpumatrix init` decide by.

A file is parsed (`ast`, never imported) for the signs of where it can run, each kept with its line:

- skips and checks on GPU availability (`torch.cuda.is_available()`, `torch.xpu.is_available()`,
  `torch.version.hip`), on compute capability (`get_device_capability() >= (9, 0)`) and on the
  device count (`device_count() < 2`: two GPUs);
- device strings and calls (`"cuda"`, `.cuda()`, `"xpu"`);
- imports of GPU-only libraries (`GPU_ONLY_MODULES`, and the modules `--gpu-module` names);
- its name (`_sm90`, `sm100`, `_hopper`, `_mi300`, `_xpu`, `_multi_gpu`, `_cpu`);
- the same signs inside helpers the file imports from the test tree's own modules (`from test.utils
  import supports_bfloat16`: `gpumatrix.adopt.local_helpers` finds them), counted where the file uses the
  helper: in a test's marks (`pytest.param(..., marks=pytest.mark.skipif(not supports_bfloat16(), ...))`)
  for that test, in `pytestmark` or other module-level code for the whole file.

A sign in a test function (its decorators and the marks of its parameters included) or in a method of
a `Test*` class (the class's decorators included) belongs to that test; any other sign is module-level.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GPU_ONLY_MODULES",
    "Evidence",
    "Sign",
    "find_evidence",
    "helper_signs",
    "parse_test_file",
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


def find_evidence(
    tree: ast.Module,
    path: str,
    gpu_modules: Iterable[str] = (),
    helpers: Mapping[str, Sequence[Sign]] | None = None,
) -> Evidence:
    """The signs of needing a GPU in a parsed test file, and its tests; `helpers` maps each name the
    file imports from the tree's own modules to the signs in its definition (`helper_signs`)."""
    extra = dict.fromkeys(gpu_modules)
    signs: list[Sign] = []
    tests: list[str] = []
    for stmt in tree.body:
        for test, node in _scopes(stmt, tests):
            signs.extend(_signs(node, test, extra))
            if helpers:
                signs.extend(_helper_uses(node, test, helpers))
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


def helper_signs(module: ast.Module, where: str, names: Iterable[str]) -> dict[str, tuple[Sign, ...]]:
    """The signs in the definitions of `names` in a module of the tree (`where`, its path): a function's
    body, or the value a module-level name is assigned (`requires_cuda = pytest.mark.skipif(...)`). Only
    names with signs are in the result."""
    wanted = set(names)
    found: dict[str, tuple[Sign, ...]] = {}
    for stmt in module.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in wanted:
            name, node = stmt.name, stmt
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in wanted
        ):
            name, node = stmt.targets[0].id, stmt.value
        else:
            continue
        signs = tuple(
            Sign(s.line, f"{where}:{s.line}: {s.what}", s.vendors, s.capability, s.gpus)
            for s in _signs(node, None, {})
        )
        if signs:
            found[name] = signs
    return found


def _helper_uses(root: ast.AST, test: str | None, helpers: Mapping[str, Sequence[Sign]]) -> Iterable[Sign]:
    """The signs of each helper `root` uses, at the line of the use, in the test (or module) it is in."""
    for node in ast.walk(root):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in helpers:
            for sign in helpers[node.id]:
                yield Sign(
                    node.lineno,
                    f"uses {node.id} ({sign.what})",
                    sign.vendors,
                    sign.capability,
                    sign.gpus,
                    in_test=test,
                )


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


def parse_test_file(data: bytes, path: str) -> tuple[str, str, ast.Module]:
    """(encoding, text, tree) of a test file's bytes, decoded as Python decodes a module."""
    encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    text = data.decode(encoding)
    return encoding, text, ast.parse(text, filename=path)
