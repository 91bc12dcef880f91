"""The one codec of the bot's hidden markers: the state it keeps on GitHub, written and read back.

The bot keeps no database. What it must know again later rides in hidden HTML comments of what it writes:

    kind             where                           holds
    state            a status comment                the `StatusComment`: command, pinned SHA, groups, runs
    check            a check run's summary, last     the `ReportMark`: the run, its attempt, what its reports
                     line                            said (so a later sync need not download them again)
    ci-states-state  the CI-states comment           the `CiStates` block, whose stale part only it keeps

Every marker is one line, `<!-- gpumatrix:KIND {"v":1,...} -->`: JSON with `<`, `>` and `@` escaped, so
neither `-->` nor a mention can occur in it (`hidden_json`), and `v`, the version of its fields. A reader
takes version 1 and a marker without `v` (check-run summaries were written without one before this codec),
and refuses any other version with a `MarkerError` that names it: a marker a newer gpumatrix wrote is never
half read. Fields that are not what the codec writes are refused the same way. The `check` marker counts
only as the summary's last line: a failing test id shown above it (text from the code under test) that
imitates one is never last.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpumatrix import GpumatrixError
from gpumatrix.bot.model import (
    HEAD,
    CiStates,
    GroupStatus,
    ReportMark,
    StatusComment,
    Suite,
    Tally,
)
from gpumatrix.bot.report import ReportSummary
from gpumatrix.bot.resolve import Refusal

__all__ = [
    "CHECK",
    "CI_STATES",
    "KINDS",
    "STATUS",
    "VERSION",
    "MarkerError",
    "decode_ci_states",
    "decode_status",
    "encode_check",
    "encode_ci_states",
    "encode_status",
    "hidden_json",
    "parse_status_comment",
    "read_mark",
    "read_marker",
    "write_marker",
]

VERSION = 1  # of the fields every marker is written with; raise it when one changes, and read the old one


@dataclass(frozen=True)
class _Kind:
    name: str
    what: str  # named in messages
    last_line: bool  # the marker counts only as the text's last line


STATUS = "state"
CHECK = "check"
CI_STATES = "ci-states-state"
KINDS = {
    STATUS: _Kind(STATUS, "status comment", last_line=False),
    CHECK: _Kind(CHECK, "check run summary", last_line=True),
    CI_STATES: _Kind(CI_STATES, "CI-states comment", last_line=False),
}
_PATTERNS = {
    name: re.compile(
        rf"\n<!-- gpumatrix:{re.escape(name)} (\{{[^\n]*\}}) -->\Z"
        if kind.last_line
        else rf"<!-- gpumatrix:{re.escape(name)} (\{{.*?\}}) -->",
        re.DOTALL,
    )
    for name, kind in KINDS.items()
}


class MarkerError(GpumatrixError):
    """A gpumatrix marker this code cannot read: of an unknown version, not JSON, or with other fields."""


def hidden_json(data: Any) -> str:
    """`data` as JSON that can sit inside an HTML comment: `<`, `>` and `@` escaped, so neither `-->` nor
    `--!>` (which end a comment) nor a mention can occur in it."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("@", "\\u0040")


