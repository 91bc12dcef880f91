"""What reading each test file gave, kept between runs: a warm run re-reads only changed files.

One JSON file per tree, `ROOT/.gpumatrix/registry-cache.json`, maps a repository-relative path to
the file's size and modification time (ns) when it was read, and what reading it gave, as plain JSON
values its reader (`gpumatrix.registry`) chose: the registration before runners are resolved, as the
list of its fields, and its problems as `[line, message]` pairs. This module knows files and their
stat, not what a registration is: `gpumatrix.registry` turns entries back into registrations, and
passes the key of the code that reads them (`registry.reading_code_key`); the cache is dropped whole
when that key changes or it cannot be read. Runners are resolved from the matrix on every run, so
editing ci/matrix.yaml never needs the cache cleared.

Like git's index, an entry whose file was modified no earlier than the cache itself was written is
"racily clean": a same-size edit within the file system's timestamp granularity could hide behind
an unchanged mtime, so such entries are read again. Writes go through a temporary file and
`os.replace`, so concurrent runs never see half a cache; one that cannot be written (a read-only
checkout) is simply not kept. JSON, not pickle: the file sits in a tree that may come from a PR.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gpumatrix.bounds import MAX_PLAN_BYTES
from gpumatrix.regular_files import read_regular

__all__ = ["CACHE_PATH", "CachedReading", "RegistrationCache"]

CACHE_PATH = ".gpumatrix/registry-cache.json"

# What one file gave, as stored: the registration's field values (None: the file has none) and its
# problems as (line, message).
CachedReading = tuple[list[Any] | None, list[tuple[int, str]]]


class RegistrationCache:
    """The readings of one tree's test files, by path, valid while size and mtime are unchanged."""

    def __init__(self, path: Path, entries: dict[str, list[Any]], written_ns: int, key: str) -> None:
        self.path = path
        self._entries = entries  # path: [size, mtime_ns, registration fields | None, [[line, message], ...]]
        self._written_ns = written_ns
        self._key = key
        self._seen: set[str] = set()
        self._changed = False

    @classmethod
    def open(cls, root: str | Path, *, key: str) -> RegistrationCache:
        """The cache of the tree at `root`; empty when missing, unreadable or written under another `key`
        (the code that reads registrations changed)."""
        path = Path(root) / CACHE_PATH
        try:
            written_ns = path.stat().st_mtime_ns
            data = json.loads(read_regular(path, limit=MAX_PLAN_BYTES))  # never a FIFO's endless wait
            entries = data["files"] if data.get("key") == key else {}
            if not isinstance(entries, dict):
                entries = {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return cls(path, {}, 0, key)
        return cls(path, entries, written_ns, key)

    def get(self, relpath: str, stat: os.stat_result) -> CachedReading | None:
        """What reading `relpath` gave, if its size and mtime are those it was read at; None when it must
        be read again (new, changed, racily clean, or an entry of another shape)."""
        self._seen.add(relpath)
        entry = self._entries.get(relpath)
        if (
            not isinstance(entry, list)
            or len(entry) != 4
            or entry[0] != stat.st_size
            or entry[1] != stat.st_mtime_ns
            or stat.st_mtime_ns >= self._written_ns
            or not (entry[2] is None or isinstance(entry[2], list))
            or not isinstance(entry[3], list)
        ):
            return None
        try:
            return entry[2], [(int(line), str(message)) for line, message in entry[3]]
        except (TypeError, ValueError):  # problems of another shape: read the file again
            return None

    def put(self, relpath: str, stat: os.stat_result, reading: CachedReading) -> None:
        values, problems = reading
        self._seen.add(relpath)
        self._entries[relpath] = [
            stat.st_size,
            stat.st_mtime_ns,
            values,
            [[line, message] for line, message in problems],
        ]
        self._changed = True

    def save(self) -> None:
        """Write the cache when anything changed (files read, or files gone); best effort."""
        gone = set(self._entries) - self._seen
        for relpath in gone:
            del self._entries[relpath]
        if not self._changed and not gone:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".registry-cache-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as stream:
                    # dumps, not dump: dump feeds the stream from the pure-Python encoder (5x slower here).
                    stream.write(
                        json.dumps({"key": self._key, "files": self._entries}, separators=(",", ":"))
                    )
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError:
            return
