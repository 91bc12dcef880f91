"""Gathering facts: what the bot reads from GitHub and git before it acts, each read at most once.

- `arrive`: what a comment event finds when it arrives: the comment as it stands now (an event's payload
  may be stale), whether it was handled before (the 👀 reaction on receipt is a test-and-set lock: GitHub
  answers 201 the first time, 200 after), and the status comment it already has;
- `comment_now`: the source comment as it stands now;
- `status_comments`: the PR's status comments, the bot's own only, newest first;
- `refresh_groups`: each runner group with its run's current state;
- `LiveFacts`: the `gpumatrix.bot.facts.Facts` a decision asks for (the commenter's permission, the PR
  head and its registry, the base of a `--repeat` comparison, the latest status comment), from GitHub and
  git, as far as the decision's chain gets and no further.

Reads only, but for the 👀 of `arrive`; nothing here decides what to do about a command: the decision
(`decide`) and what is done about it (`dispatch`, `sync`) come after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from gpumatrix.bot.authorize import Ignored, permission_level
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.facts import Base, Head, Unavailable
from gpumatrix.bot.github import CommentData, GitHubApiError, JobInfo, PullHead, RunInfo
from gpumatrix.bot.model import TERMINAL_STATES, GroupStatus, StatusComment, run_state
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.bot.tree import TreeError, merge_base, read_test_sources
from gpumatrix.config import Matrix
from gpumatrix.registry.discovery import build_registry

__all__ = [
    "Arrival",
    "FactsClient",
    "LiveFacts",
    "RunClient",
    "SourceReader",
    "arrive",
    "comment_now",
    "is_own_comment",
    "refresh_groups",
    "status_comments",
]

SourceReader = Callable[..., Mapping[str, str]]
# A job that ended so has decided its run's outcome before the run itself completes.
_FAILED_JOB = ("failure", "timed_out", "startup_failure")


class RunClient(Protocol):
    def get_run(self, run_id: int) -> RunInfo: ...

    def run_jobs(self, run_id: int) -> list[JobInfo]: ...


class FactsClient(RunClient, Protocol):
    def get_comment(self, comment_id: int) -> CommentData: ...

    def list_comments(self, issue_number: int) -> list[CommentData]: ...

    def permission(self, login: str) -> tuple[str, str | None]: ...

    def pull_head(self, number: int) -> PullHead: ...

    def add_reaction(self, comment_id: int, content: str) -> bool: ...


def comment_now(event: CommentEvent, client: FactsClient) -> CommentData | Ignored:
    """The source comment as it stands now, read through the API: a delivery is acted on only when the
    comment still says what its payload says, by the same author. A comment deleted since, or edited since
    (a late `created` delivery, or an `edited` one overtaken by a later edit, which has its own event), is
    ignored: a stale payload never dispatches."""
    try:
        current = client.get_comment(event.comment_id)
    except GitHubApiError as exc:
        if exc.status == 404:
            return Ignored("The comment was deleted since this event was sent; nothing dispatched.")
        raise
    if current.author.lower() != event.author.lower():
        return Ignored("The comment's author is not the one this event names; nothing dispatched.")
    if current.body != event.body:
        return Ignored(
            "The comment was edited since this event was sent; nothing dispatched from the old text "
            "(an edit is handled from its own event, where bot.allow_edits is set)."
        )
    return current


def is_own_comment(comment: CommentData, login: str) -> bool:
    """Whether `comment` was written by the bot itself: by its login (GitHub's logins ignore case)."""
    return comment.author.lower() == login.lower()


def status_comments(
    client: FactsClient, issue_number: int, login: str
) -> Iterator[tuple[CommentData, StatusComment]]:
    """The PR's status comments, newest first; only the bot's own comments (by its login, `bot.login`)
    count, whoever copies the marker, another bot included."""
    for comment in reversed(client.list_comments(issue_number)):
        status = parse_status_comment(comment.body) if is_own_comment(comment, login) else None
        if status is not None:
            yield comment, status


def refresh_groups(
    groups: Sequence[GroupStatus],
    client: RunClient,
    *,
    caller_run_id: int | None = None,
    seen: dict[int, RunInfo] | None = None,
) -> tuple[GroupStatus, ...]:
    """Each group with a run, with the run's current state and link; groups without a run unchanged.

    The run `caller_run_id` is the one asking (its last job syncs): it is still in progress while it
    asks, so its jobs are read too, and a job that failed shows the run failed now. A run only ever
    shows passed once GitHub says it completed with success. Every run read is put in `seen`.
    """
    fresh: list[GroupStatus] = []
    for group in groups:
        if group.run_id is None:  # never dispatched (or its dispatch failed): nothing to read
            fresh.append(group)
            continue
        run = client.get_run(group.run_id)
        if seen is not None:
            seen[run.id] = run
        state = run_state(run.status, run.conclusion)
        if (
            group.run_id == caller_run_id
            and state not in TERMINAL_STATES
            and any(
                job.status == "completed" and job.conclusion in _FAILED_JOB for job in client.run_jobs(run.id)
            )
        ):
            state = "failed"
        fresh.append(replace(group, state=state, url=run.html_url or group.url))
    return tuple(fresh)


class LiveFacts:
    """`Facts` from GitHub and git, each read at most once."""

    def __init__(
        self,
        event: CommentEvent,
        *,
        matrix: Matrix,
        client: FactsClient,
        root: Path,
        read_sources: SourceReader = read_test_sources,
        find_base: Callable[..., str] = merge_base,
    ) -> None:
        self.event, self.matrix, self.client, self.root = event, matrix, client, root
        self.read_sources, self.find_base = read_sources, find_base
        self.pull: PullHead | None = None

    def permission(self, login: str) -> str | None:
        try:
            return permission_level(*self.client.permission(login))
        except GitHubApiError:  # fail closed: a lookup that failed grants nothing
            return None

    def head(self) -> Head:
        pull = self.pull = self.client.pull_head(self.event.issue_number)
        try:
            sources = self.read_sources(
                self.root, pull.sha, pr_number=self.event.issue_number, roots=self.matrix.test_roots
            )
        except TreeError as exc:
            raise Unavailable(str(exc)) from exc
        return Head(pull.sha, build_registry(sources, self.matrix))

    def base(self, head: Head) -> Base:
        """The merge base of the head with the PR's base branch, and its registry (from git, as the head's)."""
        pull = self.pull or self.client.pull_head(self.event.issue_number)
        if head.sha is None or not pull.base_ref:
            raise Unavailable("the PR's base branch is not known, so there is no base commit to compare with")
        try:
            sha = self.find_base(self.root, head.sha, pull.base_ref, pr_number=self.event.issue_number)
            # The base's files under the same test roots as the head's: ci/matrix.yaml's, not the default.
            sources = self.read_sources(
                self.root, sha, pr_number=self.event.issue_number, roots=self.matrix.test_roots
            )
        except TreeError as exc:
            raise Unavailable(str(exc)) from exc
        return Base(sha, pull.base_ref, build_registry(sources, self.matrix))

    def latest_status(self) -> StatusComment | None:
        for _, status in status_comments(self.client, self.event.issue_number, self.matrix.bot.login):
            if status.groups:  # a refusal dispatched nothing and has nothing to re-run
                return status.with_groups(refresh_groups(status.groups, self.client))
        return None


@dataclass(frozen=True)
class Arrival:
    """A comment event as the bot finds it: `event` with the comment's text as it stands now; `handled`
    when it was handled before (its status comment, when it has one, is `seen`); and the `facts` a
    decision about it may ask for."""

    event: CommentEvent
    handled: bool
    seen: CommentData | None
    facts: LiveFacts


def arrive(
    event: CommentEvent,
    line: str,
    *,
    matrix: Matrix,
    client: FactsClient,
    root: Path,
    read_sources: SourceReader = read_test_sources,
    find_base: Callable[..., str] = merge_base,
) -> Arrival | Ignored:
    """Read the comment again (a stale payload is `Ignored`), put the 👀 on it, and, when it was there
    already or the comment was edited, find the status comment its command `line` already has."""
    current = comment_now(event, client)
    if isinstance(current, Ignored):
        return current
    event = replace(event, body=current.body)  # what the comment says now, read through the API
    first_time = client.add_reaction(event.comment_id, "eyes")
    seen, handled = None, False
    # An edit (handled only with bot.allow_edits) may carry a new command under the same 👀.
    if not first_time or event.action == "edited":
        seen = next(
            (
                comment
                for comment, status in status_comments(client, event.issue_number, matrix.bot.login)
                if status.source_comment_id == event.comment_id and status.command == line
            ),
            None,
        )
        handled = seen is not None or (not first_time and event.action == "created")
    facts = LiveFacts(
        event, matrix=matrix, client=client, root=root, read_sources=read_sources, find_base=find_base
    )
    return Arrival(event, handled, seen, facts)
