"""`gpumatrix bot sync`: rewrite a status comment, whole, from the current state of every run it references;
move the runs' check runs on their commit; and rewrite the PR's CI-states comment.

A comment has no compare-and-swap, so concurrent syncs race: one may write states it read before
another run finished. Each sync therefore re-reads, after its write, the runs it wrote as unfinished,
and writes again if any moved. The last write of all is then followed by a read that matched it, and a
sync started after a run finished reads that run after it finished: once every run is done and every
sync has returned, the comment shows every final state, whatever the interleaving. Check runs follow the
same rounds (`gpumatrix.bot.publish`), and so does the CI-states comment (`gpumatrix.bot.ci_states_sync`).

For `/rerun-test --repeat`, each run over has its reports tallied into the comment once
(`gpumatrix.bot.repeat.fill_tallies`), so the verdicts appear when a runner's head and base runs are both
over. The run asking for the sync (`run_id`) publishes only its own check run (a base run: its head's): every run's own syncs (at its start,
at its end, and when it completes) carry it to the end, and no two runs' syncs write the same check run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpumatrix import GpumatrixError
from gpumatrix.bot.ci_states import RerunSource
from gpumatrix.bot.ci_states_sync import CiStatesClient, CiStatesResult, sync_ci_states
from gpumatrix.bot.github import CommentData, GitHubApiError, JobInfo, RunInfo
from gpumatrix.bot.publish import ChecksPublisher, Publication, PublishClient
from gpumatrix.bot.render import (
    TERMINAL_STATES,
    GroupStatus,
    StatusComment,
    parse_status_comment,
    render_status_comment,
    run_state,
)
from gpumatrix.bot.repeat import fill_tallies
from gpumatrix.config import Matrix

__all__ = ["SyncClient", "SyncError", "SyncResult", "refresh_groups", "sync_status_comment"]

# Rounds of write-then-verify before giving up on runs that keep moving (each round is one write).
_MAX_ROUNDS = 5
# A job that ended so has decided its run's outcome before the run itself completes.
_FAILED_JOB = ("failure", "timed_out", "startup_failure")


class SyncError(GpumatrixError):
    """The comment is not a gpumatrix status comment, or does not reference the given run."""


class SyncClient(PublishClient, CiStatesClient, Protocol):
    def get_comment(self, comment_id: int) -> CommentData: ...

    def get_run(self, run_id: int) -> RunInfo: ...

    def run_jobs(self, run_id: int) -> list[JobInfo]: ...

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


def refresh_groups(
    groups: Sequence[GroupStatus],
    client: SyncClient,
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
    status = parse_status_comment(comment.body)
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
