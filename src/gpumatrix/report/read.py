"""The one reader of JSON test reports: every field checked, or a `ReportError` naming the file and field.

A report comes from a run of the code under test, so it is read as untrusted data: any bytes, any shape,
any size. Reading ends in a `Report` or a `ReportError`, never another exception:

- bounded: at most MAX_REPORT_BYTES, JSON nested no deeper than the report's own shape (the parser's
  recursion limit ends anything deeper), no NaN or Infinity literal, no key given twice in an object;
  strings within their limits (node ids and file names one line of printable text);
- typed: every key the writer writes is present with its type, no other key; outcomes are the known
  ones; durations finite, at least 0 and at most MAX_SECONDS;
- consistent (a `contradiction`, exit 1): the hardware's class is the class its first device's compute
  capability belongs to in the matrix, a GPU class has GPUs and `cpu` none, and the names, capabilities
  and device ids are one per GPU; the runner label names a runner of the same class and GPU count as
  the hardware (unless the run was refused: then it ran nothing); a test appears once; `ran` and
  `totals` add up; every witnessed test has that outcome in that file; a test that ran again (`reruns`)
  ran in its file, and its failed attempts are numbered 1, 2, ... in order.

A class or runner that ci/matrix.yaml does not define is a usage error (exit 2), as coverage has always
treated it: the report belongs to another tree.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from gpumatrix.config import CPU_CLASS, MAX_REPEAT, MAX_SECONDS, Matrix
from gpumatrix.hardware.detection import HARDWARE_SOURCES, Hardware
from gpumatrix.regular_files import read_regular
from gpumatrix.report.model import (
    FORMAT,
    OUTCOMES,
    PHASES,
    RAN,
    READ_FORMATS,
    FileResult,
    PathRecord,
    Report,
    ReportError,
    Rerun,
    Skip,
    Witnessed,
    report_digest,
)

__all__ = [
    "EARLIEST_FINISHED",
    "FUTURE_SLACK",
    "MAX_REPORT_BYTES",
    "parse_report",
    "parse_report_bytes",
    "read_report",
]

MAX_REPORT_BYTES = 64 * 1024 * 1024
_MAX_ID = 4096  # characters of a node id or file name
_MAX_TEXT = 4096  # of a skip reason or a problem
_MAX_SHORT = 200  # of a GPU name, driver, device id, path name or reason of a witness
_MAX_GPUS = 1024
_MAX_REASONS = 3
_MAX_ATTEMPTS = 100  # a test's failed attempts: far above any rerun count ci/matrix.yaml allows
# ASCII digits only: `\d` would take the fullwidth ones too.
_FINISHED_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
#: The earliest `finished` a report may have (gpumatrix wrote none before it): a report dated 2001 is forged.
EARLIEST_FINISHED = datetime(2024, 1, 1, tzinfo=timezone.utc)
#: How far past the reader's clock a report may be dated (clocks of runners drift; 2999 is forged).
FUTURE_SLACK = timedelta(days=1)
_COMMIT_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256, as git rev-parse prints it
_CAPABILITY_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})$")
_TOP = ("format", "hardware", "runner", "finished", "problems", "files", "totals", "witnessed")
_HARDWARE = ("gpu_class", "count", "names", "capabilities", "driver", "source", "device_ids", "description")
_FILE = ("ran", *OUTCOMES, "duration", "est_time")
_TOTALS = ("ran", *OUTCOMES, "hardware_skipped", "deselected")


def read_report(path: str | Path, matrix: Matrix, *, now: float | None = None) -> Report:
    """Read the report at `path`; a `ReportError` naming it when it cannot be read or used. `now` (seconds
    since the epoch, default the clock) bounds how late its `finished` may be."""
    try:
        data = read_regular(path, limit=MAX_REPORT_BYTES)  # a FIFO or a device is refused, never opened
    except OSError as exc:
        raise ReportError(str(path), "", str(exc.strerror or exc), unreadable=True) from None
    return parse_report_bytes(data, source=str(path), matrix=matrix, now=now)


def parse_report_bytes(data: bytes, *, source: str, matrix: Matrix, now: float | None = None) -> Report:
    """A report from the bytes of its file."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(source, "", f"it is larger than {MAX_REPORT_BYTES >> 20} MiB")
    try:
        document = json.loads(data, parse_constant=_no_constant, object_pairs_hook=_no_repeated_key)
    except _Refused as exc:
        raise ReportError(source, "", str(exc)) from None
    except RecursionError:
        raise ReportError(source, "", "its JSON is nested deeper than any report") from None
    except ValueError as exc:  # not JSON, not UTF-8, an integer of thousands of digits
        raise ReportError(source, "", f"it is not JSON: {exc}") from None
    return _Reader(source, matrix, now).report(document, digest=_canonical_digest(document))


