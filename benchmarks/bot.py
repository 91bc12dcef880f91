"""The /rerun-test bot: one comment that dispatches to four runners, against the GitHub REST emulator.

Measures
  (a) `handle_event` in a warm process: wall time, median of --repeats, each on a fresh emulated PR;
  (b) `gpumatrix bot handle --event ...` as a fresh process, as the rerun-test workflow runs it:
      wall time including interpreter start and imports, median of --repeats;
  (c) the API calls one handling makes (the emulator's request log);
  (d) `python -c "import gpumatrix.bot"` in a fresh process with torch made unimportable by a
      meta-path finder: wall time (median of --repeats) and what the import pulled in.
Targets: (a) and (b) <= 0.5 s, (c) <= runners + 4, (d) <= 150 ms with no torch.

    python benchmarks/bot.py [--repeats 7] [--show-comment]
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

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "support"))  # the emulator and the PR fixture live there

from bot_world import PR, make_world  # noqa: E402
from github_emulator import GitHubEmulator  # noqa: E402

from gpumatrix.bot.sync import sync_status_comment  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--show-comment", action="store_true", help="print the status comment of the last run"
    )
    args = parser.parse_args()

    warm, calls, comment = handle_in_process(args.repeats)
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
    print(f"\nheavy modules loaded by `import gpumatrix.bot`: {loaded or 'none'}")
    if args.show_comment:
        print("\n" + comment)


if __name__ == "__main__":
    main()
