"""Read the PR head's test files from git objects, as data: nothing is checked out, imported or run.

The bot runs from a clone of the default branch. The PR head commit is fetched into that clone
(`git fetch --depth=1 origin refs/pull/N/head`) when it is not there yet, and the test files are read
with `git ls-tree` and `git cat-file --batch` at exactly the SHA the API reported as the head: no
REST call per file, and a PR cannot point the bot at anything but blobs of its own commit (symlinks are
not followed, submodules are skipped).

`/rerun-test --repeat N` also runs the tests on the base commit, the merge base of the head with the PR's
base branch (`merge_base`): the branch as the origin has it now and the PR head are fetched with the
history between them (a shallow clone is deepened for it), and git finds their best common ancestor.
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
from gpumatrix.git_commit import head_commit

__all__ = ["TreeError", "git_head", "git_toplevel", "merge_base", "read_test_sources"]

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
    return head_commit(root)


def read_test_sources(
    root: str | Path,
    sha: str,
    *,
    pr_number: int | None = None,
    token: str | None = None,
    roots: Sequence[str] = DEFAULT_TEST_ROOTS,
) -> dict[str, str]:
    """{path: text} of every `test_*.py` blob under the test `roots` of commit `sha` in the clone at
    `root` (a root that is a symlink holds none, as `gpumatrix.registry.discovery.find_test_files` reads it).

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


def merge_base(
    root: str | Path, head: str, base_ref: str, *, pr_number: int | None = None, token: str | None = None
) -> str:
    """The merge base of commit `head` with branch `base_ref`, in the clone at `root`.

    With `pr_number` (the bot), `refs/heads/<base_ref>` and `refs/pull/<pr_number>/head` are fetched from
    `origin` first, with their history (`--unshallow` when the clone is shallow), into refs of the bot's own;
    if the PR head is then no longer `head`, `TreeError` says so. Without it, the local branch is used.
    """
    if not isinstance(head, str) or not _SHA_RE.fullmatch(head):
        raise ValueError(f"head must be a full 40-character lowercase hex SHA, got {head!r}")
    root = Path(root)
    try:  # a name from the API, not from a comment; still, only a valid branch name reaches git as a ref
        if not isinstance(base_ref, str) or not base_ref or base_ref.startswith("-"):
            raise TreeError("not a branch name")
        _git(root, "check-ref-format", "--branch", base_ref)
    except TreeError:
        raise TreeError(f"the PR's base branch {base_ref!r} is not a branch name git accepts") from None
    ref = base_ref
    if pr_number is not None:
        shallow = _git(root, "rev-parse", "--is-shallow-repository").decode().strip() == "true"
        _git(
            root,
            "fetch",
            "--quiet",
            "--no-tags",
            *(["--unshallow"] if shallow else []),
            "origin",
            f"+refs/heads/{base_ref}:refs/gpumatrix/base",
            f"+refs/pull/{int(pr_number)}/head:refs/gpumatrix/head",
            config=_auth_config(token),
        )
        fetched = _git(root, "rev-parse", "refs/gpumatrix/head").decode().strip()
        if fetched != head:
            raise TreeError(
                f"the PR head moved while planning: #{pr_number} is now at {fetched[:12]}, not {head[:12]}; "
                "comment again"
            )
        ref = "refs/gpumatrix/base"
    try:
        return _git(root, "merge-base", head, ref).decode().strip()
    except TreeError:
        raise TreeError(
            f"commit {head[:12]} and {base_ref} have no common ancestor in the clone at {root}"
        ) from None


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
