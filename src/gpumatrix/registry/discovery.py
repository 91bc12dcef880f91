"""Discovery: the registry of a tree on disk (or of files read as data), with the cache that keeps what each
file gave.

`discover` walks the matrix's test roots for `test_*.py` files (links are not followed), reads each one
through `gpumatrix.registry.reader`, keeps what it gave in `ROOT/.gpumatrix/registry-cache.json`
(`gpumatrix.registry.cache`, keyed by path, size and modification time, and by the code that reads), and
places each file on its runners (`gpumatrix.registry.resolution`): a second run parses only the files that
changed (benchmarks/registry_discovery.py).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpumatrix.config import DEFAULT_TEST_ROOTS, Matrix, load_matrix
from gpumatrix.problems import Problem
from gpumatrix.registry import model, reader, refine, source
from gpumatrix.registry.cache import CachedReading, RegistrationCache
from gpumatrix.registry.model import FileReading, Registration, Registry
from gpumatrix.registry.reader import read_registration
from gpumatrix.registry.resolution import resolve_registry
from gpumatrix.registry.source import read_source_bytes

__all__ = ["build_registry", "discover", "find_test_files", "load_tree", "reading_code_key"]

# Part of the registry cache's key: raise it when a reading's stored shape changes without the reading
# code changing (2: suite, disabled, disabled_on and est_times joined; 3: refined tests
# (`@pytest.mark.gpumatrix`) and own_runners; 4: exclusive).
CACHE_FORMAT = 4


def find_test_files(root: str | Path, *, roots: Sequence[str] = DEFAULT_TEST_ROOTS) -> list[str]:
    """Repository-relative paths of every `test_*.py` under the test `roots` of `root`, sorted.

    Symbolic links are not followed, a root that is one included: git and the bot read the tree as
    stored, and the plugin names a file by its real path, so a linked file would be registered under a
    name nothing else uses (`gpumatrix check` names such links: `gpumatrix.adopt.tree_survey`).
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
    """A hash of the code that decides what reading a file gives (the reader, the source reading, the
    refinements and the registration's fields): the registry cache keeps readings only under the key of
    the code that made them."""
    digest = hashlib.sha256(str(CACHE_FORMAT).encode())
    for module in (model, reader, refine, source):
        digest.update(Path(module.__file__ or "").read_bytes())
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
