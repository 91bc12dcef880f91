"""`gpumatrix estimate --write`: measured seconds written back into registrations, as literal edits.

Only the `est_time=` literal of a file's `register(...)` call changes; everything else in the file
stays byte for byte (comments, quoting, line endings, a BOM). A number becomes the new number; a
mapping keeps its other classes and gets the measured ones (a class it lacked is added, which
rewrites that mapping); a single number on a file that runs on classes the reports did not measure
becomes a mapping that keeps the old number for those, since one number is every class's estimate.
Files that are not UTF-8 (a PEP 263 coding line naming another encoding) are left for a person.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpumatrix.estimate.proposals import FileEstimate
from gpumatrix.registry.reader import find_register_call
from gpumatrix.registry.source import SourceError, parse_head

__all__ = ["DEFAULT_TOLERANCE", "EstTimeEdit", "plan_edits", "rewrite_est_time", "write_edits"]

# A registration within this factor of the measurement is left as it is: a second run measures a
# little differently every time, and rewriting every file after every run would bury the changes
# that matter. 1.25 keeps every registration within 1.25x of what was measured.
DEFAULT_TOLERANCE = 1.25
_BOM = "\ufeff"
_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class EstTimeEditError(ValueError):
    """A file whose registration cannot be edited in place (no call, no literal, not UTF-8)."""


@dataclass(frozen=True)
class EstTimeEdit:
    """New seconds for some classes of one file, and what they replace."""

    path: str
    seconds: Mapping[str, int]  # class: measured seconds to write
    registered: Mapping[str, float]  # class: what the file says now


def plan_edits(
    estimates: Sequence[FileEstimate], *, tolerance: float = DEFAULT_TOLERANCE
) -> list[EstTimeEdit]:
    """The edits that bring every registration with samples within `tolerance` of its proposal."""
    if not tolerance >= 1:
        raise ValueError(f"tolerance must be a factor >= 1, got {tolerance!r}")
    by_path: dict[str, tuple[dict[str, int], dict[str, float]]] = {}
    for e in estimates:
        if e.registered is None or e.proposed is None:
            continue
        if e.proposed / tolerance <= e.registered <= e.proposed * tolerance:
            continue
        seconds, registered = by_path.setdefault(e.path, ({}, {}))
        seconds[e.gpu_class], registered[e.gpu_class] = e.proposed, e.registered
    return [EstTimeEdit(path, *by_path[path]) for path in sorted(by_path)]


def rewrite_est_time(text: str, path: str, seconds: Mapping[str, int]) -> str:
    """`text` (a test file's source) with the `est_time=` of its registration set to `seconds` for
    those classes; an `EstTimeEditError` when the file has no literal registration to edit."""
    body_text = text[1:] if text.startswith(_BOM) else text
    try:
        body = parse_head(body_text, path)
    except SourceError as exc:
        raise EstTimeEditError(f"{path}: {exc.message}") from None
    call = find_register_call(body or [])
    if call is None:
        raise EstTimeEditError(f"{path}: no register(...) call at module top level")
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    node = keywords.get("est_time")
    current, on = _literal(node), _literal(keywords.get("on"))
    on = (on,) if isinstance(on, str) else on
    if node is None or not isinstance(on, (tuple, list)):
        raise EstTimeEditError(f"{path}: register(...) has no literal on= and est_time= to edit")
    lines = _lines(body_text)
    if isinstance(node, ast.Dict) and isinstance(current, dict):
        spans = {
            key.value: value
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant)
        }
        if set(seconds) <= set(spans):  # only values change: the mapping keeps its layout
            edits = sorted(
                ((spans[name], str(value)) for name, value in seconds.items()), key=_start, reverse=True
            )
            for value_node, new in edits:
                body_text = _replace(body_text, lines, value_node, new)
                lines = _lines(body_text)
        else:
            body_text = _replace(body_text, lines, node, _mapping({**current, **seconds}))
    elif isinstance(current, (int, float)) and not isinstance(current, bool):
        others = {name: current for name in on if name not in seconds}
        if not others and len(set(seconds.values())) == 1:
            new = str(next(iter(seconds.values())))
        else:
            new = _mapping({name: seconds.get(name, others.get(name)) for name in on})
        body_text = _replace(body_text, lines, node, new)
    else:
        raise EstTimeEditError(f"{path}: est_time= is not a number or a mapping of classes to numbers")
    return (_BOM if text.startswith(_BOM) else "") + body_text


def write_edits(root: Path, edits: Sequence[EstTimeEdit]) -> dict[str, str]:
    """Apply `edits` under `root`; each file is replaced through a temporary file beside it. Returns
    {path: why} for the files that could not be edited (the others are written)."""
    problems: dict[str, str] = {}
    for edit in edits:
        target = root / edit.path
        try:
            data = target.read_bytes()
            text = data.decode("utf-8")
            new = rewrite_est_time(text, edit.path, edit.seconds)
        except UnicodeDecodeError:
            problems[edit.path] = "not UTF-8; edit its est_time by hand"
            continue
        except OSError as exc:
            problems[edit.path] = exc.strerror or str(exc)
            continue
        except EstTimeEditError as exc:
            problems[edit.path] = str(exc).removeprefix(f"{edit.path}: ")
            continue
        _write_beside(target, new.encode("utf-8"))
    return problems


def _write_beside(target: Path, data: bytes) -> None:
    """Replace `target` with `data` through a temporary file in its directory, keeping its mode."""
    mode = target.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _literal(node: ast.expr | None) -> object:
    """The value of a literal node; None for no node or one that is not a literal."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _mapping(seconds: Mapping[str, float | int]) -> str:
    return "{" + ", ".join(f'"{name}": {_number(value)}' for name, value in seconds.items()) + "}"


def _number(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _start(item: tuple[ast.expr, str]) -> tuple[int, int]:
    return item[0].lineno, item[0].col_offset


def _lines(text: str) -> list[str]:
    """The lines of `text` with their ends, split where Python's tokenizer splits (not at U+2028 or a
    form feed, as str.splitlines would)."""
    return _LINE_RE.findall(text)


def _offset(lines: Sequence[str], line: int, col: int) -> int:
    """The index in the text of (1-based `line`, `col` in UTF-8 bytes), as ast gives positions."""
    before = sum(len(text) for text in lines[: line - 1])
    return before + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))


def _replace(text: str, lines: Sequence[str], node: ast.expr, new: str) -> str:
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
    return text[:start] + new + text[end:]
