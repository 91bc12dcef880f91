"""The facts the bot needs from an `issue_comment` webhook payload, checked once at the edge."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumatrix import GpumatrixError
from gpumatrix.bounds import MAX_EVENT_BYTES, MAX_EVENT_ID
from gpumatrix.regular_files import read_regular

__all__ = ["CommentEvent", "EventError", "load_event", "without_lone_surrogates"]

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class EventError(GpumatrixError):
    """The event file is missing, unreadable, or not an `issue_comment` payload."""


@dataclass(frozen=True)
class CommentEvent:
    action: str  # created, edited or deleted
    comment_id: int
    body: str
    author: str
    author_type: str  # "User", "Bot" or "Organization"
    issue_number: int
    is_pull_request: bool
    repository: str = ""  # owner/name, when the payload names it

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> CommentEvent:
        """Read an `issue_comment` payload; raises `EventError` naming the first field that is missing or
        not of its type (a field GitHub may leave out or send as null: of its type when present)."""
        if not isinstance(payload, Mapping):
            raise EventError(f"an issue_comment event must be a JSON object, got {type(payload).__name__}")
        comment = _field(payload, "comment", Mapping)
        user = _field(comment, "user", Mapping, where="comment")
        issue = _field(payload, "issue", Mapping)
        repository = _optional(payload, "repository", Mapping) or {}
        return cls(
            action=_field(payload, "action", str),
            comment_id=_id(comment, "id", where="comment"),
            body=without_lone_surrogates(_optional(comment, "body", str, where="comment") or ""),
            author=without_lone_surrogates(_field(user, "login", str, where="comment.user")),
            author_type=_optional(user, "type", str, where="comment.user") or "User",
            issue_number=_id(issue, "number", where="issue"),
            # GitHub sends PR comments as issue comments; only PRs carry `issue.pull_request`.
            is_pull_request=bool(_optional(issue, "pull_request", Mapping, where="issue")),
            repository=_optional(repository, "full_name", str, where="repository") or "",
        )


def without_lone_surrogates(text: str) -> str:
    """`text` with each lone UTF-16 surrogate (JSON's `"\\ud800"`, which no UTF-8 text can hold: posting or
    printing it would fail) replaced by U+FFFD, as a decoder replaces bytes it cannot read."""
    return _SURROGATE_RE.sub("\ufffd", text)


def _id(mapping: Mapping[str, Any], key: str, *, where: str) -> int:
    """A GitHub id: an integer from 1 to 2**63 - 1 (a 64-bit signed integer), else `EventError`."""
    value = _field(mapping, key, int, where=where)
    if not 1 <= value <= MAX_EVENT_ID:
        raise EventError(f"not an issue_comment event: `{where}.{key}` must be from 1 to {MAX_EVENT_ID}")
    return value


def load_event(path: str | Path) -> CommentEvent:
    """Read an `issue_comment` event file (`$GITHUB_EVENT_PATH`)."""
    try:  # a FIFO or a device is refused, never opened for a read that would wait
        data = read_regular(Path(path), limit=MAX_EVENT_BYTES)
    except OSError as exc:
        raise EventError(f"cannot read the event file {path}: {exc.strerror}") from exc
    if len(data) > MAX_EVENT_BYTES:
        raise EventError(f"the event file {path} is larger than {MAX_EVENT_BYTES >> 20} MiB")
    try:
        payload = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise EventError(f"the event file {path} is not JSON: {type(exc).__name__}: {exc}") from None
    return CommentEvent.from_payload(payload)


def _optional(mapping: Mapping[str, Any], key: str, kind: type, *, where: str = "") -> Any:
    """`mapping[key]` when it is of `kind`, None when it is absent or null; `EventError` otherwise."""
    return None if mapping.get(key) is None else _field(mapping, key, kind, where=where)


def _field(mapping: Mapping[str, Any], key: str, kind: type, *, where: str = "") -> Any:
    value = mapping.get(key)
    # bool is an int subclass: a `true` id is as wrong as a missing one.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        name = f"{where}.{key}" if where else key
        raise EventError(f"not an issue_comment event: `{name}` is missing or not a {kind.__name__}")
    return value
