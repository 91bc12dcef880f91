"""The one reader of JSON test reports: what the writer writes reads back, and nothing else gets through.

Each row changes one field of a report the plugin's writer produced and names the field, the problem and
the exit code the reader answers with: 2 for a report that is malformed, 1 for one whose fields disagree.
The property tests feed the reader arbitrary JSON, arbitrary bytes and valid reports with one part
replaced by arbitrary JSON: it returns a report that writes back to itself, or raises `ReportError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from coverage_reports import report_json
from gpumatrix_trees import MATRIX_YAML
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpumatrix.report.read
from gpumatrix import register
from gpumatrix.config import MAX_SECONDS, parse_matrix
from gpumatrix.hardware.detection import Hardware
from gpumatrix.report import (
    OUTCOME_RANK,
    Report,
    ReportError,
    parse_report,
    parse_report_bytes,
    read_report,
    report_to_json,
    worse,
)
from gpumatrix.report.collect import RunOutcomes

register(on=("cpu",), est_time=20)

MATRIX = parse_matrix(MATRIX_YAML)
K = "tests/kernels/test_k.py"
H100 = report_json(
    "1-gpu-h100",
    "h100",
    1,
    {f"{K}::pair": "passed", f"{K}::bf16": "failed", f"{K}::big": "skipped"},
    {f"{K}::pair": ["k.pair"], f"{K}::bf16": ["k.bf16"]},
    est_times={K: 30},
)


def read(document: Any) -> Report:
    return parse_report(document, source="r.json", matrix=MATRIX)


def edited(edit: Callable[[dict], object], base: dict = H100) -> dict:
    document = json.loads(json.dumps(base))
    edit(document)
    return document


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """An edit that sets the field at a dotted path (list indexes as numbers)."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split("|")]

    def edit(document: dict) -> None:
        node: Any = document
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


def _drop(path: str) -> Callable[[dict], None]:
    *parents, last = path.split("|")

    def edit(document: dict) -> None:
        node: Any = document
        for key in parents:
            node = node[key]
        del node[last]

    return edit


def test_what_the_writer_writes_reads_back_as_the_same_report() -> None:
    report = read(H100)
    assert report_to_json(report) == H100
    assert report.runner == "1-gpu-h100" and report.hardware.count == 1
    result = report.files[K]
    assert (result.passed, result.failed, result.duration, result.est_time) == (
        (f"{K}::pair",),
        (f"{K}::bf16",),
        3.0,
        30.0,
    )
    assert result.skipped[0].reason == "needs b200" and not result.skipped[0].hardware
    assert report.witnessed[f"{K}::bf16"].outcome == "failed"
    assert report.totals()["ran"] == 2


