"""gpumatrix's architecture, read from its source with `ast`: no import cycle, no private name across modules,
no public function over 12 parameters (DESIGN.md: "Imports run one way").

- An import inside a function counts as much as one at module top: it runs when the function does, and a
  cycle through it is a cycle all the same. `if TYPE_CHECKING:` imports count too.
- `from a.b import c` imports `a.b.c` when that is a module, else `a.b`; importing `a.b.c` runs `a` and
  `a.b` first, so a module outside those packages also depends on their `__init__`s.
- A private name is one that starts with `_` (not a dunder). A module may use its own and, for a private
  module (`compare/_scan.py`), the package that holds it may import it; nothing else may import one.
- A public function is a module's or a public class's function whose name has no leading `_`, and
  `__init__`; `self` and `cls` are not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest
from import_graph import Module, import_graph, imports_of, read_modules

from gpumatrix import register

register(on=("cpu",), est_time=3)

SOURCE = Path(__file__).resolve().parents[2] / "src" / "gpumatrix"
MAX_PARAMETERS = 12


def import_cycles(modules: Mapping[str, Module]) -> list[str]:
    """Each strongly connected group of modules as one line: a cycle through it, with the import lines."""
    graph = import_graph(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's algorithm; the graph is a few hundred nodes
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_show_cycle(group, graph) for group in sorted(groups)]


def _show_cycle(group: list[str], graph: Mapping[str, Mapping[str, int]]) -> str:
    """`a (line 3) -> b (line 9) -> a`: one cycle through the group's first module, by breadth-first search."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came_from:
        following = []
        for name in frontier:
            for target in graph[name]:
                if target in members and target not in came_from:
                    came_from[target] = name
                    following.append(target)
        frontier = following
    path = [start]
    while True:
        previous = came_from[path[-1]]
        if previous == start:
            break
        path.append(previous)
    path.reverse()
    steps = [start, *path]
    return (
        " -> ".join(f"{name} (line {graph[name][steps[index + 1]]})" for index, name in enumerate(steps[:-1]))
        + f" -> {start}   [all of: {', '.join(group)}]"
    )


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def private_imports(modules: Mapping[str, Module]) -> list[str]:
    """Each import of another module's private name, and each use of one through an imported module."""
    found = []
    for module in modules.values():
        bound: dict[str, str] = {}  # local name -> the module it was bound to by an import
        for item in imports_of(module, modules):
            if item.bound is not None:
                bound[item.bound] = item.target
            parts = item.target.split(".")
            # A private module may be imported by the package holding it (and that package's modules).
            for end, part in enumerate(parts):
                if _private(part) and not _inside(module.name, ".".join(parts[:end])):
                    found.append(f"{module.name}:{item.line} imports private module {item.target}")
                    break
            if item.name is not None and _private(item.name) and item.target != module.name:
                found.append(f"{module.name}:{item.line} imports {item.target}.{item.name}")
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _private(node.attr)
                and bound[node.value.id] != module.name
            ):
                found.append(f"{module.name}:{node.lineno} uses {bound[node.value.id]}.{node.attr}")
    return sorted(found)


