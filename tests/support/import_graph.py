"""The import graph of a package, read from its source with `ast` (never by importing it).

An import inside a function counts as much as one at module top: it runs when the function does.
`if TYPE_CHECKING:` imports count too. `from a.b import c` imports `a.b.c` when that is a module, else
`a.b`; importing `a.b.c` runs `a` and `a.b` first, so a module outside those packages also depends on
their `__init__`s. Used by tests/unit/test_architecture_gpumatrix.py and the bot's route test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Import", "Module", "import_graph", "imports_of", "read_modules", "reachable"]


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    package: bool  # an __init__.py
    tree: ast.Module


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    line: int
    target: str  # the module imported: `a.b.c` for `from a.b import c` when c is a module
    name: str | None  # the name taken from `target` (None: the module itself)
    bound: str | None = None  # the local name the import binds to a module, if it binds one


def read_modules(root: Path) -> dict[str, Module]:
    """Every module of the package at `root`, by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        found[name] = Module(name, path, package, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def imports_of(module: Module, modules: Mapping[str, Module]) -> Iterator[Import]:
    """The imports of the package's own modules in `module`, wherever they stand (functions included)."""
    top = next(iter(modules)).split(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    # `import a.b` binds `a`; `import a.b as m` binds `m` to `a.b`.
                    bound = (alias.asname, alias.name) if alias.asname else (top, top)
                    yield Import(module.name, node.lineno, alias.name, None)
                    yield Import(module.name, node.lineno, bound[1], None, bound[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.name.split(".")
                base = base[: len(base) - node.level + (1 if module.package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != top:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in modules:
                    yield Import(module.name, node.lineno, submodule, None, alias.asname or alias.name)
                else:
                    yield Import(module.name, node.lineno, target, alias.name)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def import_graph(modules: Mapping[str, Module]) -> dict[str, dict[str, int]]:
    """module -> {module it makes Python run: the line of the import}, packages' `__init__`s included."""
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for module in modules.values():
        # Its own packages have run before it: importing a module inside them runs no `__init__` again.
        own = set(_ancestors(module.name)) | ({module.name} if module.package else set())
        for found in imports_of(module, modules):
            implied = [name for name in _ancestors(found.target) if name not in own]
            for target in (*implied, found.target):
                if target in modules and target != module.name:
                    graph[module.name].setdefault(target, found.line)
    return graph


def reachable(graph: Mapping[str, Mapping[str, int]], start: str) -> set[str]:
    """Every module that importing `start` makes Python run (`start` itself not included, unless a
    cycle comes back to it)."""
    found: set[str] = set()
    frontier = list(graph.get(start, {}))
    while frontier:
        name = frontier.pop()
        if name not in found:
            found.add(name)
            frontier.extend(graph.get(name, {}))
    return found
