"""A pull request for the /rerun-test bot to act on: the REST emulator plus a git clone holding its head.

The bot reads the PR head's test files from git objects (`gpumatrix.bot.tree`), so the head commit of
the emulated PR is a real commit in a local clone, and the emulator serves the same tree. Shared by
tests/e2e/gpumatrix/bot/test_bot_emulator.py and benchmarks/bot.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import coverage_reports
from github_emulator import GitHubEmulator
from gpumatrix_trees import MATRIX_YAML as BASE_MATRIX_YAML
from gpumatrix_trees import registered

from gpumatrix.bot.dispatch import HandleResult
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.github import GitHubClient, RetryPolicy
from gpumatrix.bot.handle import handle_event
from gpumatrix.bot.sync import SyncResult, sync_status_comment
from gpumatrix.config import Matrix, load_matrix

__all__ = [
    "EIGHT_RUNNER_COMMAND",
    "FILES",
    "MATRIX_YAML",
    "PR",
    "BotWorld",
    "make_based_world",
    "make_world",
    "report_json",
    "stamped",
]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
PR = 7

# Eight runners, so one command can fan out to eight runs: the plugin tests' six, two 8-GPU ones, the bot.
MATRIX_YAML = (
    BASE_MATRIX_YAML
    + """\
  - {label: 8-gpu-h100, class: h100, gpus: 8, runs_on: [gpu-h100-8], timeout_minutes: 60}
  - {label: 8-gpu-b200, class: b200, gpus: 8, runs_on: [gpu-b200-8], timeout_minutes: 60}
bot: {permission: write, workflow: gpu-tests.yml, ref: main}
"""
)
_BODY = "def test_x():\n    pass\n"
FILES = {
    "tests/kernels/test_quantize.py": registered(("h100", "b200", "gb300", "5090"), body=_BODY),  # 4 runners
    "tests/kernels/test_gemm.py": registered(("h100",), gpus=2, body=_BODY),
    "tests/e2e/test_model.py": registered(("h100", "b200"), gpus=8, body=_BODY),
    "tests/unit/gpumatrix/registry/test_config.py": registered(("cpu",), body=_BODY),
}
EIGHT_RUNNER_COMMAND = "/rerun-test test_quantize.py test_gemm.py test_model.py test_config.py"

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "dev",
    "GIT_AUTHOR_EMAIL": "dev@example.com",
    "GIT_COMMITTER_NAME": "dev",
    "GIT_COMMITTER_EMAIL": "dev@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **_GIT_ENV}, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def report_json(
    path: str,
    *,
    passed: int = 0,
    failed: tuple[str, ...] = (),
    errors: tuple[str, ...] = (),
    skipped: int = 0,
) -> str:
    """A `gpumatrix run --report` JSON document for one test file, from the plugin's writer."""
    tests = {f"{path}::test_pass_{index}": "passed" for index in range(passed)}
    tests |= {nodeid: "failed" for nodeid in failed} | {nodeid: "errors" for nodeid in errors}
    skips = {f"{path}::test_skip_{index}": "skipped" for index in range(skipped)}
    reasons = dict.fromkeys(skips, "not today")
    return json.dumps(coverage_reports.report_json(None, "cpu", 0, tests | skips, reasons=reasons))


def stamped(document: str, matrix: Matrix, label: str, *, commit: str | None) -> str:
    """`document` (a report's JSON) as runner `label` of `matrix` writes it at `commit`."""
    runner = matrix.runner(label)
    assert runner is not None, label
    data = json.loads(document)
    data.update(
        runner=label,
        commit=commit,
        hardware=coverage_reports.hardware_of(runner.gpu_class, runner.gpus).to_dict(),
    )
    return json.dumps(data)


