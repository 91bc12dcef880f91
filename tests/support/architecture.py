"""Static architecture checks of a Python package tree, read with ``ast`` (nothing is imported).

``read_package(root)`` parses every module under a package directory; the checks over it are pure:

* ``import_cycles``: cycles of the module import graph. Every ``import`` and ``from ... import`` counts,
  those inside functions included (a deferred import is still a dependency). ``from a.b import c`` is an
  edge to ``a.b.c`` when that is a module of the tree, else to ``a.b``.
* ``private_imports``: a module that imports (or reads as an attribute of an imported module) a name
  whose owner is another module: ``from a.b import _c`` anywhere but in ``a.b`` or below it, and
  ``import a._b`` anywhere but in ``a``.
* ``long_signatures``: public functions and methods with more than ``limit`` parameters (``self`` and
  ``cls`` not counted). Public: neither the function nor its class starts with an underscore. Functions
  decorated with ``triton.jit`` are device code and exempt.
* ``upward_imports``: imports from a floor to a higher one, given each top-level subpackage's floor.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Finding",
    "Package",
    "import_cycles",
    "long_signatures",
    "private_imports",
    "read_package",
    "upward_imports",
]


@dataclass(frozen=True)
class Finding:
    """One problem: the module (dotted name), the line, and what is wrong."""

    module: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Package:
    """Every module of a package tree: dotted name -> (path, parsed tree)."""

    name: str
    modules: dict[str, tuple[Path, ast.Module]]

    def is_package(self, module: str) -> bool:
        return self.modules[module][0].name == "__init__.py"


def read_package(root: Path) -> Package:
    """Parse every ``*.py`` under the package directory ``root`` (its name is the package's)."""
    modules: dict[str, tuple[Path, ast.Module]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = (path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return Package(root.name, modules)


def _absolute(package: Package, module: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not package.is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(package: Package, module: str) -> list[tuple[int, str]]:
    """(line, dotted path) of everything ``module`` imports: ``import a.b`` gives ``a.b``; ``from a
    import b, c`` gives ``a.b`` and ``a.c``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(package.modules[module][1]):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(package, module, node)
            found.extend((node.lineno, f"{source}.{alias.name}") for alias in node.names if alias.name != "*")
    return found


def _target(package: Package, path: str) -> str | None:
    """The module of the tree an imported dotted path loads: the path itself, else its parent."""
    if path in package.modules:
        return path
    parent = path.rpartition(".")[0]
    return parent if parent in package.modules else None


def import_graph(package: Package) -> dict[str, dict[str, int]]:
    """module -> {imported module of the tree: first line}."""
    graph: dict[str, dict[str, int]] = {m: {} for m in package.modules}
    for module in package.modules:
        for line, path in _imports(package, module):
            target = _target(package, path)
            if target is not None and target != module:
                graph[module].setdefault(target, line)
    return graph


def import_cycles(package: Package) -> list[Finding]:
    """One finding per strongly connected component of more than one module (Tarjan's algorithm)."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        # Iterative, so a deep graph cannot exhaust Python's recursion limit.
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, edges = work[-1]
            advanced = False
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    findings = []
    for component in components:
        members = set(component)
        first = component[0]
        edges = ", ".join(
            f"{a} -> {b} (line {line})"
            for a in component
            for b, line in sorted(graph[a].items())
            if b in members
        )
        findings.append(Finding(first, 0, f"import cycle among {component}: {edges}"))
    return findings


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_owner(path: str) -> str | None:
    """The dotted path that owns the first private component of ``path`` (None: nothing private)."""
    parts = path.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            return ".".join(parts[:i])
    return None


def _inside(module: str, owner: str) -> bool:
    return module == owner or module.startswith(owner + ".")


def private_imports(package: Package) -> list[Finding]:
    """Imports of another module's private names, and reads of ``module._name`` through an import."""
    findings = []
    for module, (_, tree) in package.modules.items():
        bound: dict[str, str] = {}  # local name -> module of the tree it is bound to
        for line, path in _imports(package, module):
            owner = _private_owner(path)
            if owner is not None and not _inside(module, owner):
                findings.append(Finding(module, line, f"imports {path}, a private name of {owner}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in package.modules:
                        bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(package, module, node)
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in package.modules:
                        bound[alias.asname or alias.name] = full
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _is_private(node.attr)
            ):
                owner = bound[node.value.id]
                if not _inside(module, owner):
                    findings.append(
                        Finding(module, node.lineno, f"reads {owner}.{node.attr}, a private name of {owner}")
                    )
    return findings


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
    """Public functions and methods (not ``triton.jit``) taking more than ``limit`` parameters."""
    findings = []
    for module, (_, tree) in package.modules.items():
        scopes: list[tuple[str, list[ast.stmt], bool]] = [("", tree.body, False)]
        while scopes:
            prefix, body, method = scopes.pop()
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    scopes.append((f"{prefix}{node.name}.", node.body, True))
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if node.name.startswith("_") or _is_device_code(node):
                        continue
                    count = _parameters(node, method=method)
                    if count > limit:
                        findings.append(
                            Finding(
                                module,
                                node.lineno,
                                f"{prefix}{node.name} takes {count} parameters (> {limit})",
                            )
                        )
    return findings


def upward_imports(package: Package, floors: dict[str, int]) -> list[Finding]:
    """Imports of a module on a higher floor. ``floors`` maps the package's top-level names (``a`` for
    ``pkg.a`` and ``pkg.a.*``; ``""`` for the package's own ``__init__``) to floors, 0 the lowest; a
    module whose name is missing is a finding of its own."""
    findings = []

    def floor(module: str) -> int | None:
        parts = module.split(".")
        return floors.get(parts[1] if len(parts) > 1 else "")

    for module, targets in import_graph(package).items():
        mine = floor(module)
        if mine is None:
            findings.append(Finding(module, 0, "is on no floor of the layering table"))
            continue
        for target, line in targets.items():
            theirs = floor(target)
            if theirs is not None and theirs > mine:
                findings.append(
                    Finding(module, line, f"imports {target}, a higher floor ({theirs} > {mine})")
                )
    return findings
