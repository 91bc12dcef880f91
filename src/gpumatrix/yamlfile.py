"""Reading a YAML file a person edits (ci/matrix.yaml, ci/paths.yaml) so that every value keeps its line.

Whatever the bytes, reading ends in a node tree or a `ProblemsError` of the caller's kind: text that is
not UTF-8, nesting deep enough to exhaust PyYAML's recursive composer, and YAML that does not parse are
problems with a line. `YamlReader` walks the composed nodes and collects a problem, with its line, for
every value that is not what the caller asked for, so a whole file is reported at once: tags the safe
loader refuses or cannot convert (`!!int two`, `!!python/object:...`), and null or empty text fields
(which would otherwise become the string "None").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gpumatrix.bounds import MAX_CONFIG_BYTES, MAX_COUNT, int_literal_problem
from gpumatrix.problems import Problem, ProblemsError
from gpumatrix.regular_files import read_regular

__all__ = [
    "INVALID",
    "MAX_DEPTH",
    "YamlReader",
    "compose_yaml",
    "is_plain_scalar",
    "load_yaml_data",
    "read_yaml_text",
]

# Deeper than any file of ci/ needs (the matrix nests 4 levels) and far below what exhausts PyYAML's
# recursive composer and constructor (about 300 levels under pytest's own stack).
MAX_DEPTH = 32
_OPENERS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSERS = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
# Plain scalars that are text as written: a class named 5090 or a ref named 1.0.
_TEXT_TAGS = frozenset({"tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})
INVALID = object()  # a value that could not be read (its problem is already reported)


def read_yaml_text(path: str | Path, *, error: type[ProblemsError], what: str) -> str:
    """The text of the file at `path`; `error` naming the file (and the line of a byte that is not UTF-8)
    when it cannot be read. `what` names the file's content in messages ("the runner matrix")."""
    path = Path(path)
    try:
        data = read_regular(path, limit=MAX_CONFIG_BYTES)
    except OSError as exc:
        raise error([Problem(str(path), 0, f"cannot read {what}: {exc.strerror}")]) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise error([Problem(str(path), 0, f"{what} is larger than {MAX_CONFIG_BYTES >> 20} MiB")])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            [Problem(str(path), line, f"not UTF-8 text (byte 0x{data[exc.start]:02x}): save {what} as UTF-8")]
        ) from None


def compose_yaml(
    text: str, source: str, *, error: type[ProblemsError], depth_needed: str
) -> yaml.Node | None:
    """The node tree of YAML `text` (None when it is empty); `error` with the line of the first problem.

    Nesting past MAX_DEPTH is refused from the token stream, which PyYAML scans without recursion;
    `depth_needed` says in the file's own words how deep it needs to go ("a runner matrix needs four").
    """
    try:
        deep = _too_deep(text)
        if deep is not None:
            message = f"nested more than {MAX_DEPTH} levels deep; {depth_needed}"
            raise error([Problem(source, deep.start_mark.line + 1, message)])
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise error(
            [Problem(source, _error_line(exc, text), f"not valid YAML: {_yaml_problem(exc)}")]
        ) from None


