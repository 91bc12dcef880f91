"""gpumatrix.bot.state: the one codec of the bot's three hidden markers, its versions, and the markers
already posted on pull requests (written out here as the code before this codec wrote them)."""

from __future__ import annotations

import pytest
from gpumatrix_trees import MATRIX_YAML

from gpumatrix import register
from gpumatrix.bot.ci_states import CI_STATES_MARKER, parse_ci_states, render_ci_states
from gpumatrix.bot.github import CommentData
from gpumatrix.bot.model import CiStates, GroupStatus, ReportMark, StatusComment, Suite, Tally
from gpumatrix.bot.render import render_status_comment
from gpumatrix.bot.report import ReportSummary
from gpumatrix.bot.resolve import Refusal
from gpumatrix.bot.state import (
    CHECK,
    CI_STATES,
    STATUS,
    VERSION,
    MarkerError,
    decode_ci_states,
    decode_status,
    encode_check,
    encode_ci_states,
    encode_status,
    parse_status_comment,
    read_mark,
    read_marker,
    write_marker,
)
from gpumatrix.bot.sync import SyncError, sync_status_comment
from gpumatrix.config import parse_matrix

register(on=("cpu",), est_time=2)

SHA = "0123456789abcdef0123456789abcdef01234567"
OLD = "fedcba9876543210fedcba9876543210fedcba98"

STATUS_VALUE = StatusComment(
    source_comment_id=11,
    command="/rerun-test test_x.py --repeat 3",
    author="alice",
    pr=7,
    sha=SHA,
    groups=(
        GroupStatus(
            "cpu", ("tests/test_x.py",), "passed", 5, "https://x/runs/5", tally=Tally(True, (("t", 2, 3),))
        ),
        GroupStatus(
            "cpu", ("tests/test_x.py",), "error", error="HTTP 422: no", commit="base", include_disabled=True
        ),
    ),
    refusals=(Refusal("nope.py", "is not a registered test file"),),
    checks="check-runs",
    repeat=3,
    base_sha=OLD,
    base_ref="main",
    new_tests=("tests/test_new.py",),
)
MARK = ReportMark(99, 2, True, ReportSummary(passed=3, failed=1, failing=("tests/x.py::test_y",), reports=1))
CI_VALUE = CiStates(
    7,
    SHA,
    (Suite("CI", "running", SHA, "https://x/runs/1", 1, 41),),
    (Suite("rerun / cpu", "passed", OLD, "https://x/runs/2", 2, comment_url="https://x/c/3"),),
)

# What the code before this codec wrote, character for character: the status and CI-states markers with
# `"v":1` (which no reader checked), the check-run marker with no version at all.
POSTED_STATUS = (
    "<!-- gpumatrix:source=11 -->\nheader\n\n"
    '<!-- gpumatrix:state {"v":1,"source":11,"command":"/rerun-test test_x.py","author":"alice","pr":7,'
    f'"sha":"{SHA}","groups":[{{"label":"cpu","tests":["tests/test_x.py"],"state":"queued","run_id":5,'
    '"url":"https://x/runs/5","error":null}],"refusals":[["nope.py","is not a registered test file"]],'
    '"problem":null,"checks":"check-runs","checks_note":null} -->'
)
POSTED_CHECK = (
    "summary\n\n"
    '<!-- gpumatrix:check {"run":99,"attempt":2,"complete":true,"report":{"passed":3,"failed":1,"skipped":0,'
    '"failing":["tests/x.py::test_y"],"more_failing":0,"reports":1,"unreadable":0}} -->'
)
POSTED_CI_STATES = (
    f"{CI_STATES_MARKER}\n**CI states** ...\n\n"
    f'<!-- gpumatrix:ci-states-state {{"v":1,"pr":7,"head":"{SHA}","suites":[{{"name":"CI","state":"running",'
    f'"sha":"{SHA}","url":"https://x/runs/1","run_id":1,"number":41,"comment_url":null}}],"stale":[]}} -->'
)


def test_each_kind_reads_back_what_it_wrote() -> None:
    assert decode_status(render_status_comment(STATUS_VALUE)) == STATUS_VALUE
    assert read_mark("summary\n" + encode_check(MARK)) == MARK
    assert read_mark("summary\n" + encode_check(ReportMark(1, 1, False, None))) == ReportMark(
        1, 1, False, None
    )
    assert decode_ci_states(render_ci_states(CI_VALUE)) == CI_VALUE


