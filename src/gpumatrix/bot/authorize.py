"""Who may run the bot, and which comments it does not look at: every filter says why it stopped.

The filters run as a fixed chain of early returns (the order of Prow's trigger plugin): the repository
the event comes from, event kind, edits, issues that are not PRs, bots, the bot itself (by its login); the permission check comes last because it is
the only one that costs an API call. Permissions are ordered `none < read < triage < write < maintain <
admin` and fail closed: an unknown level or a failed lookup counts as `none`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.parse import Command, parse_comment
from gpumatrix.config import PERMISSION_LEVELS, BotConfig, Matrix

__all__ = ["STATUS_MARKER", "Ignored", "authorize", "permission_level", "screen", "screen_event"]

# Every comment the bot writes starts with this hidden marker (see gpumatrix.bot.render and .state).
STATUS_MARKER = "<!-- gpumatrix:"


@dataclass(frozen=True)
class Ignored:
    """The comment is not acted on; `reason` is what the log and the `plan` output show."""

    reason: str


def screen_event(event: CommentEvent, *, bot: BotConfig, repository: str | None = None) -> Ignored | None:
    """The filters that need no API call; None means the comment may be looked at. `repository` is the
    one the bot serves (`owner/name`, GITHUB_REPOSITORY): an event of any other is not looked at (None:
    an offline dry run, which has no event to check)."""
    if repository is not None and event.repository.lower() != repository.lower():
        where = event.repository or "no repository"
        return Ignored(f"Event from {where}, not {repository}: this bot serves its own repository only.")
    if event.action not in ("created", "edited"):
        return Ignored(f"Comment was {event.action}; only new comments are handled.")
    if event.action == "edited" and not bot.allow_edits:
        return Ignored("Comment was edited; edits are ignored (bot.allow_edits is false).")
    if not event.is_pull_request:
        return Ignored("Comment on an issue that is not a pull request.")
    if event.author_type == "Bot" or event.author.endswith("[bot]"):
        return Ignored("Comment by a bot.")
    if event.author.lower() == bot.login.lower() or event.body.lstrip().startswith(STATUS_MARKER):
        return Ignored("Comment by gpumatrix itself.")
    return None


def screen(event: CommentEvent, *, matrix: Matrix, repository: str | None = None) -> Ignored | Command:
    """The filters that need no API call, then the parse: the command, or why there is none. `repository`:
    the one the bot serves, which the event must come from (`screen_event`)."""
    ignored = screen_event(event, bot=matrix.bot, repository=repository)
    if ignored is not None:
        return ignored
    command = parse_comment(event.body)
    if command is None:
        return Ignored("No /rerun-test or /rerun-failed command in the comment.")
    return command


def permission_level(permission: str | None, role_name: str | None = None) -> str:
    """The commenter's level in PERMISSION_LEVELS; unknown or missing values count as `none`.

    GitHub's collaborator-permission endpoint reports `permission` in the legacy four levels (a
    maintainer shows as `write`) and the finer `role_name` (`maintain`, `triage`, or a custom role);
    the higher of the two that this table knows is the level.
    """
    known = [value for value in (permission, role_name) if value in PERMISSION_LEVELS]
    return max(known, key=PERMISSION_LEVELS.index) if known else "none"


def authorize(author: str, level: str | None, *, required: str) -> Ignored | None:
    """None when `level` reaches `required`; a lookup that failed is passed as `level=None`."""
    if required not in PERMISSION_LEVELS:
        raise ValueError(f"required must be one of {', '.join(PERMISSION_LEVELS)}, got {required!r}")
    granted = level if level in PERMISSION_LEVELS else "none"
    if PERMISSION_LEVELS.index(granted) >= PERMISSION_LEVELS.index(required):
        return None
    if level is None:
        return Ignored(
            f"@{author}'s permission could not be read; treated as none (/rerun-test needs {required})."
        )
    return Ignored(f"@{author} has {granted} permission; /rerun-test needs {required}.")
