"""Helpers a test file imports from the tree's own modules, and the GPU signs in their definitions.

Kernel test suites put their hardware checks in a shared module (`test/utils.py`'s
`supports_bfloat16()`, a `requires_sm90 = pytest.mark.skipif(...)` in `tests/helpers.py`) and use them
in marks: `pytest.param(..., marks=pytest.mark.skipif(not supports_bfloat16(), ...))`. `register
--suggest` and `init` read those definitions too, as data, without importing anything:

- `from test.utils import a, b` names `ROOT/test/utils.py` (or `ROOT/test/utils/__init__.py`), and
  `from .utils import a` the module beside the file; a module outside the root, missing, not a regular
  file or larger than the registry reads of a test file is not read;
- only the imported names are looked up, one level deep (a helper's own imports are not followed);
- each module is parsed once per walk of the tree.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from pathlib import Path

from gpumatrix.adopt.evidence import Sign, helper_signs
from gpumatrix.registry.source import READ_LIMIT
from gpumatrix.regular_files import read_regular

__all__ = ["LocalHelpers"]


class LocalHelpers:
    """The tree at `root`'s own modules, read on demand and kept for one walk."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self._modules: dict[Path, ast.Module | None] = {}

    def helpers_for(self, tree: ast.Module, path: str) -> dict[str, Sequence[Sign]]:
        """{name: signs} for every name `tree` (the file at root-relative `path`) imports from a module
        of the tree whose definition of it shows a sign."""
        found: dict[str, Sequence[Sign]] = {}
        for stmt in tree.body:
            if not isinstance(stmt, ast.ImportFrom):
                continue
            module_file = self._module_file(stmt, path)
            module = self._parsed(module_file) if module_file is not None else None
            if module is None or module_file is None:
                continue
            names = {alias.name: alias.asname or alias.name for alias in stmt.names if alias.name != "*"}
            where = module_file.relative_to(self.root).as_posix()
            for name, signs in helper_signs(module, where, names).items():
                found[names[name]] = signs
        return found

    def _module_file(self, stmt: ast.ImportFrom, path: str) -> Path | None:
        parts = (stmt.module or "").split(".") if stmt.module else []
        if stmt.level:
            base = (self.root / path).parent
            for _ in range(stmt.level - 1):
                base = base.parent
        else:
            base = self.root
        if not parts:
            return None
        stem = base.joinpath(*parts)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            resolved = Path(os.path.normpath(candidate))
            if resolved.is_relative_to(self.root) and resolved.is_file():
                return resolved
        return None

    def _parsed(self, module_file: Path) -> ast.Module | None:
        if module_file not in self._modules:
            try:
                data = read_regular(module_file, limit=READ_LIMIT)
                self._modules[module_file] = (
                    ast.parse(data, filename=str(module_file)) if len(data) <= READ_LIMIT else None
                )
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                self._modules[module_file] = None
        return self._modules[module_file]