@dataclass
class BotWorld:
    gh: GitHubEmulator
    root: Path
    sha: str
    matrix: Matrix
    waits: list[float] = field(default_factory=list)  # every retry wait the clients asked for
    base: str = ""  # make_based_world: the PR's merge base with main (main has moved on since)

    def comment(self, body: str, *, login: str = "alice") -> CommentEvent:
        posted = self.gh.add_comment(PR, body, login=login)
        return CommentEvent.from_payload(self.gh.comment_event(posted["id"]))

    def client(self, *, sleep: Callable[[float], None] | None = None) -> GitHubClient:
        """A client whose retries record their waits instead of sleeping (tests assert the waits)."""
        return GitHubClient(
            token=self.gh.token,
            repository=self.gh.repository,
            base_url=self.gh.base_url,
            retry=RetryPolicy(backoff_base=0.05),
            sleep=sleep or self.waits.append,
        )

    def upload_report(
        self, run_id: int, document: str, *, shard: str = "1-of-1", as_run: bool = True
    ) -> None:
        """The report artifact a gpu-tests.yml shard uploads (see its `test` job). With `as_run`, the report
        is made the run's own, as `gpumatrix run --runner` writes it there: its runner, that runner's
        machine, and the commit the run was pinned to; without, it is uploaded as given."""
        run = self.gh.run(run_id)
        runner = run.inputs.get("runner", "cpu")
        if as_run:
            document = stamped(document, self.matrix, runner, commit=run.inputs.get("sha") or None)
        self.gh.add_artifact(run_id, f"gpumatrix-report-{runner}-shard-{shard}", {"report.json": document})

    def sync(self, comment_id: int, *, run_id: int | None = None) -> SyncResult:
        with self.client() as client:
            return sync_status_comment(comment_id, client=client, matrix=self.matrix, run_id=run_id)

    def handle(self, event: CommentEvent) -> tuple[HandleResult, int]:
        """Handle `event` with a fresh client; returns the result and the API calls it made."""
        with self.client() as client:
            result = handle_event(event, matrix=self.matrix, client=client, root=self.root)
        return result, client.calls


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def make_based_world(
    gh: GitHubEmulator,
    directory: Path,
    *,
    base_files: dict[str, str],
    head_files: dict[str, str],
    later_main_files: dict[str, str],
    matrix_yaml: str = MATRIX_YAML,
) -> BotWorld:
    """PR #7 as GitHub and the bot's workflow see it: an origin whose main has `base_files` and then, after
    the PR branched, `later_main_files`; the PR head adds `head_files` to the base; and the bot's clone, a
    shallow clone of main (as actions/checkout makes it) that holds neither the PR head nor the base.
    `matrix_yaml` is the tree's ci/matrix.yaml (test roots other than tests/, say)."""
    work, origin, root = directory / "work", directory / "origin.git", directory / "clone"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    base = _commit(work, {"ci/matrix.yaml": matrix_yaml, **base_files}, "the base")
    _git(work, "checkout", "-q", "-b", "feature")
    head = _commit(work, head_files, "the PR head")
    _git(work, "checkout", "-q", "main")
    _commit(work, later_main_files, "main moves on")
    _git(directory, "clone", "-q", "--bare", str(work), str(origin))
    _git(origin, "update-ref", f"refs/pull/{PR}/head", head)
    _git(directory, "clone", "-q", "--depth=1", "--branch", "main", f"file://{origin}", str(root))
    gh.add_pull(
        PR,
        head_sha=head,
        tree={"ci/matrix.yaml": matrix_yaml, **base_files, **head_files},
        files=list(head_files),
    )
    gh.set_permission("alice", "write")
    gh.set_permission("rita", "read")
    gh.add_workflow_file(REPOSITORY_ROOT / ".github" / "workflows" / "gpu-tests.yml")
    return BotWorld(gh, root, head, load_matrix(root / "ci" / "matrix.yaml"), base=base)


def make_world(
    gh: GitHubEmulator,
    directory: Path,
    *,
    files: dict[str, str] | None = None,
    permissions: dict[str, str] | None = None,
) -> BotWorld:
    """A clone at `directory` whose HEAD is PR #7's head on `gh`, with gpu-tests.yml declared."""
    files = FILES if files is None else files
    root = directory / "clone"
    (root / "ci").mkdir(parents=True)
    (root / "ci" / "matrix.yaml").write_text(MATRIX_YAML)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "the PR head")
    sha = _git(root, "rev-parse", "HEAD")
    gh.add_pull(PR, head_sha=sha, tree={"ci/matrix.yaml": MATRIX_YAML, **files}, files=list(files))
    for login, level in (permissions or {"alice": "write"}).items():
        gh.set_permission(login, level)
    workflow = REPOSITORY_ROOT / ".github" / "workflows" / "gpu-tests.yml"
    if workflow.is_file():  # dispatch exactly the inputs the real workflow declares
        gh.add_workflow_file(workflow)
    else:
        gh.add_workflow(
            "gpu-tests.yml",
            inputs={
                "runner": True,
                "tests": False,
                "pr_number": False,
                "sha": True,
                "status_comment_id": False,
                "suite": False,
                "include_disabled": False,
                "repeat": False,
            },
        )
    return BotWorld(gh, root, sha, load_matrix(root / "ci" / "matrix.yaml"))
