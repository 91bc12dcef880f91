"""Read the PR head's test files from git objects, as data: nothing is checked out, imported or run.

The bot runs from a clone of the default branch. The PR head commit is fetched into that clone
(`git fetch --depth=1 origin refs/pull/N/head`) when it is not there yet, and the test files are read
with `git ls-tree` and `git cat-file --batch` at exactly the SHA the API reported as the head: no
REST call per file, and a PR cannot point the bot at anything but blobs of its own commit (symlinks are
not followed, submodules are skipped).
"""

from __future__ import annotations

import base64
import os
import posixpath
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gpumatrix import GpumatrixError
from gpumatrix.config import DEFAULT_TEST_ROOTS

__all__ = ["TreeError", "git_head", "git_toplevel", "read_test_sources"]

_SHA_RE = re.compile(r"[0-9a-f]{40}")


class TreeError(GpumatrixError):
    """The PR head's tree cannot be read (no git clone, the commit cannot be fetched, the head moved)."""


def git_toplevel(path: str | Path) -> Path | None:
    """The top level of the git work tree holding `path`, or None outside one (or without git)."""
    try:
        out = _git(Path(path), "rev-parse", "--show-toplevel")
    except TreeError:
        return None
    return Path(out.decode().strip())


def git_head(root: str | Path) -> str | None:
    """The commit checked out at `root`, or None when `root` is not a git work tree."""
    try:
        return _git(Path(root), "rev-parse", "--verify", "-q", "HEAD^{commit}").decode().strip() or None
    except TreeError:
        return None


def read_test_sources(
    root: str | Path,
    sha: str,
    *,
    pr_number: int | None = None,
    token: str | None = None,
    roots: Sequence[str] = DEFAULT_TEST_ROOTS,
) -> dict[str, str]:
    """{path: text} of every `test_*.py` blob under the test `roots` of commit `sha` in the clone at
    `root` (a root that is a symlink holds none, as `gpumatrix.registry.find_test_files` reads it).

    When the commit is missing and `pr_number` is given, `refs/pull/<pr_number>/head` is fetched from
    `origin` first (authenticated with `token` when given, as actions/checkout does, but through the
    environment of that one git process, never its arguments or the clone's config); if that is no
    longer `sha` (the PR moved), `TreeError` says so.
    """
    if not isinstance(sha, str) or not _SHA_RE.fullmatch(sha):
        raise ValueError(f"sha must be a full 40-character lowercase hex SHA, got {sha!r}")
    root = Path(root)
    if not _has_commit(root, sha):
        if pr_number is None:
            raise TreeError(f"commit {sha[:12]} is not in the clone at {root}")
        _git(
            root,
            "fetch",
            "--quiet",
            "--no-tags",
            "--depth=1",
            "origin",
            f"refs/pull/{int(pr_number)}/head",
            config=_auth_config(token),
        )
        if not _has_commit(root, sha):
            fetched = _git(root, "rev-parse", "FETCH_HEAD").decode().strip()
            raise TreeError(
                f"the PR head moved while planning: #{pr_number} is now at {fetched[:12]}, "
                f"not {sha[:12]}; comment again"
            )

    listing = _git(root, "ls-tree", "-r", "-z", "--full-tree", sha, "--", *roots)
    blobs: list[tuple[str, str]] = []
    for entry in listing.decode("utf-8", errors="surrogateescape").split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode, kind, oid = meta.split(" ")
        name = posixpath.basename(path)
        # 120000 is a symlink: its blob is the link text, and following it is what we must not do.
        if kind == "blob" and mode != "120000" and name.startswith("test_") and name.endswith(".py"):
            blobs.append((path, oid))
    if not blobs:
        return {}
    out = _git(root, "cat-file", "--batch", stdin="".join(f"{oid}\n" for _, oid in blobs).encode())
    sources: dict[str, str] = {}
    offset = 0
    for path, _ in blobs:
        header_end = out.index(b"\n", offset)
        size = int(out[offset:header_end].split(b" ")[2])
        start = header_end + 1
        sources[path] = out[start : start + size].decode("utf-8", errors="replace")
        offset = start + size + 1  # each object is followed by a newline
    return sources


def _has_commit(root: Path, sha: str) -> bool:
    try:
        _git(root, "cat-file", "-e", f"{sha}^{{commit}}")
    except TreeError:
        return False
    return True


def _auth_config(token: str | None) -> dict[str, str]:
    if not token:
        return {}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {"http.extraheader": f"AUTHORIZATION: basic {basic}"}


def _git(root: Path, *args: str, stdin: bytes | None = None, config: dict[str, str] | None = None) -> bytes:
    # Argument lists only (no shell), and no prompt for credentials that would hang a CI job.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    for index, (key, value) in enumerate((config or {}).items()):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    if config:
        env["GIT_CONFIG_COUNT"] = str(len(config))
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            input=stdin,
            capture_output=True,
            env=env,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TreeError(f"git {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise TreeError(f"git {args[0]} failed: {message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout
