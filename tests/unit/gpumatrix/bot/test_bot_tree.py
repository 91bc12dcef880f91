"""Reading the PR head's test files from git objects: exact blobs, no symlinks, fetch when missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gpumatrix_trees import GIT_ENV

from gpumatrix import register
from gpumatrix.bot.tree import TreeError, git_head, git_toplevel, read_test_sources

register(on=("cpu",), est_time=20)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str | bytes], message: str = "c") -> str:
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def test_reads_exactly_the_test_blobs_of_the_commit(repo: Path) -> None:
    sha = commit(
        repo,
        {
            "tests/unit/test_a.py": "A = 1\n",
            "tests/kernels/deep/test_b.py": "B = 2\n",
            "tests/unit/helpers.py": "not a test\n",
            "tests/unit/test_data.txt": "not python\n",
            "other/test_c.py": "outside tests/\n",
            "tests/unit/test_latin1.py": b"X = '\xe9'\n",
        },
    )
    (repo / "tests/unit/test_link.py").symlink_to("../../other/test_c.py")
    sha_with_link = commit(repo, {})
    (repo / "tests/unit/test_a.py").write_text("changed in the work tree, not committed\n")

    expected = {
        "tests/kernels/deep/test_b.py": "B = 2\n",
        "tests/unit/test_a.py": "A = 1\n",
        "tests/unit/test_latin1.py": "X = '\ufffd'\n",
    }
    assert read_test_sources(repo, sha) == expected
    assert read_test_sources(repo, sha_with_link) == expected  # the symlink is neither read nor followed


def test_empty_tests_dir(repo: Path) -> None:
    sha = commit(repo, {"README.md": "hi\n"})
    assert read_test_sources(repo, sha) == {}


# (id, sha)
BAD_SHAS = [
    ("Short.", "abc1234"),
    ("A ref name.", "HEAD"),
    ("Upper case.", "A" * 40),
    ("Option-like.", "-" * 40),
]


@pytest.mark.parametrize("sha", [r[1] for r in BAD_SHAS], ids=[r[0] for r in BAD_SHAS])
def test_sha_must_be_full_hex(repo: Path, sha: str) -> None:
    with pytest.raises(ValueError, match="sha must be a full 40-character"):
        read_test_sources(repo, sha)


def test_missing_commit_without_pr_number(repo: Path) -> None:
    commit(repo, {"tests/test_a.py": "x\n"})
    with pytest.raises(TreeError, match="is not in the clone"):
        read_test_sources(repo, "f" * 40)


@pytest.fixture
def origin_with_pull(tmp_path: Path, repo: Path) -> tuple[Path, str]:
    """A bare origin whose refs/pull/7/head is a commit the clone does not have; returns (clone, head)."""
    commit(repo, {"tests/test_main.py": "main\n"})
    git(repo, "checkout", "-q", "-b", "feature")
    head = commit(repo, {"tests/test_new.py": "added by the PR\n"})
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(origin))
    git(origin, "update-ref", "refs/pull/7/head", head)
    git(origin, "branch", "-q", "-D", "feature")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--branch", "main", f"file://{origin}", str(clone))
    return clone, head


def test_fetches_the_pull_head_when_missing(origin_with_pull: tuple[Path, str]) -> None:
    clone, head = origin_with_pull
    assert read_test_sources(clone, head, pr_number=7) == {
        "tests/test_main.py": "main\n",
        "tests/test_new.py": "added by the PR\n",
    }
    assert not (clone / "tests/test_new.py").exists()  # read as data: nothing checked out


def test_a_moved_head_is_refused(origin_with_pull: tuple[Path, str]) -> None:
    clone, _ = origin_with_pull
    with pytest.raises(TreeError, match="the PR head moved while planning"):
        read_test_sources(clone, "e" * 40, pr_number=7)


def test_git_head_and_toplevel(repo: Path, tmp_path: Path) -> None:
    sha = commit(repo, {"tests/test_a.py": "x\n"})
    (repo / "sub").mkdir()
    assert git_head(repo) == sha
    assert git_toplevel(repo / "sub") == repo.resolve()
    outside = tmp_path / "plain"
    outside.mkdir()
    assert git_head(outside) is None
    assert git_toplevel(outside) is None
