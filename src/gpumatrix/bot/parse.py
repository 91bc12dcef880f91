"""Find and parse the `/rerun-test` command in a PR comment.

Only the first line that *starts* with a command counts, and only where a reader of the rendered comment
sees it as the commenter's own words: quoted text (`>` lines and their lazy continuations), fenced and
indented code, and HTML comments are skipped, so a quoted reply or a pasted log never fires again.
Invisible format characters (Unicode category Cf: zero-width spaces, bidi overrides, ...) are removed
first, so a command cannot be hidden from, or smuggled past, a human reader.

Parsing only splits on whitespace: no quoting, no escapes, nothing a shell would interpret. Whether a
spec names a registered test is decided later, against the registry (`gpumatrix.bot.resolve`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "LIST",
    "MAX_SPECS",
    "RERUN_FAILED",
    "INCLUDE_DISABLED",
    "REPEAT",
    "RERUN_TEST",
    "Command",
    "command_lines",
    "parse_comment",
    "strip_format_characters",
]

RERUN_TEST = "rerun-test"
LIST = "list"
RERUN_FAILED = "rerun-failed"
# One comment dispatches at most this many specs: enough for any honest re-run, and it bounds the size
# of the workflow inputs and of the status comment.
MAX_SPECS = 50

USAGE = (
    "/rerun-test <file>[::node]... [--runner LABEL]... [--sha SHORT_SHA] [--include-disabled] [--repeat N]  |  "
    "/rerun-test ?  |  /rerun-failed [--include-disabled]"
)
# Runs the selection N times on the PR head and N times on its merge base, and compares (docs/flaky.md).
REPEAT = "--repeat"
# Runs files registered disabled= (or disabled_on= a runner's class) instead of refusing them.
INCLUDE_DISABLED = "--include-disabled"

_COMMAND_RE = re.compile(r"/(rerun-test|rerun-failed)(?=\s|$)")
_FENCE_RE = re.compile(r"(`{3,}|~{3,})(.*)$")
_SHA_RE = re.compile(r"[0-9a-f]{7,40}")
_COUNT_RE = re.compile(r"[0-9]{1,6}")
_BACKTICKS_RE = re.compile(r"`+")
_INLINE_OPENER_RE = re.compile(r"`+|<!--")


@dataclass(frozen=True)
class Command:
    """A command found in a comment; `problem` is set when it is malformed and must be refused whole."""

    kind: str  # RERUN_TEST, LIST or RERUN_FAILED
    line: str  # the command line as written (format characters removed), for the status comment
    specs: tuple[str, ...] = ()
    runners: tuple[str, ...] = ()
    sha: str | None = None
    problem: str | None = None
    include_disabled: bool = False  # --include-disabled: disabled files run instead of being refused
    repeat: int | None = None  # --repeat N: N runs on the head and N on the base, compared per test


def strip_format_characters(text: str) -> str:
    """Remove every Unicode format character (category Cf)."""
    if text.isascii():  # the common case: nothing to remove, and no per-character scan
        return text
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def command_lines(body: str) -> Iterator[str]:
    """Yield the lines of `body` that a command may start on, leading indentation removed.

    A simplified CommonMark block scan: enough to tell the commenter's own top-level lines from quotes,
    code and hidden HTML comments. Lines of one paragraph are held until it ends, because an inline code
    span may run over several lines (`` ` `` on one line, the closing one lines later): a line that
    starts inside such a span is code, not a command.
    """
    fence: str | None = None  # the opening fence while inside a fenced code block
    in_quote = False  # inside a block quote, including its lazy continuation lines
    in_html_comment = False
    paragraph: list[tuple[str, bool]] = []  # (line, whether a command may start on it)
    for raw in body.splitlines():
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        if fence is not None:
            if indent < 4 and line.startswith(fence[0] * len(fence)) and not line.strip(fence[0]):
                fence = None
            continue
        if in_html_comment:
            in_html_comment = "-->" not in line
            continue
        if not line:
            in_quote = False
            yield from _visible_lines(paragraph)
            paragraph = []
            continue
        if raw.startswith("\t") or indent >= 4:
            if paragraph:  # an indented line continues a paragraph (its text may close a code span)
                paragraph.append((line, False))
            continue  # indented code (or an indented continuation: never a command either way)
        match = _FENCE_RE.match(line)
        if match and not (match[1][0] == "`" and "`" in match[2]):
            yield from _visible_lines(paragraph)
            paragraph = []
            fence, in_quote = match[1], False
            continue
        if line.startswith(">"):
            yield from _visible_lines(paragraph)
            paragraph = []
            in_quote = True
            continue
        if in_quote:
            continue  # lazy continuation: rendered inside the quote
        if line.startswith("<!--"):
            yield from _visible_lines(paragraph)
            paragraph = []
            in_html_comment = "-->" not in line[4:]
            continue
        paragraph.append((line, True))
    yield from _visible_lines(paragraph)


def _visible_lines(paragraph: list[tuple[str, bool]]) -> Iterator[str]:
    """The candidate lines of one paragraph that do not start inside a code span or an HTML comment."""
    text = "\n".join(line for line, _ in paragraph)
    spans = _hidden_spans(text)
    offset = 0
    for line, candidate in paragraph:
        if candidate and not any(start < offset < end for start, end in spans):
            yield line
        offset += len(line) + 1


def _hidden_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each inline code span and inline HTML comment, scanned left to right.

    A code span is a run of n backticks up to the next run of exactly n; an HTML comment is `<!--` up to
    the first `-->` (`<!-->` and `<!--->` included). An opener without its closer is literal text, and a
    backslash before it escapes its first character.
    """
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text)]
    spans: list[tuple[int, int]] = []
    pos = 0
    while (match := _INLINE_OPENER_RE.search(text, pos)) is not None:
        start, end = match.span()
        pos = end
        backslashes = len(text[:start]) - len(text[:start].rstrip("\\"))
        if backslashes % 2:  # `\`` is a literal backtick (the rest of its run may still open a span)
            pos = start + 1
            continue
        if match[0] == "<!--":
            close = text.find("-->", start + 2)
            if close >= 0:
                spans.append((start, close + 3))
                pos = close + 3
            continue
        width = end - start
        closer = next((r for r in runs if r[0] >= end and r[1] - r[0] == width), None)
        if closer is not None:
            spans.append((start, closer[1]))
            pos = closer[1]
    return spans


def parse_comment(body: str) -> Command | None:
    """The first command in `body`, or None when the comment holds no command."""
    if not isinstance(body, str):
        raise TypeError(f"body must be a str, got {type(body).__name__}")
    for line in command_lines(strip_format_characters(body)):
        match = _COMMAND_RE.match(line)
        if match:
            return _parse_arguments(match[1], line, line[match.end() :].split())
    return None


def _parse_arguments(name: str, line: str, tokens: list[str]) -> Command:
    specs: list[str] = []
    runners: list[str] = []
    sha: str | None = None
    include_disabled = False
    repeat: int | None = None
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("-"):
            specs.append(token)
            continue
        option, has_value, value = token.partition("=")
        if option == INCLUDE_DISABLED:
            if has_value:
                return _refused(name, line, f"{INCLUDE_DISABLED} takes no value; usage: {USAGE}")
            include_disabled = True
            continue
        if option not in ("--runner", "--sha", REPEAT):
            return _refused(name, line, f"unknown option {token[:40]!r}; usage: {USAGE}")
        if not has_value:
            if index == len(tokens) or tokens[index].startswith("-"):
                return _refused(name, line, f"{option} needs a value; usage: {USAGE}")
            value = tokens[index]
            index += 1
        if option == "--runner":
            runners.append(value)
        elif option == REPEAT:
            if repeat is not None:
                return _refused(name, line, f"{REPEAT} is given more than once")
            if not _COUNT_RE.fullmatch(value) or int(value) < 2:
                return _refused(
                    name,
                    line,
                    f"{REPEAT} {value[:40]!r} is not a number of runs of at least 2 (a plain re-run is 1)",
                )
            repeat = int(value)
        elif sha is not None:
            return _refused(name, line, "--sha is given more than once")
        else:
            sha = value.lower()
            if not _SHA_RE.fullmatch(sha):
                return _refused(name, line, f"--sha {value[:40]!r} is not a commit SHA (7 to 40 hex digits)")
    runners = list(dict.fromkeys(runners))

    if repeat is not None and (name == RERUN_FAILED or specs == ["?"]):
        what = "/rerun-failed" if name == RERUN_FAILED else "/rerun-test ?"
        return _refused(name if name == RERUN_FAILED else LIST, line, f"{what} takes no {REPEAT}")
    if name == RERUN_FAILED:
        if specs or sha is not None:
            return _refused(
                RERUN_FAILED,
                line,
                "/rerun-failed takes no tests and no --sha (only --runner and --include-disabled); "
                "it re-runs the failed groups of the latest status comment",
            )
        return Command(RERUN_FAILED, line, runners=tuple(runners), include_disabled=include_disabled)
    if specs == ["?"]:
        if sha is not None or include_disabled:
            option = "--sha" if sha is not None else INCLUDE_DISABLED
            return _refused(LIST, line, f"/rerun-test ? takes no {option} (only --runner)")
        return Command(LIST, line, runners=tuple(runners))
    if "?" in specs:
        return _refused(
            RERUN_TEST, line, "`?` lists the registered tests and cannot be combined with test specs"
        )
    if not specs:
        return _refused(RERUN_TEST, line, f"no test given; usage: {USAGE}")
    if len(specs) > MAX_SPECS:
        return _refused(RERUN_TEST, line, f"too many specs: {len(specs)} (at most {MAX_SPECS} per comment)")
    return Command(
        RERUN_TEST,
        line,
        specs=tuple(specs),
        runners=tuple(runners),
        sha=sha,
        include_disabled=include_disabled,
        repeat=repeat,
    )


def _refused(kind: str, line: str, problem: str) -> Command:
    return Command(kind, line, problem=problem)