def wide_functions(modules: Mapping[str, Module], limit: int = MAX_PARAMETERS) -> list[str]:
    """Each public function (or method of a public class) taking more than `limit` parameters."""
    found = []

    def visit(module: Module, body: list[ast.stmt], owner: str | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(module, node.body, node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                not node.name.startswith("_") or node.name == "__init__"
            ):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
                if owner is not None and names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                if len(names) > limit:
                    where = f"{owner}.{node.name}" if owner else node.name
                    found.append(f"{module.name}:{node.lineno} {where} takes {len(names)} parameters")

    for module in modules.values():
        visit(module, module.tree.body, None)
    return sorted(found)


# -- the rules on gpumatrix ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpumatrix_modules() -> dict[str, Module]:
    return read_modules(SOURCE)


def test_no_import_cycle(gpumatrix_modules: dict[str, Module]) -> None:
    cycles = import_cycles(gpumatrix_modules)
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(cycles)


def test_no_private_name_is_imported_across_modules(gpumatrix_modules: dict[str, Module]) -> None:
    found = private_imports(gpumatrix_modules)
    assert not found, "private names used across modules (give them a public home):\n" + "\n".join(found)


def test_no_public_function_takes_more_than_12_parameters(gpumatrix_modules: dict[str, Module]) -> None:
    found = wide_functions(gpumatrix_modules)
    assert not found, "public functions over 12 parameters (group what travels together):\n" + "\n".join(
        found
    )


def test_the_whole_package_is_read(gpumatrix_modules: dict[str, Module]) -> None:
    """The rules above see every module, the CLI, the plugin and the bot among them."""
    assert {"gpumatrix", "gpumatrix.cli", "gpumatrix.plugin", "gpumatrix.bot"} <= set(gpumatrix_modules)
    assert len(gpumatrix_modules) > 50


# -- the checks catch what they are for (a package of a few files, written here) ------------------------


def _write(root: Path, files: Mapping[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return read_modules(root / "pkg")


CYCLES = [
    ("none", {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import x\n", "pkg/b.py": "x = 1\n"}, 0),
    (
        "top-level",
        {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": "from pkg import a\n"},
        1,
    ),
    (
        "inside a function",
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import x\n",
            "pkg/b.py": "x = 1\ndef f():\n    from pkg.a import y\n",
        },
        1,
    ),
    (
        "relative, under TYPE_CHECKING",
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import x\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n",
        },
        1,
    ),
    (
        "through a package __init__",
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.sub.c import z\n",
            "pkg/sub/c.py": "from pkg.a import y\n",
            "pkg/a.py": "from pkg.sub.d import x\n",
            "pkg/sub/d.py": "x = 1\n",
        },
        1,
    ),
    (
        "a package re-exporting its own modules",
        {"pkg/__init__.py": "", "pkg/sub/__init__.py": "from .c import z\n", "pkg/sub/c.py": "z = 1\n"},
        0,
    ),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CYCLES], ids=[c[0] for c in CYCLES])
def test_cycles_are_found(tmp_path: Path, files: dict[str, str], expected: int) -> None:
    assert len(import_cycles(_write(tmp_path, files))) == expected


PRIVATE = [
    ("public", {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import x\n", "pkg/b.py": "x = 1\n"}, 0),
    ("a private name", {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import _x\n", "pkg/b.py": ""}, 1),
    (
        "in a function",
        {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    from pkg.b import _x\n", "pkg/b.py": ""},
        1,
    ),
    (
        "through the module",
        {"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\nb._x()\n", "pkg/b.py": ""},
        1,
    ),
    (
        "a private module from its package",
        {"pkg/__init__.py": "", "pkg/s/__init__.py": "from pkg.s._m import x\n", "pkg/s/_m.py": "x = 1\n"},
        0,
    ),
    (
        "a private module from outside its package",
        {
            "pkg/__init__.py": "",
            "pkg/s/__init__.py": "",
            "pkg/s/_m.py": "x = 1\n",
            "pkg/a.py": "import pkg.s._m\n",
        },
        1,
    ),
    ("a dunder", {"pkg/__init__.py": "__version__ = '1'\n", "pkg/a.py": "from pkg import __version__\n"}, 0),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in PRIVATE], ids=[c[0] for c in PRIVATE])
def test_private_imports_are_found(tmp_path: Path, files: dict[str, str], expected: int) -> None:
    assert len(private_imports(_write(tmp_path, files))) == expected


def _params(count: int, *, method: bool = False) -> str:
    names = ", ".join(f"p{i}" for i in range(count))
    if method:
        return f"class C:\n    def run(self, {names}):\n        pass\n"
    return f"def run({names}):\n    pass\n"


WIDE = [
    ("12 parameters", {"pkg/__init__.py": _params(12)}, 0),
    ("13 parameters", {"pkg/__init__.py": _params(13)}, 1),
    (
        "13 keyword-only",
        {"pkg/__init__.py": "def run(*, " + ", ".join(f"p{i}" for i in range(13)) + "):\n    pass\n"},
        1,
    ),
    ("a method of 12 and self", {"pkg/__init__.py": _params(12, method=True)}, 0),
    ("a method of 13", {"pkg/__init__.py": _params(13, method=True)}, 1),
    ("private", {"pkg/__init__.py": _params(13).replace("def run", "def _run")}, 0),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in WIDE], ids=[c[0] for c in WIDE])
def test_wide_functions_are_found(tmp_path: Path, files: dict[str, str], expected: int) -> None:
    assert len(wide_functions(_write(tmp_path, files))) == expected
