"""`gpumatrix bot handle`: one `issue_comment` event, from its text to the runs it dispatches.

The route runs one way: each step is a module this one enters once, and none calls back into an earlier
one (tests/e2e/gpumatrix/bot/test_bot_route.py follows an event through it):

    parse      `authorize.screen`: the event's repository, kind and author, then the command; pure
    read       `gather.arrive`: the comment as it stands now, the 👀 lock, a status comment it already has
    decide     `decide.decide`: a fixed chain of early returns, pure; the facts it needs (permission, PR
               head and registry, the base of a --repeat, the latest status comment) come from
               `gather.LiveFacts` as far as the chain gets, so a comment that is not acted on reads no head
    carry out  `dispatch.carry_out`: post, dispatch, publish the check runs, rewrite, react (a comment
               handled before: `dispatch.resync`)

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
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpumatrix.bot.authorize import Ignored, screen
from gpumatrix.bot.decide import decide
from gpumatrix.bot.dispatch import DispatchClient, HandleResult, carry_out, resync
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.gather import FactsClient, SourceReader, arrive
from gpumatrix.bot.github import GitHubApiError
from gpumatrix.bot.sync import SyncClient
from gpumatrix.bot.tree import merge_base, read_test_sources
from gpumatrix.config import Matrix

__all__ = ["HandleClient", "handle_event"]


class HandleClient(FactsClient, DispatchClient, SyncClient, Protocol):
    @property
    def repository(self) -> str: ...


def handle_event(
    event: CommentEvent,
    *,
    matrix: Matrix,
    client: HandleClient,
    root: str | Path,
    read_sources: SourceReader = read_test_sources,
    find_base: Callable[..., str] = merge_base,
) -> HandleResult:
    """Handle one comment event end to end; see the module docstring for the route and the calls it makes."""
    command = screen(event, matrix=matrix, repository=client.repository)
    if isinstance(command, Ignored):
        return HandleResult("ignore", command.reason)
    arrival = arrive(
        event,
        command.line,
        matrix=matrix,
        client=client,
        root=Path(root),
        read_sources=read_sources,
        find_base=find_base,
    )
    if isinstance(arrival, Ignored):
        return HandleResult("ignore", arrival.reason)
    if arrival.handled:
        return resync(arrival.seen, client=client, matrix=matrix)
    try:
        decision = decide(arrival.event, command, matrix=matrix, facts=arrival.facts)
        return carry_out(decision, arrival.event, matrix=matrix, client=client)
    except Exception:
        try:  # best effort: the original error is what matters
            client.add_reaction(event.comment_id, "confused")
        except GitHubApiError:
            pass
        raise
