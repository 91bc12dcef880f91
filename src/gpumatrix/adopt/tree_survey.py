"""Whether the registry sees every test file of a repository: what `gpumatrix check` adds to the registry.

The registry reads the `test_*.py` files under the test roots of ci/matrix.yaml (`test_roots:`,
default `tests`). A tree can hold test files it never reads, and a check that passed over them would
say "ok" about tests nobody gates. So the survey walks what pytest would collect by default (its
`testpaths`, else the whole tree, minus `norecursedirs`, by `python_files`) and reports, naming them:

- a test root that does not exist, or is a symbolic link (git and the bot read the link, not its
  target, and the plugin names files by their real paths: the three would disagree);
- a symbolic link inside a root to a test file or to a directory holding test files (never read);
- test files pytest collects outside every test root (one problem per directory, with a count);
- files pytest collects under a root that are not named `test_*.py` (`*_test.py`: never registered).

`survey_files` is the pure part (paths in, problems out); `survey_tree` walks the disk.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpumatrix.adopt.pytest_settings import PytestSettings, read_pytest_settings
from gpumatrix.config import Matrix
from gpumatrix.problems import Problem

__all__ = ["TreeSurvey", "survey_files", "survey_tree"]

_LISTED = 3  # file names shown per directory


@dataclass(frozen=True)
class TreeSurvey:
    """The files pytest would collect (root-relative '/'-paths), symbolic links met under the roots,
    and the problems they amount to against the test roots."""

    collected: tuple[str, ...]
    links: tuple[str, ...]
    problems: tuple[Problem, ...]


def survey_tree(root: str | Path, matrix: Matrix, settings: PytestSettings | None = None) -> TreeSurvey:
    """Walk `root` as pytest would collect it, and survey what is found against `matrix.test_roots`."""
    root = Path(root)
    settings = settings if settings is not None else read_pytest_settings(root)
    starts = settings.testpaths or (".",)
    collected: set[str] = set()
    links: set[str] = set()
    for start in (*starts, *matrix.test_roots):
        collected.update(_walk(root, start, settings, links))
    missing = tuple(r for r in matrix.test_roots if not (root / r).is_dir() and not (root / r).is_symlink())
    linked_roots = tuple(r for r in matrix.test_roots if (root / r).is_symlink())
    links -= set(linked_roots)
    problems = survey_files(
        sorted(collected), sorted(links), matrix, settings, missing=missing, linked_roots=linked_roots
    )
    return TreeSurvey(tuple(sorted(collected)), tuple(sorted(links)), problems)


def survey_files(
    collected: Sequence[str],
    links: Sequence[str],
    matrix: Matrix,
    settings: PytestSettings,
    *,
    missing: Sequence[str] = (),
    linked_roots: Sequence[str] = (),
) -> tuple[Problem, ...]:
    """The problems of a tree whose collectable test files are `collected` and whose symbolic links
    under the test roots (to test files, or to directories holding them) are `links`."""
    source = matrix.source
    problems = [
        Problem(source, 0, f"test root {r!r} does not exist (test_roots: {', '.join(matrix.test_roots)})")
        for r in missing
    ]
    problems += [
        Problem(
            source,
            0,
            f"test root {r!r} is a symbolic link: git and the /rerun-test bot read the link, not what it "
            f"points to, so its files are never registered; name the directory itself in test_roots",
        )
        for r in linked_roots
    ]
    problems += [
        Problem(
            path,
            0,
            "a symbolic link under a test root is not followed (the plugin names files by their real "
            "paths, git and the bot store the link): move the files here, or list their directory in "
            "test_roots",
        )
        for path in links
    ]
    outside: dict[str, list[str]] = {}
    for path in collected:
        if matrix.in_test_roots(path):
            name = path.rsplit("/", 1)[-1]
            if not (name.startswith("test_") and name.endswith(".py")):
                problems.append(
                    Problem(
                        path,
                        0,
                        f"pytest collects this file (python_files: {' '.join(settings.python_files)}), "
                        f"but gpumatrix registers only test_*.py files: rename it",
                    )
                )
            continue
        outside.setdefault(_directory(path), []).append(path)
    where = f"testpaths in {settings.source}" if settings.testpaths else "no testpaths: the whole tree"
    for directory, paths in sorted(outside.items()):
        shown = ", ".join(p.rsplit("/", 1)[-1] for p in paths[:_LISTED])
        more = f" and {len(paths) - _LISTED} more" if len(paths) > _LISTED else ""
        problems.append(
            Problem(
                directory,
                0,
                f"{len(paths)} test file(s) pytest collects ({where}) lie outside the test roots "
                f"({', '.join(matrix.test_roots)}), so nothing registers or gates them ({shown}{more}): "
                f"add {directory!r} to test_roots in {source}",
            )
        )
    return tuple(problems)


def _directory(path: str) -> str:
    """The top-level directory of a root-relative path ('.' for a file at the top)."""
    return path.split("/", 1)[0] if "/" in path else "."


def _walk(root: Path, start: str, settings: PytestSettings, links: set[str]) -> Iterable[str]:
    """Root-relative paths of the files pytest would collect under `start`; symbolic links to test
    files, or to directories holding them, are added to `links` (and not followed)."""
    top = root / start
    if top.is_symlink() or not top.exists():
        return
    if top.is_file():
        if _matches(top.name, settings.python_files):
            yield _relative(root, top)
        return
    for dirpath, dirnames, filenames in os.walk(top):
        kept = []
        for name in sorted(dirnames):
            full = os.path.join(dirpath, name)
            if _ignored_dir(name, full, settings):
                continue
            if os.path.islink(full):
                if _holds_tests(full, settings):
                    links.add(_relative(root, Path(full)))
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            if not _matches(name, settings.python_files):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                links.add(_relative(root, Path(full)))
            else:
                yield _relative(root, Path(full))


def _ignored_dir(name: str, full: str, settings: PytestSettings) -> bool:
    if name == "__pycache__" or any(fnmatch.fnmatch(name, pattern) for pattern in settings.norecursedirs):
        return True
    return os.path.isfile(os.path.join(full, "pyvenv.cfg"))  # a virtual environment, as pytest skips it


def _holds_tests(directory: str, settings: PytestSettings, *, limit: int = 2000) -> bool:
    # Links are followed here, to see whether it hides tests; `limit` directories bound a link cycle.
    for count, (_, _, filenames) in enumerate(os.walk(directory, followlinks=True)):
        if count >= limit or any(_matches(name, settings.python_files) for name in filenames):
            return count < limit
    return False


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return name.endswith(".py") and any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def _relative(root: Path, path: Path) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")
