"""Writing gpumatrix's output files without ever clobbering what is at their paths.

`gpumatrix run` writes a JSON report, a report page, a JUnit XML file and a session plan; `gpumatrix
coverage` a page and Markdown. Each path comes from an option (`--report PATH`), and a path can name
anything: a test file, ci/matrix.yaml, `/dev/null` (which, written as root through a rename, becomes a
regular file), a FIFO. So an output is written only as a regular file:

- through a temporary file in the same directory, then a rename: the path holds the old file or the
  whole new one, never half of either, and a device or a FIFO is never opened;
- only where nothing is, or where a file of its own kind is that gpumatrix wrote before: its first bytes
  carry the header of that kind (`HEADERS`). Anything else, an empty file included, is refused with a
  `UsageError` naming the option, before any test runs; remove the file to write there;
- never over a symbolic link, a directory, a FIFO, a device or a socket.

Appending (a step summary: `--summary-md`, `$GITHUB_STEP_SUMMARY`) needs no header, only a regular file or
nothing, opened without following a link and without blocking.
"""

from __future__ import annotations

import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpumatrix import UsageError
from gpumatrix.regular_files import file_kind

__all__ = [
    "HEADERS",
    "Output",
    "OutputError",
    "append_output",
    "check_append",
    "check_output",
    "publish_output",
    "remove_own_output",
    "staging_path",
    "write_output",
]

_HEAD_BYTES = 1024
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

#: How each kind of output begins (its first `_HEAD_BYTES` bytes hold all of these), as gpumatrix writes it.
HEADERS: dict[str, tuple[bytes, ...]] = {
    "report": (b'{\n  "format": ',),  # gpumatrix.report.dump_report
    "plan": (b'{"format": ', b'"root": '),  # gpumatrix.running.session.SessionPlan.write
    "page": (b"<!DOCTYPE html>", b'<meta name="generator" content="gpumatrix">'),  # templates/report.html.j2
    "junit": (b"<?xml", b"<testsuites"),  # pytest's --junitxml (its attributes vary with pytest's version)
    "markdown": (b"<!-- gpumatrix:coverage -->",),  # gpumatrix.coverage.page.render_markdown
}


class OutputError(UsageError):
    """An output path gpumatrix will not write (exit 2), naming the option that gave it."""


@dataclass(frozen=True)
class Output:
    """An output file: the option that names it (`--report`), its path and its kind (a key of HEADERS)."""

    option: str
    path: Path
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in HEADERS:
            raise ValueError(f"kind must be one of {', '.join(HEADERS)}, got {self.kind!r}")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _is_own(path: Path, kind: str) -> bool:
    """Whether the regular file at `path` begins as gpumatrix writes a `kind` (read without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, _HEAD_BYTES)
    finally:
        os.close(fd)
    return head.startswith(HEADERS[kind][0]) and all(mark in head for mark in HEADERS[kind][1:])


def check_output(output: Output) -> None:
    """Refuse (`OutputError`) a path that is not nothing or a `kind` file gpumatrix wrote before."""
    found = _lstat(output.path)
    if found is None:
        return
    if not stat.S_ISREG(found.st_mode):
        raise OutputError(
            f"{output.option}: {output.path} is {file_kind(found.st_mode)}, not a regular file: "
            "gpumatrix writes its outputs only as regular files"
        )
    if not _is_own(output.path, output.kind):
        raise OutputError(
            f"{output.option}: {output.path} exists and is not a {output.kind} gpumatrix wrote: refusing to "
            "overwrite it (remove it, or give another path)"
        )


def _make_parent(output: Output) -> None:
    try:
        output.path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{output.option}: cannot write {output.path}: {exc.strerror or exc}") from None


def staging_path(output: Output) -> Path:
    """A path beside the output where nothing is: a writer (pytest, the plugin) writes there first, and
    `publish_output` renames it into place."""
    _make_parent(output)
    return output.path.with_name(f".{output.path.name}.{uuid.uuid4().hex[:12]}.tmp")


def publish_output(staged: Path, output: Output) -> bool:
    """Rename the finished `staged` file into the output's place (checked again first); False when the
    writer left nothing there. The staged file is gone afterwards either way."""
    try:
        if _lstat(staged) is None:
            return False
        if not stat.S_ISREG(os.lstat(staged).st_mode):
            raise OutputError(f"{output.option}: {staged} is not a regular file")
        check_output(output)
        os.replace(staged, output.path)
        return True
    except OSError as exc:
        raise OutputError(f"{output.option}: cannot write {output.path}: {exc.strerror or exc}") from None
    finally:
        try:
            if _lstat(staged) is not None:
                os.unlink(staged)
        except OSError:
            pass


def write_output(output: Output, text: str) -> None:
    """Write `text` as the output: checked, then through a temporary file in its directory and a rename."""
    _make_parent(output)
    check_output(output)
    staged = staging_path(output)
    try:
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
    except OSError as exc:
        raise OutputError(f"{output.option}: cannot write {output.path}: {exc.strerror or exc}") from None
    publish_output(staged, output)


def remove_own_output(output: Output) -> None:
    """Remove a `kind` file gpumatrix wrote at the output's path (a stale report must not pass for a new
    run's); anything else there is refused by `check_output`."""
    check_output(output)
    if _lstat(output.path) is not None:
        try:
            os.unlink(output.path)
        except OSError as exc:
            raise OutputError(
                f"{output.option}: cannot remove {output.path}: {exc.strerror or exc}"
            ) from None


def check_append(option: str, path: Path) -> None:
    """Refuse (`OutputError`) to append to anything but a regular file or nothing."""
    found = _lstat(path)
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise OutputError(f"{option}: {path} is {file_kind(found.st_mode)}, not a regular file to append to")


def append_output(option: str, path: Path, text: str) -> None:
    """Append `text` to the regular file at `path` (created when missing), never following a link or
    waiting on a FIFO."""
    check_append(option, path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK, 0o644)
        with os.fdopen(fd, "a", encoding="utf-8") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise OutputError(f"{option}: {path} is not a regular file to append to")
            stream.write(text)
    except OSError as exc:
        raise OutputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None
