"""The bot end to end against the GitHub REST emulator: real HTTP, GitHub's schemas, a real git clone.

Dispatch to several runners, a dispatch that fails on one runner, retries, handling a comment twice,
eight runs finishing together while eight syncs race, /rerun-failed, /rerun-test ?, and the CLI.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bot_world import EIGHT_RUNNER_COMMAND, PR, BotWorld, make_world
from click.testing import CliRunner
from github_emulator import GitHubEmulator, github_emulator  # noqa: F401  (the fixture)

from gpumatrix import register
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.github import GitHubClient
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.bot.sync import sync_status_comment
from gpumatrix.commands.bot import bot

register(on=("cpu",), est_time=20)

Q = "tests/kernels/test_quantize.py"
QUANTIZE_RUNNERS = ["1-gpu-5090", "1-gpu-h100", "4-gpu-b200", "4-gpu-gb300"]
EIGHT_RUNNERS = [
    "cpu",
    "1-gpu-5090",
    "1-gpu-h100",
    "2-gpu-h100",
    "4-gpu-b200",
    "4-gpu-gb300",
    "8-gpu-h100",
    "8-gpu-b200",
]
# What each run conclusion must show, written out rather than taken from the code under test.
EMOJI = {"success": "✅", "failure": "❌", "timed_out": "❌", "cancelled": "⚠️", "skipped": "⚠️"}


@pytest.fixture
def world(github_emulator: GitHubEmulator, tmp_path: Path) -> BotWorld:  # noqa: F811
    return make_world(github_emulator, tmp_path, permissions={"alice": "write", "rita": "read"})


def calls(gh: GitHubEmulator, since: int = 0) -> list[str]:
    """The requests made, as "METHOD /path" with the repository prefix cut."""
    prefix = f"/repos/{gh.repository}/"
    return [f"{r.method} {r.path.removeprefix(prefix)}" for r in gh.requests[since:]]


def reactions(gh: GitHubEmulator, comment_id: int) -> list[str]:
    return [r["content"] for r in gh.reactions(comment_id)]


def line_of(body: str, label: str) -> str:
    return next(line for line in body.splitlines() if line.startswith(f"🚀 {label} ("))


def test_dispatch_to_four_runners(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment("Flaky on Blackwell?\n\n/rerun-test test_quantize.py")
    result, count = world.handle(event)

    assert result.action == "dispatch"
    status_id = result.comment_id
    assert calls(gh) == [
        f"GET issues/comments/{event.comment_id}",  # the comment as it stands now, not the payload's text
        f"POST issues/comments/{event.comment_id}/reactions",  # 👀: receipt and idempotency lock
        "GET collaborators/alice/permission",
        f"GET pulls/{PR}",
        f"POST issues/{PR}/comments",
        *["POST actions/workflows/gpu-tests.yml/dispatches"] * 4,
        *["POST check-runs"] * 4,  # queued on the pinned SHA, one per runner
        f"PATCH issues/comments/{status_id}",
        f"POST issues/comments/{event.comment_id}/reactions",  # 🚀
    ]
    assert count == 2 * len(QUANTIZE_RUNNERS) + 7
    assert [run.inputs["runner"] for run in gh.runs] == QUANTIZE_RUNNERS
    for run in gh.runs:
        assert run.ref == "main"  # the workflow runs from the default branch; the SHA travels as an input
        assert run.inputs == {
            "runner": run.inputs["runner"],
            "tests": Q,
            "pr_number": str(PR),
            "sha": world.sha,
            "status_comment_id": str(status_id),
        }
    assert reactions(gh, event.comment_id) == ["eyes", "rocket"]
    body = gh.comment(status_id)["body"]
    for run in gh.runs:
        assert line_of(body, run.inputs["runner"]) == (
            f"🚀 {run.inputs['runner']} (1 test): ⏳ [View workflow run]"
            f"(https://github.com/{gh.repository}/actions/runs/{run.id})"
        )


def test_status_comment_as_posted(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment(
        "/rerun-test test_gemm.py::test_x[bf16-2] test_model.py nope.py --runner 8-gpu-h100 "
        "--runner 2-gpu-h100"
    )
    result, _ = world.handle(event)
    gemm, model = gh.runs
    gh.set_run_state(gemm.id, "completed", "failure")
    gh.set_run_state(model.id, "in_progress")
    with world.client() as client:
        sync_status_comment(result.comment_id, client=client, matrix=world.matrix)
    body = gh.comment(result.comment_id)["body"]
    runs = f"https://github.com/{gh.repository}/actions/runs"
    assert body.splitlines()[:-1] == [
        f"<!-- gpumatrix:source={event.comment_id} -->",
        "`/rerun-test test_gemm.py::test_x[bf16-2] test_model.py nope.py --runner 8-gpu-h100 --runner 2-gpu-h100` "
        f"from @alice on #{PR} at `{world.sha}`",
        "",
        f"🚀 2-gpu-h100 (1 test): ❌ [View workflow run]({runs}/{gemm.id})",
        "",
        "```bash",
        "pytest 'tests/kernels/test_gemm.py::test_x[bf16-2]'",
        "```",
        "",
        f"🚀 8-gpu-h100 (1 test): 🔄 [View workflow run]({runs}/{model.id})",
        "",
        "```bash",
        "pytest tests/e2e/test_model.py",
        "```",
        "",
        "⛔ `nope.py`: is not a registered test file; \\`/rerun-test ?\\` lists the registered tests",
        "",
        f"☑️ Each runner's result is also a check run `rerun / <runner>` on `{world.sha}`.",
        "",
    ]
    assert body.splitlines()[-1].startswith("<!-- gpumatrix:state ")
    stored = parse_status_comment(body)
    assert stored is not None and [(g.run_id, g.state) for g in stored.groups] == [
        (gemm.id, "failed"),
        (model.id, "running"),
    ]


def test_partial_dispatch_failure_marks_only_its_line(world: BotWorld) -> None:
    gh = world.gh
    gh.inject_fault("POST", r"/dispatches$", 422, times=1)  # the first dispatch: 1-gpu-5090, in matrix order
    event = world.comment("/rerun-test test_quantize.py")
    result, _ = world.handle(event)

    body = gh.comment(result.comment_id)["body"]
    assert (
        line_of(body, "1-gpu-5090")
        == "🚀 1-gpu-5090 (1 test): ❗ dispatch failed: HTTP 422: Unexpected inputs provided"
    )
    assert [run.inputs["runner"] for run in gh.runs] == QUANTIZE_RUNNERS[1:]
    for run in gh.runs:
        assert "⏳ [View workflow run]" in line_of(body, run.inputs["runner"])
    assert reactions(gh, event.comment_id) == ["eyes", "rocket"]


def test_every_dispatch_failing_gets_confused(world: BotWorld) -> None:
    gh = world.gh
    gh.inject_fault(
        "POST", r"/dispatches$", 422, times=4, message="Workflow does not have 'workflow_dispatch' trigger"
    )
    event = world.comment("/rerun-test test_quantize.py")
    result, _ = world.handle(event)
    assert gh.runs == []
    assert reactions(gh, event.comment_id) == ["eyes", "confused"]
    states = [g.state for g in result.status.groups] if result.status else []
    assert states == ["error"] * 4


def test_retries_on_5xx_and_secondary_rate_limits(world: BotWorld) -> None:
    gh = world.gh
    gh.inject_fault("GET", rf"/pulls/{PR}$", 403, retry_after=1)
    gh.inject_fault("POST", rf"/issues/{PR}/comments$", 500)
    gh.inject_fault("POST", r"/dispatches$", 502, times=2)
    event = world.comment("/rerun-test test_quantize.py")
    result, count = world.handle(event)

    assert [run.inputs["runner"] for run in gh.runs] == QUANTIZE_RUNNERS  # nothing lost, nothing doubled
    assert world.waits == [1.0, 0.05, 0.05, 0.1]  # Retry-After honoured; then backoff 0.05 * 2**attempt
    assert count == 2 * len(QUANTIZE_RUNNERS) + 7 + 4
    assert result.status is not None and [g.state for g in result.status.groups] == ["queued"] * 4


def test_handling_the_same_comment_again_dispatches_nothing(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment("/rerun-test test_quantize.py")
    first, _ = world.handle(event)
    comments_before, runs_before = len(gh.comments(PR)), len(gh.runs)
    gh.set_run_state(gh.runs[0].id, "completed", "success")
    since = len(gh.requests)

    again, _ = world.handle(event)

    assert again.action == "ignore" and "already handled" in again.reason
    assert (len(gh.comments(PR)), len(gh.runs)) == (comments_before, runs_before)
    assert not [c for c in calls(gh, since) if c.endswith("/dispatches") or c == f"POST issues/{PR}/comments"]
    assert again.comment_id == first.comment_id  # its status comment was re-synced instead
    assert "✅" in line_of(gh.comment(first.comment_id)["body"], "1-gpu-5090")
    assert reactions(gh, event.comment_id) == ["eyes", "rocket"]


def test_edits_fire_again_only_when_allowed_and_changed(world: BotWorld) -> None:
    gh = world.gh
    posted = gh.add_comment(PR, "/rerun-test test_gemm.py", login="alice")
    world.handle(CommentEvent.from_payload(gh.comment_event(posted["id"])))
    gh.edit_comment(posted["id"], "/rerun-test test_config.py")
    edited = CommentEvent.from_payload(
        gh.comment_event(posted["id"], action="edited", previous_body="/rerun-test test_gemm.py")
    )

    ignored, _ = world.handle(edited)  # bot.allow_edits is false in ci/matrix.yaml
    assert ignored.action == "ignore" and "edits are ignored" in ignored.reason
    assert [run.inputs["runner"] for run in gh.runs] == ["2-gpu-h100"]

    world.matrix = replace(world.matrix, bot=replace(world.matrix.bot, allow_edits=True))
    changed, _ = world.handle(edited)
    assert changed.action == "dispatch"
    assert [run.inputs["runner"] for run in gh.runs] == ["2-gpu-h100", "cpu"]
    again, _ = world.handle(edited)  # the same edit delivered twice
    assert again.action == "ignore" and again.comment_id == changed.comment_id
    assert len(gh.runs) == 2


def test_unauthorized_commenter_gets_no_comment(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment("/rerun-test test_quantize.py", login="rita")
    result, _ = world.handle(event)
    assert result.action == "ignore" and "@rita has read permission" in result.reason
    assert gh.runs == [] and len(gh.comments(PR)) == 1
    assert reactions(gh, event.comment_id) == ["eyes", "confused"]


def test_eight_runs_finishing_together_with_eight_syncs(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment(EIGHT_RUNNER_COMMAND))
    assert [run.inputs["runner"] for run in gh.runs] == EIGHT_RUNNERS
    conclusions = ["success", "failure", "cancelled", "timed_out", "success", "skipped", "failure", "success"]
    start = threading.Barrier(len(gh.runs))
    failures: list[BaseException] = []

    def finish(run_id: int, conclusion: str) -> None:
        try:
            start.wait()
            gh.set_run_state(run_id, "in_progress")
            with world.client() as client:
                sync_status_comment(result.comment_id, client=client, matrix=world.matrix, run_id=run_id)
            gh.set_run_state(run_id, "completed", conclusion)
            with world.client() as client:
                sync_status_comment(result.comment_id, client=client, matrix=world.matrix, run_id=run_id)
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            failures.append(exc)

    threads = [
        threading.Thread(target=finish, args=(run.id, conclusion))
        for run, conclusion in zip(gh.runs, conclusions, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    body = gh.comment(result.comment_id)["body"]
    for run, conclusion in zip(gh.runs, conclusions, strict=True):
        assert f": {EMOJI[conclusion]} [View workflow run]" in line_of(body, run.inputs["runner"])


class _StaleWriter:
    """A client that, just before its first comment write, lets another sync finish a run and write first."""

    def __init__(self, inner: GitHubClient, before_first_write: Any) -> None:
        self.inner, self.before_first_write = inner, before_first_write

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update_comment(self, comment_id: int, body: str) -> None:
        if self.before_first_write is not None:
            hook, self.before_first_write = self.before_first_write, None
            hook()
        self.inner.update_comment(comment_id, body)


def test_a_sync_that_read_too_early_writes_again(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py test_config.py"))
    cpu_run, gemm_run = gh.runs
    gh.set_run_state(cpu_run.id, "completed", "success")

    def the_other_sync() -> None:
        gh.set_run_state(gemm_run.id, "completed", "failure")
        with world.client() as client:
            sync_status_comment(result.comment_id, client=client, matrix=world.matrix, run_id=gemm_run.id)

    with world.client() as client:
        late = sync_status_comment(
            result.comment_id, client=_StaleWriter(client, the_other_sync), matrix=world.matrix
        )  # type: ignore[arg-type]

    assert (
        late.writes == 2
    )  # its first write was stale (gemm still queued when read); it re-read and fixed it
    body = gh.comment(result.comment_id)["body"]
    assert "❌ [View workflow run]" in line_of(body, "2-gpu-h100")
    assert "✅ [View workflow run]" in line_of(body, "cpu")


def test_a_failed_job_shows_before_its_run_completes(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = gh.runs[0]
    gh.set_run_state(run.id, "in_progress")
    gh.set_jobs(
        run.id,
        [
            {"name": "test", "status": "completed", "conclusion": "failure"},
            {"name": "Status comment (end)", "status": "in_progress"},
        ],
    )
    with world.client() as client:
        synced = sync_status_comment(result.comment_id, client=client, matrix=world.matrix, run_id=run.id)
    assert synced.states == {"2-gpu-h100": "failed"}
    gh.set_jobs(
        run.id,
        [
            {"name": "test", "status": "completed", "conclusion": "success"},
            {"name": "Status comment (end)", "status": "in_progress"},
        ],
    )
    with world.client() as client:  # a passing job alone never shows green: only the completed run does
        assert sync_status_comment(
            result.comment_id, client=client, matrix=world.matrix, run_id=run.id
        ).states == {"2-gpu-h100": "running"}


def test_rerun_failed_dispatches_only_failed_and_cancelled_groups(world: BotWorld) -> None:
    gh = world.gh
    first, _ = world.handle(world.comment(EIGHT_RUNNER_COMMAND))
    outcome = {
        "cpu": "success",
        "1-gpu-5090": "failure",
        "1-gpu-h100": "success",
        "2-gpu-h100": "cancelled",
        "4-gpu-b200": "success",
        "4-gpu-gb300": "success",
        "8-gpu-h100": "success",
        "8-gpu-b200": "timed_out",
    }
    for (
        run
    ) in gh.runs:  # finished, but nobody synced: /rerun-failed must read the runs, not the stale comment
        gh.set_run_state(run.id, "completed", outcome[run.inputs["runner"]])
    before = len(gh.runs)

    event = world.comment("/rerun-failed")
    result, _ = world.handle(event)

    assert result.action == "rerun-failed"
    rerun = gh.runs[before:]
    assert [run.inputs["runner"] for run in rerun] == ["1-gpu-5090", "2-gpu-h100", "8-gpu-b200"]
    assert {run.inputs["runner"]: run.inputs["tests"] for run in rerun} == {
        "1-gpu-5090": Q,
        "2-gpu-h100": "tests/kernels/test_gemm.py",
        "8-gpu-b200": "tests/e2e/test_model.py",
    }
    assert result.comment_id != first.comment_id
    assert reactions(gh, event.comment_id) == ["eyes", "rocket"]


def test_list_posts_the_registered_tests(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment("/rerun-test ? --runner 4-gpu-b200")
    result, _ = world.handle(event)
    assert result.action == "list" and gh.runs == []
    body = gh.comment(result.comment_id)["body"]
    assert "<details><summary>4-gpu-b200: 1 file</summary>" in body.splitlines()
    assert Q in body.splitlines()
    assert reactions(gh, event.comment_id) == ["eyes"]


def test_a_head_that_is_not_in_the_clone_is_refused(
    github_emulator: GitHubEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    world = make_world(github_emulator, tmp_path)
    github_emulator.add_pull(8, head_sha="c" * 40, tree={"tests/x/test_y.py": "y"})
    posted = github_emulator.add_comment(8, "/rerun-test test_y.py", login="alice")
    result, _ = world.handle(CommentEvent.from_payload(github_emulator.comment_event(posted["id"])))
    assert result.action == "refuse" and "git fetch failed" in result.reason
    assert github_emulator.runs == []
    assert reactions(github_emulator, posted["id"]) == ["eyes", "confused"]


# -- the CLI ------------------------------------------------------------------------------------------------


def _event_file(world: BotWorld, tmp_path: Path, body: str, login: str = "alice") -> Path:
    posted = world.gh.add_comment(PR, body, login=login)
    path = tmp_path / f"event-{posted['id']}.json"
    path.write_text(json.dumps(world.gh.comment_event(posted["id"])))
    return path


def test_cli_handle_and_sync(world: BotWorld, tmp_path: Path) -> None:
    gh, runner = world.gh, CliRunner()
    env = gh.env()
    handled = runner.invoke(
        bot,
        [
            "handle",
            "--event",
            str(_event_file(world, tmp_path, "/rerun-test test_gemm.py")),
            "--root",
            str(world.root),
            "--retry-backoff",
            "0",
        ],
        env=env,
    )
    assert handled.exit_code == 0, handled.output
    assert handled.output.splitlines()[0] == "dispatch: 1 runner group(s), 1 test(s); dispatched 1 of 1"
    assert "published as check runs: 1 write(s)" in handled.output.splitlines()
    assert "API calls: 9" in handled.output
    run = gh.runs[0]
    gh.set_run_state(run.id, "completed", "success")
    status_id = int(run.inputs["status_comment_id"])
    synced = runner.invoke(bot, ["sync", "--comment-id", str(status_id), "--run-id", str(run.id)], env=env)
    assert synced.exit_code == 0, synced.output
    assert synced.output.splitlines()[:2] == [
        f"synced comment {status_id} (1 write(s)): 2-gpu-h100 ✅ passed",
        "published as check runs: 1 write(s)",
    ]
    assert synced.output.splitlines()[2].startswith(f"CI states of #{PR}: comment ")
    assert gh.token not in handled.output + synced.output


# (id, arguments after `bot`, environment change, expected exit code, fragment of the output)
CLI_CASES = [
    (
        "Ignored comment exits 0 with its reason.",
        ["handle", "--event", "{event:LGTM}"],
        {},
        0,
        "ignore: No /rerun-test or /rerun-failed command in the comment.",
    ),
    (
        "Unauthorized exits 0.",
        ["handle", "--event", "{event-rita:/rerun-test test_gemm.py}"],
        {},
        0,
        "ignore: @rita has read permission; /rerun-test needs write.",
    ),
    (
        "Missing token is a usage error.",
        ["handle", "--event", "{event:/rerun-test test_gemm.py}"],
        {"GITHUB_TOKEN": None},
        2,
        "GITHUB_TOKEN must be set",
    ),
    ("Missing event file.", ["handle", "--event", "{missing}"], {}, 2, "cannot read the event file"),
    (
        "Not an issue_comment event.",
        ["handle", "--event", "{not-an-event}"],
        {},
        2,
        "not an issue_comment event",
    ),
    (
        "Sync of a comment that is not a status comment.",
        ["sync", "--comment-id", "{source-comment}"],
        {},
        2,
        "is not a gpumatrix status comment",
    ),
    ("Sync of a comment that does not exist fails.", ["sync", "--comment-id", "999"], {}, 1, "HTTP 404"),
    (
        "GitHub down fails with exit 1.",
        ["handle", "--event", "{event:/rerun-test test_gemm.py}", "{down}"],
        {},
        1,
        "HTTP 503",
    ),
    (
        "Bad credentials fail without the token.",
        ["handle", "--event", "{event:/rerun-test test_gemm.py}"],
        {"GITHUB_TOKEN": "ghs_wrong_and_secret"},
        1,
        "HTTP 401",
    ),
]


@pytest.mark.parametrize(
    ("args", "env_change", "code", "fragment"), [r[1:] for r in CLI_CASES], ids=[r[0] for r in CLI_CASES]
)
def test_cli_exit_codes(
    world: BotWorld,
    tmp_path: Path,
    args: list[str],
    env_change: dict[str, str | None],
    code: int,
    fragment: str,
) -> None:
    gh = world.gh
    expanded: list[str] = []
    for arg in args:
        if arg.startswith("{event"):
            who, _, body = arg[1:-1].partition(":")
            expanded.append(
                str(_event_file(world, tmp_path, body, login="rita" if who == "event-rita" else "alice"))
            )
        elif arg == "{missing}":
            expanded.append(str(tmp_path / "nope.json"))
        elif arg == "{not-an-event}":
            (tmp_path / "other.json").write_text('{"action": "completed", "workflow_run": {}}')
            expanded.append(str(tmp_path / "other.json"))
        elif arg == "{source-comment}":
            expanded.append(str(gh.add_comment(PR, "just words", login="alice")["id"]))
        elif arg == "{down}":
            gh.inject_fault("*", r".", 503, times=10)
        else:
            expanded.append(arg)
    if expanded[0] == "handle":
        expanded += ["--root", str(world.root), "--retry-backoff", "0"]
    env = {**gh.env(), **env_change}
    outcome = CliRunner().invoke(bot, expanded, env=env)
    assert outcome.exit_code == code, outcome.output
    assert fragment in outcome.output
    assert "ghs_wrong_and_secret" not in outcome.output and gh.token not in outcome.output
    gh.take_violations()  # the wrong-token case provokes an auth violation on purpose
