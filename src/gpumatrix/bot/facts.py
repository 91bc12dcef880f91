"""The facts a decision about a comment may need, and the narrow interface it asks for them through.

`gpumatrix.bot.decide` asks a `Facts` for the commenter's permission, the PR head (its SHA, pinned, and the
registry of its tree read as data), the base of a `--repeat` comparison and the latest status comment,
each only when its chain of early returns gets that far. `gpumatrix.bot.gather.LiveFacts` answers from
GitHub and git, `gpumatrix plan` offline, tests with small fakes. Plain values and a Protocol: no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpumatrix import GpumatrixError
from gpumatrix.bot.model import StatusComment
from gpumatrix.registry.model import Registry

__all__ = ["Base", "Facts", "Head", "Unavailable"]


class Unavailable(GpumatrixError):
    """A fact cannot be known here (for example the latest status comment in an offline dry run)."""


@dataclass(frozen=True)
class Head:
    """The PR head: its SHA, read once and pinned, and the registry of its tree read as data."""

    sha: str | None
    registry: Registry


@dataclass(frozen=True)
class Base:
    """The base of a `--repeat` comparison: the merge base of the head with the PR's base branch (`ref`),
    read once and pinned, and the registry of its tree read as data."""

    sha: str
    ref: str
    registry: Registry


class Facts(Protocol):
    def permission(self, login: str) -> str | None:
        """The commenter's level in PERMISSION_LEVELS; None when the lookup failed."""

    def head(self) -> Head:
        """The PR head, read once; raises `Unavailable` when its tree cannot be read."""

    def base(self, head: Head) -> Base:
        """The merge base of `head` with the PR's base branch (for `--repeat`); raises `Unavailable`."""

    def latest_status(self) -> StatusComment | None:
        """The PR's latest status comment with every run's current state; raises `Unavailable`."""