def load_yaml_data(text: str) -> Any:
    """The plain data of YAML that another tool reads (a GitHub workflow, say), for a look at a few of
    its values; None when it is not valid YAML or nests past MAX_DEPTH. What cannot be read is not
    guessed at, and it is no problem of gpumatrix's to report."""
    try:
        if _too_deep(text) is not None:
            return None
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def is_plain_scalar(text: str) -> bool:
    """Whether YAML reads `text`, written unquoted, back as the same string: `h100` is, `5090` (an int),
    `yes` (a bool in YAML 1.1) and `a: b` are not."""
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def _too_deep(text: str) -> yaml.Token | None:
    """The token that opens a collection MAX_DEPTH levels deep, found from the token stream, which PyYAML
    scans without recursion; None when the text stays shallower. A `yaml.YAMLError` where it does not scan."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_DEPTH:
                return token
        elif isinstance(token, _CLOSERS):
            depth -= 1
    return None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        character = exc.character
        shown = f"U+{character:04X}" if isinstance(character, int) else repr(character)
        return f"the character {shown} is not allowed in YAML"
    return str(getattr(exc, "problem", None) or exc)


def _error_line(exc: yaml.YAMLError, text: str) -> int:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return mark.line + 1
    position = getattr(exc, "position", None)  # a ReaderError: a character YAML does not allow
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else 0


class YamlReader:
    """Node helpers over one file's composed YAML: each value read keeps its line, each problem too."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[Problem] = []
        self._constructor = yaml.SafeLoader("")

    def error(self, node: yaml.Node | None, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 0
        self.problems.append(Problem(self.source, line, message))

    def value(self, node: yaml.Node, what: str) -> Any:
        """The Python value of `node`, or INVALID (reported) when the safe loader cannot build it."""
        try:
            return self._constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            problem = getattr(exc, "problem", None) or str(exc) or type(exc).__name__
            self.error(node, f"{what}: cannot read the value {_shown(node)} ({problem})")
            return INVALID

    def text(self, node: yaml.Node, what: str, *, default: str = "") -> str:
        """A non-empty string as written (a number stays its digits); `default` after a problem."""
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, f"{what} must be a string, got a {_kind(node)}")
        elif node.tag in _TEXT_TAGS and node.value:
            return node.value
        elif node.tag == "tag:yaml.org,2002:null" or (node.tag in _TEXT_TAGS and not node.value):
            self.error(node, f"{what} must not be empty (got {node.value or 'nothing'!s})")
        elif node.tag == "tag:yaml.org,2002:bool":
            self.error(node, f"{what} must be a string, got the boolean {node.value}; quote it")
        else:
            self.error(node, f"{what} must be a plain string, got {_shown(node)} (tag {node.tag})")
        return default

    def mapping(self, node: yaml.Node | None, what: str) -> Iterator[tuple[str, yaml.ScalarNode, yaml.Node]]:
        """Yield (key, key node, value node); reports non-mappings and duplicate keys."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, f"{what} must be a mapping")
            return
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = self.text(key_node, f"a key in {what}")
            if not key:
                continue
            if key in seen:
                self.error(key_node, f"duplicate key {key!r} in {what}")
                continue
            seen.add(key)
            yield key, key_node, value_node

    def check_keys(self, node: yaml.Node, allowed: tuple[str, ...], what: str) -> dict[str, yaml.Node]:
        found: dict[str, yaml.Node] = {}
        for key, key_node, value_node in self.mapping(node, what):
            if key not in allowed:
                self.error(key_node, f"unknown key {key!r} in {what} (expected one of: {', '.join(allowed)})")
            else:
                found[key] = value_node
        return found

    def string_list(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if not isinstance(node, yaml.SequenceNode) or not all(
            isinstance(item, yaml.ScalarNode) for item in node.value
        ):
            self.error(node, f"{what} must be a list of strings")
            return ()
        texts = (self.text(item, f"{what} item") for item in node.value)
        return tuple(text for text in texts if text)

    def positive_int(
        self, node: yaml.Node, what: str, *, allow_zero: bool = False, maximum: int = MAX_COUNT
    ) -> int:
        """A count from 1 (or 0) to `maximum`; 0 after a problem. A literal of more than MAX_INT_DIGITS
        digits is a problem before it is converted: a hexadecimal one is not held to Python's 4,300-digit
        limit, and a decimal one is only as long as `sys.set_int_max_str_digits` says."""
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, f"{what} must be an integer, got a {_kind(node)}")
            return 0
        too_long = int_literal_problem(node.value)
        if too_long is not None:
            self.error(
                node, f"{what} must be an integer from {int(not allow_zero)} to {maximum}, got {too_long}"
            )
            return 0
        value = self.value(node, what)
        if value is INVALID:
            return 0
        if not isinstance(value, int) or isinstance(value, bool):
            self.error(node, f"{what} must be an integer, got {_shown(node)}")
            return 0
        if value < 0 or (value == 0 and not allow_zero):
            self.error(node, f"{what} must be {'>= 0' if allow_zero else 'positive'}, got {value}")
            return 0
        if value > maximum:
            self.error(node, f"{what} must be at most {maximum}, got {value}")
            return 0
        return value


def _kind(node: yaml.Node) -> str:
    return {yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}.get(type(node), "value")


def _shown(node: yaml.Node) -> str:
    text = node.value if isinstance(node, yaml.ScalarNode) else f"<{_kind(node)}>"
    return repr(text if len(text) <= 40 else text[:37] + "...")
