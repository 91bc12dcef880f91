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

A syntax error after the registration is left to pytest, which reports it when it imports the file.
Parser limits (deep nesting: `MemoryError` or `RecursionError` from `ast.parse`) become a
`SourceError` with a line, like any syntax error.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import deque
from dataclasses import dataclass

__all__ = [
    "READ_LIMIT",
    "SourceError",
    "decode_source",
    "mentions_register",
    "parse_head",
    "read_source_bytes",
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


def read_source_bytes(path: str, *, limit: int = READ_LIMIT) -> tuple[bytes, int]:
    """The first `limit` bytes of the file at `path` (cut after its last whole line) and its size."""
    with open(path, "rb") as stream:
        data = stream.read(limit + 1)
        size = max(len(data), _size(stream))
    if len(data) > limit:
        data = data[: data.rfind(b"\n", 0, limit) + 1]
    return data, size


def _size(stream: io.BufferedReader) -> int:
    stream.seek(0, io.SEEK_END)
    return stream.tell()


def decode_source(data: bytes) -> str:
    """Text of module source bytes as the interpreter decodes it; `SourceError` where it cannot."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
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


def mentions_register(text: str) -> bool:
    return _MENTION in text


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
    except (RecursionError, MemoryError):
        # CPython gives no line for these; the deepest expression is almost always the longest line.
        lines = text.splitlines() or [""]
        longest = max(range(len(lines)), key=lambda i: len(lines[i]))
        raise SourceError(
            longest + 1, "cannot parse test file: an expression here nests too deeply for Python's parser"
        ) from None
