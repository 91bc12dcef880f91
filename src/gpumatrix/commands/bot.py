"""The bot's CLI: `gpumatrix bot handle`, `gpumatrix bot sync` and the offline `gpumatrix plan`.

Each command computes a result and a separate step prints it. Errors derive from `GpumatrixError` and
are mapped to an exit code in one place: 0 done (an ignored comment included, with its reason), 1 a
failure (GitHub, git), 2 a usage or configuration error. GITHUB_TOKEN, GITHUB_REPOSITORY and
GITHUB_API_URL are read when `handle` or `sync` runs; the token is never printed.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpumatrix import GpumatrixError
from gpumatrix.bounds import MAX_EVENT_ID
from gpumatrix.config import PERMISSION_LEVELS, Matrix, MatrixError, load_matrix

if TYPE_CHECKING:  # the bot's modules load when a command runs, not when the CLI is imported
    from gpumatrix.bot.facts import Base, Head
    from gpumatrix.bot.publish import Publication

__all__ = ["bot", "plan"]


def _default_root() -> Path:
    from gpumatrix.bot.tree import git_toplevel

    return git_toplevel(Path.cwd()) or Path.cwd()


def _load(root: Path | None) -> tuple[Path, Matrix]:
    root = root or _default_root()
    # The bot's settings come from this tree (the default branch), never from the PR being tested.
    return root, load_matrix(root / "ci" / "matrix.yaml")


@contextmanager
def _exit_codes() -> Iterator[None]:
    """The one place errors become exit codes; messages never hold the token."""
    from gpumatrix.bot.event import EventError
    from gpumatrix.bot.github import MissingEnvironment
    from gpumatrix.bot.sync import SyncError

    try:
        yield
    except (MatrixError, EventError, MissingEnvironment, SyncError) as exc:
        _echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except GpumatrixError as exc:
        _echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None


_root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Tree holding ci/matrix.yaml and tests/ (default: the repository root).",
)
_backoff_option = click.option(
    "--retry-backoff",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds before the first retry of a failed GitHub call (doubles each time).",
)


@click.group(name="bot")
def bot() -> None:
    """The /rerun-test PR-comment bot."""


@bot.command(name="handle")
@click.option(
    "--event",
    "event_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The issue_comment event file ($GITHUB_EVENT_PATH).",
)
@_root_option
@_backoff_option
def handle(event_path: Path, root: Path | None, retry_backoff: float) -> None:
    """Handle one PR comment: authorize, plan, dispatch, post the status comment."""
    from gpumatrix.bot.event import load_event
    from gpumatrix.bot.github import GitHubClient, RetryPolicy
    from gpumatrix.bot.handle import handle_event
    from gpumatrix.bot.tree import merge_base, read_test_sources

    with _exit_codes():
        root, matrix = _load(root)
        event = load_event(event_path)
        # The clone is checked out without credentials; the PR head (and, for --repeat, the base branch) is
        # fetched with the job's token.
        token = os.environ.get("GITHUB_TOKEN")
        read_sources = functools.partial(read_test_sources, token=token)
        find_base = functools.partial(merge_base, token=token)
        with GitHubClient.from_env(os.environ, retry=RetryPolicy(backoff_base=retry_backoff)) as client:
            result = handle_event(
                event, matrix=matrix, client=client, root=root, read_sources=read_sources, find_base=find_base
            )
        _echo(f"{result.action}: {result.reason}")
        if result.comment_id is not None:
            _echo(f"comment: {result.comment_id}")
        for group in result.status.groups if result.status else ():
            _echo(
                f"  {group.label}: {group.state}"
                + (f" {group.url}" if group.url else "")
                + (f" ({group.error})" if group.error else "")
            )
        if result.publication is not None:
            _echo_publication(result.publication)
        _echo(f"API calls: {client.calls}")


@bot.command(name="sync")
@click.option(
    "--comment-id",
    type=click.IntRange(min=1, max=MAX_EVENT_ID),
    default=None,
    help="The status comment to rewrite.",
)
@click.option(
    "--run-id",
    type=click.IntRange(min=1, max=MAX_EVENT_ID),
    default=None,
    help="The run asking for the sync; it must be one the comment references.",
)
@click.option(
    "--pr",
    "pr_number",
    type=click.IntRange(min=1, max=MAX_EVENT_ID),
    default=None,
    help="Only rewrite this pull request's CI-states comment (a run that has no status comment).",
)
@_root_option
@_backoff_option
def sync(
    comment_id: int | None, run_id: int | None, pr_number: int | None, root: Path | None, retry_backoff: float
) -> None:
    """Rewrite a status comment from the current state of every run it references, move those runs' check
    runs, and rewrite the PR's CI-states comment; or, with --pr alone, only the CI-states comment."""
    from gpumatrix.bot.ci_states_sync import sync_ci_states
    from gpumatrix.bot.github import GitHubClient, RetryPolicy
    from gpumatrix.bot.model import STATE_EMOJI
    from gpumatrix.bot.sync import SyncError, sync_status_comment

    with _exit_codes():
        if (comment_id is None) == (pr_number is None):
            raise SyncError(
                "give --comment-id (a status comment, optionally with --run-id) or --pr, not both"
            )
        if run_id is not None and comment_id is None:
            raise SyncError("--run-id needs --comment-id: the run's status comment")
        # The runs' JSON test reports are read against the matrix of this tree (the default branch).
        _, matrix = _load(root)
        with GitHubClient.from_env(os.environ, retry=RetryPolicy(backoff_base=retry_backoff)) as client:
            if pr_number is not None:
                summary = sync_ci_states(pr_number, client=client, login=matrix.bot.login)
                _echo(f"CI states of #{pr_number}: comment {summary.comment_id} ({summary.writes} write(s))")
                return
            result = sync_status_comment(comment_id, client=client, matrix=matrix, run_id=run_id)
        states = ", ".join(f"{label} {STATE_EMOJI[state]} {state}" for label, state in result.states.items())
        _echo(f"synced comment {comment_id} ({result.writes} write(s)): {states or 'no runs'}")
        if result.publication is not None:
            _echo_publication(result.publication)
        if result.ci_states is not None:
            _echo(
                f"CI states of #{result.status.pr}: comment {result.ci_states.comment_id} "
                f"({result.ci_states.writes} write(s))"
            )
        if result.ci_states_error is not None:
            _warn(f"the CI-states comment was not written: {result.ci_states_error}")