# (id, edit, field named, problem named)
MALFORMED = [
    ("top-list", lambda d: d.clear() or d.update(x=1), "the top level", "is missing 'format'"),
    ("unknown-key", _set("extra", 1), "the top level", "has the unknown key 'extra'"),
    ("format", _set("format", 3), "format", "this gpumatrix reads formats 1, 2"),
    ("format-bool", _set("format", True), "format", "reads formats 1, 2"),
    ("format-float", _set("format", 2.0), "format", "reads formats 1, 2"),
    ("format-1-with-a-commit", _set("format", 1), "the top level", "has the unknown key 'commit'"),
    ("format-2-without-a-commit", _drop("commit"), "the top level", "is missing 'commit'"),
    ("commit-short", _set("commit", "0123abc"), "commit", "must be a full commit SHA"),
    ("commit-upper", _set("commit", "A" * 40), "commit", "must be a full commit SHA"),
    ("commit-number", _set("commit", 1234), "commit", "must be a string, got the number 1234"),
    ("suite-unknown", _set("suite", "weekly"), "suite", "'weekly' is not a suite of"),
    ("suite-list", _set("suite", ["pr"]), "suite", "must be a string, got a list"),
    ("finished-fullwidth", _set("finished", "２０２６-01-31T12:00:00Z"), "finished", "must be a UTC time"),
    (
        "finished-impossible",
        _set("finished", "9999-99-99T00:00:00Z"),
        "finished",
        "is not a date and time that",
    ),
    (
        "finished-in-2001",
        _set("finished", "2001-09-09T01:46:40Z"),
        "finished",
        "is 2001-09-09T01:46:40Z, outside",
    ),
    (
        "finished-in-2999",
        _set("finished", "2999-01-01T00:00:00Z"),
        "finished",
        "is 2999-01-01T00:00:00Z, outside",
    ),
    (
        "finished-trailing-newline",
        _set("finished", "2026-01-31T12:00:0Z\n"),
        "finished",
        "must be a UTC time",
    ),
    ("format-enormous", _set("format", 10**5000), "format", "an integer of more than 19 digits"),
    ("class-unknown", _set("hardware|gpu_class", "h900"), "hardware.gpu_class", "'h900' is not a class of"),
    (
        "class-list",
        _set("hardware|gpu_class", ["h100"]),
        "hardware.gpu_class",
        "must be a string, got a list",
    ),
    ("count-negative", _set("hardware|count", -1), "hardware.count", "must be a count"),
    ("count-float", _set("hardware|count", 1.0), "hardware.count", "must be a count"),
    ("count-huge", _set("hardware|count", 10**30), "hardware.count", "more than 19 digits"),
    ("count-enormous", _set("hardware|count", 10**5000), "hardware.count", "more than 19 digits"),
    ("capability", _set("hardware|capabilities|0", "sm90"), "hardware.capabilities[0]", "compute capability"),
    ("source", _set("hardware|source", "guess"), "hardware.source", "must be one of override, nvml"),
    ("name-markup", _set("hardware|names|0", "a\nb"), "hardware.names[0]", "one line of printable text"),
    ("runner-unknown", _set("runner", "9-gpu-tpu"), "runner", "'9-gpu-tpu' is not a runner of"),
    ("runner-number", _set("runner", 7), "runner", "must be a string, got the number 7"),
    ("finished", _set("finished", "yesterday"), "finished", "must be a UTC time"),
    ("problems-string", _set("problems", "x"), "problems", "must be a list"),
    ("files-list", _set("files", []), "files", "must be an object, got a list"),
    (
        "file-name-newline",
        lambda d: d["files"].update({"a\nb": d["files"].pop(K)}),
        "files['a\\nb']",
        "one line",
    ),
    (
        "file-name-empty",
        lambda d: d["files"].update({"": d["files"].pop(K)}),
        "files['']",
        "must not be empty",
    ),
    ("file-missing-key", _drop(f"files|{K}|est_time"), f"files[{K!r}]", "is missing 'est_time'"),
    ("passed-string", _set(f"files|{K}|passed", "all"), f"files[{K!r}].passed", "must be a list"),
    ("nodeid-number", _set(f"files|{K}|passed|0", 7), f"files[{K!r}].passed[0]", "must be a string"),
    ("nodeid-long", _set(f"files|{K}|passed|0", "x" * 5000), f"files[{K!r}].passed[0]", "longer than 4096"),
    ("duration-negative", _set(f"files|{K}|duration", -1), f"files[{K!r}].duration", "finite number"),
    ("duration-nan", _set(f"files|{K}|duration", float("nan")), f"files[{K!r}].duration", "finite number"),
    ("duration-inf", _set(f"files|{K}|duration", float("inf")), f"files[{K!r}].duration", "finite number"),
    (
        "duration-absurd",
        _set(f"files|{K}|duration", 1e300),
        f"files[{K!r}].duration",
        f"at most {MAX_SECONDS}",
    ),
    (
        "duration-huge-int",
        _set(f"files|{K}|duration", 10**400),
        f"files[{K!r}].duration",
        "more than 19 digits",
    ),
    ("duration-string", _set(f"files|{K}|duration", "3"), f"files[{K!r}].duration", "got the string '3'"),
    ("duration-bool", _set(f"files|{K}|duration", True), f"files[{K!r}].duration", "got the boolean true"),
    ("est-zero", _set(f"files|{K}|est_time", 0), f"files[{K!r}].est_time", "above 0"),
    ("skip-reason-list", _set(f"files|{K}|skipped|0|reason", ["x"]), "skipped[0].reason", "must be a string"),
    (
        "skip-hardware-string",
        _set(f"files|{K}|skipped|0|hardware", "no"),
        "skipped[0].hardware",
        "true or false",
    ),
    ("witnessed-outcome", _set(f"witnessed|{K}::pair|outcome", "ok"), "outcome", "must be one of passed"),
    ("witnessed-paths-list", _set(f"witnessed|{K}::pair|paths", []), "paths", "must be an object"),
    ("witnessed-count", _set(f"witnessed|{K}::pair|paths|k.pair|count", "1"), "count", "must be a count"),
    (
        "witnessed-reasons",
        _set(f"witnessed|{K}::pair|paths|k.pair|reasons", ["a"] * 4),
        "reasons",
        "at most 3",
    ),
    ("totals-missing", _drop("totals|ran"), "totals", "is missing 'ran'"),
    ("note-number", _set("note", 3), "note", "must be a string"),
]


