"""A test file's source read as data, as Python would read it, in bounded time.

The registry needs one statement of each test file, `register(...)`, and every name bound to
`gpumatrix.register`. Three things keep reading it cheap and total:

- bytes are decoded as the interpreter decodes a module (a UTF-8 BOM, a PEP 263 coding line, else
  UTF-8), so a file Python runs is a file the registry reads;
- a file without the word `register` is not parsed at all, and only its first `READ_LIMIT` bytes
  are read: a 40 MB generated test file costs one bounded read;
- a file is parsed only up to the end of the line holding its last mention of `register` (or of a
  name imported `as` it): every call of it lies in that head, and `ast.walk` over a whole 5,000-file
  tree was half the cost of discovery (0.40 s of 0.76 s, cProfile) while parsing heads took 8 us
  against 68 us per file for the whole of a 17-line file. A head that does not parse on its own (a
  call spread over lines) is extended to the next top-level statement, then to the whole text.

Most files register in one plain form (`from gpumatrix import register` and a one-line call with
string classes and number literals, under a docstring, comments and imports). `canonical_call` reads
that form with regular expressions and declines anything else, which is then parsed; a property test
checks the two readings agree. Reading 5,000 such files took 0.44 s this way against 1.1 s through
`ast.parse` of their heads on the CI box under load (load average 5.6 on 2 cores).

A syntax error after the registration is left to pytest, which reports it when it imports the file.
Parser limits (deep nesting: `MemoryError` or `RecursionError` from `ast.parse`) become a
`SourceError` with a line, like any syntax error.
"""

from __future__ import annotations

import ast
import io
import keyword
import os
import re
import tokenize
from collections import deque
from dataclasses import dataclass

from gpumatrix.bounds import MAX_GPUS
from gpumatrix.config import MAX_SECONDS
from gpumatrix.regular_files import read_regular

__all__ = [
    "DEEP_NESTING",
    "READ_LIMIT",
    "CanonicalCall",
    "SourceError",
    "canonical_call",
    "decode_source",
    "deepest_line",
    "parse_head",
    "read_source_bytes",
    "shown_literal",
]

# Past this many bytes a test file is not read: a registration belongs near the top, and parsing
# 1 MiB of Python takes about 0.15 s on the CI box.
READ_LIMIT = 1 << 20
_MENTION = "register"
# Every mention of register, capturing the name of an `import ... register as NAME` alias.
_MENTION_RE = re.compile(r"\bregister\b(?:\s+as\s+([A-Za-z_]\w*))?")
_TOP_LEVEL_START_RE = re.compile(r"^[A-Za-z_@]", re.MULTILINE)


@dataclass(frozen=True)
class SourceError(Exception):
    """The file cannot be read as Python source, at `line` (1-based; 0: the whole file)."""

    line: int
    message: str

    def __str__(self) -> str:
        return self.message


def read_source_bytes(path: str, *, size: int | None = None, limit: int = READ_LIMIT) -> tuple[bytes, int]:
    """The first `limit` bytes of the regular file at `path` (cut after its last whole line) and its size;
    an `OSError` (`gpumatrix.regular_files.NotRegularFile` for a FIFO or a device) when it cannot be read.

    `size` is the size a caller's stat saw; the read asks for no more than it needs, because
    `read(limit + 1)` allocates that much first (40 us a file, 5,000 times over, for 1 MiB buffers).
    """
    if size is None:
        size = os.stat(path).st_size
    # Only a regular file: a FIFO named test_x.py would block the open, a device never end the read.
    data = read_regular(path, limit=min(size, limit))
    if len(data) > limit:
        data = data[: data.rfind(b"\n", 0, limit) + 1]
        size = max(size, limit + 1)
    return data, max(size, len(data))


