"""Static architecture checks of a Python package tree, read with ``ast`` (nothing is imported).

``read_package(root)`` parses every module under a package directory; the checks over it are pure:

* ``import_graph``: module -> the modules of the tree that importing it makes Python run. Every ``import``
  and ``from ... import`` counts, those inside functions and under ``if TYPE_CHECKING:`` included (a
  deferred import is still a dependency). ``from a.b import c`` is an edge to ``a.b.c`` when that is a
  module of the tree, else to ``a.b``; importing ``a.b.c`` runs ``a`` and ``a.b`` first, so a module outside
  those packages also depends on their ``__init__``s.
* ``import_cycles``: each strongly connected group of that graph, shown as one cycle with its lines.
* ``private_imports``: a module that imports (or reads as an attribute of an imported module) a name
  whose owner is another module: ``from a.b import _c`` anywhere but in ``a.b`` or below it, and
  ``import a._b`` anywhere but in ``a``. Dunders are not private.
* ``long_signatures``: public functions and methods with more than ``limit`` parameters (``self`` and
  ``cls`` not counted). Public: neither the function nor its class starts with an underscore
  (``__init__`` is public). Functions decorated with ``triton.jit``/``gluon.jit`` are device code, whose
  parameters are the kernel's launch ABI, and are exempt; their host launchers are not.
* ``upward_imports``: imports from a floor to a higher one, given each top-level subpackage's floor.

Used by tests/unit/project/test_architecture.py (both packages) and the bot's route test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Finding",
    "Import",
    "Module",
    "Package",
    "import_cycles",
    "import_graph",
    "imports_of",
    "long_signatures",
    "private_imports",
    "reachable",
    "read_package",
    "upward_imports",
]


@dataclass(frozen=True)
class Finding:
    """One problem: the module (dotted name), the line (0: the module as a whole), and what is wrong."""

    module: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    package: bool  # an __init__.py
    tree: ast.Module


@dataclass(frozen=True)
class Package:
    """Every module of a package tree, by dotted name."""

    name: str
    modules: dict[str, Module]


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    line: int
    target: str  # the module imported: `a.b.c` for `from a.b import c` when c is a module
    name: str | None  # the name taken from `target` (None: the module itself)
    bound: str | None = None  # the local name the import binds to a module, if it binds one


def read_package(root: Path) -> Package:
    """Parse every ``*.py`` under the package directory ``root`` (its name is the package's)."""
    modules: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules[name] = Module(name, path, package, tree)
    return Package(root.name, modules)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    base = base[: len(base) - node.level + (1 if module.package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(package: Package, module: Module) -> Iterator[Import]:
    """The imports of the package's own modules in ``module``, wherever they stand (functions included)."""
    top = package.name
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    # `import a.b` binds `a`; `import a.b as m` binds `m` to `a.b`.
                    bound = (alias.asname, alias.name) if alias.asname else (top, top)
                    yield Import(module.name, node.lineno, alias.name, None)
                    yield Import(module.name, node.lineno, bound[1], None, bound[0])
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            if target.split(".")[0] != top:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in package.modules:
                    yield Import(module.name, node.lineno, submodule, None, alias.asname or alias.name)
                elif alias.name != "*":
                    yield Import(module.name, node.lineno, target, alias.name)
                else:
                    yield Import(module.name, node.lineno, target, None)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def import_graph(package: Package) -> dict[str, dict[str, int]]:
    """module -> {module it makes Python run: the line of the import}, packages' ``__init__``s included."""
    graph: dict[str, dict[str, int]] = {name: {} for name in package.modules}
    for module in package.modules.values():
        # Its own packages have run before it: importing a module inside them runs no `__init__` again.
        own = set(_ancestors(module.name)) | ({module.name} if module.package else set())
        for found in imports_of(package, module):
            implied = [name for name in _ancestors(found.target) if name not in own]
            for target in (*implied, found.target):
                if target in package.modules and target != module.name:
                    graph[module.name].setdefault(target, found.line)
    return graph


def reachable(graph: Mapping[str, Mapping[str, int]], start: str) -> set[str]:
    """Every module that importing ``start`` makes Python run (``start`` itself not included, unless a
    cycle comes back to it)."""
    found: set[str] = set()
    frontier = list(graph.get(start, {}))
    while frontier:
        name = frontier.pop()
        if name not in found:
            found.add(name)
            frontier.extend(graph.get(name, {}))
    return found


def _groups(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative so that a
    deep graph cannot exhaust Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def enter(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)

    for start in sorted(graph):
        if start in index:
            continue
        enter(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    enter(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def _one_cycle(group: list[str], graph: Mapping[str, Mapping[str, int]]) -> str:
    """``a (line 3) -> b (line 9) -> a``: one cycle through the group's first module, by breadth-first search."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came_from:
        following = []
        for name in frontier:
            for target in sorted(graph[name]):
                if target in members and target not in came_from:
                    came_from[target] = name
                    following.append(target)
        frontier = following
    backwards = []  # the modules before start on the way round, last first
    name = came_from[start]
    while name != start:
        backwards.append(name)
        name = came_from[name]
    path = [start, *reversed(backwards)]
    hops = [f"{a} (line {graph[a][b]})" for a, b in zip(path, [*path[1:], start], strict=True)]
    return " -> ".join([*hops, start])


def import_cycles(package: Package) -> list[Finding]:
    """One finding per strongly connected group of modules: one cycle through it, and all its members."""
    graph = import_graph(package)
    return [
        Finding(group[0], 0, f"import cycle {_one_cycle(group, graph)}   [all of: {', '.join(group)}]")
        for group in _groups(graph)
    ]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _inside(module: str, owner: str) -> bool:
    return module == owner or module.startswith(owner + ".")


def private_imports(package: Package) -> list[Finding]:
    """Each import of another module's private name, and each use of one through an imported module."""
    findings = []
    for module in package.modules.values():
        bound: dict[str, str] = {}  # local name -> the module it was bound to by an import
        for item in imports_of(package, module):
            if item.bound is not None:
                bound[item.bound] = item.target
            parts = item.target.split(".")
            # A private module may be imported by the package holding it (and that package's modules).
            for end, part in enumerate(parts):
                if _is_private(part) and not _inside(module.name, ".".join(parts[:end])):
                    findings.append(Finding(module.name, item.line, f"imports private module {item.target}"))
                    break
            if item.name is not None and _is_private(item.name) and not _inside(module.name, item.target):
                findings.append(Finding(module.name, item.line, f"imports {item.target}.{item.name}"))
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _is_private(node.attr)
                and not _inside(module.name, bound[node.value.id])
            ):
                findings.append(Finding(module.name, node.lineno, f"uses {bound[node.value.id]}.{node.attr}"))
    return sorted(findings, key=lambda f: (f.module, f.line, f.message))


def _is_device_code(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("triton.jit", "jit", "gluon.jit"):
            return True
    return False


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> int:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    if method and positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    extra = (args.vararg is not None) + (args.kwarg is not None)
    return len(positional) + len(args.kwonlyargs) + extra


def long_signatures(package: Package, *, limit: int = 12) -> list[Finding]:
    """Public functions and methods (not device code) taking more than ``limit`` parameters."""
    findings = []
    for module in package.modules.values():
        scopes: list[tuple[str, list[ast.stmt], bool]] = [("", module.tree.body, False)]
        while scopes:
            prefix, body, method = scopes.pop()
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    scopes.append((f"{prefix}{node.name}.", node.body, True))
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if (node.name.startswith("_") and node.name != "__init__") or _is_device_code(node):
                        continue
                    count = _parameters(node, method=method)
                    if count > limit:
                        message = f"{prefix}{node.name} takes {count} parameters (> {limit})"
                        findings.append(Finding(module.name, node.lineno, message))
    return sorted(findings, key=lambda f: (f.module, f.line))


def upward_imports(package: Package, floors: dict[str, int]) -> list[Finding]:
    """Imports of a module on a higher floor. ``floors`` maps the package's top-level names (``a`` for
    ``pkg.a`` and ``pkg.a.*``; ``""`` for the package's own ``__init__``) to floors, 0 the lowest; a
    module whose name is missing is a finding of its own. Only the imports a module writes count here, not
    the package ``__init__``s they imply."""
    findings = []

    def floor(module: str) -> int | None:
        parts = module.split(".")
        return floors.get(parts[1] if len(parts) > 1 else "")

    for module in package.modules.values():
        mine = floor(module.name)
        if mine is None:
            findings.append(Finding(module.name, 0, "is on no floor of the layering table"))
            continue
        seen: set[str] = set()
        for item in imports_of(package, module):
            theirs = floor(item.target)
            if item.target not in seen and theirs is not None and theirs > mine:
                seen.add(item.target)
                message = f"imports {item.target}, a higher floor ({theirs} > {mine})"
                findings.append(Finding(module.name, item.line, message))
    return findings
