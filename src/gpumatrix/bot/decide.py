"""The comment handler's decisions as one fixed chain of early returns, with I/O behind `Facts`.

    screen (`authorize.screen`: event kind, edits, non-PR issues, bots, itself) -> parse -> permission -> usage problem
    -> --repeat cap -> PR head (SHA + registry) -> --sha -> list | rerun-failed | resolve -> plan
    -> (--repeat) base commit (merge base + registry) -> the same groups on the base

Every stop carries a reason a person can act on. The facts that cost an API call (permission, PR head,
latest status comment) are asked for only when the chain gets that far, through the narrow `Facts`
interface: `gpumatrix bot handle` answers it from GitHub and git, `gpumatrix plan` offline, tests with
small fakes. The `Decision` says what to post and dispatch; carrying it out is `gpumatrix.bot.dispatch`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpumatrix.bot.authorize import Ignored, authorize, screen
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.facts import Facts, Head, Unavailable
from gpumatrix.bot.model import BASE, HEAD, GroupStatus, StatusComment
from gpumatrix.bot.parse import LIST, RERUN_FAILED, Command
from gpumatrix.bot.plan import (
    RunnerGroup,
    check_runners,
    check_sha,
    listing_notes,
    plan_groups,
    plan_listing,
    replan_group,
)
from gpumatrix.bot.render import render_listing, render_status_comment
from gpumatrix.bot.repeat import base_groups, within_budget
from gpumatrix.bot.resolve import Refusal, resolve_specs
from gpumatrix.config import Matrix

__all__ = ["ACTIONS", "Decision", "decide", "plan_comment"]

ACTIONS = ("dispatch", "list", "rerun-failed", "ignore", "refuse")
# A run that failed, was cancelled, or never started because its dispatch failed is worth re-running.
_RERUN_STATES = ("failed", "cancelled", "error")


@dataclass(frozen=True)
class Decision:
    action: str  # one of ACTIONS
    reason: str
    command: Command | None = None
    groups: tuple[RunnerGroup, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    sha: str | None = None
    status: StatusComment | None = None  # the status comment to post, before any dispatch
    comment: str | None = None  # the Markdown to post: the status comment or the listing

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {self.action!r}")

    def to_json(self) -> dict[str, Any]:
        """The `gpumatrix plan --json` document."""
        errors = [{"spec": r.spec, "message": r.message} for r in self.refusals]
        if not self.groups and not errors:  # nothing else explains the outcome: the reason does
            errors.append({"spec": self.command.line if self.command else "", "message": self.reason})
        repeated = self.status is not None and bool(self.status.repeat) and bool(self.groups)
        groups: tuple[RunnerGroup | GroupStatus, ...] = self.status.groups if repeated else self.groups
        document = {
            "action": self.action,
            "runners": [
                {
                    "label": g.label,
                    "tests": list(g.tests),
                    **({"include_disabled": True} if g.include_disabled else {}),
                    **({"commit": g.commit} if repeated else {}),
                }
                for g in groups
            ],
            "errors": errors,
            "comment": self.comment,
        }
        if repeated:
            document.update(repeat=self.status.repeat, base=self.status.base_sha)
        return document


def plan_comment(event: CommentEvent, *, matrix: Matrix, facts: Facts) -> Decision:
    """The whole chain for one comment event."""
    screened = screen(event, matrix=matrix)
    if isinstance(screened, Ignored):
        return Decision("ignore", screened.reason)
    return decide(event, screened, matrix=matrix, facts=facts)


def decide(event: CommentEvent, command: Command, *, matrix: Matrix, facts: Facts) -> Decision:
    """From a parsed command to what to post and dispatch."""
    # Authorization comes before any usage message: strangers get no comment from the bot.
    denied = authorize(event.author, facts.permission(event.author), required=matrix.bot.permission)
    if denied is not None:
        return Decision("ignore", denied.reason, command)
    status = StatusComment(
        source_comment_id=event.comment_id,
        command=command.line,
        author=event.author,
        pr=event.issue_number or None,
    )
    if command.problem:
        return _refuse(command, status, command.problem)
    if command.repeat is not None and command.repeat > matrix.bot.max_repeat:
        return _refuse(
            command,
            status,
            f"--repeat {command.repeat} is more runs than this repository allows (bot max_repeat in "
            f"{matrix.source}: {matrix.bot.max_repeat})",
        )

    try:
        head = facts.head()
    except Unavailable as exc:  # e.g. the PR moved while its tree was fetched: nothing was planned
        return _refuse(command, status, str(exc))
    status = replace(status, sha=head.sha)
    problem = check_sha(command.sha, head.sha)
    if problem:
        return _refuse(command, status, problem)

    if command.kind == LIST:
        listing, refusals = plan_listing(head.registry, matrix, runners=command.runners)
        comment = render_listing(
            listing,
            source_comment_id=event.comment_id,
            sha=head.sha,
            notes=listing_notes(listing, head.registry, matrix),
        )
        return Decision(
            "list",
            f"{sum(map(len, listing.values()))} registered file(s) on {len(listing)} runner(s)",
            command,
            tuple(RunnerGroup(label, paths) for label, paths in listing.items()),
            tuple(refusals),
            head.sha,
            comment=comment,
        )

    if command.kind == RERUN_FAILED:
        return _rerun_failed(command, status, head, matrix, facts)

    resolution = resolve_specs(command.specs, head.registry)
    plan = plan_groups(
        resolution.targets,
        head.registry,
        matrix,
        runners=command.runners,
        include_disabled=command.include_disabled,
    )
    refusals = resolution.refusals + plan.refusals
    if command.repeat is not None and plan.groups:
        return _dispatch_repeated(command, status, head, plan.groups, refusals, matrix, facts)
    return _dispatch("dispatch", command, status, plan.groups, refusals)


def _dispatch_repeated(
    command: Command,
    status: StatusComment,
    head: Head,
    groups: tuple[RunnerGroup, ...],
    refusals: tuple[Refusal, ...],
    matrix: Matrix,
    facts: Facts,
) -> Decision:
    """Each runner's group on the head, then the same tests on the base commit (those it has)."""
    groups, over = within_budget(groups, head.registry, matrix, repeat=command.repeat or 1)
    refusals += over
    if not groups:
        return _dispatch("dispatch", command, status, groups, refusals)
    try:
        base = facts.base(head)
    except Unavailable as exc:
        return _refuse(command, status, str(exc))
    if base.sha == head.sha:
        return _refuse(
            command,
            status,
            f"the PR head is its own merge base with {base.ref}: there is no change of this PR to compare",
        )
    on_base, new, dropped = base_groups(
        groups, base.registry, matrix, include_disabled=command.include_disabled
    )
    status = replace(status, repeat=command.repeat, base_sha=base.sha, base_ref=base.ref, new_tests=new)
    by_label = {group.label: group for group in on_base}
    statuses = []
    for group in groups:
        statuses.append(
            GroupStatus(group.label, group.tests, include_disabled=group.include_disabled, commit=HEAD)
        )
        twin = by_label.get(group.label)
        if twin is not None:
            statuses.append(
                GroupStatus(twin.label, twin.tests, include_disabled=twin.include_disabled, commit=BASE)
            )
    return _dispatch(
        "dispatch", command, status, groups + on_base, refusals + dropped, statuses=tuple(statuses)
    )


