"""`gpumatrix bot sync`: rewrite a status comment, whole, from the current state of every run it references;
move the runs' check runs on their commit; and rewrite the PR's CI-states comment.

A comment has no compare-and-swap, so concurrent syncs race: one may write states it read before
another run finished. Each sync therefore re-reads, after its write, the runs it wrote as unfinished,
and writes again if any moved. The last write of all is then followed by a read that matched it, and a
sync started after a run finished reads that run after it finished: once every run is done and every
sync has returned, the comment shows every final state, whatever the interleaving. Check runs follow the
same rounds (`gpumatrix.bot.publish`), and so does the CI-states comment (`gpumatrix.bot.ci_states_sync`).

For `/rerun-test --repeat`, each run over has its reports tallied into the comment once
(`fill_tallies`), so the verdicts appear when a runner's head and base runs are both
over. The run asking for the sync (`run_id`) publishes only its own check run (a base run: its head's): every run's own syncs (at its start,
at its end, and when it completes) carry it to the end, and no two runs' syncs write the same check run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpumatrix import GpumatrixError
from gpumatrix.bot.artifacts import ArtifactClient, run_report_documents
from gpumatrix.bot.ci_states import RerunSource
from gpumatrix.bot.ci_states_sync import CiStatesClient, CiStatesResult, sync_ci_states
from gpumatrix.bot.gather import RunClient, refresh_groups
from gpumatrix.bot.github import CommentData, GitHubApiError, RunInfo
from gpumatrix.bot.model import TERMINAL_STATES, GroupStatus, StatusComment
from gpumatrix.bot.publish import ChecksPublisher, Publication, PublishClient
from gpumatrix.bot.render import render_status_comment
from gpumatrix.bot.repeat import tally_documents
from gpumatrix.bot.state import MarkerError, decode_status
from gpumatrix.config import Matrix

__all__ = ["SyncClient", "SyncError", "SyncResult", "fill_tallies", "sync_status_comment"]

# Rounds of write-then-verify before giving up on runs that keep moving (each round is one write).
_MAX_ROUNDS = 5


class SyncError(GpumatrixError):
    """The comment is not a gpumatrix status comment, or does not reference the given run."""


class SyncClient(PublishClient, CiStatesClient, RunClient, Protocol):
    def get_comment(self, comment_id: int) -> CommentData: ...

    def update_comment(self, comment_id: int, body: str) -> None: ...


@dataclass(frozen=True)
class SyncResult:
    comment_id: int
    status: StatusComment
    writes: int  # writes of the status comment
    publication: Publication | None = None  # the check runs (or commit statuses) of the runs
    ci_states: CiStatesResult | None = None
    ci_states_error: str | None = None  # the CI-states comment could not be written (the rest was)

    @property
    def states(self) -> dict[str, str]:
        return {group.label: group.state for group in self.status.groups}


def sync_status_comment(
    comment_id: int,
    *,
    client: SyncClient,
    matrix: Matrix,
    run_id: int | None = None,
    ci_states: bool = True,
) -> SyncResult:
    """Re-render status comment `comment_id`; `run_id`, when given, must be one of its runs. With
    `ci_states`, the PR's CI-states comment is rewritten too. The runs' test reports are read against
    `matrix`."""
    comment = client.get_comment(comment_id)
    if comment.author.lower() != matrix.bot.login.lower():  # the marker can be copied; the author cannot
        raise SyncError(
            f"comment {comment_id} is by {comment.author or 'no one'}, not by this bot ({matrix.bot.login}): "
            "it is not a gpumatrix status comment"
        )
    try:
        status = decode_status(comment.body)
    except MarkerError as exc:  # ours, of a version or form this code does not read: never half rewritten
        raise SyncError(
            f"comment {comment_id} is not a gpumatrix status comment this bot reads: {exc}"
        ) from None
    if status is None:
        raise SyncError(f"comment {comment_id} is not a gpumatrix status comment")
    if run_id is not None and run_id not in {group.run_id for group in status.groups}:
        raise SyncError(f"run {run_id} is not referenced by status comment {comment_id}")

    runs: dict[int, RunInfo] = {}
    publisher = (
        ChecksPublisher(
            client,
            status,
            comment_id=comment_id,
            comment_url=comment.html_url or None,
            matrix=matrix,
            only_run=run_id,
        )
        if status.sha and status.groups
        else None
    )
    current, writes = comment.body, 0
    groups = refresh_groups(status.groups, client, caller_run_id=run_id, seen=runs)
    if status.repeat:
        groups = fill_tallies(groups, client, matrix, runs)
    for _ in range(_MAX_ROUNDS):
        published = publisher.publish(groups, runs) if publisher else 0
        status = status.with_groups(groups)
        if publisher is not None:
            status = replace(status, checks=publisher.result.kind, checks_note=publisher.result.note)
        body = render_status_comment(status)
        if body != current:
            client.update_comment(comment_id, body)
            current, writes = body, writes + 1
        elif not published:
            break  # the comment and the checks already show what was just read
        unfinished = [
            index
            for index, group in enumerate(groups)
            if group.run_id is not None and group.state not in TERMINAL_STATES
        ]
        if not unfinished:
            break  # finished runs do not change: what was written stays true
        again = refresh_groups(
            [groups[index] for index in unfinished], client, caller_run_id=run_id, seen=runs
        )
        if status.repeat:
            again = fill_tallies(again, client, matrix, runs)
        groups = tuple(
            again[unfinished.index(i)] if i in unfinished else group for i, group in enumerate(groups)
        )

    result = SyncResult(comment_id, status, writes, publisher.result if publisher else None)
    if not ci_states or status.pr is None:
        return result
    try:
        summary = sync_ci_states(
            status.pr,
            client=client,
            runs=runs,
            fresh=RerunSource(comment_id, comment.html_url, status),
            login=matrix.bot.login,
        )
    except GitHubApiError as exc:  # the status comment and checks are written; say what was not
        return replace(result, ci_states_error=str(exc))
    return replace(result, ci_states=summary)


def fill_tallies(
    groups: Sequence[GroupStatus], client: ArtifactClient, matrix: Matrix, runs: Mapping[int, RunInfo]
) -> tuple[GroupStatus, ...]:
    """Each group whose run is over, with the tally of its reports (`gpumatrix.bot.repeat.tally_documents`):
    read once, and again only when they were read before the run completed. A download that fails leaves
    the group as it was (the next sync tries)."""
    filled = []
    for group in groups:
        run = runs.get(group.run_id) if group.run_id is not None else None
        complete = run is not None and run.status == "completed"
        stale = group.tally is None or (not group.tally.complete and complete)
        if group.run_id is None or group.state not in TERMINAL_STATES or not stale:
            filled.append(group)
            continue
        try:
            documents = run_report_documents(client, group.run_id)
        except GitHubApiError:
            filled.append(group)
            continue
        filled.append(replace(group, tally=tally_documents(documents, matrix, complete=complete)))
    return tuple(filled)
