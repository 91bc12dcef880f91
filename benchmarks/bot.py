"""The /rerun-test bot: one comment that dispatches to four runners, against the GitHub REST emulator.

Measures
  (a) `handle_event` in a warm process: wall time, median of --repeats, each on a fresh emulated PR;
  (b) `gpumatrix bot handle --event ...` as a fresh process, as the rerun-test workflow runs it:
      wall time including interpreter start and imports, median of --repeats;
  (c) the API calls one handling makes (the emulator's request log);
  (d) `python -c "import gpumatrix.bot"` in a fresh process with torch made unimportable by a
      meta-path finder: wall time (median of --repeats) and what the import pulled in;
  (e) the API calls the check runs and the CI-states comment add: per dispatch (handle), and per sync of
      one run of that comment at its start, at its completion (report artifact downloaded) and once
      more with nothing new, each split into the status comment's own calls, the check run's and the
      CI-states comment's (the latter measured as the difference to the same sync without it);
  (f) `sync_status_comment` wall time, warm, for those syncs (median of --repeats).
Targets: (a) and (b) <= 0.5 s, (c) <= runners + 4, (d) <= 150 ms with no torch.

    python -m benchmarks bot [--repeats 9] [--show-comment] [--show-checks]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from benchmarks.support import import_test_support
from gpumatrix.bot.sync import sync_status_comment

# The emulator and the PR fixture live with the tests; bot_world imports its three siblings by name.
_bot_world = import_test_support("coverage_reports", "github_emulator", "gpumatrix_trees", "bot_world")
PR, make_world, report_json = _bot_world.PR, _bot_world.make_world, _bot_world.report_json
GitHubEmulator = import_test_support("github_emulator").GitHubEmulator

# Operations that exist for the check runs (and their fallback): what a dispatch and a sync add for them.
CHECK_OPERATIONS = {
    "checks/create",
    "checks/update",
    "checks/list-for-ref",
    "repos/create-commit-status",
    "actions/list-workflow-run-artifacts",
    "actions/download-artifact",
}

COMMAND = "/rerun-test test_quantize.py"  # registered on h100, b200, gb300 and 5090: four runners
RUNNERS = 4

BLOCK_TORCH = """
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked for this measurement")
sys.meta_path.insert(0, _NoTorch())
"""
IMPORT_CHECK = (
    BLOCK_TORCH
    + """
import gpumatrix.bot
heavy = sorted(m for m in ("torch", "githubkit", "httpx", "pydantic", "click") if m in sys.modules)
print(",".join(heavy))
"""
)


def handle_in_process(repeats: int) -> tuple[list[float], int, str]:
    timings: list[float] = []
    calls = 0
    comment = ""
    for _ in range(repeats + 1):  # the first run pays githubkit's imports and is reported apart
        with tempfile.TemporaryDirectory(prefix="gpumatrix-bot-bench-") as tmp, GitHubEmulator() as gh:
            world = make_world(gh, Path(tmp))
            event = world.comment(COMMAND)
            start = time.perf_counter()
            result, _ = world.handle(event)
            timings.append(time.perf_counter() - start)
            if len(gh.runs) != RUNNERS or result.comment_id is None:
                raise SystemExit(f"expected {RUNNERS} runs, got {len(gh.runs)}: {result}")
            calls = len(gh.requests)
            gh.assert_no_violations()
            comment = _finished_comment(world, result.comment_id)
    return timings, calls, comment


def _finished_comment(world, comment_id: int) -> str:
    """Finish the runs (pass, fail, cancel, keep one running) and sync: the comment a reviewer sees."""
    for run, state in zip(
        world.gh.runs,
        [
            ("completed", "success"),
            ("completed", "failure"),
            ("completed", "cancelled"),
            ("in_progress", None),
        ],
        strict=True,
    ):
        world.gh.set_run_state(run.id, *state)
    with world.client() as client:
        sync_status_comment(comment_id, client=client)
    return world.gh.comment(comment_id)["body"]


def _calls(gh: GitHubEmulator, since: int) -> tuple[int, int]:
    """(all requests, requests for check runs) since `since`; the blob behind an artifact download counts
    as a check-run request (its 302 is followed by a second HTTP request)."""
    recent = gh.requests[since:]
    checks = sum(r.operation_id in CHECK_OPERATIONS or "/_blobs/" in r.path for r in recent)
    return len(recent), checks


def sync_calls(repeats: int) -> tuple[dict[str, list[int]], dict[str, list[float]], int, str]:
    """Per sync phase: [all calls, check-run calls, CI-states calls]; the sync's wall times; the checks
    a dispatch adds; one check run's summary as shown."""
    phases = ("start", "completion", "again")
    counts: dict[str, list[int]] = {}
    timings: dict[str, list[float]] = {phase: [] for phase in phases}
    summary, added = "", 0
    for repeat in range(repeats + 1):  # the first repeat warms the process and is not timed
        found: dict[str, list[int]] = {}
        for with_ci_states in (True, False):
            with tempfile.TemporaryDirectory(prefix="gpumatrix-bot-bench-") as tmp, GitHubEmulator() as gh:
                world = make_world(gh, Path(tmp))
                gh.add_workflow("ci.yml", name="CI")
                gh.set_run_state(gh.add_run("ci.yml", head_sha=world.sha).id, "completed", "success")
                since = len(gh.requests)
                result, _ = world.handle(world.comment(COMMAND))
                added = _calls(gh, since)[1]
                with world.client() as client:  # one sync before: the CI-states comment exists already
                    sync_status_comment(result.comment_id, client=client, ci_states=with_ci_states)
                run = gh.runs[1]
                for phase in phases:
                    if phase == "start":
                        gh.set_run_state(run.id, "in_progress")
                    elif phase == "completion":
                        world.upload_report(
                            run.id,
                            report_json(
                                "tests/kernels/test_quantize.py",
                                passed=40,
                                failed=("tests/kernels/test_quantize.py::test_x",),
                                skipped=3,
                            ),
                        )
                        gh.set_run_state(run.id, "completed", "failure")
                    since = len(gh.requests)
                    with world.client() as client:
                        start = time.perf_counter()
                        sync_status_comment(
                            result.comment_id, client=client, run_id=run.id, ci_states=with_ci_states
                        )
                        elapsed = time.perf_counter() - start
                    total, checks = _calls(gh, since)
                    if with_ci_states:
                        found[phase] = [total, checks]
                        if repeat:
                            timings[phase].append(elapsed)
                    else:
                        found[phase].append(found[phase][0] - total)
                gh.assert_no_violations()
                if with_ci_states:
                    summary = next(c.output["summary"] for c in gh.check_runs if c.conclusion == "failure")
        counts = found
    return counts, timings, added, summary