def _rerun_failed(
    command: Command, status: StatusComment, head: Head, matrix: Matrix, facts: Facts
) -> Decision:
    try:
        previous = facts.latest_status()
    except Unavailable as exc:
        return Decision("rerun-failed", str(exc), command, sha=head.sha)
    if previous is None:
        return _refuse(command, status, "there is no earlier status comment on this PR to re-run from")
    refusals, _ = check_runners(command.runners, matrix)
    groups: list[RunnerGroup] = []
    for old in previous.groups:
        if old.state not in _RERUN_STATES or (command.runners and old.label not in command.runners):
            continue
        if old.commit == BASE:  # a --repeat command's run on the base measured it; it is not re-run
            continue
        group, dropped = replan_group(
            old.label,
            old.tests,
            head.registry,
            matrix=matrix,
            include_disabled=old.include_disabled or command.include_disabled,
        )
        refusals += dropped
        if group is not None:
            groups.append(group)
    if not groups and not refusals:
        return _refuse(command, status, "nothing failed or was cancelled in the latest status comment")
    return _dispatch("rerun-failed", command, status, tuple(groups), tuple(refusals))


def _dispatch(
    action: str,
    command: Command,
    status: StatusComment,
    groups: tuple[RunnerGroup, ...],
    refusals: tuple[Refusal, ...],
    *,
    statuses: tuple[GroupStatus, ...] | None = None,
) -> Decision:
    if statuses is None:
        statuses = tuple(GroupStatus(g.label, g.tests, include_disabled=g.include_disabled) for g in groups)
    status = replace(status, groups=statuses, refusals=refusals)
    comment = render_status_comment(status)
    if not groups:
        return Decision(
            "refuse",
            "nothing to dispatch: every spec was refused",
            command,
            (),
            refusals,
            status.sha,
            status,
            comment,
        )
    tests = sum(len(g.tests) for g in groups)
    reason = f"{len(groups)} runner group(s), {tests} test(s)"
    return Decision(action, reason, command, groups, refusals, status.sha, status, comment)


def _refuse(command: Command, status: StatusComment, problem: str) -> Decision:
    status = replace(status, problem=problem)
    return Decision(
        "refuse", problem, command, sha=status.sha, status=status, comment=render_status_comment(status)
    )
