"""Carry out a decision: the GitHub calls that post, dispatch and publish what `decide` chose.

For a command that dispatches to N runners, in order:

    status comment, posted before dispatch             1   (its id is a workflow input)
    workflow dispatch, one per runner                  N   (head SHA pinned; a failure shows on its line only)
    check run on the pinned SHA, one per runner        N   (queued; a commit status if checks are refused)
    status comment, rewritten with run links           1
    🚀 / 😕 reaction (outcome)                          1

A listing is one comment; a decision to ignore, or a refusal with nothing to post, is a 😕 reaction. The
check runs of a status comment just posted cannot exist yet, so they are created without a lookup. A
comment handled before dispatches nothing: `resync` rewrites its status comment and check runs instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from gpumatrix.bot.decide import Decision
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.github import CommentData, DispatchedRun, GitHubApiError
from gpumatrix.bot.model import BASE, GroupStatus, StatusComment
from gpumatrix.bot.publish import ChecksPublisher, Publication, PublishClient
from gpumatrix.bot.render import render_status_comment
from gpumatrix.bot.sync import SyncClient, sync_status_comment
from gpumatrix.config import Matrix

__all__ = ["DispatchClient", "HandleResult", "carry_out", "dispatch_inputs", "resync"]


class DispatchClient(PublishClient, Protocol):
    def add_reaction(self, comment_id: int, content: str) -> bool: ...

    def create_comment(self, issue_number: int, body: str) -> int: ...

    def post_comment(self, issue_number: int, body: str) -> CommentData: ...

    def update_comment(self, comment_id: int, body: str) -> None: ...

    def dispatch(self, workflow: str, *, ref: str, inputs: Mapping[str, str]) -> DispatchedRun: ...


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


def carry_out(
    decision: Decision, event: CommentEvent, *, matrix: Matrix, client: DispatchClient
) -> HandleResult:
    """Make the GitHub calls `decision` asks for (see the module docstring), in order."""
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


def resync(seen: CommentData | None, *, client: SyncClient, matrix: Matrix) -> HandleResult:
    """A comment handled before: nothing is dispatched; its status comment (`seen`), when it has one, is
    re-synced with its own check runs only, so handling a comment again adds nothing to the PR."""
    if seen is None:
        return HandleResult("ignore", "Comment already handled (👀 is there); nothing dispatched.")
    synced = sync_status_comment(seen.id, client=client, matrix=matrix, ci_states=False)
    return HandleResult(
        "ignore",
        "Comment already handled; nothing dispatched, its status comment re-synced.",
        seen.id,
        synced.status,
        synced.publication,
    )
