"""Test roots (`test_roots:` in ci/matrix.yaml): the registry, `check`, the plugin and the bot read the
same directories, and `check` never says ok about test files it did not see."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpumatrix_trees import GIT_ENV, MATRIX_YAML, registered, run_pytest, write_tree

from gpumatrix import register
from gpumatrix.adopt.pytest_settings import PytestSettings, read_pytest_settings
from gpumatrix.adopt.tree_survey import survey_files, survey_tree
from gpumatrix.bot.tree import read_test_sources
from gpumatrix.cli import main
from gpumatrix.config import MatrixError, parse_matrix
from gpumatrix.registry.discovery import discover, find_test_files

register(on=("cpu",), est_time=20)

ROOTED = MATRIX_YAML + "test_roots: [test]\n"
CPU_FILE = registered(("cpu",), body="def test_cpu():\n    pass\n")
GPU_FILE = registered(("h100",), body="def test_gpu():\n    pass\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ("tests",)),
        ("test_roots: [test]\n", ("test",)),
        ("test_roots: [tests/unit, tests/kernels/]\n", ("tests/unit", "tests/kernels")),
    ],
    ids=["default", "one", "two-trailing-slash"],
)
def test_test_roots_are_read_from_the_matrix(text: str, expected: tuple[str, ...]) -> None:
    assert parse_matrix(MATRIX_YAML + text).test_roots == expected


@pytest.mark.parametrize(
    ("roots", "message"),
    [
        ("[]", "must name at least one directory"),
        ("[/abs]", "relative to the repository root"),
        ("[../up]", "without '.' or '..'"),
        ("[tests, tests/unit]", "overlaps 'tests'"),
        ("tests", "must be a list of strings"),
    ],
    ids=["empty", "absolute", "dotdot", "nested", "not-a-list"],
)
def test_bad_test_roots_are_problems_with_a_line(roots: str, message: str) -> None:
    with pytest.raises(MatrixError, match=message) as caught:
        parse_matrix(MATRIX_YAML + f"test_roots: {roots}\n")
    assert caught.value.problems[0].line == MATRIX_YAML.count("\n") + 1


def test_registry_reads_every_root_and_follows_no_link(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {"test/a/test_1.py": CPU_FILE, "bench/test_2.py": CPU_FILE, "elsewhere/test_3.py": CPU_FILE},
    )
    (tmp_path / "test/test_link.py").symlink_to("../elsewhere/test_3.py")
    (tmp_path / "test/linked_dir").symlink_to("../elsewhere")
    assert find_test_files(tmp_path, roots=("test", "bench")) == ["bench/test_2.py", "test/a/test_1.py"]
    matrix = parse_matrix(MATRIX_YAML + "test_roots: [test, bench]\n")
    assert [f.path for f in discover(tmp_path, matrix, cache=False).files] == [
        "bench/test_2.py",
        "test/a/test_1.py",
    ]


@pytest.mark.parametrize(
    ("files", "settings", "expected"),
    [
        (["tests/test_a.py"], PytestSettings(), []),
        (
            ["test/test_a.py", "test/ops/test_b.py"],
            PytestSettings(testpaths=("test",), source="pyproject.toml"),
            ["test: 2 test file(s) pytest collects (testpaths in pyproject.toml) lie outside the test roots"],
        ),
        (
            ["tests/test_a.py", "test_top.py"],
            PytestSettings(),
            [".: 1 test file(s) pytest collects (no testpaths: the whole tree)"],
        ),
        (
            ["tests/ops/rms_test.py"],
            PytestSettings(),
            ["tests/ops/rms_test.py: pytest collects this file", "registers only test_*.py"],
        ),
    ],
    ids=["all-seen", "outside-testpaths", "top-level-file", "other-pattern"],
)
def test_survey_names_what_the_registry_does_not_see(
    files: list[str], settings: PytestSettings, expected: list[str]
) -> None:
    problems = survey_files(files, [], parse_matrix(MATRIX_YAML), settings)
    text = "\n".join(map(str, problems))
    for fragment in expected:
        assert fragment in text
    assert bool(problems) == bool(expected)


def test_survey_names_missing_and_linked_roots_and_links_inside(tmp_path: Path) -> None:
    write_tree(tmp_path, {"real/test_a.py": CPU_FILE, "tests/test_b.py": CPU_FILE, "hidden/test_c.py": ""})
    (tmp_path / "linked").symlink_to("real")
    (tmp_path / "tests/more").symlink_to("../hidden")
    matrix = parse_matrix(MATRIX_YAML + "test_roots: [tests, linked, gone]\n")
    text = "\n".join(map(str, survey_tree(tmp_path, matrix, PytestSettings(testpaths=("tests",))).problems))
    assert "test root 'gone' does not exist" in text
    assert "test root 'linked' is a symbolic link" in text
    assert "tests/more: a symbolic link under a test root is not followed" in text


@pytest.mark.parametrize(
    ("name", "text", "testpaths"),
    [
        ("pytest.ini", "[pytest]\ntestpaths = test other\n", ("test", "other")),
        ("pyproject.toml", '[tool.pytest.ini_options]\ntestpaths = ["test/"]\n', ("test",)),
        ("pyproject.toml", '[tool.pytest]\ntestpaths = ["t"]\n', ("t",)),
        ("tox.ini", "[pytest]\ntestpaths = t2\n", ("t2",)),
        ("setup.cfg", "[tool:pytest]\ntestpaths = t3\n", ("t3",)),
        ("setup.cfg", "[flake8]\nmax-line-length = 9\n", ()),
    ],
    ids=["pytest.ini", "pyproject", "pyproject-native", "tox", "setup.cfg", "no-section"],
)
def test_pytest_settings_come_from_the_file_pytest_reads(
    tmp_path: Path, name: str, text: str, testpaths: tuple[str, ...]
) -> None:
    (tmp_path / name).write_text(text)
    assert read_pytest_settings(tmp_path).testpaths == testpaths


def _check(root: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", "--root", str(root)], catch_exceptions=False)
    return result.exit_code, result.output


def test_check_fails_on_a_tree_whose_tests_it_did_not_see_and_passes_once_the_root_is_declared(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path, {"test/test_a.py": CPU_FILE, "test/ops/test_b.py": GPU_FILE})
    code, output = _check(tmp_path)
    assert code == 1
    assert "test: 2 test file(s) pytest collects" in output
    assert "add 'test' to test_roots" in output
    (tmp_path / "ci/matrix.yaml").write_text(ROOTED)
    code, output = _check(tmp_path)
    assert code == 0, output
    assert "ok: 6 runners, 2 registered test files (2 pr, 0 nightly) under test" in output


def test_check_names_an_unregistered_file_under_a_declared_root(tmp_path: Path) -> None:
    write_tree(
        tmp_path, {"test/test_a.py": CPU_FILE, "test/test_new.py": "def test_x():\n    pass\n"}, matrix=ROOTED
    )
    code, output = _check(tmp_path)
    assert code == 1
    assert "test/test_new.py:1: test file is not registered" in output


def test_plugin_gates_the_files_of_a_declared_root(tmp_path: Path) -> None:
    write_tree(tmp_path, {"test/test_cpu.py": CPU_FILE, "test/test_gpu.py": GPU_FILE}, matrix=ROOTED)
    run = run_pytest(tmp_path, "-rs", hardware="cpu")
    assert run.returncode == 0, run.output
    assert "SKIPPED [1] test/test_gpu.py: needs 1 x h100; this machine: cpu" in run.output
    assert run.report is not None
    (skip,) = run.report["files"]["test/test_gpu.py"]["skipped"]
    assert skip["hardware"] is True


def test_plugin_decides_on_a_file_reached_through_a_link_by_its_real_path(tmp_path: Path) -> None:
    write_tree(tmp_path, {"test/test_gpu.py": GPU_FILE}, matrix=ROOTED)
    (tmp_path / "tests").symlink_to("test")
    run = run_pytest(tmp_path, "tests", "-rs", hardware="cpu")
    assert "tests/test_gpu.py: needs 1 x h100; this machine: cpu" in run.output
    assert run.report is not None
    assert list(run.report["files"]) == ["test/test_gpu.py"]  # the registry's name of the file


def test_bot_reads_the_roots_of_the_matrix_and_not_a_linked_root(tmp_path: Path) -> None:
    env = GIT_ENV
    write_tree(tmp_path, {"test/test_a.py": "A\n", "tests/test_b.py": "B\n"}, matrix=None)
    (tmp_path / "linked").symlink_to("test")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    assert read_test_sources(tmp_path, sha, roots=("test",)) == {"test/test_a.py": "A\n"}
    assert read_test_sources(tmp_path, sha, roots=("linked",)) == {}
    assert read_test_sources(tmp_path, sha) == {"tests/test_b.py": "B\n"}