@pytest.mark.parametrize(
    ("kind", "line"),
    [
        (STATUS, encode_status(STATUS_VALUE)),
        (CHECK, encode_check(MARK)),
        (CI_STATES, encode_ci_states(CI_VALUE)),
    ],
    ids=[STATUS, CHECK, CI_STATES],
)
def test_every_marker_is_one_line_that_names_its_kind_and_version(kind: str, line: str) -> None:
    assert "\n" not in line
    assert line.startswith(f'<!-- gpumatrix:{kind} {{"v":{VERSION},') and line.endswith("} -->")
    assert line.count("-->") == 1 and "@" not in line


def test_markers_already_posted_are_read() -> None:
    status = parse_status_comment(POSTED_STATUS)
    assert status == StatusComment(
        11,
        "/rerun-test test_x.py",
        "alice",
        7,
        SHA,
        (GroupStatus("cpu", ("tests/test_x.py",), "queued", 5, "https://x/runs/5"),),
        (Refusal("nope.py", "is not a registered test file"),),
        checks="check-runs",
    )
    assert read_mark(POSTED_CHECK) == ReportMark(
        99, 2, True, ReportSummary(passed=3, failed=1, failing=("tests/x.py::test_y",), reports=1)
    )
    assert parse_ci_states(POSTED_CI_STATES) == CiStates(
        7, SHA, (Suite("CI", "running", SHA, "https://x/runs/1", 1, 41),)
    )


def _versioned(text: str, version: str) -> str:
    """`text` (a posted marker) as another version of gpumatrix would write it."""
    for kind in (STATUS, CHECK, CI_STATES):
        text = text.replace(f'gpumatrix:{kind} {{"v":1,', f"gpumatrix:{kind} {{").replace(
            f"gpumatrix:{kind} {{", f'gpumatrix:{kind} {{"v":{version},'
        )
    return text


@pytest.mark.parametrize("version", ["2", "0", '"1"', "true", "null"])
@pytest.mark.parametrize(
    ("kind", "posted", "what"),
    [
        (STATUS, POSTED_STATUS, "status comment"),
        (CHECK, POSTED_CHECK, "check run summary"),
        (CI_STATES, POSTED_CI_STATES, "CI-states comment"),
    ],
    ids=[STATUS, CHECK, CI_STATES],
)
def test_an_unknown_version_is_refused_naming_it(kind: str, posted: str, what: str, version: str) -> None:
    text = _versioned(posted, version)
    assert f'{{"v":{version},' in text
    with pytest.raises(MarkerError) as refused:
        read_marker(kind, text)
    shown = {"2": "2", "0": "0", '"1"': "'1'", "true": "True", "null": "None"}[version]
    assert f"{what}'s gpumatrix marker is version {shown};" in str(refused.value)
    assert f"reads version {VERSION}" in str(refused.value)
    # The readers that answer "none" for what they cannot read do so, never half a value.
    assert parse_status_comment(text) is None and read_mark(text) is None and parse_ci_states(text) is None


def test_version_1_is_read_with_or_without_the_field() -> None:
    assert read_mark(_versioned(POSTED_CHECK, "1")) == read_mark(POSTED_CHECK) is not None
    assert parse_status_comment(POSTED_STATUS.replace('{"v":1,', "{")) == parse_status_comment(POSTED_STATUS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<!-- gpumatrix:state {"v":1,"source":1} -->', "holds fields it does not write"),
        (
            '<!-- gpumatrix:state {"v":1,"source":1,"command":"c","author":"a","groups":7} -->',
            "does not write",
        ),
        ("<!-- gpumatrix:state {oops} -->", "is not JSON"),
    ],
)
def test_a_status_marker_with_other_fields_is_refused(text: str, message: str) -> None:
    with pytest.raises(MarkerError, match=message):
        decode_status(text)
    assert parse_status_comment(text) is None


def test_the_check_marker_counts_only_as_the_last_line() -> None:
    assert read_mark(POSTED_CHECK + "\nmore") is None
    assert read_marker(CHECK, POSTED_CHECK + "\n") is None


def test_a_kind_that_does_not_exist_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        write_marker("status", {})
    with pytest.raises(ValueError, match="kind must be one of"):
        read_marker("status", "")


class _OneComment:
    def __init__(self, body: str) -> None:
        self.body = body

    def get_comment(self, comment_id: int) -> CommentData:
        return CommentData(comment_id, self.body, "github-actions[bot]", "Bot")


def test_sync_refuses_a_status_comment_of_an_unknown_version_naming_it() -> None:
    matrix = parse_matrix(MATRIX_YAML)
    client = _OneComment(_versioned(POSTED_STATUS, "2"))
    with pytest.raises(SyncError, match="status comment's gpumatrix marker is version 2"):
        sync_status_comment(5, client=client, matrix=matrix)  # type: ignore[arg-type]
    with pytest.raises(SyncError, match="is not a gpumatrix status comment$"):
        sync_status_comment(5, client=_OneComment("no marker"), matrix=matrix)  # type: ignore[arg-type]
