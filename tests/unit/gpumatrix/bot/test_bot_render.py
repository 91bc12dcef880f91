"""The status comment: state lines, reproduction commands, escaping, and the hidden state read back."""

from __future__ import annotations

import pytest

from gpumatrix import register
from gpumatrix.bot.model import GroupStatus, StatusComment, run_state
from gpumatrix.bot.render import render_listing, render_status_comment
from gpumatrix.bot.resolve import Refusal
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.escape import markdown

register(on=("cpu",), est_time=20)

SHA = "0123456789abcdef0123456789abcdef01234567"
URL = "https://github.com/acme/mxfuse/actions/runs/99"


def _status(
    *groups: GroupStatus, refusals: tuple[Refusal, ...] = (), problem: str | None = None
) -> StatusComment:
    return StatusComment(
        source_comment_id=5,
        command="/rerun-test test_x.py",
        author="alice",
        pr=7,
        sha=SHA,
        groups=groups,
        refusals=refusals,
        problem=problem,
    )


# (id, run status, run conclusion, expected state)
RUN_STATES = [
    ("queued", "queued", None, "queued"),
    ("waiting", "waiting", None, "queued"),
    ("requested", "requested", None, "queued"),
    ("pending", "pending", None, "queued"),
    ("in progress", "in_progress", None, "running"),
    ("success", "completed", "success", "passed"),
    ("failure", "completed", "failure", "failed"),
    ("timed out", "completed", "timed_out", "failed"),
    ("startup failure", "completed", "startup_failure", "failed"),
    ("action required", "completed", "action_required", "failed"),
    ("cancelled", "completed", "cancelled", "cancelled"),
    ("skipped", "completed", "skipped", "cancelled"),
    ("neutral", "completed", "neutral", "cancelled"),
    ("completed without conclusion", "completed", None, "failed"),
    ("a conclusion GitHub adds later", "completed", "exploded", "failed"),
]


@pytest.mark.parametrize(
    ("status", "conclusion", "expected"), [r[1:] for r in RUN_STATES], ids=[r[0] for r in RUN_STATES]
)
def test_run_state(status: str, conclusion: str | None, expected: str) -> None:
    assert run_state(status, conclusion) == expected


# (id, group, expected line)
LINES = [
    ("Pending.", GroupStatus("1-gpu-h100", ("a",)), "🚀 1-gpu-h100 (1 test): ⏳ not dispatched yet"),
    (
        "Queued.",
        GroupStatus("1-gpu-h100", ("a", "b"), "queued", 99, URL),
        f"🚀 1-gpu-h100 (2 tests): ⏳ [View workflow run]({URL})",
    ),
    (
        "Running.",
        GroupStatus("cpu", ("a",), "running", 99, URL),
        f"🚀 cpu (1 test): 🔄 [View workflow run]({URL})",
    ),
    (
        "Passed.",
        GroupStatus("cpu", ("a",), "passed", 99, URL),
        f"🚀 cpu (1 test): ✅ [View workflow run]({URL})",
    ),
    (
        "Failed.",
        GroupStatus("4-gpu-gb300", ("a", "b", "c"), "failed", 99, URL),
        f"🚀 4-gpu-gb300 (3 tests): ❌ [View workflow run]({URL})",
    ),
    (
        "Cancelled.",
        GroupStatus("cpu", ("a",), "cancelled", 99, URL),
        f"🚀 cpu (1 test): ⚠️ [View workflow run]({URL})",
    ),
    (
        "Dispatch error.",
        GroupStatus("cpu", ("a",), "error", error="HTTP 422: Unexpected inputs provided"),
        "🚀 cpu (1 test): ❗ dispatch failed: HTTP 422: Unexpected inputs provided",
    ),
]


@pytest.mark.parametrize(("group", "line"), [r[1:] for r in LINES], ids=[r[0] for r in LINES])
def test_group_line(group: GroupStatus, line: str) -> None:
    assert line in render_status_comment(_status(group)).splitlines()


def test_whole_comment_layout() -> None:
    body = render_status_comment(
        _status(
            GroupStatus("1-gpu-h100", ("tests/k/test_x.py",), "passed", 1, URL),
            refusals=(Refusal("nope.py", "is not a registered test file"),),
        )
    )
    assert body.splitlines()[:9] == [
        "<!-- gpumatrix:source=5 -->",
        f"`/rerun-test test_x.py` from @alice on #7 at `{SHA}`",
        "",
        f"🚀 1-gpu-h100 (1 test): ✅ [View workflow run]({URL})",
        "",
        "```bash",
        "pytest tests/k/test_x.py",
        "```",
        "",
    ]
    assert "⛔ `nope.py`: is not a registered test file" in body.splitlines()
    assert body.splitlines()[-1].startswith("<!-- gpumatrix:state {")


