"""`/rerun-test --repeat N` end to end against the GitHub REST emulator and a real origin: the comment, two
pinned dispatches per runner (the PR head and its merge base with main, which has moved on since), reports
with known pass counts coming back, and the verdict of each test in the status comment and the head's check
run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bot_world import PR, BotWorld, make_based_world
from coverage_reports import report_json
from github_emulator import GitHubEmulator, github_emulator  # noqa: F401  (the fixture)

from gpumatrix import register
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.bot.tree import merge_base, read_test_sources
from gpumatrix.flaky.stats import PassRate

register(on=("cpu",), est_time=20)

GEMM = "tests/kernels/test_gemm.py"  # 2-gpu-h100
CONFIG = "tests/unit/gpumatrix/registry/test_config.py"  # cpu
NEW = "tests/unit/test_new.py"  # cpu, added by the PR
_HEADER = "from gpumatrix import register\n"
BASE_FILES = {
    GEMM: _HEADER + 'register(on=("h100",), gpus=2, est_time=5)\n\ndef test_tile():\n    pass\n',
    CONFIG: _HEADER + 'register(on=("cpu",), est_time=5)\n\ndef test_a():\n    pass\n',
}
HEAD_FILES = {
    GEMM: _HEADER + 'register(on=("h100",), gpus=2, est_time=5)\n\ndef test_tile():\n    pass  # changed\n',
    NEW: _HEADER + 'register(on=("cpu",), est_time=5)\n\ndef test_n():\n    pass\n',
}
LATER_MAIN_FILES = {"README.md": "main moved on after the PR branched\n"}
COMMAND = "/rerun-test --repeat 20 test_gemm.py test_config.py test_new.py"


@pytest.fixture
def world(github_emulator: GitHubEmulator, tmp_path: Path) -> BotWorld:  # noqa: F811
    return make_based_world(
        github_emulator,
        tmp_path,
        base_files=BASE_FILES,
        head_files=HEAD_FILES,
        later_main_files=LATER_MAIN_FILES,
    )


def calls(gh: GitHubEmulator, since: int = 0) -> list[str]:
    prefix = f"/repos/{gh.repository}/"
    return [f"{r.method} {r.path.removeprefix(prefix)}" for r in gh.requests[since:]]


def repeated_report(runner: str, gpu_class: str, gpus: int, counts: dict[str, tuple[int, int]]) -> str:
    """A report of `gpumatrix run --repeat N` (N: the runs of each test) with `passed` of each test's runs."""
    tests = {}
    repeat = max(runs for _, runs in counts.values())
    for test, (passed, runs) in counts.items():
        tests |= {f"{test}[{i}-{repeat}]": "passed" if i <= passed else "failed" for i in range(1, runs + 1)}
    return json.dumps(report_json(runner, gpu_class, gpus, tests) | {"repeat": repeat})


def finish(world: BotWorld, comment_id: int, run_id: int, conclusion: str) -> None:
    """A run's own syncs: at its start, and once it completed."""
    world.gh.set_run_state(run_id, "in_progress")
    world.sync(comment_id, run_id=run_id)
    world.gh.set_run_state(run_id, "completed", conclusion)
    world.sync(comment_id, run_id=run_id)


