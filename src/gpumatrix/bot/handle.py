"""`gpumatrix bot handle`: carry out the decision for one `issue_comment` event.

API calls, in order, for a command that dispatches to N runners (2N + 7 in all; `--repeat` dispatches each
runner's group twice, on the head and on its merge base, with a check run for the head's only: 3N + 7):

    the comment, re-read (it still says this)          1   (edited or deleted since: nothing dispatched)
    👀 reaction (receipt, and the idempotency lock)   1
    collaborator permission                            1
    pull request (head SHA, read once and pinned)      1
    status comment, posted before dispatch             1   (its id is a workflow input)
    workflow dispatch, one per runner                  N
    check run on the pinned SHA, one per runner        N   (queued; a commit status if checks are refused)
    status comment, rewritten with run links           1
    🚀 / 😕 reaction (outcome)                          1

The PR head's tree costs no call: it is read from git objects (`gpumatrix.bot.tree`). Idempotency costs
no extra call either: creating a reaction answers 201 the first time and 200 when this token already
reacted so, which makes the 👀 on receipt a test-and-set lock on the source comment. A comment seen
before dispatches nothing new; its status comment (found by the source marker) is re-synced instead, with
its check runs (found by external_id, created only where missing): handling a comment again adds nothing.
The check runs of a status comment just posted cannot exist yet, so they are created without a lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from gpumatrix.bot.authorize import Ignored, permission_level
from gpumatrix.bot.decide import Base, Decision, Head, Unavailable, decide, screen
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.github import CommentData, DispatchedRun, GitHubApiError, JobInfo, PullHead, RunInfo
from gpumatrix.bot.publish import ChecksPublisher, Publication, PublishClient
from gpumatrix.bot.render import GroupStatus, StatusComment, parse_status_comment, render_status_comment
from gpumatrix.bot.repeat import BASE
from gpumatrix.bot.sync import refresh_groups, sync_status_comment
from gpumatrix.bot.tree import TreeError, merge_base, read_test_sources
from gpumatrix.config import Matrix
from gpumatrix.registry.discovery import build_registry

__all__ = ["HandleClient", "HandleResult", "dispatch_inputs", "handle_event", "is_own_comment"]

SourceReader = Callable[..., Mapping[str, str]]


class HandleClient(PublishClient, Protocol):
    @property
    def repository(self) -> str: ...

    def add_reaction(self, comment_id: int, content: str) -> bool: ...

    def permission(self, login: str) -> tuple[str, str | None]: ...

    def pull_head(self, number: int) -> PullHead: ...

    def list_comments(self, issue_number: int) -> list[CommentData]: ...

    def get_comment(self, comment_id: int) -> CommentData: ...

    def create_comment(self, issue_number: int, body: str) -> int: ...

    def post_comment(self, issue_number: int, body: str) -> CommentData: ...

    def update_comment(self, comment_id: int, body: str) -> None: ...

    def dispatch(self, workflow: str, *, ref: str, inputs: Mapping[str, str]) -> DispatchedRun: ...

    def get_run(self, run_id: int) -> RunInfo: ...

    def run_jobs(self, run_id: int) -> list[JobInfo]: ...


@dataclass(frozen=True)
class HandleResult:
    action: str  # the decision's action
    reason: str
    comment_id: int | None = None  # the status comment (or listing) posted or re-synced
    status: StatusComment | None = None
    publication: Publication | None = None  # the check runs (or commit statuses) written


def dispatch_inputs(group: GroupStatus, status: StatusComment, comment_id: int) -> dict[str, str]:
    """The workflow inputs of one runner group: only registry paths and validated node ids (and
    `include_disabled`, only for a group that runs disabled tests, as gpu-tests.yml's boolean; `repeat`,
    only for a `--repeat N` command, whose base group runs at the pinned merge base)."""
    inputs = {
        "runner": group.label,
        "tests": "\n".join(group.tests),
        "pr_number": str(status.pr),
        "sha": (status.base_sha if group.commit == BASE else status.sha) or "",
        "status_comment_id": str(comment_id),
    }
    if group.include_disabled:
        inputs["include_disabled"] = "true"
    if status.repeat:
        inputs["repeat"] = str(status.repeat)
    return inputs


def handle_event(
    event: CommentEvent,
    *,
    matrix: Matrix,
    client: HandleClient,
    root: str | Path,
    read_sources: SourceReader = read_test_sources,
    find_base: Callable[..., str] = merge_base,
) -> HandleResult:
    """Handle one comment event end to end; see the module docstring for the calls it makes."""
    screened = screen(event, matrix=matrix, repository=client.repository)
    if isinstance(screened, Ignored):
        return HandleResult("ignore", screened.reason)
    current = _comment_now(event, client)
    if isinstance(current, Ignored):
        return HandleResult("ignore", current.reason)
    event = replace(event, body=current.body)  # what the comment says now, read through the API

    first_time = client.add_reaction(event.comment_id, "eyes")
    # An edit (handled only with bot.allow_edits) may carry a new command under the same 👀.
    if not first_time or event.action == "edited":
        seen = _existing_status(event, screened.line, client, matrix.bot.login)
        if seen is not None or (not first_time and event.action == "created"):
            return _already_handled(seen, client, matrix)

    facts = _LiveFacts(
        event, matrix=matrix, client=client, root=Path(root), read_sources=read_sources, find_base=find_base
    )
    try:
        decision = decide(event, screened, matrix=matrix, facts=facts)
        return _carry_out(decision, event, matrix=matrix, client=client)
    except Exception:
        _react(client, event.comment_id, "confused")  # best effort: the original error is what matters
        raise


def _carry_out(
    decision: Decision, event: CommentEvent, *, matrix: Matrix, client: HandleClient
) -> HandleResult:
    if decision.action == "ignore":
        client.add_reaction(event.comment_id, "confused")
        return HandleResult("ignore", decision.reason)
    if decision.action == "list":
        comment_id = client.create_comment(event.issue_number, decision.comment or "")
        return HandleResult("list", decision.reason, comment_id)
    if decision.status is None:  # rerun-failed with nothing to read: nothing to post
        client.add_reaction(event.comment_id, "confused")
        return HandleResult(decision.action, decision.reason)

    posted = client.post_comment(event.issue_number, decision.comment or "")
    comment_id = posted.id
    if not decision.groups:
        client.add_reaction(event.comment_id, "confused")
        return HandleResult(decision.action, decision.reason, comment_id, decision.status)

    groups: list[GroupStatus] = []
    for group in decision.status.groups:
        try:
            run = client.dispatch(
                matrix.bot.workflow,
                ref=matrix.bot.ref,
                inputs=dispatch_inputs(group, decision.status, comment_id),
            )
        except GitHubApiError as exc:  # only this runner's line shows it; the others still go
            groups.append(
                replace(
                    group,
                    state="error",
                    error=f"HTTP {exc.status}: {exc.message}" if exc.status is not None else exc.message,
                )
            )
        else:
            groups.append(replace(group, state="queued", run_id=run.run_id, url=run.html_url))
    status = decision.status.with_groups(groups)
    publisher = ChecksPublisher(
        client,
        status,
        comment_id=comment_id,
        comment_url=posted.html_url or None,
        matrix=matrix,
        look_up=False,
    )
    publisher.publish(groups)
    status = replace(status, checks=publisher.result.kind, checks_note=publisher.result.note)
    client.update_comment(comment_id, render_status_comment(status))
    dispatched = sum(group.state != "error" for group in groups)
    client.add_reaction(event.comment_id, "rocket" if dispatched else "confused")
    reason = f"{decision.reason}; dispatched {dispatched} of {len(groups)}"
    return HandleResult(decision.action, reason, comment_id, status, publisher.result)


def _comment_now(event: CommentEvent, client: HandleClient) -> CommentData | Ignored:
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


def _status_comments(
    client: HandleClient, issue_number: int, login: str
) -> Iterator[tuple[CommentData, StatusComment]]:
    """The PR's status comments, newest first; only the bot's own comments (by its login, `bot.login`)
    count, whoever copies the marker, another bot included."""
    for comment in reversed(client.list_comments(issue_number)):
        status = parse_status_comment(comment.body) if is_own_comment(comment, login) else None
        if status is not None:
            yield comment, status


def is_own_comment(comment: CommentData, login: str) -> bool:
    """Whether `comment` was written by the bot itself: by its login (GitHub's logins ignore case)."""
    return comment.author.lower() == login.lower()


def _existing_status(event: CommentEvent, line: str, client: HandleClient, login: str) -> CommentData | None:
    """The status comment this source comment (and, after an edit, this command line) already has."""
    for comment, status in _status_comments(client, event.issue_number, login):
        if status.source_comment_id == event.comment_id and status.command == line:
            return comment
    return None


def _already_handled(seen: CommentData | None, client: HandleClient, matrix: Matrix) -> HandleResult:
    if seen is None:
        return HandleResult("ignore", "Comment already handled (👀 is there); nothing dispatched.")
    # Its own status comment and check runs only: handling a comment again adds nothing to the PR.
    synced = sync_status_comment(seen.id, client=client, matrix=matrix, ci_states=False)
    return HandleResult(
        "ignore",
        "Comment already handled; nothing dispatched, its status comment re-synced.",
        seen.id,
        synced.status,
        synced.publication,
    )


def _react(client: HandleClient, comment_id: int, content: str) -> None:
    try:
        client.add_reaction(comment_id, content)
    except GitHubApiError:
        pass


class _LiveFacts:
    """`Facts` from GitHub and git, each read at most once."""

    def __init__(
        self,
        event: CommentEvent,
        *,
        matrix: Matrix,
        client: HandleClient,
        root: Path,
        read_sources: SourceReader,
        find_base: Callable[..., str] = merge_base,
    ) -> None:
        self.event, self.matrix, self.client, self.root, self.read_sources = (
            event,
            matrix,
            client,
            root,
            read_sources,
        )
        self.find_base = find_base
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
        for _, status in _status_comments(self.client, self.event.issue_number, self.matrix.bot.login):
            if status.groups:  # a refusal dispatched nothing and has nothing to re-run
                return status.with_groups(refresh_groups(status.groups, self.client))
        return None
