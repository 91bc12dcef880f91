"""Re-run results where GitHub shows them, end to end against the REST emulator: check runs on the pinned
commit (or commit statuses when checks are refused) and the PR's CI-states comment, through dispatch, syncs
racing, a comment handled twice, a push while runs are going, and GitHub failing on the new calls."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from bot_world import EIGHT_RUNNER_COMMAND, PR, BotWorld, make_world, report_json
from click.testing import CliRunner
from github_emulator import SECONDARY_RATE_LIMIT_MESSAGE, GitHubEmulator, github_emulator  # noqa: F401
from github_emulator.state import CheckRunRecord

from gpumatrix import register
from gpumatrix.bot.ci_states import CI_STATES_MARKER, parse_ci_states
from gpumatrix.bot.ci_states_sync import sync_ci_states
from gpumatrix.bot.github import GitHubClient
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.bot.sync import sync_status_comment
from gpumatrix.commands.bot import bot

register(on=("cpu",), est_time=25)

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
# Run conclusion -> the check run's conclusion, the CI-states cell, written out rather than taken from the code.
CHECK_CONCLUSION = {
    "success": "success",
    "failure": "failure",
    "timed_out": "failure",
    "cancelled": "cancelled",
    "skipped": "cancelled",
}
CELL = {
    "success": "✅ passed",
    "failure": "❌ failed",
    "timed_out": "❌ failed",
    "cancelled": "⚠️ cancelled",
    "skipped": "⚠️ cancelled",
}
NEW_HEAD = "feed" * 10


@pytest.fixture
def world(github_emulator: GitHubEmulator, tmp_path: Path) -> BotWorld:  # noqa: F811
    github_emulator.add_workflow("ci.yml", name="CI")
    return make_world(github_emulator, tmp_path)


def checks_by_runner(gh: GitHubEmulator, sha: str) -> dict[str, list[CheckRunRecord]]:
    found: dict[str, list[CheckRunRecord]] = {}
    for check in gh.check_runs:
        if check.head_sha == sha:
            found.setdefault(check.name.removeprefix("rerun / "), []).append(check)
    return found


def ci_states_comments(gh: GitHubEmulator) -> list[dict[str, Any]]:
    return [c for c in gh.comments(PR) if c["body"].startswith(CI_STATES_MARKER)]


def table_rows(body: str) -> list[list[str]]:
    """The cells of every Markdown table row but the header and rule rows."""
    rows = [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in body.splitlines()
        if line.startswith("| ") and not line.startswith(("| suite", "| ---"))
    ]
    return rows


def check_writes(gh: GitHubEmulator, check_id: int) -> list[str]:
    """The status (or conclusion) each create/update of a check run asked for, in order."""
    asked = []
    for request in gh.requests:
        created = (
            request.method == "POST"
            and request.path.endswith("/check-runs")
            and request.status == 201
            and request.response["id"] == check_id
        )
        updated = (
            request.method == "PATCH"
            and request.path.endswith(f"/check-runs/{check_id}")
            and request.status == 200
        )
        if created or updated:
            asked.append(request.json.get("conclusion") or request.json["status"])
    return asked


# -- check runs -------------------------------------------------------------------------------------------------


def test_four_runners_end_with_four_check_runs_whose_conclusions_match_the_runs(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_quantize.py"))
    runs = {run.inputs["runner"]: run for run in gh.runs}
    assert sorted(runs) == QUANTIZE_RUNNERS
    created = checks_by_runner(gh, world.sha)
    assert {label: [(c.status, c.details_url) for c in checks] for label, checks in created.items()} == {
        label: [("queued", f"https://github.com/{gh.repository}/actions/runs/{runs[label].id}")]
        for label in QUANTIZE_RUNNERS
    }
    assert {c.external_id for c in gh.check_runs} == {
        f"gpumatrix:{result.status.source_comment_id}:{result.comment_id}:{label}"
        for label in QUANTIZE_RUNNERS
    }

    outcome = {
        "1-gpu-5090": "success",
        "1-gpu-h100": "failure",
        "4-gpu-b200": "cancelled",
        "4-gpu-gb300": "timed_out",
    }
    failing = f"{Q}::test_quantize[bf16-127]"
    world.upload_report(runs["1-gpu-5090"].id, report_json(Q, passed=12, skipped=2))
    world.upload_report(runs["1-gpu-h100"].id, report_json(Q, passed=11, failed=(failing,), skipped=2))
    for label, run in runs.items():  # each run's own syncs: at its start, and once it completed
        gh.set_run_state(run.id, "in_progress")
        world.sync(result.comment_id, run_id=run.id)
        gh.set_run_state(run.id, "completed", outcome[label])
        world.sync(result.comment_id, run_id=run.id)

    final = checks_by_runner(gh, world.sha)
    assert {label: [(c.status, c.conclusion) for c in checks] for label, checks in final.items()} == {
        label: [("completed", CHECK_CONCLUSION[outcome[label]])] for label in QUANTIZE_RUNNERS
    }
    for label in QUANTIZE_RUNNERS:
        assert check_writes(gh, final[label][0].id) == [
            "queued",
            "in_progress",
            CHECK_CONCLUSION[outcome[label]],
        ]
    assert final["1-gpu-5090"][0].output["title"] == "Passed: 12 passed, 0 failed, 2 skipped"
    h100 = final["1-gpu-h100"][0].output
    assert h100["title"] == "Failed: 11 passed, 1 failed, 2 skipped"
    assert "| 11 | 1 | 2 |" in h100["summary"].splitlines()
    assert f"- `{failing}`" in h100["summary"].splitlines()
    assert final["4-gpu-gb300"][0].output["title"] == "Failed · the run uploaded no test report"
    assert "The run uploaded no test report" in final["4-gpu-gb300"][0].output["summary"]


def test_a_failed_dispatch_is_an_action_required_check_run(world: BotWorld) -> None:
    gh = world.gh
    gh.inject_fault(
        "POST", r"/dispatches$", 422, times=1, message="Workflow does not have 'workflow_dispatch' trigger"
    )
    result, _ = world.handle(world.comment("/rerun-test test_quantize.py"))
    failed = checks_by_runner(gh, world.sha)["1-gpu-5090"]
    assert [(c.status, c.conclusion) for c in failed] == [("completed", "action_required")]
    assert (
        failed[0].details_url
        == f"https://github.com/{gh.repository}/pull/{PR}#issuecomment-{result.comment_id}"
    )
    assert (
        failed[0].output["title"]
        == "Dispatch failed: HTTP 422: Workflow does not have 'workflow_dispatch' trigger"
    )
    assert len(gh.check_runs) == 4


def test_a_report_is_read_once_the_run_completed(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = gh.runs[0]
    gh.set_run_state(run.id, "in_progress")
    gh.set_jobs(
        run.id,
        [
            {"name": "test (shard 1)", "status": "completed", "conclusion": "failure"},
            {"name": "test (shard 2)", "status": "in_progress"},
        ],
    )
    world.upload_report(run.id, report_json("tests/kernels/test_gemm.py", failed=("g::a",)), shard="1-of-2")
    world.sync(result.comment_id, run_id=run.id)  # a failed job shows the run failed; shard 2 still runs
    assert gh.check_runs[0].output["title"] == "Failed: 0 passed, 1 failed, 0 skipped"

    world.upload_report(run.id, report_json("tests/kernels/test_gemm.py", passed=3), shard="2-of-2")
    gh.set_run_state(run.id, "completed", "failure")
    world.sync(result.comment_id, run_id=run.id)
    assert gh.check_runs[0].output["title"] == "Failed: 3 passed, 1 failed, 0 skipped"
    downloads = [r for r in gh.requests if r.path.endswith("/zip")]
    since = len(gh.requests)
    world.sync(result.comment_id, run_id=run.id)  # the marker covers the completed run: nothing downloaded
    assert [r for r in gh.requests[since:] if "/artifacts" in r.path or "check-runs/" in r.path] == []
    assert len(downloads) == 3  # one shard's report, then both after completion


def test_eight_concurrent_syncs_leave_checks_and_summary_equal_to_the_truth(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment(EIGHT_RUNNER_COMMAND))
    runs = gh.runs
    assert [run.inputs["runner"] for run in runs] == EIGHT_RUNNERS
    conclusions = ["success", "failure", "cancelled", "timed_out", "success", "skipped", "failure", "success"]
    for run in runs:  # a check run passes on its reports, never on the run's conclusion alone
        world.upload_report(run.id, report_json(Q, passed=5))
    start = threading.Barrier(len(runs))
    failures: list[BaseException] = []

    def finish(run_id: int, conclusion: str) -> None:
        try:
            start.wait()
            gh.set_run_state(run_id, "in_progress")
            world.sync(result.comment_id, run_id=run_id)
            gh.set_run_state(run_id, "completed", conclusion)
            world.sync(result.comment_id, run_id=run_id)
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            failures.append(exc)

    threads = [
        threading.Thread(target=finish, args=(run.id, conclusion))
        for run, conclusion in zip(runs, conclusions, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    truth = dict(zip(EIGHT_RUNNERS, conclusions, strict=True))
    checks = checks_by_runner(gh, world.sha)
    assert {label: [(c.status, c.conclusion) for c in found] for label, found in checks.items()} == {
        label: [("completed", CHECK_CONCLUSION[conclusion])] for label, conclusion in truth.items()
    }
    summary = ci_states_comments(gh)
    assert len(summary) == 1  # eight first writers, one comment
    rows = table_rows(summary[0]["body"])
    assert sorted((row[0], row[1]) for row in rows) == sorted(
        (f"rerun / {label}", CELL[conclusion]) for label, conclusion in truth.items()
    )
    status = parse_status_comment(gh.comment(result.comment_id)["body"])
    assert status is not None and {g.label: g.state for g in status.groups} == {
        label: CELL[conclusion].split()[1] for label, conclusion in truth.items()
    }


def test_a_rehandled_comment_adds_nothing(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment("/rerun-test test_quantize.py")
    world.handle(event)
    before = (len(gh.comments(PR)), len(gh.runs), len(gh.check_runs), len(gh.statuses))
    since = len(gh.requests)
    again, _ = world.handle(event)
    assert again.action == "ignore"
    assert (len(gh.comments(PR)), len(gh.runs), len(gh.check_runs), len(gh.statuses)) == before
    assert [
        r.path for r in gh.requests[since:] if r.method == "POST" and not r.path.endswith("/reactions")
    ] == []
    assert ci_states_comments(gh) == []


def test_a_rehandled_comment_creates_only_the_check_runs_that_are_missing(world: BotWorld) -> None:
    gh = world.gh
    # The first creation fails for good (five 500s outlast the retries); the others go through.
    event = world.comment("/rerun-test test_quantize.py")
    gh.inject_fault("POST", r"/check-runs$", 500, times=5)
    first, _ = world.handle(event)
    assert first.publication is not None and len(first.publication.failures) == 1
    assert sorted(checks_by_runner(gh, world.sha)) == QUANTIZE_RUNNERS[1:]

    world.handle(event)
    assert {label: len(found) for label, found in checks_by_runner(gh, world.sha).items()} == dict.fromkeys(
        QUANTIZE_RUNNERS, 1
    )


def test_a_check_run_created_twice_is_kept_true_twice(world: BotWorld) -> None:
    gh = world.gh
    # The first creation goes through but its answer is lost: the retry creates the same check run again.
    gh.inject_fault("POST", r"/check-runs$", 502, after_handler=True)
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = gh.runs[0]
    assert [(c.name, c.status) for c in gh.check_runs] == [("rerun / 2-gpu-h100", "queued")] * 2
    world.upload_report(run.id, report_json("tests/kernels/test_gemm.py", passed=2))
    gh.set_run_state(run.id, "completed", "success")
    world.sync(result.comment_id, run_id=run.id)
    assert [(c.status, c.conclusion) for c in gh.check_runs] == [("completed", "success")] * 2


def test_a_push_between_dispatch_and_completion(world: BotWorld) -> None:
    gh = world.gh
    old_ci = gh.add_run("ci.yml", head_sha=world.sha)
    gh.set_run_state(old_ci.id, "completed", "failure")
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py test_config.py"))
    dispatched = {run.inputs["runner"]: run for run in gh.runs if run.event == "workflow_dispatch"}
    gemm, config = dispatched["2-gpu-h100"], dispatched["cpu"]
    gh.push(PR, NEW_HEAD)
    new_ci = gh.add_run("ci.yml", head_sha=NEW_HEAD)
    gh.set_run_state(new_ci.id, "in_progress")
    world.upload_report(gemm.id, report_json("tests/kernels/test_gemm.py", passed=2))
    gh.set_run_state(gemm.id, "completed", "success")
    gh.set_run_state(config.id, "completed", "failure")
    world.sync(result.comment_id, run_id=gemm.id)
    world.sync(result.comment_id, run_id=config.id)

    old = checks_by_runner(gh, world.sha)
    assert {label: [(c.status, c.conclusion) for c in found] for label, found in old.items()} == {
        "2-gpu-h100": [("completed", "success")],
        "cpu": [("completed", "failure")],
    }
    assert checks_by_runner(gh, NEW_HEAD) == {}
    (summary,) = ci_states_comments(gh)
    states = parse_ci_states(summary["body"])
    assert states is not None and states.head == NEW_HEAD
    body = summary["body"]
    assert f"at `{NEW_HEAD[:12]}` (the head)" in body
    # Current: only what ran on the new head. Stale: the reruns of the old head (the old head's CI run was
    # never in a CI-states comment before the push, and GitHub lists runs by one head at a time).
    assert [row[:2] for row in table_rows(body)] == [
        ["CI", "🔄 running"],
        ["rerun / 2-gpu-h100", "✅ passed"],
        ["rerun / cpu", "❌ failed"],
    ]
    stale_rows = table_rows(body.split("**Stale**")[1])
    assert [(row[0], row[2]) for row in stale_rows] == [
        ("rerun / 2-gpu-h100", f"`{world.sha[:12]}`"),
        ("rerun / cpu", f"`{world.sha[:12]}`"),
    ]


def test_a_later_push_keeps_the_earlier_suites_stale_until_they_run_again(world: BotWorld) -> None:
    gh = world.gh
    ci = gh.add_run("ci.yml", head_sha=world.sha)
    gh.set_run_state(ci.id, "completed", "success")
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    world.sync(result.comment_id)  # the CI-states comment now shows CI passed on the old head
    gh.push(PR, NEW_HEAD)
    with world.client() as client:
        sync_ci_states(PR, client=client)
    body = ci_states_comments(gh)[0]["body"]
    assert "No run on this head yet." in body
    assert [(row[0], row[1], row[2]) for row in table_rows(body)] == [
        ("CI", "✅ passed", f"`{world.sha[:12]}`"),
        ("rerun / 2-gpu-h100", "⏳ queued", f"`{world.sha[:12]}`"),
    ]


# -- commit statuses when check runs are refused -------------------------------------------------------------------


def test_falls_back_to_commit_statuses_and_says_so(world: BotWorld) -> None:
    gh = world.gh
    gh.inject_fault("POST", r"/check-runs$", 403, times=10, message="Resource not accessible by integration")
    result, _ = world.handle(world.comment("/rerun-test test_quantize.py"))
    assert result.publication is not None and result.publication.kind == "commit-statuses"
    assert gh.check_runs == []
    assert sorted((s.context, s.state, s.sha) for s in gh.statuses) == [
        (f"rerun / {label}", "pending", world.sha) for label in QUANTIZE_RUNNERS
    ]
    body = gh.comment(result.comment_id)["body"]
    assert (
        f"☑️ Each runner's result is also a commit status `rerun / <runner>` on `{world.sha}` (check runs "
        "could not be written: HTTP 403: Resource not accessible by integration)."
    ) in body.splitlines()

    run = gh.runs[1]
    gh.set_run_state(run.id, "completed", "failure")
    world.sync(result.comment_id, run_id=run.id)  # the status comment says statuses: no check run is tried
    latest = [s for s in gh.statuses if s.context == f"rerun / {run.inputs['runner']}"][-1]
    assert (latest.state, latest.description, latest.target_url) == (
        "failure",
        "Failed · the run uploaded no test report",
        f"https://github.com/{gh.repository}/actions/runs/{run.id}",
    )
    assert not [r for r in gh.requests if r.path.endswith("/check-runs") and r.method == "GET"]


def test_cli_says_which_was_used(world: BotWorld, tmp_path: Path) -> None:
    gh = world.gh
    gh.inject_fault("POST", r"/check-runs$", 403, times=10, message="Resource not accessible by integration")
    posted = gh.add_comment(PR, "/rerun-test test_gemm.py", login="alice")
    event = tmp_path / "event.json"
    event.write_text(json.dumps(gh.comment_event(posted["id"])))
    handled = CliRunner().invoke(
        bot,
        ["handle", "--event", str(event), "--root", str(world.root), "--retry-backoff", "0"],
        env=gh.env(),
    )
    assert handled.exit_code == 0, handled.output
    assert (
        "published as commit statuses (check runs refused: HTTP 403: Resource not accessible by integration): "
        "1 write(s)"
    ) in handled.output.splitlines()


# -- GitHub failing on the new calls --------------------------------------------------------------------------------


# (id, method, path regex, status, times, Retry-After)
TRANSIENT = [
    ("Create check run: 502 twice.", "POST", r"/check-runs$", 502, 2, None),
    ("Create check run: secondary rate limit.", "POST", r"/check-runs$", 403, 1, 1),
    ("List check runs: 503.", "GET", r"/check-runs$", 503, 1, None),
    ("Update check run: secondary rate limit (429).", "PATCH", r"/check-runs/\d+$", 429, 1, 2),
    ("List artifacts: 500.", "GET", r"/artifacts$", 500, 1, None),
    ("Download artifact: 502.", "GET", r"/zip$", 502, 1, None),
    ("Runs of the head: 500.", "GET", r"/actions/runs$", 500, 2, None),
    ("Create CI-states comment: 502.", "POST", rf"/issues/{PR}/comments$", 502, 1, None),
]


@pytest.mark.parametrize(
    ("method", "path", "status", "times", "retry_after"),
    [r[1:] for r in TRANSIENT],
    ids=[r[0] for r in TRANSIENT],
)
def test_transient_failures_on_the_new_calls_are_retried(
    world: BotWorld, method: str, path: str, status: int, times: int, retry_after: int | None
) -> None:
    gh = world.gh
    event = world.comment("/rerun-test test_gemm.py")
    if method == "POST" and "check-runs" in path:
        gh.inject_fault(
            method,
            path,
            status,
            times=times,
            retry_after=retry_after,
            message=SECONDARY_RATE_LIMIT_MESSAGE if status == 403 else None,
        )
    result, _ = world.handle(event)
    run = gh.runs[0]
    world.upload_report(run.id, report_json("tests/kernels/test_gemm.py", passed=4))
    gh.set_run_state(run.id, "completed", "success")
    if not (method == "POST" and "check-runs" in path):
        gh.inject_fault(method, path, status, times=times, retry_after=retry_after)
    synced = world.sync(result.comment_id, run_id=run.id)

    assert synced.publication is not None and synced.publication.failures == []
    assert synced.ci_states_error is None
    assert [(c.status, c.conclusion, c.output["title"]) for c in gh.check_runs] == [
        ("completed", "success", "Passed: 4 passed, 0 failed, 0 skipped")
    ]
    assert len(ci_states_comments(gh)) == 1
    assert len(world.waits) == times


def test_a_stale_update_is_read_again_not_forced(world: BotWorld) -> None:
    """A sync that read the run in progress tries to move the check run back after another sync completed it:
    GitHub answers 422; the sync reads the check run again and leaves it completed."""
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = gh.runs[0]
    gh.set_run_state(run.id, "in_progress")

    class LateWriter:
        def __init__(self, inner: GitHubClient) -> None:
            self.inner, self.armed = inner, True

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def update_check_run(self, check_run_id: int, fields: dict[str, Any]) -> Any:
            if self.armed:  # the run ends and its own sync completes the check run first
                self.armed = False
                world.upload_report(run.id, report_json("tests/kernels/test_gemm.py", passed=2))
                gh.set_run_state(run.id, "completed", "success")
                world.sync(result.comment_id, run_id=run.id)
            return self.inner.update_check_run(check_run_id, fields)

    with world.client() as client:
        late = sync_status_comment(
            result.comment_id, client=LateWriter(client), matrix=world.matrix, run_id=run.id
        )  # type: ignore[arg-type]
    assert [r.status for r in gh.requests if r.method == "PATCH" and "/check-runs/" in r.path] == [200, 422]
    assert late.publication is not None and late.publication.failures == []
    assert [(c.status, c.conclusion) for c in gh.check_runs] == [("completed", "success")]
    assert parse_status_comment(gh.comment(result.comment_id)["body"]).groups[0].state == "passed"  # type: ignore[union-attr]


def test_an_injected_422_on_update_is_retried_once_then_reported(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = gh.runs[0]
    gh.set_run_state(run.id, "completed", "failure")
    gh.inject_fault("PATCH", r"/check-runs/\d+$", 422, times=1, message="Validation Failed")
    once = world.sync(result.comment_id, run_id=run.id)
    assert once.publication is not None and once.publication.failures == []
    assert gh.check_runs[0].conclusion == "failure"

    result2, _ = world.handle(world.comment("/rerun-test test_config.py"))
    run2 = gh.runs[1]
    gh.set_run_state(run2.id, "completed", "success")
    gh.inject_fault("PATCH", r"/check-runs/\d+$", 422, times=2, message="Validation Failed")
    twice = world.sync(result2.comment_id, run_id=run2.id)
    assert twice.publication is not None and len(twice.publication.failures) == 1
    assert "HTTP 422: Validation Failed" in twice.publication.failures[0]
    assert parse_status_comment(gh.comment(result2.comment_id)["body"]).groups[0].state == "passed"  # type: ignore[union-attr]


# -- the CI-states comment --------------------------------------------------------------------------------------


def test_duplicate_ci_states_comments_are_merged_into_the_oldest(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    with world.client() as client:
        first = client.post_comment(PR, f"{CI_STATES_MARKER}\nold")
        second = client.post_comment(PR, f"{CI_STATES_MARKER}\nalso old")
    gh.add_comment(PR, f"{CI_STATES_MARKER}\nsomeone copied the marker", login="mallory")
    synced = world.sync(result.comment_id)
    assert synced.ci_states is not None and synced.ci_states.comment_id == first.id
    assert synced.ci_states.deleted == (second.id,)
    bot_ones = [c for c in ci_states_comments(gh) if c["user"]["type"] == "Bot"]
    assert [c["id"] for c in bot_ones] == [first.id]
    assert "rerun / 2-gpu-h100" in bot_ones[0]["body"]
    assert [c["body"] for c in ci_states_comments(gh) if c["user"]["login"] == "mallory"] == [
        f"{CI_STATES_MARKER}\nsomeone copied the marker"
    ]


def test_two_first_writers_leave_one_ci_states_comment(world: BotWorld) -> None:
    """Both find no CI-states comment and both post one: the later one deletes its own and writes the oldest."""
    gh = world.gh
    ci = gh.add_run("ci.yml", head_sha=world.sha)

    class RacedPoster:
        def __init__(self, inner: GitHubClient) -> None:
            self.inner, self.armed = inner, True

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def post_comment(self, issue_number: int, body: str) -> Any:
            if self.armed:  # another sync, one step ahead, posts first (and sees the run pass)
                self.armed = False
                gh.set_run_state(ci.id, "completed", "success")
                with world.client() as other:
                    sync_ci_states(PR, client=other)
            return self.inner.post_comment(issue_number, body)

    with world.client() as client:
        late = sync_ci_states(PR, client=RacedPoster(client))  # type: ignore[arg-type]
    (survivor,) = ci_states_comments(gh)
    assert late.comment_id == survivor["id"] and len(late.deleted) == 1 and late.deleted[0] > survivor["id"]
    assert [row[:2] for row in table_rows(survivor["body"])] == [["CI", "✅ passed"]]


def test_cli_sync_pr_rewrites_only_the_ci_states_comment(world: BotWorld) -> None:
    gh = world.gh
    ci = gh.add_run("ci.yml", head_sha=world.sha)
    gh.set_run_state(ci.id, "completed", "success")
    outcome = CliRunner().invoke(bot, ["sync", "--pr", str(PR), "--retry-backoff", "0"], env=gh.env())
    assert outcome.exit_code == 0, outcome.output
    (summary,) = ci_states_comments(gh)
    assert outcome.output == f"CI states of #{PR}: comment {summary['id']} (1 write(s))\n"
    assert [row[:2] for row in table_rows(summary["body"])] == [["CI", "✅ passed"]]
    assert gh.check_runs == [] and gh.statuses == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sync"], "give --comment-id"),
        (["sync", "--comment-id", "5", "--pr", "7"], "not both"),
        (["sync", "--pr", "7", "--run-id", "3"], "--run-id needs --comment-id"),
    ],
)
def test_cli_sync_needs_one_target(world: BotWorld, args: list[str], message: str) -> None:
    outcome = CliRunner().invoke(bot, args, env=world.gh.env())
    assert outcome.exit_code == 2 and message in outcome.output


def test_a_ci_states_failure_is_a_warning_not_a_failed_sync(world: BotWorld) -> None:
    gh = world.gh
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    run = gh.runs[0]
    world.upload_report(run.id, report_json("tests/kernels/test_gemm.py", passed=2))
    gh.set_run_state(run.id, "completed", "success")
    gh.inject_fault("GET", rf"/pulls/{PR}$", 500, times=5)
    outcome = CliRunner().invoke(
        bot,
        ["sync", "--comment-id", str(result.comment_id), "--run-id", str(run.id), "--retry-backoff", "0"],
        env={**gh.env(), "GITHUB_ACTIONS": "true"},
    )
    assert outcome.exit_code == 0, outcome.output
    assert "::warning::the CI-states comment was not written:" in outcome.output
    assert "HTTP 500" in outcome.output
    assert [(c.status, c.conclusion) for c in gh.check_runs] == [("completed", "success")]


def test_when_statuses_are_refused_too_the_failure_is_reported_not_raised(world: BotWorld) -> None:
    gh = world.gh
    gh.inject_fault("POST", r"/check-runs$", 403, times=10, message="Resource not accessible by integration")
    gh.inject_fault("POST", r"/statuses/", 403, times=10, message="Resource not accessible by integration")
    result, _ = world.handle(world.comment("/rerun-test test_gemm.py"))
    assert result.action == "dispatch" and len(gh.runs) == 1
    assert result.publication is not None and result.publication.kind == "commit-statuses"
    assert [f.split(":")[0] for f in result.publication.failures] == ["rerun / 2-gpu-h100"]
    assert gh.check_runs == [] and gh.statuses == []
