"""The `/rerun-test` PR-comment bot: a pure core with I/O at the edges.

    parse -> authorize -> resolve -> plan -> dispatch -> render

Pure: `parse` (the command in a comment), `authorize`, `resolve` (specs against the registry), `plan`
(runner groups), `repeat` (--repeat's base groups and verdicts), `decide` (the chain of early returns),
`model` (the values the bot keeps), `state` (the one codec of its hidden markers), `render`, `checks` and
`ci_states` (what it writes), `report` (what a run's reports add up to).
I/O: `github` (the REST client), `tree` (the PR head read from git as data), `facts` (what is read before
acting), `dispatch` (the calls a decision makes), `artifacts`, `publish` (check runs), `handle` (a comment
event), `sync` and `ci_states_sync` (rewrite what was written from the runs). The CLI is
`gpumatrix.commands.bot`. Importing this package loads only the pure core: no torch, no GitHub client, no
HTTP stack.
"""

from __future__ import annotations

from gpumatrix.bot.authorize import screen
from gpumatrix.bot.decide import Decision, decide, plan_comment
from gpumatrix.bot.facts import Facts, Head
from gpumatrix.bot.model import GroupStatus, StatusComment
from gpumatrix.bot.parse import Command, parse_comment
from gpumatrix.bot.render import render_status_comment
from gpumatrix.bot.state import parse_status_comment

__all__ = [
    "Command",
    "Decision",
    "Facts",
    "GroupStatus",
    "Head",
    "StatusComment",
    "decide",
    "parse_comment",
    "parse_status_comment",
    "plan_comment",
    "render_status_comment",
    "screen",
]
