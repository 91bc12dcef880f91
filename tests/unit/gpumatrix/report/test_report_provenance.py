"""A report says what it is (its commit, its suite, where its hardware was learnt) and coverage uses it.

`gpumatrix run` in a git tree records the commit checked out and the suite it ran; outside one, `commit` is
null. `gpumatrix coverage` refuses reports of different commits or suites unless `--allow-mixed`, naming
them, and fails reports that ran nothing (before, both merged as green).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner
from coverage_reports import PATHS_YAML, report_json
from gpumatrix_trees import GIT_ENV, registered, write_tree

from gpumatrix import register
from gpumatrix.cli import main

register(on=("cpu",), est_time=30)

TEST = "tests/unit/test_r.py"
BODY = "def test_t():\n    pass\n"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


def _invoke(*args: str):
    result = CliRunner().invoke(
        main, list(args), env={"GPUMATRIX_HARDWARE": "cpu", "GITHUB_STEP_SUMMARY": ""}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def test_a_run_in_a_git_tree_records_its_commit_suite_and_hardware_source(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", {TEST: registered(("cpu",), body=BODY)})
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "tree")
    result = _invoke("run", "--runner", "cpu", "-n", "0", "--root", str(root))
    assert result.exit_code == 0, result.output
    document = json.loads((root / "reports" / "gpumatrix-cpu.json").read_text())
    assert (document["format"], document["commit"], document["suite"]) == (
        2,
        _git(root, "rev-parse", "HEAD"),
        "pr",
    )
    assert document["hardware"]["source"] == "override"  # GPUMATRIX_HARDWARE: said, never passed for a probe


def test_a_run_outside_git_records_no_commit_and_a_tests_file_no_suite(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", {TEST: registered(("cpu",), body=BODY)})
    (tmp_path / "tests.txt").write_text(f"{TEST}\n")
    result = _invoke(
        "run", "--runner", "cpu", "-n", "0", "--tests-file", str(tmp_path / "tests.txt"), "--root", str(root)
    )
    assert result.exit_code == 0, result.output
    document = json.loads((root / "reports" / "gpumatrix-cpu.json").read_text())
    assert (document["commit"], document["suite"]) == (None, None)


def _report(tmp_path: Path, name: str, **fields: object) -> str:
    document = report_json("cpu", "cpu", 0, {f"{TEST}::t": "passed"}, {f"{TEST}::t": ["ref.torch"]})
    document.update(fields)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def test_coverage_refuses_reports_of_two_commits_unless_allowed(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", {TEST: registered(("cpu",), body=BODY), "ci/paths.yaml": PATHS_YAML})
    first = _report(tmp_path, "a.json", commit="a" * 40, suite="pr")
    second = _report(tmp_path, "b.json", commit="b" * 40, suite="pr")
    refused = _invoke("coverage", first, second, "--root", str(root), "--warn-only")
    assert refused.exit_code == 1
    flat = " ".join(refused.output.split())
    assert f"commit aaaaaaaaaaaa, suite pr: {first}; commit bbbbbbbbbbbb, suite pr: {second}" in flat
    allowed = _invoke("coverage", first, second, "--root", str(root), "--warn-only", "--allow-mixed")
    assert allowed.exit_code == 0, allowed.output


def test_coverage_of_reports_that_ran_nothing_fails(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", {TEST: registered(("cpu",), body=BODY), "ci/paths.yaml": PATHS_YAML})
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(report_json("cpu", "cpu", 0, {})))
    result = _invoke("coverage", str(path), "--root", str(root), "--warn-only")
    assert result.exit_code == 1
    assert "none of the 1 report(s) ran a test: nothing was exercised anywhere" in " ".join(
        result.output.split()
    )
