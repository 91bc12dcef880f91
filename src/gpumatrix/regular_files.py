"""Reading a file gpumatrix was given, only when it is a regular file, never more than a bound.

A path given as a report, a test file, a tests-file, an event or a matrix can name a FIFO, whose open
for reading waits for a writer that never comes, or a device (`/dev/zero` never ends, `/dev/tty` waits
for a person). Each is refused before it is opened: `os.stat` must say a regular file. The open itself
asks for `O_NONBLOCK` (a FIFO put in the file's place after the check then answers at once instead of
blocking) and `fstat` checks the opened file again. At most `limit + 1` bytes are read, so a caller can
tell a file that is too large from one that fits.

The refusal is an `OSError` (`NotRegularFile`) with a `strerror`, so every caller's existing handling of
an unreadable file ("cannot read report X: ...") names it too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["NotRegularFile", "file_kind", "read_regular"]

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """The path exists and is not a regular file (a FIFO, a device, a socket, a directory)."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file", str(path))


def file_kind(mode: int) -> str:
    """What a file of this `st_mode` is, in words ("a FIFO")."""
    for test, kind in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return kind
    return "not a file"


def read_regular(path: str | Path, *, limit: int) -> bytes:
    """At most `limit + 1` bytes of the regular file at `path` (a symbolic link to one is followed);
    `NotRegularFile` for anything else, an `OSError` when it cannot be read."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, file_kind(mode))
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the stat and the open
            raise NotRegularFile(path, file_kind(mode))
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
