"""The registry cache: a warm run reads only files whose size or mtime changed, and gives the same registry."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

import gpumatrix.registry.discovery
from gpumatrix import register
from gpumatrix.config import load_matrix
from gpumatrix.registry.cache import CACHE_PATH
from gpumatrix.registry.discovery import discover

register(on=("cpu",), est_time=3)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
PAST = 1_700_000_000  # seconds: files older than any cache written by the test


def _write(root: Path, relpath: str, text: str, *, when: int = PAST) -> None:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (when, when))


def _registered(on: str = '("cpu",)', est_time: int = 1) -> str:
    return f"from gpumatrix import register\nregister(on={on}, est_time={est_time})\n"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths whose bytes discovery read, in order."""
    seen: list[str] = []
    original = gpumatrix.registry.discovery.read_source_bytes

    def counting(path: str, **kwargs: int) -> tuple[bytes, int]:
        seen.append(Path(path).name)
        return original(path, **kwargs)

    monkeypatch.setattr(gpumatrix.registry.discovery, "read_source_bytes", counting)
    return seen


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    _write(tmp_path, "tests/test_a.py", _registered())
    _write(tmp_path, "tests/test_b.py", _registered('("h100",)'))
    _write(
        tmp_path,
        "tests/test_bad.py",
        "from gpumatrix import register\ndef test_x():\n    register(on=('cpu',), est_time=1)\n",
    )
    return tmp_path


def test_a_warm_run_reads_nothing_and_gives_the_same_registry(tree: Path, reads: list[str]) -> None:
    cold = discover(tree, MATRIX)
    assert sorted(reads) == ["test_a.py", "test_b.py", "test_bad.py"]
    reads.clear()
    warm = discover(tree, MATRIX)
    assert reads == []
    assert warm == cold and [str(p) for p in warm.problems] == [str(p) for p in cold.problems]
    assert [f.path for f in warm.files] == ["tests/test_a.py", "tests/test_b.py"]
    assert "tests/test_bad.py:3: register(...) must be called at module top level" in str(warm.problems[0])


@pytest.mark.parametrize("change", ["size", "mtime"])
def test_a_changed_file_is_read_again(tree: Path, reads: list[str], change: str) -> None:
    discover(tree, MATRIX)
    reads.clear()
    if change == "size":
        _write(tree, "tests/test_a.py", _registered('("cpu", "h100")'))
    else:  # same size, new time: est_time 1 -> 2
        _write(tree, "tests/test_a.py", _registered(est_time=2), when=PAST + 60)
    registry = discover(tree, MATRIX)
    assert reads == ["test_a.py"]
    registration = registry.get("tests/test_a.py")
    assert registration is not None
    assert (registration.on, registration.est_time) == (
        (("cpu", "h100"), 1.0) if change == "size" else (("cpu",), 2.0)
    )


def test_files_modified_no_earlier_than_the_cache_are_read_again(tree: Path, reads: list[str]) -> None:
    """Racily clean entries (git's term): an edit within the timestamp granularity must not hide."""
    future = (PAST + 10**9) * 10**9  # ns; no cache is written after it
    os.utime(tree / "tests" / "test_b.py", ns=(future, future))
    discover(tree, MATRIX)
    assert (tree / CACHE_PATH).stat().st_mtime_ns < future
    reads.clear()
    discover(tree, MATRIX)
    assert reads == ["test_b.py"]


def test_new_and_removed_files(tree: Path, reads: list[str]) -> None:
    discover(tree, MATRIX)
    reads.clear()
    (tree / "tests" / "test_b.py").unlink()
    _write(tree, "tests/sub/test_c.py", _registered())
    registry = discover(tree, MATRIX)
    assert reads == ["test_c.py"]
    assert [f.path for f in registry.files] == ["tests/sub/test_c.py", "tests/test_a.py"]
    assert sorted(json.loads((tree / CACHE_PATH).read_text())["files"]) == [
        "tests/sub/test_c.py",
        "tests/test_a.py",
        "tests/test_bad.py",
    ]


def test_runners_are_resolved_from_the_matrix_of_each_run(tree: Path, reads: list[str]) -> None:
    discover(tree, MATRIX)
    reads.clear()
    text = (REPO_ROOT / "ci" / "matrix.yaml").read_text().replace("label: 1-gpu-h100", "label: one-hopper")
    (tree / "matrix.yaml").write_text(text)
    registry = discover(tree, load_matrix(tree / "matrix.yaml"))
    assert reads == []
    assert registry.get("tests/test_b.py").runners == ("one-hopper",)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"key": "other-code", "files": {}}',
        '["a list"]',
        '{"key": "KEY", "files": {"tests/test_a.py": [1, 2]}}',
        '{"key": "KEY", "files": {"tests/test_a.py": [SIZE, MTIME, {"path": 1}, []]}}',
        '{"key": "KEY", "files": {"tests/test_a.py": [SIZE, MTIME, ["x"], []]}}',
    ],
    ids=["corrupt", "other-code", "not-a-mapping", "short-entry", "fields-as-a-dict", "too-few-fields"],
)
def test_a_cache_that_cannot_be_used_is_rebuilt(tree: Path, reads: list[str], content: str) -> None:
    from gpumatrix.registry.discovery import reading_code_key

    expected = discover(tree, MATRIX, cache=False)
    stat = (tree / "tests" / "test_a.py").stat()
    content = content.replace("KEY", reading_code_key()).replace("SIZE", str(stat.st_size))
    content = content.replace("MTIME", str(stat.st_mtime_ns))
    (tree / CACHE_PATH).parent.mkdir(parents=True)
    (tree / CACHE_PATH).write_text(content)
    os.utime(tree / CACHE_PATH, (PAST + 3600, PAST + 3600))
    reads.clear()
    assert discover(tree, MATRIX) == expected
    assert sorted(reads) == ["test_a.py", "test_b.py", "test_bad.py"]


def test_a_tree_where_the_cache_cannot_be_written_still_works(tree: Path) -> None:
    (tree / ".gpumatrix").write_text("a file where the cache directory would go")
    assert [f.path for f in discover(tree, MATRIX).files] == ["tests/test_a.py", "tests/test_b.py"]


def test_without_cache_nothing_is_written(tree: Path) -> None:
    discover(tree, MATRIX, cache=False)
    assert not (tree / ".gpumatrix").exists()
