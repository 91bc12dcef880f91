"""The bot against hostile events, comments and reports, end to end on the GitHub REST emulator.

Where an event comes from (its repository), what the comment says now (re-read: an edited or deleted
comment is never dispatched from a stale payload), whose comments are the bot's own (its login, not any
Bot account), what a check run concludes (the reports, never the workflow's conclusion alone), and input
that used to crash it (a lone surrogate) or exit with the wrong code (an id past 64 bits).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bot_world import PR, BotWorld, make_based_world, make_world, report_json, stamped
from click.testing import CliRunner
from github_emulator import GitHubEmulator, github_emulator  # noqa: F401  (the fixture)

from gpumatrix import register
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.model import GroupStatus, StatusComment
from gpumatrix.bot.render import render_status_comment
from gpumatrix.commands.bot import bot

register(on=("cpu",), est_time=30)

GEMM = "tests/kernels/test_gemm.py"


@pytest.fixture
def world(github_emulator: GitHubEmulator, tmp_path: Path) -> BotWorld:  # noqa: F811
    return make_world(github_emulator, tmp_path)


def _nothing_done(world: BotWorld, comment_id: int) -> None:
    assert world.gh.runs == [] and world.gh.check_runs == []
    assert [c["id"] for c in world.gh.comments(PR)] == [comment_id]  # no status comment posted
    assert world.gh.reactions(comment_id) == []  # not even the 👀 of a receipt


# -- where the event comes from, and what the comment says now -----------------------------------------------


def test_an_event_of_another_repository_is_ignored(world: BotWorld) -> None:
    posted = world.gh.add_comment(PR, "/rerun-test test_gemm.py", login="alice")
    payload = world.gh.comment_event(posted["id"])
    payload["repository"]["full_name"] = "someone/else"
    result, _ = world.handle(CommentEvent.from_payload(payload))
    assert result.action == "ignore"
    assert (
        result.reason
        == f"Event from someone/else, not {world.gh.repository}: this bot serves its own repository only."
    )
    _nothing_done(world, posted["id"])


def test_a_late_delivery_of_a_comment_edited_since_dispatches_nothing(world: BotWorld) -> None:
    """The `created` event says /rerun-test test_gemm.py; the comment now says something else."""
    posted = world.gh.add_comment(PR, "/rerun-test test_gemm.py", login="alice")
    stale = CommentEvent.from_payload(world.gh.comment_event(posted["id"]))
    world.gh.edit_comment(posted["id"], "never mind")
    result, _ = world.handle(stale)
    assert result.action == "ignore" and "edited since this event was sent" in result.reason
    _nothing_done(world, posted["id"])


def test_a_payload_whose_body_is_not_the_comments_dispatches_nothing(world: BotWorld) -> None:
    """A forged or replayed payload: the body it carries is not what the comment says."""
    posted = world.gh.add_comment(PR, "Looks good to me.", login="alice")
    payload = world.gh.comment_event(posted["id"])
    payload["comment"]["body"] = "/rerun-test test_gemm.py"
    result, _ = world.handle(CommentEvent.from_payload(payload))
    assert result.action == "ignore" and "edited since this event was sent" in result.reason
    _nothing_done(world, posted["id"])


def test_a_comment_deleted_since_dispatches_nothing(world: BotWorld) -> None:
    posted = world.gh.add_comment(PR, "/rerun-test test_gemm.py", login="alice")
    event = CommentEvent.from_payload(world.gh.comment_event(posted["id"]))
    with world.client() as client:
        client.delete_comment(posted["id"])
    result, _ = world.handle(event)
    assert result.action == "ignore" and "deleted since this event was sent" in result.reason
    assert world.gh.runs == [] and world.gh.comments(PR) == []


def test_a_lone_surrogate_in_a_comment_is_text_not_a_crash(world: BotWorld, tmp_path: Path) -> None:
    posted = world.gh.add_comment(PR, "/rerun-test test_gemm.py \ud800", login="alice")
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps(world.gh.comment_event(posted["id"])))  # JSON escapes it: "\ud800"
    outcome = CliRunner().invoke(
        bot,
        ["handle", "--event", str(event_file), "--root", str(world.root), "--retry-backoff", "0"],
        env=world.gh.env(),
    )
    assert outcome.exit_code == 0, outcome.output
    assert (
        "Traceback" not in outcome.output
        and outcome.exception is None
        or isinstance(outcome.exception, SystemExit)
    )
    (status,) = [c for c in world.gh.comments(PR) if c["id"] != posted["id"]]
    assert "\ufffd" in status["body"]  # shown as the replacement character, never sent as a lone surrogate
    assert [run.inputs["runner"] for run in world.gh.runs] == ["2-gpu-h100"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["handle", "--event", "{event}"], "`comment.id` must be from 1 to 9223372036854775807"),
        (["sync", "--comment-id", str(2**64)], "is not in the range 1<=x<=9223372036854775807"),
        (["sync", "--pr", str(2**70)], "is not in the range 1<=x<=9223372036854775807"),
        (["sync", "--comment-id", "1", "--run-id", "0"], "is not in the range 1<=x<=9223372036854775807"),
    ],
    ids=["event-comment-id", "sync-comment-id", "sync-pr", "sync-run-id-zero"],
)
def test_an_id_out_of_range_is_a_usage_error(
    world: BotWorld, tmp_path: Path, args: list[str], says: str
) -> None:
    posted = world.gh.add_comment(PR, "/rerun-test test_gemm.py", login="alice")
    payload = world.gh.comment_event(posted["id"])
    payload["comment"]["id"] = 2**64
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps(payload))
    filled = [arg.format(event=event_file) for arg in args]
    outcome = CliRunner().invoke(bot, [*filled, "--root", str(world.root)], env=world.gh.env())
    assert outcome.exit_code == 2, outcome.output
    assert says in " ".join(outcome.output.split())
    assert world.gh.runs == []


# -- the bot's own comments ------------------------------------------------------------------------------------


def _forged_status(world: BotWorld, login: str) -> int:
    """A status comment with a failed run to re-run, posted by `login` (a Bot account: user_type Bot)."""
    status = StatusComment(
        source_comment_id=1,
        command="/rerun-test test_gemm.py",
        author="alice",
        pr=PR,
        sha=world.sha,
        groups=(GroupStatus("2-gpu-h100", (GEMM,), state="failed", run_id=None),),
    )
    return world.gh.add_comment(PR, render_status_comment(status), login=login, user_type="Bot")["id"]


def test_a_status_comment_of_another_bot_is_not_the_bots_own(world: BotWorld) -> None:
    """Before, any Bot account's comment with the marker counted: /rerun-failed re-ran what it listed."""
    _forged_status(world, "mallory-ci[bot]")
    result, _ = world.handle(world.comment("/rerun-failed"))
    assert result.action == "refuse"
    assert "there is no earlier status comment on this PR to re-run from" in result.reason
    assert world.gh.runs == []