def _echo_publication(publication: Publication) -> None:
    """Which of check runs or commit statuses carried the results, and what could not be written. A failed
    write is a warning, not a failed command: the tests' outcome is not in question, and the next sync
    writes it again."""
    kind = "check runs" if publication.kind == "check-runs" else "commit statuses"
    why = f" (check runs refused: {publication.note})" if publication.note else ""
    _echo(f"published as {kind}{why}: {publication.writes} write(s)")
    for failure in publication.failures:
        _warn(failure)


def _echo(message: object, *, err: bool = False) -> None:
    """Print a line of the bot's output: text from comments, reports and GitHub with its control
    characters shown as escapes (`gpumatrix.escape.terminal`), never sent to the terminal raw."""
    from gpumatrix.escape import terminal

    click.echo(terminal(message, newlines=True, markup=False), err=err)


def _warn(message: str) -> None:
    # In a workflow, a ::warning:: line becomes an annotation on the run's summary page.
    prefix = "::warning::" if os.environ.get("GITHUB_ACTIONS") == "true" else "warning: "
    _echo(f"{prefix}{' '.join(message.split())}", err=True)


@click.command(name="plan")
@click.option(
    "--author-permission",
    type=click.Choice(PERMISSION_LEVELS),
    default=None,
    help="The commenter's permission (default: exactly what ci/matrix.yaml requires).",
)
@click.option(
    "--pr",
    "pr_number",
    type=click.IntRange(min=1, max=MAX_EVENT_ID),
    default=None,
    help="The PR number to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@_root_option
@click.argument("text")
def plan(
    author_permission: str | None, pr_number: int | None, as_json: bool, root: Path | None, text: str
) -> None:
    """Dry run: print what a comment TEXT would do and the comment it would post. No network."""
    from gpumatrix.bot.decide import plan_comment
    from gpumatrix.bot.event import CommentEvent

    with _exit_codes():
        root, matrix = _load(root)
        event = CommentEvent(
            action="created",
            comment_id=0,
            body=text,
            author="author",
            author_type="User",
            issue_number=pr_number or 0,
            is_pull_request=True,
        )
        facts = _OfflineFacts(root, matrix, author_permission or matrix.bot.permission)
        decision = plan_comment(event, matrix=matrix, facts=facts)
    if as_json:
        _echo(json.dumps(decision.to_json(), indent=2, ensure_ascii=False))
        return
    _echo(f"action: {decision.action} ({decision.reason})")
    if decision.sha:
        _echo(f"sha: {decision.sha}")
    document = decision.to_json()
    for group in document["runners"]:  # a --repeat plan's runners name their commit: head or base
        where = f" on the {group['commit']}" if "commit" in group else ""
        _echo(f"runner {group['label']}{where}: {len(group['tests'])} test(s)")
        for test in group["tests"]:
            _echo(f"  {test}")
    for error in document["errors"]:
        _echo(f"refused {error['spec']!r}: {error['message']}")
    if decision.comment is not None:
        _echo("\n--- comment ---")
        _echo(decision.comment)


class _OfflineFacts:
    """`Facts` for the dry run: the given permission, the working tree at `root`, no status comments."""

    def __init__(self, root: Path, matrix: Matrix, level: str) -> None:
        self.root, self.matrix, self.level = root, matrix, level

    def permission(self, login: str) -> str | None:
        return self.level

    def head(self) -> Head:
        from gpumatrix.bot.facts import Head
        from gpumatrix.bot.tree import git_head
        from gpumatrix.registry.discovery import discover

        return Head(git_head(self.root), discover(self.root, self.matrix))

    def base(self, head: Head) -> Base:
        """The merge base of the working tree's HEAD with the bot's branch (`bot.ref`), from the local clone."""
        from gpumatrix.bot.facts import Base, Unavailable
        from gpumatrix.bot.tree import TreeError, merge_base, read_test_sources
        from gpumatrix.registry.discovery import build_registry

        ref = self.matrix.bot.ref
        if head.sha is None:
            raise Unavailable(f"offline: {self.root} is not a git clone, so it has no merge base with {ref}")
        try:
            sha = merge_base(self.root, head.sha, ref)
            sources = read_test_sources(self.root, sha, roots=self.matrix.test_roots)
            return Base(sha, ref, build_registry(sources, self.matrix))
        except TreeError as exc:
            raise Unavailable(f"offline: {exc}") from None

    def latest_status(self) -> None:
        from gpumatrix.bot.facts import Unavailable

        raise Unavailable(
            "offline: /rerun-failed reads the PR's latest status comment when the bot handles it"
        )