def decode_source(data: bytes) -> str:
    """Text of module source bytes as the interpreter decodes it; `SourceError` where it cannot."""
    second_line_end = data.find(b"\n", data.find(b"\n") + 1)
    plain = not data.startswith(b"\xef\xbb\xbf") and b"coding" not in data[: max(second_line_end, 0) or None]
    try:
        # No BOM and no PEP 263 line in the first two: UTF-8, as detect_encoding would say, 3x faster.
        encoding = "utf-8" if plain else tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError as exc:  # an unknown coding, or undecodable bytes in the first two lines
        raise SourceError(_line_of_bad_bytes(data) or 1, f"cannot read test file: {exc.msg}") from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(
            line,
            f"cannot read test file: not valid {encoding} text "
            f"(byte 0x{data[exc.start]:02x}); declare its encoding (PEP 263) "
            f"or save it as UTF-8",
        ) from None


def _line_of_bad_bytes(data: bytes) -> int | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return data.count(b"\n", 0, exc.start) + 1
    return None


def parse_head(text: str, path: str) -> list[ast.stmt] | None:
    """The statements of `text` through its last mention of `register` or an alias of it.

    None when it mentions neither; `SourceError` when Python cannot parse it.
    """
    text = text.removeprefix("\ufeff")  # a decoded BOM (the bot hands over text, not bytes)
    mentions = deque(_MENTION_RE.finditer(text), maxlen=1)
    if not mentions:
        return None
    last = mentions[0].end()
    aliases = set(_MENTION_RE.findall(text)) - {""}
    if aliases:
        later = deque(
            re.finditer(r"\b(?:" + "|".join(map(re.escape, sorted(aliases))) + r")\b", text), maxlen=1
        )
        last = max(last, later[0].end()) if later else last
    end = _line_end(text, last)
    if end < len(text):
        body = _try_parse(text[:end], path)
        if body is not None:
            return body
        # A statement running past the line, such as a call spread over several lines: up to the
        # next line that starts a top-level statement.
        start = _TOP_LEVEL_START_RE.search(text, end)
        if start is not None:
            body = _try_parse(text[: start.start()], path)
            if body is not None:
                return body
    return _parse(text, path)


def _line_end(text: str, position: int) -> int:
    end = text.find("\n", position)
    return len(text) if end < 0 else end + 1


def _try_parse(text: str, path: str) -> list[ast.stmt] | None:
    try:
        return _parse(text, path)
    except SourceError:
        return None


def _parse(text: str, path: str) -> list[ast.stmt]:
    try:
        return ast.parse(text, filename=path).body
    except SyntaxError as exc:
        raise SourceError(exc.lineno or 0, f"cannot parse test file: {exc.msg}") from None
    except ValueError:  # Python 3.10 refuses NUL bytes with ValueError, later ones with SyntaxError
        raise SourceError(
            text.count("\n", 0, max(text.find("\0"), 0)) + 1,
            "cannot parse test file: source code cannot contain null bytes",
        ) from None
    except (RecursionError, MemoryError):
        raise SourceError(deepest_line(text), DEEP_NESTING) from None


#: The problem of a file whose parse ran into Python's parser limits (RecursionError, MemoryError).
DEEP_NESTING = "cannot parse test file: an expression here nests too deeply for Python's parser"


def deepest_line(text: str) -> int:
    """The line to blame for a parse that hit Python's limits: CPython gives none, and the deepest
    expression is almost always the longest line."""
    lines = text.splitlines() or [""]
    return max(range(len(lines)), key=lambda i: len(lines[i])) + 1