def test_the_bots_own_status_comment_is_read_again(world: BotWorld) -> None:
    _forged_status(world, "github-actions[bot]")  # the bot's own login (bot.login's default)
    result, _ = world.handle(world.comment("/rerun-failed"))
    assert result.action == "rerun-failed" and [r.inputs["runner"] for r in world.gh.runs] == ["2-gpu-h100"]


def test_sync_refuses_a_status_comment_another_account_wrote(world: BotWorld) -> None:
    forged = _forged_status(world, "mallory-ci[bot]")
    outcome = CliRunner().invoke(
        bot, ["sync", "--comment-id", str(forged), "--root", str(world.root)], env=world.gh.env()
    )
    assert outcome.exit_code == 2
    assert f"comment {forged} is by mallory-ci[bot], not by this bot (github-actions[bot])" in outcome.output


# -- the check run's conclusion comes from the reports ---------------------------------------------------------


def _finish(world: BotWorld, conclusion: str, *documents: tuple[str, bool]) -> tuple[str, str, str]:
    """Dispatch test_gemm.py, upload `documents` ((JSON, made the run's own?)), end the run with `conclusion`,
    and return the check run's (status, conclusion, title)."""
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = world.gh.runs[0]
    for index, (document, as_run) in enumerate(documents):
        world.upload_report(run.id, document, shard=f"{index + 1}-of-{len(documents)}", as_run=as_run)
    world.gh.set_run_state(run.id, "completed", conclusion)
    world.sync(result.comment_id, run_id=run.id)
    (check,) = world.gh.check_runs
    return check.status, check.conclusion, check.output["title"]