def parse_report(document: Any, *, source: str, matrix: Matrix, now: float | None = None) -> Report:
    """A report from its JSON value (as `report_to_json` gives it)."""
    return _Reader(source, matrix, now).report(document, digest=_canonical_digest(document))


def _canonical_digest(document: Any) -> str:
    """The digest of the report's JSON value, whatever its spacing or key order: one report saved again (by
    an editor, a copy through jq) is still one report. Empty when it is not a JSON value."""
    try:
        canonical = json.dumps(document, sort_keys=True, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError):  # not a JSON value; the reader says where
        return ""
    return report_digest(canonical)


class _Refused(ValueError):
    pass


def _no_constant(name: str) -> NoReturn:
    raise _Refused(f"it holds {name}, which is not a JSON number")


def _no_repeated_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Refused(f"an object gives the key {_shown(key)} twice")
        found[key] = value
    return found


def _shown(key: Any) -> str:
    if isinstance(key, int) and key.bit_length() > 64:
        return "an integer of more than 19 digits"  # repr() of a huge int is itself refused
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Reader:
    def __init__(self, source: str, matrix: Matrix, now: float | None = None) -> None:
        self.source, self.matrix = source, matrix
        self.now = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)

    # -- problems ------------------------------------------------------------------------------------
    def bad(self, where: str, problem: str) -> NoReturn:
        raise ReportError(self.source, where, problem)

    def contradiction(self, where: str, problem: str) -> NoReturn:
        raise ReportError(self.source, where, problem, contradiction=True)

    # -- values --------------------------------------------------------------------------------------
    def object(self, value: Any, where: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.bad(where, f"must be an object, got {_kind(value)}")
        missing = [key for key in keys if key not in value]
        if missing:
            self.bad(where, f"is missing {', '.join(map(repr, missing))}")
        unknown = [key for key in value if key not in keys and key not in optional]
        if unknown:
            self.bad(where, f"has the unknown key {_shown(unknown[0])}")
        return value

    def mapping(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            self.bad(where, f"must be an object, got {_kind(value)}")
        return value

    def array(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            self.bad(where, f"must be a list, got {_kind(value)}")
        return value

    def text(self, value: Any, where: str, *, limit: int, line: bool = False, empty: bool = True) -> str:
        if not isinstance(value, str):
            self.bad(where, f"must be a string, got {_kind(value)}")
        if len(value) > limit:
            self.bad(where, f"is longer than {limit} characters")
        if not empty and not value:
            self.bad(where, "must not be empty")
        if line and not value.isprintable():
            self.bad(where, "must be one line of printable text")
        return value

    def ident(self, value: Any, where: str) -> str:
        """A node id or file name: one line of printable text, not empty."""
        return self.text(value, where, limit=_MAX_ID, line=True, empty=False)

    def count(self, value: Any, where: str, *, limit: int | None = None) -> int:
        if not _is_count(value):
            self.bad(where, f"must be a count (an integer >= 0), got {_kind(value)}")
        if limit is not None and value > limit:
            self.bad(where, f"must be at most {limit}, got {_kind(value)}")
        return value

    def seconds(self, value: Any, where: str, *, positive: bool = False) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            self.bad(where, f"must be a number of seconds, got {_kind(value)}")
        seconds = float(value) if not isinstance(value, int) or abs(value) <= MAX_SECONDS else math.inf
        if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SECONDS or (positive and not seconds):
            low = "above 0" if positive else "at least 0"
            self.bad(
                where,
                f"must be a finite number of seconds {low} and at most {MAX_SECONDS}, got {_kind(value)}",
            )
        return seconds

    def texts(self, value: Any, where: str, item: Callable[[Any, str], str]) -> tuple[str, ...]:
        return tuple(item(entry, f"{where}[{index}]") for index, entry in enumerate(self.array(value, where)))

    # -- the report ----------------------------------------------------------------------------------
    def report(self, document: Any, *, digest: str) -> Report:
        version = self.mapping(document, "the top level").get("format", FORMAT)  # missing: said below
        if not _is_count(version) or version not in READ_FORMATS:
            formats = ", ".join(map(str, READ_FORMATS))
            self.bad("format", f"is {_shown(version)}; this gpumatrix reads formats {formats}")
        # Format 2 records the commit and the suite; a format-1 report (older gpumatrix) has neither.
        provenance = ("commit", "suite") if version >= 2 else ()
        top = self.object(document, "the top level", _TOP + provenance, optional=("note", "repeat"))
        hardware = self.hardware(top["hardware"])
        runner = self.runner(top["runner"])
        commit = self.commit(top.get("commit"))
        suite = self.suite(top.get("suite"))
        finished = self.finished(top["finished"])
        problems = self.texts(top["problems"], "problems", partial(self.text, limit=_MAX_TEXT))
        note = self.text(top.get("note", ""), "note", limit=_MAX_SHORT, line=True)
        repeat = self.count(top.get("repeat", 1), "repeat", limit=MAX_REPEAT)
        if "repeat" in top and repeat < 2:
            self.bad("repeat", f"is given only for a run repeated 2 to {MAX_REPEAT} times, got {repeat}")
        files = self.files(top["files"])
        witnessed = self.witnessed(top["witnessed"])
        totals = self.object(top["totals"], "totals", _TOTALS)
        for key in _TOTALS:
            self.count(totals[key], f"totals.{key}")
        report = Report(
            hardware=hardware,
            runner=runner,
            files=MappingProxyType(files),
            witnessed=MappingProxyType(witnessed),
            problems=problems,
            deselected=totals["deselected"],
            finished=finished,
            note=note,
            source=self.source,
            digest=digest,
            repeat=repeat,
            commit=commit,
            suite=suite,
            format_version=version,
        )
        self.consistent(report, totals)
        return report

    def commit(self, value: Any) -> str | None:
        """The commit it ran at: a full lowercase SHA (git's SHA-1 or SHA-256), or null outside a git tree."""
        if value is None:
            return None
        text = self.text(value, "commit", limit=64)
        if not _COMMIT_RE.fullmatch(text):
            self.bad(
                "commit",
                f"must be a full commit SHA (40 or 64 lowercase hex digits) or null, got {_shown(text)}",
            )
        return text

    def suite(self, value: Any) -> str | None:
        """The suite it ran, one of the matrix's; null: every suite, or tests named explicitly."""
        if value is None:
            return None
        name = self.text(value, "suite", limit=_MAX_SHORT)
        if name not in self.matrix.suites:
            self.bad(
                "suite",
                f"{_shown(name)} is not a suite of {self.matrix.source} "
                f"(suites: {', '.join(self.matrix.suites)}): a report of another tree",
            )
        return name

    def finished(self, value: Any) -> str:
        """When it finished: a real UTC time in ASCII digits, from EARLIEST_FINISHED to a day past now."""
        finished = self.text(value, "finished", limit=20)
        if not _FINISHED_RE.fullmatch(finished) or not finished.isascii():
            self.bad("finished", f"must be a UTC time such as 2026-01-31T12:00:00Z, got {_shown(finished)}")
        try:
            when = datetime.strptime(finished, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            self.bad("finished", f"is not a date and time that exists: {_shown(finished)}")
        if not EARLIEST_FINISHED <= when <= self.now + FUTURE_SLACK:
            self.bad(
                "finished",
                f"is {finished}, outside {EARLIEST_FINISHED:%Y-%m-%d} to {self.now + FUTURE_SLACK:%Y-%m-%d} "
                "(a day past this machine's clock): no run finished then",
            )
        return finished

    def hardware(self, value: Any) -> Hardware:
        data = self.object(value, "hardware", _HARDWARE, optional=("vendor", "architectures"))
        gpu_class = self.text(data["gpu_class"], "hardware.gpu_class", limit=_MAX_SHORT, empty=False)
        if gpu_class not in self.matrix.classes:
            self.bad(
                "hardware.gpu_class",
                f"{_shown(gpu_class)} is not a class of {self.matrix.source} "
                f"(classes: {', '.join(self.matrix.classes)}): a report of another tree",
            )
        count = self.count(data["count"], "hardware.count", limit=_MAX_GPUS)
        short = partial(self.text, limit=_MAX_SHORT, line=True)
        names = self.texts(data["names"], "hardware.names", short)
        capabilities = tuple(
            self.capability(text, f"hardware.capabilities[{index}]")
            for index, text in enumerate(self.texts(data["capabilities"], "hardware.capabilities", short))
        )
        driver = None if data["driver"] is None else short(data["driver"], "hardware.driver")
        source = self.text(data["source"], "hardware.source", limit=_MAX_SHORT)
        if source not in HARDWARE_SOURCES:
            self.bad("hardware.source", f"must be one of {', '.join(HARDWARE_SOURCES)}, got {_shown(source)}")
        device_ids = self.texts(data["device_ids"], "hardware.device_ids", short)
        description = self.text(data["description"], "hardware.description", limit=_MAX_TEXT)
        for key, found in (("names", names), ("capabilities", capabilities), ("device_ids", device_ids)):
            if len(found) != count:
                self.contradiction(
                    f"hardware.{key}", f"lists {len(found)} GPU(s), but hardware.count is {count}"
                )
        if (gpu_class == CPU_CLASS) != (count == 0):
            self.contradiction("hardware.count", f"{count} GPU(s) of class {gpu_class}")
        vendor = self.text(data.get("vendor", "nvidia"), "hardware.vendor", limit=_MAX_SHORT)
        architectures = self.texts(data.get("architectures", []), "hardware.architectures", short)
        if vendor != "nvidia" and len(architectures) != count:
            self.contradiction(
                "hardware.architectures", f"lists {len(architectures)} GPU(s), but hardware.count is {count}"
            )
        if count:
            arch = architectures[0] if architectures else ""
            owner = self.matrix.class_for_device(vendor, capabilities[0], arch, names[0])
            if owner is None or owner.name != gpu_class:
                major, minor = capabilities[0]
                shown = f"sm_{major}{minor}" if vendor == "nvidia" else f"{vendor} {arch or names[0]}"
                self.contradiction(
                    "hardware.gpu_class",
                    f"is {gpu_class}, but its first GPU ({shown}) is of class "
                    f"{owner.name if owner else 'none'} in {self.matrix.source}",
                )
        hardware = Hardware(
            gpu_class, count, names, capabilities, driver, source, device_ids, vendor, tuple(architectures)
        )
        if description != hardware.describe():
            self.contradiction(
                "hardware.description", f"says {_shown(description)}, the fields say {hardware.describe()!r}"
            )
        return hardware

    def capability(self, text: str, where: str) -> tuple[int, int]:
        match = _CAPABILITY_RE.match(text)
        if match is None:
            self.bad(where, f"must be a compute capability such as '9.0', got {_shown(text)}")
        return int(match[1]), int(match[2])

    def runner(self, value: Any) -> str | None:
        if value is None:
            return None
        label = self.text(value, "runner", limit=_MAX_SHORT)
        if self.matrix.runner(label) is None:
            self.bad(
                "runner",
                f"{_shown(label)} is not a runner of {self.matrix.source} "
                f"(labels: {', '.join(r.label for r in self.matrix.runners)}): a report of another tree",
            )
        return label

    def files(self, value: Any) -> dict[str, FileResult]:
        files = {}
        for path, entry in self.mapping(value, "files").items():
            where = f"files[{_shown(path)}]"
            self.ident(path, where)
            data = self.object(entry, where, _FILE, optional=("reruns",))
            ids = {
                outcome: self.texts(data[outcome], f"{where}.{outcome}", self.ident)
                for outcome in (*RAN, "ran")
            }
            skipped = tuple(
                self.skip(item, f"{where}.skipped[{index}]")
                for index, item in enumerate(self.array(data["skipped"], f"{where}.skipped"))
            )
            est = data["est_time"]
            files[path] = FileResult(
                passed=ids["passed"],
                failed=ids["failed"],
                errors=ids["errors"],
                skipped=skipped,
                duration=self.seconds(data["duration"], f"{where}.duration"),
                est_time=None if est is None else self.seconds(est, f"{where}.est_time", positive=True),
                reruns=self.reruns(data.get("reruns", []), f"{where}.reruns", ran=set(ids["ran"])),
            )
            if sorted(ids["ran"]) != sorted(ids["passed"] + ids["failed"] + ids["errors"]):
                self.contradiction(f"{where}.ran", "is not the tests that passed, failed and errored")
        return files

    def reruns(self, value: Any, where: str, *, ran: set[str]) -> tuple[Rerun, ...]:
        """The failed attempts of tests that ran again: each of a test that ran in this file, numbered
        1, 2, ... per test in order."""
        found: list[Rerun] = []
        attempts: dict[str, int] = {}
        for index, item in enumerate(self.array(value, where)):
            at = f"{where}[{index}]"
            data = self.object(item, at, ("nodeid", "attempt", "when", "message"))
            nodeid = self.ident(data["nodeid"], f"{at}.nodeid")
            attempt = self.count(data["attempt"], f"{at}.attempt", limit=_MAX_ATTEMPTS)
            when = data["when"]
            if when not in PHASES:
                self.bad(f"{at}.when", f"must be one of {', '.join(PHASES)}, got {_shown(when)}")
            message = self.text(data["message"], f"{at}.message", limit=_MAX_SHORT, line=True)
            if nodeid not in ran:
                self.contradiction(
                    at, f"{_shown(nodeid)} ran again, but has no outcome among the tests that ran"
                )
            if attempt != attempts.get(nodeid, 0) + 1:
                self.contradiction(
                    f"{at}.attempt", f"is {attempt}; {_shown(nodeid)}'s failed attempts go 1, 2, ... in order"
                )
            attempts[nodeid] = attempt
            found.append(Rerun(nodeid, attempt, when, message))
        return tuple(found)

    def skip(self, value: Any, where: str) -> Skip:
        data = self.object(value, where, ("nodeid", "reason", "hardware"), optional=("disabled",))
        flags = {}
        for key in ("hardware", "disabled"):
            flags[key] = data.get(key, False)
            if not isinstance(flags[key], bool):
                self.bad(f"{where}.{key}", f"must be true or false, got {_kind(flags[key])}")
        if flags["hardware"] and flags["disabled"]:
            self.contradiction(
                where, "a skip is for this machine's hardware or for a disabled registration, not both"
            )
        return Skip(
            self.ident(data["nodeid"], f"{where}.nodeid"),
            self.text(data["reason"], f"{where}.reason", limit=_MAX_TEXT),
            **flags,
        )

    def witnessed(self, value: Any) -> dict[str, Witnessed]:
        found = {}
        for nodeid, entry in self.mapping(value, "witnessed").items():
            where = f"witnessed[{_shown(nodeid)}]"
            self.ident(nodeid, where)
            data = self.object(entry, where, ("file", "outcome", "paths"))
            outcome = data["outcome"]
            if outcome not in OUTCOMES:
                self.bad(f"{where}.outcome", f"must be one of {', '.join(OUTCOMES)}, got {_shown(outcome)}")
            paths = {}
            for name, record in self.mapping(data["paths"], f"{where}.paths").items():
                at = f"{where}.paths[{_shown(name)}]"
                self.text(name, at, limit=_MAX_SHORT, line=True, empty=False)
                fields = self.object(record, at, ("count", "reasons"))
                count = self.count(fields["count"], f"{at}.count")
                if not count:
                    self.contradiction(f"{at}.count", "a path recorded 0 times")
                reasons = self.texts(fields["reasons"], f"{at}.reasons", partial(self.text, limit=_MAX_SHORT))
                if len(reasons) > _MAX_REASONS:
                    self.bad(f"{at}.reasons", f"keeps at most {_MAX_REASONS} reasons")
                paths[name] = PathRecord(count, reasons)
            if not paths:
                self.contradiction(f"{where}.paths", "a witnessed test recorded no path")
            found[nodeid] = Witnessed(
                self.ident(data["file"], f"{where}.file"), outcome, MappingProxyType(paths)
            )
        return found

    # -- agreement -----------------------------------------------------------------------------------
    def consistent(self, report: Report, totals: Mapping[str, int]) -> None:
        seen: dict[str, str] = {}
        for path, result in report.files.items():
            for outcome in OUTCOMES:
                for nodeid in result.ids(outcome):
                    if nodeid in seen:
                        self.contradiction(
                            f"files[{_shown(path)}].{outcome}",
                            f"lists {_shown(nodeid)}, which is {seen[nodeid]} already",
                        )
                    seen[nodeid] = f"{outcome} in {path}"
        outcomes = report.outcomes()
        for nodeid, entry in report.witnessed.items():
            where = f"witnessed[{_shown(nodeid)}]"
            if nodeid not in outcomes:
                self.contradiction(where, "a test that recorded paths has no outcome in files")
            file, outcome, _ = outcomes[nodeid]
            if (entry.file, entry.outcome) != (file, outcome):
                self.contradiction(
                    where, f"says {entry.outcome} in {entry.file}; files say {outcome} in {file}"
                )
        for key, expected in report.totals().items():
            if totals[key] != expected:
                self.contradiction(f"totals.{key}", f"is {totals[key]}, files add up to {expected}")
        if report.problems:
            if report.files or report.witnessed:
                self.contradiction("problems", "a run refused before any test (it lists problems) ran tests")
            return
        runner = self.matrix.runner(report.runner) if report.runner is not None else None
        if runner is not None and (runner.gpu_class, runner.gpus) != (
            report.hardware.gpu_class,
            report.hardware.count,
        ):
            self.contradiction(
                "runner",
                f"{runner.label} is {runner.gpus} x {runner.gpu_class}, but the report's hardware is "
                f"{report.hardware.describe()}",
            )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int) and value.bit_length() > 64:
        return "an integer of more than 19 digits"  # str() of a huge int is itself refused
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)
