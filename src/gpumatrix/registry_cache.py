"""What reading each test file gave, kept between runs: a warm run re-reads only changed files.

One JSON file per tree, `ROOT/.gpumatrix/registry-cache.json`, maps a repository-relative path to
the file's size and modification time (ns) when it was read, and what reading it gave (the
registration before runners are resolved, as the list of its fields, or its problems). Runners are resolved from the matrix
on every run, so editing ci/matrix.yaml never needs the cache cleared. The cache is dropped whole
when the code that reads registrations changes (a hash of its modules) or it cannot be read.

Like git's index, an entry whose file was modified no earlier than the cache itself was written is
"racily clean": a same-size edit within the file system's timestamp granularity could hide behind
an unchanged mtime, so such entries are read again. Writes go through a temporary file and
`os.replace`, so concurrent runs never see half a cache; one that cannot be written (a read-only
checkout) is simply not kept. JSON, not pickle: the file sits in a tree that may come from a PR.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gpumatrix.config import Problem
from gpumatrix.registry import FileReading, Registration

__all__ = ["CACHE_PATH", "RegistrationCache"]

CACHE_PATH = ".gpumatrix/registry-cache.json"
_FORMAT = 2  # 2: suite, disabled, disabled_on and est_times joined the registration
_FIELD_COUNT = len(Registration.__dataclass_fields__)


def _code_key() -> str:
    """A hash of the modules whose code decides what reading a file gives."""
    import gpumatrix.registry
    import gpumatrix.source

    digest = hashlib.sha256(str(_FORMAT).encode())
    for module in (gpumatrix.registry, gpumatrix.source):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:16]


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
    def open(cls, root: str | Path) -> RegistrationCache:
        """The cache of the tree at `root`; empty when missing, unreadable or from other code."""
        path = Path(root) / CACHE_PATH
        key = _code_key()
        try:
            written_ns = path.stat().st_mtime_ns
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = data["files"] if data.get("key") == key else {}
            if not isinstance(entries, dict):
                entries = {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return cls(path, {}, 0, key)
        return cls(path, entries, written_ns, key)

    def get(self, relpath: str, stat: os.stat_result) -> FileReading | None:
        """What reading `relpath` gave, if its size and mtime are those it was read at."""
        self._seen.add(relpath)
        entry = self._entries.get(relpath)
        if (
            not isinstance(entry, list)
            or len(entry) != 4
            or entry[0] != stat.st_size
            or entry[1] != stat.st_mtime_ns
            or stat.st_mtime_ns >= self._written_ns
            or not (entry[2] is None or (isinstance(entry[2], list) and len(entry[2]) == _FIELD_COUNT))
        ):
            return None
        try:
            registration = Registration.from_values(entry[2]) if entry[2] is not None else None
            return registration, [Problem(relpath, int(line), str(message)) for line, message in entry[3]]
        except (TypeError, ValueError):  # an entry this code cannot read back: read the file again
            return None

    def put(self, relpath: str, stat: os.stat_result, reading: FileReading) -> None:
        registration, problems = reading
        self._seen.add(relpath)
        self._entries[relpath] = [
            stat.st_size,
            stat.st_mtime_ns,
            registration.to_values() if registration is not None else None,
            [[p.line, p.message] for p in problems],
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