def shown_literal(value: object, limit: int = 40) -> str:
    """A literal's value as a problem shows it, safe for any value: an integer too large for `repr`
    (past Python's 4,300-digit limit, which a hexadecimal literal reaches without it) is described, and
    a long text is cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # a container holding such an integer, or nested too deeply
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= limit else f"{text[: limit // 2]}... ({len(text)} characters)"


# -- the plain form, read without a parser ---------------------------------------------------------


@dataclass(frozen=True)
class CanonicalCall:
    """`register(on=(...), [gpus=N, ]est_time=X)` as written on line `line`, its values already valid."""

    line: int
    on: tuple[str, ...]
    gpus: int | None  # None: not given
    est_time: float


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})*"
_COMMENT = r"[ \t]*(?:#[^\n]*)?"
_BLANK_OR_COMMENT_RE = re.compile(_COMMENT)
_IMPORT_REGISTER_RE = re.compile(rf"^from gpumatrix import register{_COMMENT}$", re.MULTILINE)
_CLASS = r"\"[A-Za-z0-9_.-]+\"|'[A-Za-z0-9_.-]+'"
_CALL_RE = re.compile(
    rf"^register\(on=\(((?:{_CLASS})(?:, ?(?:{_CLASS}))*),?\)(?:, ?gpus=([1-9][0-9]{{0,5}}))?"
    rf", ?est_time=((?:0|[1-9][0-9]{{0,8}})(?:\.[0-9]{{1,9}})?)\){_COMMENT}$",
    re.MULTILINE,
)
_DOCSTRING_OPENERS = ('"""', "'''")
_PLAIN_LINE = (
    rf"(?:{_COMMENT}|import {_DOTTED}(?: as {_IDENT})?(?:, ?{_DOTTED}(?: as {_IDENT})?)*{_COMMENT}"
    rf"|from {_DOTTED} import {_IDENT}(?: as {_IDENT})?(?:, ?{_IDENT}(?: as {_IDENT})?)*{_COMMENT})"
)
_PLAIN_CODE_RE = re.compile(rf"{_PLAIN_LINE}(?:\n{_PLAIN_LINE})*")
_IDENT_RE = re.compile(_IDENT)
_COMMENT_TEXT_RE = re.compile(r"#[^\n]*")
_KEYWORDS = frozenset(keyword.kwlist)


def canonical_call(text: str) -> CanonicalCall | None:
    """The registration of a file written in the plain form, or None: parse the file instead.

    The plain form: `register` appears exactly twice, in the line `from gpumatrix import register` and
    in a one-line call `register(on=("a", "b"), gpus=N, est_time=X)` (gpus optional) at column 0, and
    every line before the call is blank, a comment, a simple `import`/`from ... import` statement or
    part of a leading docstring with no backslash. Anything else (and any value that
    `gpumatrix.registry` would report a problem for) returns None, so the result is always what parsing
    would give.
    """
    if text.count(_MENTION) != 2:
        return None
    call = _CALL_RE.search(text)
    imported = _IMPORT_REGISTER_RE.search(text)
    if call is None or imported is None or imported.start() > call.start():
        return None
    head = text[: call.start()]
    if "\\" in head or "\r" in head or "\0" in head or "\f" in head:
        return None
    lines = head.split("\n")[:-1]  # the last piece is the empty start of the call line
    code_start = _code_start(lines)
    # The import must be code, not a line of the docstring.
    if code_start is None or head.count("\n", 0, imported.start()) < code_start:
        return None
    on = tuple(name[1:-1] for name in re.findall(_CLASS, call[1]))
    est_time = float(call[3])
    gpus = int(call[2]) if call[2] is not None else None
    if len(set(on)) != len(on) or not 0 < est_time <= MAX_SECONDS or (gpus is not None and gpus > MAX_GPUS):
        return None
    return CanonicalCall(
        line=text.count("\n", 0, call.start()) + 1,
        on=on,
        gpus=gpus,
        est_time=est_time,
    )


def _code_start(lines: list[str]) -> int | None:
    """Index of the first line after the leading docstring, if every line from there is plain; else None."""
    index = 0
    while index < len(lines) and _BLANK_OR_COMMENT_RE.fullmatch(lines[index]):
        index += 1
    if index < len(lines) and lines[index].startswith(_DOCSTRING_OPENERS):  # the module docstring
        quote = lines[index][:3]
        body = "\n".join(lines[index:])
        close = body.find(quote, 3)
        if close < 0:
            return None
        rest_of_line = body[close + 3 :].split("\n", 1)[0]
        if not _BLANK_OR_COMMENT_RE.fullmatch(rest_of_line):
            return None
        index += body.count("\n", 0, close) + 1
    code = "\n".join(lines[index:])
    if not _PLAIN_CODE_RE.fullmatch(code):
        return None
    # No name may be a keyword (`import if` does not parse); comments hold no names.
    names = set(_IDENT_RE.findall(_COMMENT_TEXT_RE.sub("", code))) - {"import", "from", "as"}
    return None if names & _KEYWORDS else index
