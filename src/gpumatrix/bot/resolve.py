"""Resolve comment specs against the static registry of the PR head: only registered paths come out.

A spec is a bare file name (`test_quantize.py`, `.py` optional) or a repository-relative path, optionally
followed by `::node` (`test_name`, `Class::test_name`, `test_name[param]`). What leaves this module and
travels to a workflow is a registry path plus a node id checked against a small character set, never
the comment's text: no whitespace, quotes, `$`, backticks, `;`, `|`, `&`, `<`, `>` or backslashes.
Each refused spec says why; refused specs never stop the valid ones.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpumatrix.registry.model import Registry

__all__ = ["Refusal", "Resolution", "Target", "resolve_specs"]

_SPEC_RE = re.compile(r"[A-Za-z0-9_.:/\[\],=-]+")
_ALLOWED = "letters, digits and _ - . : [ ] / , ="
# `name`, `Class::name`, each optionally parametrized: `name[bf16-128]`.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NODE_RE = re.compile(rf"{_NAME}(?:::{_NAME})*(?:\[[A-Za-z0-9_.:/,=-]+\])?")
_CLOSE_MATCHES = 3


@dataclass(frozen=True)
class Refusal:
    """A spec (or a whole command, or an option) that is not acted on, and why."""

    spec: str
    message: str


@dataclass(frozen=True)
class Target:
    """One registered test file, or one node id in it."""

    path: str
    node: str | None = None

    @property
    def selection(self) -> str:
        """What pytest is given: `tests/x/test_y.py` or `tests/x/test_y.py::test_z[p]`."""
        return f"{self.path}::{self.node}" if self.node else self.path


@dataclass(frozen=True)
class Resolution:
    targets: tuple[Target, ...]
    refusals: tuple[Refusal, ...]


def resolve_specs(specs: Sequence[str], registry: Registry) -> Resolution:
    """Resolve every spec; duplicates collapse, and a whole file absorbs node ids of the same file."""
    if isinstance(specs, str):
        raise TypeError("specs must be a sequence of spec strings, not one str")
    targets: list[Target] = []
    refusals: list[Refusal] = []
    for spec in specs:
        found = _resolve_one(spec, registry)
        if isinstance(found, Refusal):
            if found not in refusals:
                refusals.append(found)
        elif found not in targets:
            targets.append(found)
    whole_files = {t.path for t in targets if t.node is None}
    kept = tuple(t for t in targets if t.node is None or t.path not in whole_files)
    return Resolution(kept, tuple(refusals))


def _resolve_one(spec: str, registry: Registry) -> Target | Refusal:
    bad = sorted({ch for ch in spec if not _SPEC_RE.fullmatch(ch)})
    if bad:
        shown = " ".join(repr(ch) for ch in bad[:5])
        return Refusal(spec, f"contains {shown}, which a test spec cannot hold (allowed: {_ALLOWED})")
    file_part, sep, node = spec.partition("::")
    if sep and not _NODE_RE.fullmatch(node):
        return Refusal(
            spec, "the part after `::` must be a test name: test_name, Class::test_name or test_name[param]"
        )
    if file_part.startswith("./"):
        file_part = file_part[2:]
    if file_part.startswith("/"):
        return Refusal(spec, "absolute paths are not allowed; give a repository-relative path or a file name")
    parts = file_part.split("/")
    if ".." in parts or "." in parts or "" in parts:
        return Refusal(spec, "the path must be a plain repository-relative path (no `..`, `.` or `//`)")

    if "/" in file_part:
        registration = registry.get(file_part)
        if registration is None:
            return Refusal(spec, _not_registered(file_part, registry))
        return Target(registration.path, node or None)

    wanted = {file_part, f"{file_part}.py"}
    candidates = [r.path for r in registry.files if posixpath.basename(r.path) in wanted]
    if len(candidates) > 1:
        return Refusal(
            spec,
            f"matches {len(candidates)} registered files: {', '.join(sorted(candidates))}; give the path",
        )
    if not candidates:
        return Refusal(spec, _not_registered(file_part, registry))
    return Target(candidates[0], node or None)


def _stem(path: str) -> str:
    """What tells test files apart: `tests/kernels/test_quantize.py` -> `quantize`."""
    name = posixpath.basename(path)
    return name.removeprefix("test_").removesuffix(".py")


def _not_registered(name: str, registry: Registry) -> str:
    problems = [
        p
        for p in registry.problems
        if p.source == name or posixpath.basename(p.source) in (name, f"{name}.py")
    ]
    if problems:  # the file exists in the PR but its register(...) call is broken: say so
        return f"is not in the registry: {problems[0].message}"
    # Compare stems: every candidate shares `tests/`, `test_` and `.py`, which would make anything "close".
    by_stem: dict[str, list[str]] = {}
    for registration in registry.files:
        by_stem.setdefault(_stem(registration.path), []).append(registration.path)
    close = difflib.get_close_matches(_stem(name), sorted(by_stem), n=_CLOSE_MATCHES, cutoff=0.6)
    paths = [path for stem in close for path in by_stem[stem]][:_CLOSE_MATCHES]
    hint = f"; close matches: {', '.join(paths)}" if paths else "; `/rerun-test ?` lists the registered tests"
    return f"is not a registered test file{hint}"