PASSING = report_json(GEMM, passed=3)
# (id, the run's conclusion, its reports (JSON, made the run's own), the check run's conclusion and title)
VERDICTS = [
    (
        "Passed on passing reports.",
        "success",
        [(PASSING, True)],
        "success",
        "Passed: 3 passed, 0 failed, 0 skipped",
    ),
    (
        "Passed, but a report says failed.",
        "success",
        [(PASSING, True), (report_json(GEMM, failed=(f"{GEMM}::b",)), True)],
        "failure",
        "Failed: 3 passed, 1 failed, 0 skipped",
    ),
    (
        "Passed, no report.",
        "success",
        [],
        "failure",
        "Failed · the run uploaded no test report",
    ),
    (
        "Passed, the report unreadable.",
        "success",
        [("{not json", False)],  # uploaded as it is: not JSON at all
        "failure",
        "Failed · 1 report(s) could not be counted",
    ),
    (
        "Passed, the report ran nothing.",
        "success",
        [(report_json(GEMM, skipped=2), True)],
        "failure",
        "Failed: 0 passed, 0 failed, 2 skipped · no test passed: the reports ran nothing",
    ),
    (
        "Passed, the report of another runner.",
        "success",
        [(PASSING, False)],  # as written on a CPU machine without --runner: not this run's
        "failure",
        "Failed · 1 report(s) could not be counted",
    ),
    (
        "Failed, though the reports pass.",
        "failure",
        [(PASSING, True)],
        "failure",
        "Failed: 3 passed, 0 failed, 0 skipped · the run failed, though its reports show no failure: see its log",
    ),
]


@pytest.mark.parametrize(
    ("conclusion", "documents", "expected", "title"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS]
)
def test_the_check_run_concludes_from_the_reports(
    world: BotWorld, conclusion: str, documents: list[tuple[str, bool]], expected: str, title: str
) -> None:
    assert _finish(world, conclusion, *documents) == ("completed", expected, title)


def test_a_report_of_another_commit_is_not_counted(world: BotWorld) -> None:
    """The runner's own report, but from a run at another commit: it cannot pass for this run."""
    other = stamped(PASSING, world.matrix, "2-gpu-h100", commit="f" * 40)
    assert _finish(world, "success", (other, False)) == (
        "completed",
        "failure",
        "Failed · 1 report(s) could not be counted",
    )
    (check,) = world.gh.check_runs
    assert f"it ran at ffffffffffff, not {world.sha[:12]}" in check.output["summary"]


def test_the_same_report_saved_five_times_counts_once(world: BotWorld) -> None:
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = world.gh.runs[0]
    for copy in range(5):
        world.upload_report(run.id, report_json(GEMM, passed=3), shard=f"copy-{copy}")
    world.gh.set_run_state(run.id, "completed", "success")
    world.sync(result.comment_id, run_id=run.id)
    (check,) = world.gh.check_runs
    assert check.output["title"] == "Passed: 3 passed, 0 failed, 0 skipped"


# -- /rerun-test --repeat reads the base under the configured test roots ---------------------------------------

_HEADER = "from gpumatrix import register\n\n"


def test_repeat_reads_the_base_with_the_configured_test_roots(
    github_emulator: GitHubEmulator,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    """With `test_roots: [test]`, the base's test/test_gemm.py was looked for under tests/ and reported as
    'not on the base'."""
    from bot_world import MATRIX_YAML

    matrix = MATRIX_YAML + "test_roots: [test]\n"
    gemm = "test/test_gemm.py"
    body = _HEADER + 'register(on=("h100",), gpus=2, est_time=5)\n\ndef test_tile():\n    pass\n'
    world = make_based_world(
        github_emulator,
        tmp_path,
        base_files={gemm: body},
        head_files={gemm: body + "# changed\n"},
        later_main_files={"README.md": "later\n"},
        matrix_yaml=matrix,
    )
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py --repeat 3"))
    assert result.action == "dispatch", result.reason
    assert result.status is not None and result.status.new_tests == ()
    assert sorted((g.commit, g.label) for g in result.status.groups) == [
        ("base", "2-gpu-h100"),
        ("head", "2-gpu-h100"),
    ]
