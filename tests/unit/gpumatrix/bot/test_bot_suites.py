"""`/rerun-test` and the registration's when and whether: a nightly file re-runs like any other; a disabled
one only with `--include-disabled` (otherwise a refusal naming its reason), and that choice travels to the
run; `/rerun-test ?` shows each file's suite and disabled state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bot_world import make_world
from github_emulator import GitHubEmulator, github_emulator  # noqa: F401  (the fixture)
from gpumatrix_trees import MATRIX_YAML

from gpumatrix import register
from gpumatrix.bot.decide import plan_comment
from gpumatrix.bot.dispatch import dispatch_inputs
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.facts import Head
from gpumatrix.bot.model import GroupStatus, StatusComment
from gpumatrix.bot.render import render_listing
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.config import parse_matrix
from gpumatrix.registry.discovery import build_registry

register(on=("cpu",), est_time=10)

MATRIX = parse_matrix(MATRIX_YAML + "bot: {permission: write}\n")
HEAD_SHA = "0123456789abcdef0123456789abcdef01234567"


def _file(arguments: str) -> str:
    return f"from gpumatrix import register\nregister({arguments})\n\ndef test_x():\n    pass\n"


Q = "tests/kernels/test_quantize.py"
ACCURACY = "tests/e2e/test_accuracy.py"
SPLITK = "tests/kernels/test_splitk.py"
HANG = "tests/unit/test_hang.py"
NIGHT_OFF = "tests/e2e/test_night_off.py"
SOURCES = {
    Q: _file('on=("h100", "b200", "gb300", "5090"), est_time=40'),
    ACCURACY: _file('on=("b200", "gb300"), gpus=4, est_time=1200, suite="nightly"'),
    SPLITK: _file('on=("h100", "b200", "gb300"), est_time=40, disabled_on={"gb300": "NaN in split-K, #123"}'),
    HANG: _file('on=("cpu",), est_time=3, disabled="hangs on the new runner image; @ops knows"'),
    NIGHT_OFF: _file(
        'on=("b200",), gpus=4, est_time=900, suite="nightly", disabled_on={"b200": "driver 575"}'
    ),
}
REGISTRY = build_registry(SOURCES, MATRIX)
SPLITK_OFF = "is disabled on gb300: NaN in split-K, #123; add `--include-disabled` to run it on runner 4-gpu-gb300 anyway"
HANG_OFF = "is disabled: hangs on the new runner image; @ops knows; add `--include-disabled` to run it anyway"
PREVIOUS = StatusComment(
    source_comment_id=11,
    command="/rerun-test test_splitk.py",
    author="alice",
    pr=7,
    sha="f" * 40,
    groups=(
        GroupStatus("1-gpu-h100", (SPLITK,), "failed", 1, "https://x/runs/1"),
        GroupStatus("4-gpu-gb300", (SPLITK,), "failed", 2, "https://x/runs/2"),
    ),
)
PREVIOUS_INCLUDED = StatusComment(
    source_comment_id=12,
    command="/rerun-test test_splitk.py --include-disabled --runner 4-gpu-gb300",
    author="alice",
    pr=7,
    sha="f" * 40,
    groups=(
        GroupStatus("4-gpu-gb300", (SPLITK,), "cancelled", 2, "https://x/runs/2", include_disabled=True),
    ),
)


@dataclass
class FakeFacts:
    previous: StatusComment | None = PREVIOUS

    def permission(self, login: str) -> str | None:
        return "write"

    def head(self) -> Head:
        return Head(HEAD_SHA, REGISTRY)

    def latest_status(self) -> StatusComment | None:
        return self.previous


@dataclass(frozen=True)
class Case:
    id: str
    body: str
    action: str
    runners: dict[str, list[str]] = field(default_factory=dict)
    included: tuple[str, ...] = ()  # runner groups that carry --include-disabled to their run
    errors: tuple[str, ...] = ()  # one fragment per refusal, in order
    shows: tuple[str, ...] = ()  # fragments the posted comment holds
    previous: StatusComment | None = PREVIOUS


CASES = [
    Case(
        "A nightly file re-runs.",
        "/rerun-test test_accuracy.py",
        "dispatch",
        {"4-gpu-b200": [ACCURACY], "4-gpu-gb300": [ACCURACY]},
        shows=("pytest tests/e2e/test_accuracy.py",),
    ),
    Case(
        "A disabled file is refused with its reason.",
        "/rerun-test test_hang.py",
        "refuse",
        errors=(HANG_OFF,),
        shows=(f"⛔ `{HANG}`: is disabled: hangs on the new runner image; \uff20ops knows",),
    ),
    Case(
        "A disabled file runs when included.",
        "/rerun-test test_hang.py --include-disabled",
        "dispatch",
        {"cpu": [HANG]},
        included=("cpu",),
        shows=("🚀 cpu (1 test, disabled ones included): ⏳", f"pytest --include-disabled {HANG}"),
    ),
    Case(
        "Disabled on one class: the other classes run.",
        "/rerun-test test_splitk.py",
        "dispatch",
        {"1-gpu-h100": [SPLITK], "4-gpu-b200": [SPLITK]},
        errors=(SPLITK_OFF,),
        shows=(f"⛔ `{SPLITK}`: is disabled on gb300: NaN in split-K, #123",),
    ),
    Case(
        "Included, it runs on that class too.",
        "/rerun-test --include-disabled test_splitk.py",
        "dispatch",
        {"1-gpu-h100": [SPLITK], "4-gpu-b200": [SPLITK], "4-gpu-gb300": [SPLITK]},
        included=("4-gpu-gb300",),
        shows=("🚀 1-gpu-h100 (1 test): ⏳", "🚀 4-gpu-gb300 (1 test, disabled ones included): ⏳"),
    ),
    Case(
        "Only the disabled class asked for.",
        "/rerun-test test_splitk.py --runner 4-gpu-gb300",
        "refuse",
        errors=(SPLITK_OFF,),
    ),
    Case(
        "A nightly file disabled where it runs.",
        "/rerun-test tests/e2e/test_night_off.py",
        "refuse",
        errors=("is disabled on b200: driver 575; add `--include-disabled`",),
    ),
    Case(
        "A refusal does not stop the others.",
        "/rerun-test test_hang.py test_quantize.py::test_x",
        "dispatch",
        {name: [f"{Q}::test_x"] for name in ("1-gpu-5090", "1-gpu-h100", "4-gpu-b200", "4-gpu-gb300")},
        errors=(HANG_OFF,),
    ),
    Case(
        "A node of a disabled file is refused too.",
        "/rerun-test test_hang.py::test_x",
        "refuse",
        errors=(HANG_OFF,),
    ),
    Case(
        "The flag takes no value.",
        "/rerun-test test_hang.py --include-disabled=yes",
        "refuse",
        errors=("--include-disabled takes no value",),
    ),
    Case(
        "The listing takes no flag.",
        "/rerun-test ? --include-disabled",
        "refuse",
        errors=("/rerun-test ? takes no --include-disabled (only --runner)",),
    ),
    Case(
        "Rerun failed refuses a test disabled there.",
        "/rerun-failed",
        "rerun-failed",
        {"1-gpu-h100": [SPLITK]},
        errors=(SPLITK_OFF,),
    ),
    Case(
        "Rerun failed, disabled included.",
        "/rerun-failed --include-disabled",
        "rerun-failed",
        {"1-gpu-h100": [SPLITK], "4-gpu-gb300": [SPLITK]},
        included=("4-gpu-gb300",),
    ),
    Case(
        "Rerun failed keeps an earlier --include-disabled.",
        "/rerun-failed",
        "rerun-failed",
        {"4-gpu-gb300": [SPLITK]},
        included=("4-gpu-gb300",),
        previous=PREVIOUS_INCLUDED,
    ),
]


def _event(body: str) -> CommentEvent:
    return CommentEvent(
        action="created",
        comment_id=42,
        body=body,
        author="alice",
        author_type="User",
        issue_number=7,
        is_pull_request=True,
        repository="acme/mxfuse",
    )


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_comment(case: Case) -> None:
    decision = plan_comment(_event(case.body), matrix=MATRIX, facts=FakeFacts(case.previous))
    document = decision.to_json()
    assert document["action"] == case.action
    assert {r["label"]: r["tests"] for r in document["runners"]} == case.runners
    assert [r["label"] for r in document["runners"] if r.get("include_disabled")] == list(case.included)
    assert len(document["errors"]) == len(case.errors), document["errors"]
    for error, fragment in zip(document["errors"], case.errors, strict=True):
        assert fragment in error["message"], error
    for fragment in case.shows:
        assert decision.comment is not None and fragment in decision.comment, decision.comment
    if decision.status is not None:  # what is posted reads back whole, the flag included
        back = parse_status_comment(decision.comment or "")
        assert back == decision.status
        assert [g.label for g in back.groups if g.include_disabled] == list(case.included)


def _listing_lines(body: str) -> list[str]:
    return [" ".join(line.split()) for line in body.splitlines()]


def test_the_listing_shows_suite_and_disabled_state() -> None:
    decision = plan_comment(_event("/rerun-test ?"), matrix=MATRIX, facts=FakeFacts())
    lines = _listing_lines(decision.comment or "")
    assert "<details><summary>cpu: 1 file (1 disabled here)</summary>" in lines
    assert f"{HANG} disabled: hangs on the new runner image; \uff20ops knows" in lines  # mentions no one
    assert "<details><summary>4-gpu-b200: 4 files (2 nightly, 1 disabled here)</summary>" in lines
    assert f"{NIGHT_OFF} nightly · disabled on b200: driver 575" in lines
    assert "<details><summary>4-gpu-gb300: 3 files (1 nightly, 1 disabled here)</summary>" in lines
    gb300 = lines[
        lines.index("<details><summary>4-gpu-gb300: 3 files (1 nightly, 1 disabled here)</summary>") :
    ]
    assert gb300[3:6] == [
        f"{ACCURACY} nightly",
        Q,
        f"{SPLITK} disabled on gb300: NaN in split-K, #123",
    ]
    b200 = lines[
        lines.index("<details><summary>4-gpu-b200: 4 files (2 nightly, 1 disabled here)</summary>") :
    ]
    assert SPLITK in b200[3:7]  # disabled on gb300 only
    assert "<details><summary>1-gpu-h100: 2 files</summary>" in lines  # nothing unusual: the count alone


def test_a_reason_cannot_close_the_listings_code_block() -> None:
    body = render_listing(
        {"cpu": (HANG,)}, source_comment_id=1, sha=None, notes={"cpu": {HANG: ("pr", "disabled: a ``` b")}}
    )
    assert [line for line in body.splitlines() if "```" in line] == ["```", "```"]
    assert f"{HANG}  disabled: a ''' b" in body.splitlines()


def test_dispatch_inputs_carry_the_flag_only_where_it_is_set() -> None:
    status = StatusComment(source_comment_id=1, command="/rerun-test x", author="a", pr=7, sha=HEAD_SHA)
    plain = dispatch_inputs(GroupStatus("cpu", (HANG,)), status, 5)
    included = dispatch_inputs(GroupStatus("cpu", (HANG,), include_disabled=True), status, 5)
    assert "include_disabled" not in plain
    assert included == {**plain, "include_disabled": "true"}


def test_gpu_tests_yml_accepts_the_flag_end_to_end(github_emulator: GitHubEmulator, tmp_path: Path) -> None:  # noqa: F811
    """Against the REST emulator, which accepts only the inputs the real gpu-tests.yml declares."""
    world = make_world(github_emulator, tmp_path, files=SOURCES)
    result, _ = world.handle(
        world.comment("/rerun-test test_splitk.py --include-disabled --runner 4-gpu-gb300")
    )
    assert result.action == "dispatch", result.reason
    (group,) = result.status.groups
    assert (group.label, group.state, group.include_disabled) == ("4-gpu-gb300", "queued", True)
    run = github_emulator.run(group.run_id)
    assert run.inputs["include_disabled"] == "true" and run.inputs["tests"] == SPLITK


def test_the_check_run_says_disabled_tests_ran() -> None:
    from dataclasses import replace

    from gpumatrix.bot.checks import check_spec

    group = GroupStatus("4-gpu-gb300", (SPLITK,), "running", 2, "https://x/runs/2")
    status = replace(PREVIOUS, groups=(group,))
    plain = check_spec(group, status=status, comment_id=5, comment_url=None, mark=None)
    included = replace(group, include_disabled=True)
    flagged = check_spec(
        included, status=replace(status, groups=(included,)), comment_id=5, comment_url=None, mark=None
    )
    assert plain is not None and flagged is not None
    line = "Tests registered as disabled on this runner run too (`--include-disabled`)."
    assert line not in plain.summary.splitlines() and line in flagged.summary.splitlines()
