"""Adopting gpumatrix in two real GPU-kernel test trees, as a new user would: plain `init`, then
`register --suggest --write`, `check`, `list` and `run --runner cpu` (tests/fixtures/adoption/SOURCES.md
says where the trees come from, at which version, under which licence)."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from repo_paths import FIXTURES

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.config import load_matrix

register(on=("cpu",), est_time=30)

FIXTURES = FIXTURES / "adoption"


@dataclass(frozen=True)
class Tree:
    archive: str
    root: str  # the test root init must find (pytest's testpaths, else the directory of the tests)
    files: int  # test_*.py files under it
    classes: tuple[str, ...]
    runners: tuple[tuple[str, int], ...]  # (class, GPUs) of the GPU runners
    reasons: tuple[str, ...]  # lines init must print
    cpu_slice: int  # files the cpu runner runs
    cpu_failure: str  # why the cpu slice cannot pass without the project installed
    cpu_exit: int  # 1: tests failed to import; 2: a conftest did (a configuration error)


TREES = [
    Tree(
        "liger-kernel-0.8.5-tests.tar.gz",
        "test",
        107,
        ("h100", "b200"),
        (("h100", 1), ("h100", 2), ("h100", 8), ("b200", 1), ("b200", 2), ("b200", 8)),
        (
            "test files: 3 files skip unless compute capability >= 10.0 -> b200",
            "test files: 2 files need 8 GPUs -> runners of 8 x h100, b200",
        ),
        34,
        "No module named 'liger_kernel'",
        2,
    ),
    Tree(
        "quack-kernels-0.6.5-tests.tar.gz",
        "tests",
        40,
        ("h100", "b200", "5090"),
        (("h100", 1), ("h100", 2), ("b200", 1), ("b200", 2), ("5090", 1), ("5090", 2)),
        (
            "test files: 2 files skip unless compute capability >= 10.0 -> b200",
            "test files: 2 files skip unless compute capability >= 12.0 -> 5090",
        ),
        7,
        "No module named 'quack'",
        1,
    ),
]


def _gpumatrix(root: Path, *args: str, cache: Path) -> Result:
    return CliRunner().invoke(
        main,
        [*args, "--root", str(root)],
        env={"GPUMATRIX_HARDWARE": "cpu", "GPUMATRIX_CACHE_DIR": str(cache)},
    )


@pytest.mark.parametrize("tree", TREES, ids=[t.archive.split("-tests")[0] for t in TREES])
def test_a_real_tree_is_placed_whole_by_plain_init_and_suggest(tree: Tree, tmp_path: Path) -> None:
    with tarfile.open(FIXTURES / tree.archive) as archive:
        archive.extractall(tmp_path, filter="data")
    (root,) = tmp_path.iterdir()
    cache = tmp_path / "cache"

    init = _gpumatrix(root, "init", cache=cache)
    assert init.exit_code == 0, init.output
    for line in tree.reasons:
        assert line in init.output
    assert f"classes: cpu, {', '.join(tree.classes)}" in init.output

    suggested = _gpumatrix(root, "register", "--suggest", "--write", cache=cache)
    assert suggested.exit_code == 0, suggested.output
    assert f"{tree.files} file(s) registered; 0 problem(s)" in suggested.output

    check = _gpumatrix(root, "check", cache=cache)
    assert check.exit_code == 0, check.output
    runners = 1 + len(tree.runners)
    assert f"ok: {runners} runners, {tree.files} registered test files" in check.output

    listed = json.loads(_gpumatrix(root, "list", "--json", cache=cache).output)
    assert len(listed) == tree.files
    assert all(f["path"].startswith(f"{tree.root}/") for f in listed)
    matrix = load_matrix(root / "ci" / "matrix.yaml")
    assert tuple(matrix.classes) == ("cpu", *tree.classes)
    assert {(r.gpu_class, r.gpus) for r in matrix.runners if r.gpus} == set(tree.runners)
    cpu = json.loads(_gpumatrix(root, "list", "--runner", "cpu", "--json", cache=cache).output)
    assert len(cpu) == tree.cpu_slice

    # The CPU slice runs, and fails honestly: the project's own package is not installed here.
    run = _gpumatrix(root, "run", "--runner", "cpu", "-n", "0", cache=cache)
    assert run.exit_code == tree.cpu_exit, run.output
    assert tree.cpu_failure in run.output
    assert f"gated to other runners ({tree.files - tree.cpu_slice} files" in " ".join(run.output.split())