def table(body: str, label: str | None = None) -> list[list[str]]:
    """The rows of `label`'s verdict table in a status comment, or of the one table of a check-run summary."""
    lines = body.splitlines()
    heading = f"**{label}**" if label else "20 runs of each test on the head and on the base"
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 4 :]:
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_the_merge_base_is_found_in_a_shallow_clone(world: BotWorld) -> None:
    git = ["git", "-C", str(world.root)]
    assert (
        subprocess.run(
            [*git, "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
        ).stdout.strip()
        == "true"
    )
    read_test_sources(world.root, world.sha, pr_number=PR)  # the head first, fetched one commit deep
    assert merge_base(world.root, world.sha, "main", pr_number=PR) == world.base
    main = subprocess.run(
        [*git, "rev-parse", "refs/gpumatrix/base"], capture_output=True, text=True
    ).stdout.strip()
    assert main != world.base  # main moved on: its tip is not the base


def test_repeat_dispatches_the_head_and_its_merge_base_and_gives_verdicts(world: BotWorld) -> None:
    gh = world.gh
    event = world.comment(COMMAND)
    result, count = world.handle(event)

    assert result.action == "dispatch", result.reason
    status_id = result.comment_id
    # two runners: two dispatches each, a check run on the head only
    assert count == 3 * 2 + 7
    assert calls(gh) == [
        f"GET issues/comments/{event.comment_id}",
        f"POST issues/comments/{event.comment_id}/reactions",
        "GET collaborators/alice/permission",
        f"GET pulls/{PR}",  # the head SHA and the base branch; the merge base comes from git
        f"POST issues/{PR}/comments",
        *["POST actions/workflows/gpu-tests.yml/dispatches"] * 4,
        *["POST check-runs"] * 2,
        f"PATCH issues/comments/{status_id}",
        f"POST issues/comments/{event.comment_id}/reactions",
    ]
    dispatched = [
        (run.inputs["runner"], run.inputs["sha"], run.inputs["tests"], run.inputs["repeat"])
        for run in gh.runs
    ]
    assert dispatched == [
        ("cpu", world.sha, f"{CONFIG}\n{NEW}", "20"),
        ("cpu", world.base, CONFIG, "20"),  # the PR adds NEW: the base has none
        ("2-gpu-h100", world.sha, GEMM, "20"),
        ("2-gpu-h100", world.base, GEMM, "20"),
    ]
    assert all(run.ref == "main" for run in gh.runs)  # the workflow runs from the default branch
    assert sorted((c.name, c.head_sha) for c in gh.check_runs) == [
        ("rerun / 2-gpu-h100", world.sha),
        ("rerun / cpu", world.sha),
    ]
    body = gh.comment(status_id)["body"]
    assert f"at `{world.sha}` against its base `{world.base}` (the merge base with `main`)" in body
    assert "🚀 cpu (1 test × 20 on the base): ⏳" in body and "🚀 cpu (2 tests × 20 on the head): ⏳" in body
    assert f"git checkout {world.base}\npytest --count 20 tests/kernels/test_gemm.py" in body
    assert f"🆕 Not on the base (this PR adds them): `{NEW}`" in body

    runs = {(run.inputs["runner"], run.inputs["sha"]): run for run in gh.runs}
    cpu_head, cpu_base = runs["cpu", world.sha], runs["cpu", world.base]
    gemm_head, gemm_base = runs["2-gpu-h100", world.sha], runs["2-gpu-h100", world.base]
    world.upload_report(
        cpu_head.id,
        repeated_report(
            "cpu",
            "cpu",
            0,
            {f"{CONFIG}::test_a": (20, 20), f"{CONFIG}::test_b": (17, 20), f"{NEW}::test_n": (20, 20)},
        ),
    )
    world.upload_report(
        cpu_base.id,
        repeated_report("cpu", "cpu", 0, {f"{CONFIG}::test_a": (20, 20), f"{CONFIG}::test_b": (16, 20)}),
    )
    world.upload_report(
        gemm_head.id,
        repeated_report(
            "2-gpu-h100", "h100", 2, {f"{GEMM}::test_tile": (12, 20), f"{GEMM}::test_small": (19, 20)}
        ),
    )
    world.upload_report(
        gemm_base.id,
        repeated_report(
            "2-gpu-h100", "h100", 2, {f"{GEMM}::test_tile": (20, 20), f"{GEMM}::test_small": (20, 20)}
        ),
    )

    # The gemm head run ends first: its check run completes with no verdicts yet.
    finish(world, status_id, gemm_head.id, "failure")
    gemm_check = next(c for c in gh.check_runs if c.name == "rerun / 2-gpu-h100")
    assert gemm_check.conclusion == "failure"
    assert "Verdicts against the base follow when the base run is over." in gemm_check.output["summary"]
    assert "broken by this PR" not in gh.comment(status_id)["body"]

    # The base run's own sync brings the verdicts to the comment and to the head's check run.
    finish(world, status_id, gemm_base.id, "success")
    finish(world, status_id, cpu_head.id, "failure")
    finish(world, status_id, cpu_base.id, "failure")

    body = gh.comment(status_id)["body"]
    assert table(body, "2-gpu-h100") == [
        [f"`{GEMM}::test_tile`", str(PassRate(12, 20)), str(PassRate(20, 20)), "❌ broken by this PR"],
        [
            f"`{GEMM}::test_small`",
            str(PassRate(19, 20)),
            str(PassRate(20, 20)),
            "❔ inconclusive: 91 runs each would decide",
        ],
    ]
    assert table(body, "cpu") == [
        [f"`{CONFIG}::test_b`", str(PassRate(17, 20)), str(PassRate(16, 20)), "🟡 flaky before this PR"],
        [f"`{CONFIG}::test_a`", str(PassRate(20, 20)), str(PassRate(20, 20)), "✅ passes"],
        [f"`{NEW}::test_n`", str(PassRate(20, 20)), "–", "✅ passes"],
    ]
    assert str(PassRate(12, 20)) == "12/20 (39–78%)"  # the numbers a reader sees, written out once

    checks = {c.name: c for c in gh.check_runs}
    gemm_check = checks["rerun / 2-gpu-h100"]
    assert (
        gemm_check.output["title"]
        == "Failed: 31 passed, 9 failed, 0 skipped · 1 broken by this PR, 1 inconclusive"
    )
    assert table(gemm_check.output["summary"]) == table(body, "2-gpu-h100")
    cpu_check = checks["rerun / cpu"]
    assert cpu_check.output["title"].endswith("· 1 flaky before, 2 passing")
    # what was read stays in the comment: a later sync downloads nothing
    stored = parse_status_comment(body)
    assert stored is not None and [g.tally.complete for g in stored.groups] == [True] * 4
    since = len(gh.requests)
    world.sync(status_id)
    assert [r for r in gh.requests[since:] if "/artifacts" in r.path] == []
    assert len(gh.check_runs) == 2


@pytest.mark.parametrize(
    ("comment", "login", "action", "said"),
    [
        (
            "/rerun-test --repeat 21 test_gemm.py",
            "alice",
            "refuse",
            "--repeat 21 is more runs than this repository allows (bot max_repeat in",
        ),
        ("/rerun-test --repeat 1 test_gemm.py", "alice", "refuse", "is not a number of runs of at least 2"),
        ("/rerun-test --repeat 20 test_gemm.py", "rita", "ignore", None),  # the same permission rule
        ("/rerun-failed --repeat 3", "alice", "refuse", "/rerun-failed takes no --repeat"),
    ],
)
def test_what_is_refused_dispatches_nothing(
    world: BotWorld, comment: str, login: str, action: str, said: str | None
) -> None:
    result, _ = world.handle(world.comment(comment, login=login))
    assert result.action == action
    assert world.gh.runs == []
    if said is not None:
        assert said in world.gh.comment(result.comment_id)["body"]


def test_handling_a_repeat_comment_again_dispatches_nothing(world: BotWorld) -> None:
    event = world.comment(COMMAND)
    world.handle(event)
    runs = len(world.gh.runs)
    again, _ = world.handle(event)
    assert again.action == "ignore" and len(world.gh.runs) == runs == 4
    assert len(world.gh.check_runs) == 2


def test_rerun_failed_after_a_repeat_reruns_the_head_groups_only(world: BotWorld) -> None:
    result, _ = world.handle(world.comment(COMMAND))
    for run in world.gh.runs:
        world.gh.set_run_state(run.id, "completed", "failure")
    world.sync(result.comment_id)
    before = len(world.gh.runs)
    world.handle(world.comment("/rerun-failed"))
    again: list[Any] = world.gh.runs[before:]
    assert [(run.inputs["runner"], run.inputs["sha"], "repeat" in run.inputs) for run in again] == [
        ("cpu", world.sha, False),
        ("2-gpu-h100", world.sha, False),
    ]
