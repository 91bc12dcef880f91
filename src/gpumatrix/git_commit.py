"""The commit a tree is at: what a JSON report records as `commit` (and the bot's offline plan as the head).

`git rev-parse HEAD` in the tree, when it is (inside) a git work tree and git is installed; None otherwise.
Asked once per run, from the process that writes the report, with no prompt for credentials and a bounded
wait: a report of a tree without git says so (`commit: null`), it is never guessed.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

__all__ = ["head_commit"]

_SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_TIMEOUT = 30  # seconds: rev-parse answers in milliseconds; a hung filesystem must not hang a run


def head_commit(root: str | Path) -> str | None:
    """The full SHA of the commit checked out at `root`, or None when it is not a git work tree."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
            capture_output=True,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
            timeout=_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = done.stdout.decode("ascii", "replace").strip()
    return sha if done.returncode == 0 and _SHA_RE.fullmatch(sha) else None
