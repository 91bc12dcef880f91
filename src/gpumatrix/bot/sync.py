"""`gpumatrix bot sync`: rewrite a status comment, whole, from the current state of every run it references.

A comment has no compare-and-swap, so concurrent syncs race: one may write states it read before
another run finished. Each sync therefore re-reads, after its write, the runs it wrote as unfinished,
and writes again if any moved. The last write of all is then followed by a read that matched it, and a
sync started after a run finished reads that run after it finished: once every run is done and every
sync has returned, the comment shows every final state, whatever the interleaving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpumatrix import GpumatrixError
from gpumatrix.bot.github import CommentData, JobInfo, RunInfo
from gpumatrix.bot.render import (
    TERMINAL_STATES,
    GroupStatus,
    StatusComment,
    parse_status_comment,
    render_status_comment,
    run_state,
)

__all__ = ["SyncClient", "SyncError", "SyncResult", "refresh_groups", "sync_status_comment"]

# Rounds of write-then-verify before giving up on runs that keep moving (each round is one write).
_MAX_ROUNDS = 5
# A job that ended so has decided its run's outcome before the run itself completes.
_FAILED_JOB = ("failure", "timed_out", "startup_failure")


class SyncError(GpumatrixError):
    """The comment is not a gpumatrix status comment, or does not reference the given run."""


class SyncClient(Protocol):
    def get_comment(self, comment_id: int) -> CommentData: ...

    def get_run(self, run_id: int) -> RunInfo: ...

    def run_jobs(self, run_id: int) -> list[JobInfo]: ...

    def update_comment(self, comment_id: int, body: str) -> None: ...


@dataclass(frozen=True)
class SyncResult:
    comment_id: int
    status: StatusComment
    writes: int

    @property
    def states(self) -> dict[str, str]:
        return {group.label: group.state for group in self.status.groups}


def refresh_groups(
    groups: Sequence[GroupStatus], client: SyncClient, *, caller_run_id: int | None = None
) -> tuple[GroupStatus, ...]:
    """Each group with a run, with the run's current state and link; groups without a run unchanged.

    The run `caller_run_id` is the one asking (its last job syncs): it is still in progress while it
    asks, so its jobs are read too, and a job that failed shows the run failed now. A run only ever
    shows passed once GitHub says it completed with success.
    """
    fresh: list[GroupStatus] = []
    for group in groups:
        if group.run_id is None:  # never dispatched (or its dispatch failed): nothing to read
            fresh.append(group)
            continue
        run = client.get_run(group.run_id)
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


def sync_status_comment(comment_id: int, *, client: SyncClient, run_id: int | None = None) -> SyncResult:
    """Re-render status comment `comment_id`; `run_id`, when given, must be one of its runs."""
    comment = client.get_comment(comment_id)
    status = parse_status_comment(comment.body)
    if status is None:
        raise SyncError(f"comment {comment_id} is not a gpumatrix status comment")
    if run_id is not None and run_id not in {group.run_id for group in status.groups}:
        raise SyncError(f"run {run_id} is not referenced by status comment {comment_id}")

    current, writes = comment.body, 0
    groups = refresh_groups(status.groups, client, caller_run_id=run_id)
    for _ in range(_MAX_ROUNDS):
        status = status.with_groups(groups)
        body = render_status_comment(status)
        if body == current:
            break  # the comment already shows what was just read
        client.update_comment(comment_id, body)
        current, writes = body, writes + 1
        unfinished = [
            index
            for index, group in enumerate(groups)
            if group.run_id is not None and group.state not in TERMINAL_STATES
        ]
        if not unfinished:
            break  # finished runs do not change: what was written stays true
        again = refresh_groups([groups[index] for index in unfinished], client, caller_run_id=run_id)
        groups = tuple(
            again[unfinished.index(i)] if i in unfinished else group for i, group in enumerate(groups)
        )
    return SyncResult(comment_id, status, writes)