@pytest.mark.parametrize(
    ("edit", "field", "problem"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_a_malformed_report_names_the_file_and_the_field(edit, field: str, problem: str) -> None:
    with pytest.raises(ReportError) as caught:
        read(edited(edit))
    error = caught.value
    assert str(error).startswith("report r.json is not a gpumatrix report: ")
    assert (error.source, error.contradiction, error.exit_code) == ("r.json", False, 2)
    assert field in error.field and problem in error.problem, str(error)


def _runner_of_cpu(document: dict) -> None:
    document["hardware"] = json.loads(json.dumps(report_json("cpu", "cpu", 0, {})["hardware"]))


# (id, edit, field named, problem named): every field well typed, two of them disagreeing
CONTRADICTIONS = [
    (
        "runner-vs-cpu-hardware",
        _runner_of_cpu,
        "runner",
        "1-gpu-h100 is 1 x h100, but the report's hardware is cpu",
    ),
    (
        "runner-vs-gpu-count",
        lambda d: d.update(hardware=report_json(None, "h100", 2, {})["hardware"]),
        "runner",
        "1-gpu-h100 is 1 x h100, but the report's hardware is 2 x h100",
    ),
    (
        "count-vs-names",
        _set("hardware|count", 2),
        "hardware.names",
        "lists 1 GPU(s), but hardware.count is 2",
    ),
    (
        "class-vs-capability",
        _set("hardware|capabilities|0", "10.0"),
        "hardware.gpu_class",
        "is of class b200",
    ),
    (
        "cpu-with-gpus",
        lambda d: d["hardware"].update(gpu_class="cpu"),
        "hardware.count",
        "1 GPU(s) of class cpu",
    ),
    (
        "description",
        _set("hardware|description", "1 x h100 (fast)"),
        "hardware.description",
        "the fields say",
    ),
    (
        "witnessed-without-outcome",
        lambda d: d["witnessed"].update({f"{K}::ghost": d["witnessed"][f"{K}::pair"]}),
        f"witnessed['{K}::ghost']",
        "has no outcome in files",
    ),
    (
        "witnessed-outcome-differs",
        _set(f"witnessed|{K}::bf16|outcome", "passed"),
        f"witnessed['{K}::bf16']",
        "says passed in",
    ),
    ("witnessed-no-path", _set(f"witnessed|{K}::pair|paths", {}), "paths", "recorded no path"),
    ("witnessed-zero-count", _set(f"witnessed|{K}::pair|paths|k.pair|count", 0), "count", "0 times"),
    (
        "passing-and-failing",
        lambda d: d["files"][K]["failed"].append(f"{K}::pair") or d["files"][K]["ran"].append(f"{K}::pair"),
        "failed",
        "which is passed in",
    ),
    ("ran", _set(f"files|{K}|ran", []), "ran", "is not the tests that passed, failed and errored"),
    ("totals", _set("totals|passed", 5), "totals.passed", "is 5, files add up to 1"),
    (
        "hardware-and-disabled",
        lambda d: (
            d["files"][K]["skipped"][0].update(hardware=True, disabled=True)
            or d["totals"].update(hardware_skipped=1)
        ),
        "skipped[0]",
        "not both",
    ),
    (
        "refused-but-ran",
        _set("problems", ["runner '1-gpu-h100' claims 1 x h100; this machine: cpu"]),
        "problems",
        "ran tests",
    ),
]


@pytest.mark.parametrize(
    ("edit", "field", "problem"), [c[1:] for c in CONTRADICTIONS], ids=[c[0] for c in CONTRADICTIONS]
)
def test_a_report_that_contradicts_itself_is_a_failure(edit, field: str, problem: str) -> None:
    with pytest.raises(ReportError) as caught:
        read(edited(edit))
    error = caught.value
    assert str(error).startswith("report r.json contradicts itself: ")
    assert (error.contradiction, error.exit_code) == (True, 1)
    assert field in error.field and problem in error.problem, str(error)


def test_a_refused_run_may_name_a_runner_its_machine_is_not() -> None:
    """What the plugin writes when --runner is refused: the problem says why, and no test ran."""
    refused = edited(_runner_of_cpu, report_json("1-gpu-h100", "h100", 1, {}))
    refused["problems"] = ["runner '1-gpu-h100' claims 1 x h100; this machine: cpu"]
    assert read(refused).problems == ("runner '1-gpu-h100' claims 1 x h100; this machine: cpu",)
    refused["problems"] = []
    with pytest.raises(ReportError, match="contradicts itself: runner"):
        read(refused)


# (id, bytes, problem)
BYTES = [
    ("not-json", b"{not json", "it is not JSON"),
    ("not-utf8", b'{"format": "\xff"}', "it is not JSON"),
    ("nan", json.dumps(H100).replace('"duration": 3.0', '"duration": NaN').encode(), "it holds NaN"),
    ("infinity", b'{"format": -Infinity}', "it holds -Infinity"),
    ("huge-number", b'{"format": 1' + b"0" * 5000 + b"}", "it is not JSON"),
    ("repeated-key", b'{"format": 1, "format": 1}', "gives the key 'format' twice"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "nested deeper than any report"),
    ("deep-object", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested deeper than any report"),
]


@pytest.mark.parametrize(("data", "problem"), [b[1:] for b in BYTES], ids=[b[0] for b in BYTES])
def test_bytes_that_are_no_report(data: bytes, problem: str) -> None:
    with pytest.raises(ReportError) as caught:
        parse_report_bytes(data, source="r.json", matrix=MATRIX)
    assert problem in str(caught.value) and caught.value.exit_code == 2


def test_a_file_too_large_or_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(H100))
    assert read_report(path, MATRIX).digest == read_report(path, MATRIX).digest != ""
    monkeypatch.setattr(gpumatrix.report.read, "MAX_REPORT_BYTES", 100)
    with pytest.raises(ReportError, match=r"is not a gpumatrix report: it is larger than 0 MiB"):
        read_report(path, MATRIX)
    with pytest.raises(ReportError, match=r"^cannot read report .*missing.json: No such file") as caught:
        read_report(tmp_path / "missing.json", MATRIX)
    assert caught.value.exit_code == 2


# (first, second, the worse): a test that ran outranks one skipped, a failure an error
WORSE = [
    ("skipped", "passed", "passed"),
    ("passed", "skipped", "passed"),
    ("passed", "errors", "errors"),
    ("errors", "failed", "failed"),
    ("failed", "errors", "failed"),
    ("failed", "passed", "failed"),
    ("skipped", "skipped", "skipped"),
]


@pytest.mark.parametrize(("first", "second", "expected"), WORSE)
def test_the_worse_outcome(first: str, second: str, expected: str) -> None:
    assert worse(first, second) == expected
    assert sorted(OUTCOME_RANK, key=OUTCOME_RANK.__getitem__) == ["skipped", "passed", "errors", "failed"]


# -- the writer ------------------------------------------------------------------------------------------------


class _Phase:
    """A pytest test report, as much of one as the collector reads."""

    def __init__(self, nodeid: str, when: str, outcome: str, duration: float, reason: str = "") -> None:
        self.nodeid, self.when, self.duration = nodeid, when, duration
        self.failed, self.skipped = outcome == "failed", outcome == "skipped"
        self.longrepr = ("f.py", 1, f"Skipped: {reason}") if self.skipped else None


def test_a_test_that_recorded_paths_and_never_finished_is_an_error() -> None:
    outcomes = RunOutcomes()
    setup = _Phase("tests/a.py::t", "setup", "passed", 0.5)
    setup.gpumatrix_witnessed = [{"path": "k.pair"}]  # type: ignore[attr-defined]
    outcomes.add_test_report(setup, "tests/a.py")  # the run stopped before the call
    report = read(report_to_json(outcomes.to_report(hardware=Hardware("cpu", 0), runner="cpu")))
    assert report.files["tests/a.py"].errors == ("tests/a.py::t",)
    assert report.witnessed["tests/a.py::t"].outcome == "errors"


_NODE = st.sampled_from(["tests/a.py::t", "tests/a.py::u", "tests/b.py::t", "tests/b.py::t[x\\ny]"])
_PHASE = st.tuples(
    _NODE,
    st.sampled_from(["setup", "call", "teardown"]),
    st.sampled_from(["passed", "failed", "skipped"]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5000),
)


@settings(max_examples=150, deadline=None)
@given(
    phases=st.lists(_PHASE, max_size=20), paths=st.lists(st.tuples(_NODE, st.text(min_size=1)), max_size=6)
)
def test_whatever_pytest_reports_the_writer_writes_a_report_the_reader_reads(phases, paths) -> None:
    outcomes = RunOutcomes()
    for nodeid, when, outcome, seconds, reason in phases:
        outcomes.add_test_report(_Phase(nodeid, when, outcome, seconds, reason), nodeid.split("::")[0])
    for nodeid, path in paths:
        phase = _Phase(nodeid, "call", "passed", 0.0)
        phase.gpumatrix_witnessed = [{"path": path, "reason": path * 300}]  # type: ignore[attr-defined]
        outcomes.add_test_report(phase, nodeid.split("::")[0])
    hardware = Hardware("h100", 1, ("NVIDIA H200",), ((9, 0),), None, "nvml", ("GPU-0",))
    written = report_to_json(outcomes.to_report(hardware=hardware, runner="1-gpu-h100"))
    assert report_to_json(read(json.loads(json.dumps(written)))) == written


# -- arbitrary input -------------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def _answer(document: Any) -> Report | ReportError:
    try:
        return read(document)
    except ReportError as exc:
        return exc


@settings(max_examples=300, deadline=None)
@given(document=JSON)
def test_arbitrary_json_is_a_report_or_a_report_error(document: Any) -> None:
    answer = _answer(document)
    assert isinstance(answer, ReportError) and answer.source == "r.json"


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes_are_a_report_or_a_report_error(data: bytes) -> None:
    with pytest.raises(ReportError):
        parse_report_bytes(data, source="r.json", matrix=MATRIX)


def _places(value: Any, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _places(item, (*path, index))
    return found


_PLACES = _places(H100)[1:]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(_PLACES), value=JSON | st.sampled_from([None, 0, -1, "", [], {}, 1e308, "x\n"]))
def test_a_report_with_one_part_replaced_reads_as_itself_or_raises(place: tuple, value: Any) -> None:
    document = json.loads(json.dumps(H100))
    node: Any = document
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = value
    answer = _answer(document)
    if isinstance(answer, Report):  # a value the field allows: what was read writes back as it was given
        assert report_to_json(answer) == document


def test_a_report_says_its_commit_and_suite_and_an_older_one_says_they_are_unknown() -> None:
    """Format 2 records the commit and the suite; a format-1 report (no such keys) is still read, and says
    that both are unknown rather than passing for any commit."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    recorded = read(edited(lambda d: d.update(commit=sha, suite="pr")))
    assert (recorded.commit, recorded.suite, recorded.provenance_known) == (sha, "pr", True)
    assert recorded.provenance() == "commit 0123456789ab, suite pr"
    unrecorded = read(edited(lambda d: [d.pop("commit"), d.pop("suite"), d.update(format=1)]))
    assert (unrecorded.commit, unrecorded.suite, unrecorded.provenance_known) == (None, None, False)
    assert unrecorded.provenance() == "commit and suite unknown (a format-1 report records neither)"
    plain = read(H100)  # written outside a git tree, without --suite
    assert plain.provenance() == "no commit (not run in a git tree), no suite (every suite or named tests)"


def test_finished_is_bounded_by_the_readers_clock() -> None:
    document = edited(_set("finished", "2030-06-01T00:00:00Z"))
    with pytest.raises(ReportError, match="outside 2024-01-01 to"):
        parse_report(document, source="r.json", matrix=MATRIX)  # the clock says 2026
    later = parse_report(document, source="r.json", matrix=MATRIX, now=1_906_000_000 + 86_400 * 7)
    assert later.finished == "2030-06-01T00:00:00Z"


def test_one_report_saved_again_with_other_spacing_has_one_digest() -> None:
    from gpumatrix.report import parse_report_bytes

    text = json.dumps(H100, indent=2)
    again = json.dumps(dict(reversed(list(H100.items()))), indent=None, separators=(",", ": "))
    first = parse_report_bytes(text.encode(), source="a.json", matrix=MATRIX)
    second = parse_report_bytes(again.encode(), source="b.json", matrix=MATRIX)
    assert first.digest and first.digest == second.digest