def test_pytest_command_quotes_brackets_and_splits_long_lists() -> None:
    tests = tuple(f"tests/kernels/test_quantize_{i}.py::test_round[bf16-{i}]" for i in range(3))
    body = render_status_comment(_status(GroupStatus("cpu", tests)))
    assert "pytest \\" in body.splitlines()
    assert "  'tests/kernels/test_quantize_0.py::test_round[bf16-0]' \\" in body.splitlines()
    assert "  'tests/kernels/test_quantize_2.py::test_round[bf16-2]'" in body.splitlines()


def test_problem_line() -> None:
    body = render_status_comment(_status(problem="--sha deadbee is not the PR head"))
    assert "⛔ `/rerun-test test_x.py`: --sha deadbee is not the PR head" in body.splitlines()
    assert "🚀" not in body


# (id, hostile text, what must not appear in the rendered body, what must)
HOSTILE = [
    ("Mention in a message.", "ping @octo-org/admins now", "@octo-org", "\uff20octo-org/admins"),
    ("HTML in a message.", "<img src=x onerror=alert(1)>", "<img", "&lt;img src=x onerror=alert(1)&gt;"),
    ("Marker end in a message.", "x --> <!-- gpumatrix:state {} -->", "x -->", "x --&gt;"),
    ("Newlines flattened.", "line one\n\n# Heading", "\n# Heading", "line one # Heading"),
]


@pytest.mark.parametrize(("text", "absent", "present"), [r[1:] for r in HOSTILE], ids=[r[0] for r in HOSTILE])
def test_untrusted_text_is_neutralised(text: str, absent: str, present: str) -> None:
    status = _status(GroupStatus("cpu", ("a",), "error", error=text), refusals=(Refusal("x.py", text),))
    body = render_status_comment(status)
    assert absent not in body
    assert present in body
    assert parse_status_comment(body) == status  # and the hidden state still reads back exactly
    assert body.count("-->") == 2  # the source marker and the state marker, nothing more


# (id, text, expected code span)
SPANS = [
    ("Plain.", "test_x.py", "`test_x.py`"),
    ("Backticks replaced.", "a`b`c", "`a'b'c`"),
    ("Whitespace flattened.", "a\n  b", "`a b`"),
    ("Empty.", "", "` `"),
    ("Long text cut.", "x" * 200, "`" + "x" * 119 + "…`"),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in SPANS], ids=[r[0] for r in SPANS])
def test_code_span(text: str, expected: str) -> None:
    assert markdown(text, style="code") == expected


# (id, body)
UNREADABLE = [
    ("No marker.", "just a comment"),
    ("Not JSON.", "<!-- gpumatrix:state {oops} -->"),
    ("Missing fields.", '<!-- gpumatrix:state {"v":1} -->'),
    (
        "Unknown state.",
        '<!-- gpumatrix:state {"source":1,"command":"c","author":"a","groups":'
        '[{"label":"cpu","tests":[],"state":"exploded"}]} -->',
    ),
    (
        "Run id not a number.",
        '<!-- gpumatrix:state {"source":1,"command":"c","author":"a","groups":'
        '[{"label":"cpu","tests":[],"state":"queued","run_id":"7"}]} -->',
    ),
]


@pytest.mark.parametrize("body", [r[1] for r in UNREADABLE], ids=[r[0] for r in UNREADABLE])
def test_unreadable_state_is_none(body: str) -> None:
    assert parse_status_comment(body) is None


def test_group_state_is_checked() -> None:
    with pytest.raises(ValueError, match="state must be one of"):
        GroupStatus("cpu", (), "done")


def test_listing() -> None:
    body = render_listing({"cpu": ("tests/unit/test_a.py",), "1-gpu-h100": ()}, source_comment_id=9, sha=SHA)
    lines = body.splitlines()
    assert lines[0] == "<!-- gpumatrix:source=9 -->"
    assert f"🧪 Registered test files at `{SHA}`, by runner:" in lines
    assert "<details><summary>cpu: 1 file</summary>" in lines
    assert "tests/unit/test_a.py" in lines
    assert "- 1-gpu-h100: no files" in lines
