"""Keep a pull request's CI-states comment true: read the head, its runs and the status comments, write it whole.

The block lives in one comment of the bot's own, found by its first line (`CI_STATES_MARKER`) among the
bot's comments; the README says why a comment rather than the PR description. Calls per sync:

    pull request (the current head)                 1
    the PR's comments (status comments + this one)  1 per 100 comments
    workflow runs of the head (head_sha)            1
    each rerun shown unfinished, not read already   1 each
    the comment, when it changed                    1   (created the first time, then listed once more)

Concurrent writers race like status-comment syncs do, and end the same way: each renders the whole block
from what it read, and after writing reads again every run it showed unfinished, writing again if one
moved. Two first syncs may both create the comment; each then lists the comments once more, the oldest
stays and a later one is deleted by whoever created it, who writes into the oldest instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from gpumatrix.bot.ci_states import (
    CI_STATES_MARKER,
    RerunSource,
    build_ci_states,
    parse_ci_states,
    render_ci_states,
    with_runs,
)
from gpumatrix.bot.github import CommentData, GitHubApiError, PullHead, RunInfo
from gpumatrix.bot.model import TERMINAL_STATES, CiStates, run_state
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.config import DEFAULT_BOT_LOGIN

__all__ = ["CiStatesClient", "CiStatesResult", "sync_ci_states"]

_MAX_ROUNDS = 5


class CiStatesClient(Protocol):
    def pull_head(self, number: int) -> PullHead: ...

    def list_comments(self, issue_number: int) -> list[CommentData]: ...

    def runs_for_head(self, sha: str) -> list[RunInfo]: ...

    def get_run(self, run_id: int) -> RunInfo: ...

    def post_comment(self, issue_number: int, body: str) -> CommentData: ...

    def update_comment(self, comment_id: int, body: str) -> None: ...

    def delete_comment(self, comment_id: int) -> None: ...


@dataclass(frozen=True)
class CiStatesResult:
    comment_id: int
    states: CiStates
    writes: int
    deleted: tuple[int, ...] = ()  # duplicate CI-states comments removed


def sync_ci_states(
    pr: int,
    *,
    client: CiStatesClient,
    fresh: RerunSource | None = None,
    runs: Mapping[int, RunInfo] | None = None,
    login: str = DEFAULT_BOT_LOGIN,
) -> CiStatesResult:
    """Rewrite PR `pr`'s CI-states comment (creating it when missing). `fresh` is a status comment just
    synced, whose groups are newer than its stored body; `runs` are runs already read in this process;
    `login` is the bot's own (`bot.login`): only its comments are read as its CI-states and status
    comments."""
    known: dict[int, RunInfo] = dict(runs or {})
    pull = client.pull_head(pr)
    comments = [c for c in client.list_comments(pr) if c.author.lower() == login.lower()]
    ours = _ci_states_comments(comments)
    reruns = _rerun_sources(comments, fresh)
    for source in reruns:
        for group in source.status.groups:
            if group.run_id is not None and group.state not in TERMINAL_STATES and group.run_id not in known:
                known[group.run_id] = client.get_run(group.run_id)
    reruns = [_with_known(source, known) for source in reruns]
    head_runs = [run for run in client.runs_for_head(pull.sha) if run.head_sha == pull.sha]
    known.update((run.id, run) for run in head_runs)
    previous = parse_ci_states(ours[0].body) if ours else None
    states = with_runs(build_ci_states(pr, pull.sha, runs=head_runs, reruns=reruns, previous=previous), known)

    comment = ours[0] if ours else None
    deleted: list[int] = []
    writes = 0
    for _ in range(_MAX_ROUNDS):
        body = render_ci_states(states)
        if comment is None:
            comment, removed = _create(client, pr, body, login)
            deleted += removed
        elif comment.body != body:
            client.update_comment(comment.id, body)
            comment = replace(comment, body=body)
        else:
            break
        writes += 1
        unfinished = states.unfinished()
        if not unfinished:
            break
        moved = {run_id: client.get_run(run_id) for run_id in unfinished}
        known.update(moved)
        states = with_runs(states, moved)
    for extra in ours[1:]:  # duplicates another writer left: the oldest is the one
        _delete(client, extra.id)
        deleted.append(extra.id)
    return CiStatesResult(comment.id, states, writes, tuple(deleted))


def _ci_states_comments(comments: list[CommentData]) -> list[CommentData]:
    """The bot's CI-states comments, oldest first, of `comments` (the bot's own, by its login): whoever else
    copies the marker, another bot included, writes no CI-states comment."""
    found = [c for c in comments if c.author_type == "Bot" and c.body.startswith(CI_STATES_MARKER)]
    return sorted(found, key=lambda c: c.id)


def _rerun_sources(comments: list[CommentData], fresh: RerunSource | None) -> list[RerunSource]:
    sources = []
    for comment in comments:
        if comment.author_type != "Bot":
            continue
        if fresh is not None and comment.id == fresh.comment_id:
            sources.append(fresh)
            continue
        status = parse_status_comment(comment.body)
        if status is not None and status.groups:
            sources.append(RerunSource(comment.id, comment.html_url, status))
    return sources


def _with_known(source: RerunSource, known: Mapping[int, RunInfo]) -> RerunSource:
    groups = []
    for group in source.status.groups:
        run = known.get(group.run_id) if group.run_id is not None else None
        groups.append(
            replace(group, state=run_state(run.status, run.conclusion))
            if run is not None and group.state not in TERMINAL_STATES
            else group
        )
    return replace(source, status=source.status.with_groups(groups))


def _create(client: CiStatesClient, pr: int, body: str, login: str) -> tuple[CommentData, list[int]]:
    """Post the comment; if another writer posted one first, delete ours and write into the oldest."""
    posted = client.post_comment(pr, body)
    oldest = _ci_states_comments([c for c in client.list_comments(pr) if c.author.lower() == login.lower()])
    if not oldest or oldest[0].id == posted.id:
        return replace(posted, body=body), []
    _delete(client, posted.id)
    if oldest[0].body != body:
        client.update_comment(oldest[0].id, body)
    return replace(oldest[0], body=body), [posted.id]


def _delete(client: CiStatesClient, comment_id: int) -> None:
    try:
        client.delete_comment(comment_id)
    except GitHubApiError as exc:
        if exc.status != 404:  # another writer deleted the same duplicate first
            raise
