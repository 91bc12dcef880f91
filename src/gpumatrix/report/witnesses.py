"""Recording the code paths a test exercised, for `gpumatrix coverage`.

The library under test emits plain records (`{"path": "gemm.triton", "reason": ..., ...}`); the test
suite hands each one to `record(...)` (tests/conftest.py subscribes it to `mxfuse.witness`, which
gpumatrix never imports). While the pytest plugin runs a test in this process, a record is the
running test's. Elsewhere, in a process that test started, it is appended as one JSON line to the
file named by `GPUMATRIX_WITNESS_FILE`, which the plugin sets for the length of each test and reads
back after each phase; with neither, a record goes nowhere (the library ran outside a test).

The plugin (`WitnessHooks`) attaches each phase's records to that phase's report as
`report.gpumatrix_witnessed`, a list of plain dicts: xdist sends reports from workers to the
controller and the plugin's child pytest (a test needing more GPUs than its process sees) replays
its reports to the parent, and the attribute travels with them both. A record whose path
`ci/paths.yaml` does not declare fails the phase that recorded it, naming the test and the path.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

__all__ = ["REPORT_ATTRIBUTE", "WITNESS_FILE_ENV", "WitnessHooks", "record", "witness_summary"]

WITNESS_FILE_ENV = "GPUMATRIX_WITNESS_FILE"
REPORT_ATTRIBUTE = "gpumatrix_witnessed"
# Kept per record: what a person reading the report needs to tell one path's cause from another's.
_KEPT_FIELDS = ("path", "reason", "backend", "site")
_MAX_TEXT = 200
_MAX_REASONS = 3  # distinct reasons kept per test and path in the JSON report

_lock = threading.Lock()
_running: list[dict[str, Any]] | None = None  # the running test's records, when one runs in this process


def record(witness: Mapping[str, Any]) -> None:
    """Record that the running test exercised `witness["path"]` (a plain record of the library under test)."""
    if not isinstance(witness, Mapping):
        raise TypeError(f"witness must be a mapping with a 'path'; got {type(witness).__name__}")
    path = witness.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError(f"witness must have a non-empty string 'path'; got {path!r}")
    kept = {key: _short(witness[key]) for key in _KEPT_FIELDS if witness.get(key) is not None}
    with _lock:
        if _running is not None:
            _running.append(kept)
            return
    target = os.environ.get(WITNESS_FILE_ENV)
    if target:
        # One write of one line with O_APPEND: lines from several children do not interleave.
        line = (json.dumps(kept) + "\n").encode("utf-8")
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _short(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= _MAX_TEXT else value[: _MAX_TEXT - 3] + "..."
    return value if isinstance(value, (int, float, bool)) else _short(str(value))


def witness_summary(records: list[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A test's records by path: how many, and up to three distinct reasons (for the JSON report)."""
    summary: dict[str, dict[str, Any]] = {}
    for item in records:
        entry = summary.setdefault(str(item["path"]), {"count": 0, "reasons": []})
        entry["count"] += 1
        reason = item.get("reason")
        if (
            isinstance(reason, str)
            and reason not in entry["reasons"]
            and len(entry["reasons"]) < _MAX_REASONS
        ):
            entry["reasons"].append(reason)
    return dict(sorted(summary.items()))


class WitnessHooks:
    """Per-test recording in one pytest process (controller, xdist worker or the plugin's child).

    `declared` is the set of path names of ci/paths.yaml (None when the tree has none: then every
    recorded path is undeclared).
    """

    def __init__(self, declared: frozenset[str] | None, source: str) -> None:
        self.declared, self.source = declared, source
        self._scratch = Path(tempfile.mkdtemp(prefix="gpumatrix-witness-"))
        self._file = self._scratch / "children.jsonl"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        global _running
        # A test may run pytest in its own process (pytest.main): the inner session's tests take the
        # records while they run, and the outer test's collection resumes after them.
        with _lock:
            outer, _running = _running, []
        saved_env = os.environ.get(WITNESS_FILE_ENV)
        os.environ[WITNESS_FILE_ENV] = str(self._file)
        try:
            return (yield)
        finally:
            with _lock:
                _running = outer
            if saved_env is None:
                os.environ.pop(WITNESS_FILE_ENV, None)
            else:
                os.environ[WITNESS_FILE_ENV] = saved_env
            self._file.unlink(missing_ok=True)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        report: pytest.TestReport = yield
        records = self._drain()
        if records:
            setattr(report, REPORT_ATTRIBUTE, records)
            undeclared = sorted({r["path"] for r in records} - (self.declared or frozenset()))
            if undeclared:
                _fail(report, item.nodeid, undeclared, self.source, has_file=self.declared is not None)
        return report

    def _drain(self) -> list[dict[str, Any]]:
        with _lock:
            records = list(_running or ())
            if _running is not None:
                _running.clear()
        if self._file.exists() and self._file.stat().st_size:
            lines = self._file.read_text(encoding="utf-8").splitlines()
            self._file.write_text("", encoding="utf-8")
            records += [_child_record(line) for line in lines if line.strip()]
        return [r for r in records if r is not None]

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._file.unlink(missing_ok=True)
        self._scratch.rmdir()


def _child_record(line: str) -> dict[str, Any] | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None  # a child killed mid-write leaves a partial line; the rest still count
    return data if isinstance(data, dict) and isinstance(data.get("path"), str) else None


def _fail(
    report: pytest.TestReport, nodeid: str, undeclared: list[str], source: str, *, has_file: bool
) -> None:
    where = source if has_file else f"{source} (which does not exist)"
    message = (
        f"{nodeid} recorded path(s) not declared in {where}: {', '.join(undeclared)}; "
        f"declare each with the classes it must run on, or correct the name"
    )
    if report.failed and report.longrepr is not None:
        message = f"{report.longrepr}\n\n{message}"
    report.outcome = "failed"
    report.longrepr = message