def handle_cli(repeats: int) -> list[float]:
    timings: list[float] = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="gpumatrix-bot-bench-") as tmp, GitHubEmulator() as gh:
            world = make_world(gh, Path(tmp))
            posted = gh.add_comment(PR, COMMAND, login="alice")
            event_path = Path(tmp) / "event.json"
            event_path.write_text(json.dumps(gh.comment_event(posted["id"])))
            command = [
                sys.executable,
                "-c",
                "from gpumatrix.cli import main; main()",
                "bot",
                "handle",
                "--event",
                str(event_path),
                "--root",
                str(world.root),
            ]
            start = time.perf_counter()
            done = subprocess.run(command, env={**os.environ, **gh.env()}, capture_output=True, text=True)
            timings.append(time.perf_counter() - start)
            if done.returncode != 0 or len(gh.runs) != RUNNERS:
                raise SystemExit(
                    f"gpumatrix bot handle failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                )
    return timings


def import_time(repeats: int) -> tuple[list[float], str]:
    timings: list[float] = []
    loaded = ""
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, check=True
        )
        timings.append(time.perf_counter() - start)
        loaded = done.stdout.strip()
    return timings, loaded


def interpreter_start(repeats: int) -> list[float]:
    timings: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        timings.append(time.perf_counter() - start)
    return timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--show-comment", action="store_true", help="print the status comment of the last run"
    )
    parser.add_argument(
        "--show-checks",
        action="store_true",
        help="print a finished check run's summary",
    )
    args = parser.parse_args(argv)

    warm, calls, comment = handle_in_process(args.repeats)
    synced, sync_times, added, check_summary = sync_calls(args.repeats)
    cli = handle_cli(args.repeats)
    imports, loaded = import_time(args.repeats)
    bare = interpreter_start(args.repeats)

    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("githubkit", "httpx", "pydantic", "click")
    )
    print(f"python {platform.python_version()}, {versions}; {os.cpu_count()} CPUs")
    print("| measurement | median | target |\n| --- | ---: | ---: |")
    print(
        f"| handle_event, 4 runners, warm process (median of {args.repeats}) | "
        f"{statistics.median(warm[1:]) * 1000:.0f} ms | <= 500 ms |"
    )
    print(f"| handle_event, first call in the process (githubkit imports) | {warm[0] * 1000:.0f} ms | |")
    print(
        f"| `gpumatrix bot handle` fresh process (median of {args.repeats}) | "
        f"{statistics.median(cli) * 1000:.0f} ms | <= 500 ms |"
    )
    print(f"| API calls for one comment, 4 runners | {calls} | <= {RUNNERS + 4} |")
    print(
        f"| `python -c 'import gpumatrix.bot'`, torch blocked (median of {args.repeats}) | "
        f"{statistics.median(imports) * 1000:.0f} ms | <= 150 ms |"
    )
    print(
        f"| `python -c pass` (interpreter start, for reference) | {statistics.median(bare) * 1000:.0f} ms | |"
    )
    for phase, words in (
        ("start", "run started"),
        ("completion", "run completed, report read"),
        ("again", "nothing new"),
    ):
        print(
            f"| sync of one run ({words}), warm (median of {args.repeats}) | "
            f"{statistics.median(sync_times[phase]) * 1000:.0f} ms | |"
        )
    print(f"\nheavy modules loaded by `import gpumatrix.bot`: {loaded or 'none'}")
    print(f"\nAPI calls added per dispatch (4 runners): {added} (one check run per runner)")
    print("| sync of one run of that comment | calls | status comment | check run | CI-states comment |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for phase, words in (
        ("start", "at its start (in progress)"),
        ("completion", "at its completion (report read)"),
        ("again", "again, nothing new"),
    ):
        total, checks, ci_states = synced[phase]
        print(f"| {words} | {total} | {total - checks - ci_states} | {checks} | {ci_states} |")
    if args.show_comment:
        print("\n" + comment)
    if args.show_checks:
        print("\n" + check_summary)
