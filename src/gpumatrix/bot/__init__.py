"""The `/rerun-test` PR-comment bot: a pure core with I/O at the edges.

    parse -> authorize -> resolve -> plan -> dispatch -> render

`parse`, `authorize`, `resolve`, `plan`, `render` and `decide` are pure; `github` (the REST client),
`tree` (the PR head read from git as data), `handle`, `sync` and `commands` (the CLI) do the I/O.
Importing this package loads only the pure core: no torch, no GitHub client, no HTTP stack.
"""

from __future__ import annotations

from gpumatrix.bot.decide import Decision, Facts, Head, decide, plan_comment, screen
from gpumatrix.bot.parse import Command, parse_comment
from gpumatrix.bot.render import GroupStatus, StatusComment, parse_status_comment, render_status_comment

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
