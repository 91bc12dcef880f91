"""`ci/paths.yaml`: the code paths the project cares about, and the GPU classes each must run on.

A path is a name a test records while it runs (`gpumatrix.report.witnesses`); the library under test emits
them as plain records, and gpumatrix never imports it. Each declared path lists the classes of
`ci/matrix.yaml` on which some passing test must exercise it; `gpumatrix coverage` checks the
reports of the runners against that. The file is validated as a whole, like ci/matrix.yaml: every
problem (an unknown class, a class named twice, a path nobody must run without a `why`, ...) is
collected with its line and reported at once through `PathsError`. docs/coverage.md has the rules.

    paths:
      gemm.deepgemm:
        required_on: [b200, gb300]
        description: DeepGEMM consumed the pair
      linear.rebind:
        required_on: []
        why: exercised where it happens; no class can promise it
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpumatrix import UsageError
from gpumatrix.config import Matrix
from gpumatrix.problems import ProblemsError
from gpumatrix.yamlfile import YamlReader, compose_yaml, read_yaml_text

__all__ = ["PATHS_FILE", "DeclaredPath", "PathCatalog", "PathsError", "load_paths", "parse_paths"]

PATHS_FILE = "ci/paths.yaml"
# Dotted lower-case words (`hc.boundary.kernel.pair`): names travel into reports, pages and job summaries.
_PATH_RE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
_MAX_NAME = 100


class PathsError(ProblemsError, UsageError):
    """`ci/paths.yaml` is invalid (exit 2); `problems` holds every problem found, in file order."""

    summary = "invalid path declarations"


@dataclass(frozen=True)
class DeclaredPath:
    """One code path: where some passing test must exercise it, and what it is."""

    name: str
    required_on: tuple[str, ...]  # class names of ci/matrix.yaml, as written
    line: int
    description: str = ""
    why: str = ""


@dataclass(frozen=True)
class PathCatalog:
    """Every declared path, in file order."""

    paths: Mapping[str, DeclaredPath]
    source: str = PATHS_FILE

    def declares(self, name: str) -> bool:
        return name in self.paths

    def required(self, name: str, class_name: str) -> bool:
        declared = self.paths.get(name)
        return declared is not None and class_name in declared.required_on


def load_paths(path: str | Path, matrix: Matrix) -> PathCatalog:
    """Read and validate a paths file against `matrix`'s classes; raises `PathsError` listing every problem."""
    text = read_yaml_text(path, error=PathsError, what="the path declarations")
    return parse_paths(text, matrix, source=str(path))


def parse_paths(text: str, matrix: Matrix, *, source: str = PATHS_FILE) -> PathCatalog:
    """Validate paths YAML `text`; every problem is reported together, with its line."""
    root = compose_yaml(text, source, error=PathsError, depth_needed="path declarations need three")
    return _PathsParser(source, matrix).parse(root)


class _PathsParser(YamlReader):
    """The paths file's sections, over the node helpers of `YamlReader` (each value keeps its line)."""

    def __init__(self, source: str, matrix: Matrix) -> None:
        super().__init__(source)
        self.matrix = matrix

    def parse(self, root: yaml.Node | None) -> PathCatalog:
        if root is None:
            self.error(None, "the path declarations are empty (expected 'paths')")
            raise PathsError(self.problems)
        top = self.check_keys(root, ("paths",), "the path declarations")
        if "paths" not in top and isinstance(root, yaml.MappingNode):
            self.error(root, "missing required key 'paths'")
        declared: dict[str, DeclaredPath] = {}
        for name, key_node, value_node in self.mapping(top.get("paths"), "paths") if "paths" in top else ():
            found = self.parse_path(name, key_node, value_node)
            if found is not None:
                declared[name] = found
        if "paths" in top and isinstance(top["paths"], yaml.MappingNode) and not top["paths"].value:
            self.error(top["paths"], "paths must declare at least one path")
        if self.problems:
            raise PathsError(sorted(self.problems, key=lambda p: p.line))
        return PathCatalog(paths=declared, source=self.source)

    def parse_path(self, name: str, key_node: yaml.Node, node: yaml.Node) -> DeclaredPath | None:
        where = f"path {name!r}"
        if len(name) > _MAX_NAME or not _PATH_RE.match(name):
            self.error(
                key_node,
                f"{where}: a path name is dotted lower-case words (letters, digits, '_'), such as "
                f"'gemm.triton', of at most {_MAX_NAME} characters",
            )
        fields = self.check_keys(node, ("required_on", "description", "why"), where)
        if "required_on" not in fields:
            if isinstance(node, yaml.MappingNode):
                self.error(node, f"{where} needs 'required_on' (a list of classes; [] with a 'why')")
            return None
        classes = self.class_list(fields["required_on"], where)
        description = (
            self.text(fields["description"], f"{where} description") if "description" in fields else ""
        )
        why = self.text(fields["why"], f"{where} why") if "why" in fields else ""
        if classes is not None and not classes and not why:
            self.error(
                fields["required_on"],
                f"{where} is required on no class: say why in 'why', or name the classes it must run on",
            )
        return DeclaredPath(name, classes or (), key_node.start_mark.line + 1, description, why)

    def class_list(self, node: yaml.Node, where: str) -> tuple[str, ...] | None:
        what = f"{where} required_on"
        if not isinstance(node, yaml.SequenceNode):
            self.error(node, f"{what} must be a list of class names")
            return None
        known = self.matrix.classes
        served = {runner.gpu_class for runner in self.matrix.runners}
        classes: list[str] = []
        for item in node.value:
            name = self.text(item, f"{what} item")
            if not name:
                continue
            if name not in known:
                self.error(item, f"{what} names unknown class {name!r} (known: {', '.join(known)})")
            elif name in classes:
                self.error(item, f"{what} names class {name!r} twice")
                continue
            elif name not in served:
                self.error(
                    item,
                    f"{what} names class {name!r}, which no runner of {self.matrix.source} serves: "
                    f"it could never be exercised there",
                )
            # Kept even when reported above, so one bad name does not also read as "required on no class".
            classes.append(name)
        return tuple(classes)