def write_marker(kind: str, fields: Mapping[str, Any]) -> str:
    """The marker line of `kind` holding `fields`, at the current VERSION."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return f"<!-- gpumatrix:{kind} {hidden_json({'v': VERSION, **fields})} -->"


def read_marker(kind: str, text: str | None) -> dict[str, Any] | None:
    """The fields of `kind`'s marker in `text` (its version taken off); None when `text` holds none; a
    `MarkerError` when it holds one this code cannot read."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    found = _PATTERNS[kind].search(text or "")
    if found is None:
        return None
    what = KINDS[kind].what
    try:
        data = json.loads(found[1])
    except ValueError as exc:
        raise MarkerError(f"the {what}'s gpumatrix marker is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MarkerError(f"the {what}'s gpumatrix marker is not a JSON object")
    version = data.pop("v", 1)  # check-run summaries were written without a version: that is version 1
    if version != VERSION or isinstance(version, bool):
        raise MarkerError(
            f"the {what}'s gpumatrix marker is version {version!r}; this gpumatrix reads version {VERSION} "
            "(a newer gpumatrix wrote it?)"
        )
    return data


def _refused(what: str, exc: Exception) -> MarkerError:
    return MarkerError(f"the {what}'s gpumatrix marker holds fields it does not write: {exc!r}")


# -- the status comment ---------------------------------------------------------------------------------


def encode_status(status: StatusComment) -> str:
    """The status comment's marker line."""
    fields: dict[str, Any] = {
        "source": status.source_comment_id,
        "command": status.command,
        "author": status.author,
        "pr": status.pr,
        "sha": status.sha,
        "groups": [
            {
                "label": g.label,
                "tests": list(g.tests),
                "state": g.state,
                "run_id": g.run_id,
                "url": g.url,
                "error": g.error,
                # absent unless set, so comments written before it read back the same
                **({"include_disabled": True} if g.include_disabled else {}),
                **({"commit": g.commit} if g.commit != HEAD else {}),
                **({"tally": g.tally.to_json()} if g.tally is not None else {}),
            }
            for g in status.groups
        ],
        "refusals": [[r.spec, r.message] for r in status.refusals],
        "problem": status.problem,
    }
    if status.checks is not None:  # absent, not null, so comments written before checks read back the same
        fields.update(checks=status.checks, checks_note=status.checks_note)
    if status.repeat:
        fields.update(
            repeat=status.repeat,
            base_sha=status.base_sha,
            base_ref=status.base_ref,
            new_tests=list(status.new_tests),
        )
    return write_marker(STATUS, fields)


def decode_status(body: str | None) -> StatusComment | None:
    """The status comment stored in `body`; None when `body` holds no status marker; a `MarkerError` when
    it holds one this code cannot read."""
    data = read_marker(STATUS, body)
    if data is None:
        return None
    try:
        return StatusComment(
            source_comment_id=int(data["source"]),
            command=str(data["command"]),
            author=str(data["author"]),
            pr=_optional_int(data.get("pr")),
            sha=str(data["sha"]) if data.get("sha") else None,
            groups=tuple(
                GroupStatus(
                    label=str(g["label"]),
                    tests=tuple(str(t) for t in g["tests"]),
                    state=str(g["state"]),
                    run_id=_optional_int(g.get("run_id")),
                    url=str(g["url"]) if g.get("url") else None,
                    error=str(g["error"]) if g.get("error") else None,
                    include_disabled=g.get("include_disabled") is True,
                    commit=str(g.get("commit", HEAD)),
                    tally=Tally.from_json(g["tally"]) if g.get("tally") is not None else None,
                )
                for g in data.get("groups", ())
            ),
            refusals=tuple(Refusal(str(spec), str(message)) for spec, message in data.get("refusals", ())),
            problem=str(data["problem"]) if data.get("problem") else None,
            checks=str(data["checks"]) if data.get("checks") else None,
            checks_note=str(data["checks_note"]) if data.get("checks_note") else None,
            repeat=_optional_int(data.get("repeat")),
            base_sha=str(data["base_sha"]) if data.get("base_sha") else None,
            base_ref=str(data["base_ref"]) if data.get("base_ref") else None,
            new_tests=tuple(str(t) for t in data.get("new_tests", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _refused(KINDS[STATUS].what, exc) from None


def parse_status_comment(body: str | None) -> StatusComment | None:
    """The status comment stored in `body`; None when it is not a status comment this code can read."""
    try:
        return decode_status(body)
    except MarkerError:
        return None


# -- the check run's summary ----------------------------------------------------------------------------


def encode_check(mark: ReportMark) -> str:
    """The marker line that ends a check run's summary."""
    return write_marker(
        CHECK,
        {
            "run": mark.run_id,
            "attempt": mark.attempt,
            "complete": mark.complete,
            "report": mark.report.to_json() if mark.report else None,
        },
    )


def read_mark(summary: str | None) -> ReportMark | None:
    """The marker at the end of a check run's summary; None when there is none or this code cannot read
    it (its reports are then read again)."""
    try:
        data = read_marker(CHECK, summary)
    except MarkerError:
        return None
    if data is None:
        return None
    run_id, attempt, complete = data.get("run"), data.get("attempt"), data.get("complete")
    if not (_positive(run_id) and _positive(attempt) and isinstance(complete, bool)):
        return None
    report = ReportSummary.from_json(data.get("report")) if data.get("report") is not None else None
    return ReportMark(run_id, attempt, complete, report)


# -- the CI-states comment ------------------------------------------------------------------------------


def encode_ci_states(states: CiStates) -> str:
    """The CI-states comment's marker line."""

    def suite(s: Suite) -> dict[str, Any]:
        return {
            "name": s.name,
            "state": s.state,
            "sha": s.sha,
            "url": s.url,
            "run_id": s.run_id,
            "number": s.number,
            "comment_url": s.comment_url,
        }

    return write_marker(
        CI_STATES,
        {
            "pr": states.pr,
            "head": states.head,
            "suites": [suite(s) for s in states.suites],
            "stale": [suite(s) for s in states.stale],
        },
    )


def decode_ci_states(body: str | None) -> CiStates | None:
    """The CI-states block stored in `body`; None when it holds no CI-states marker; a `MarkerError` when
    it holds one this code cannot read."""
    data = read_marker(CI_STATES, body)
    if data is None:
        return None
    try:
        return CiStates(
            int(data["pr"]),
            str(data["head"]),
            tuple(_suite(s) for s in data["suites"]),
            tuple(_suite(s) for s in data["stale"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _refused(KINDS[CI_STATES].what, exc) from None


def _suite(data: Any) -> Suite:
    def optional(key: str, kind: type) -> Any:
        value = data.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise TypeError(f"{key}: expected {kind.__name__}, got {value!r}")
        return value

    return Suite(
        str(data["name"]),
        str(data["state"]),
        str(data["sha"]),
        optional("url", str),
        optional("run_id", int),
        optional("number", int),
        optional("comment_url", str),
    )


def _optional_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
