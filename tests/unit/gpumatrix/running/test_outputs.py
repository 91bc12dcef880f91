"""Outputs never clobber: `run` and `coverage` write only regular files, atomically, over nothing but their own.

A path given as `--report`, `--html`, `--junit-xml`, `--markdown` or `--summary-md` (and the plugin's
`--gpumatrix-report`) may name a test file, ci/matrix.yaml, a device, a FIFO or a link: each is refused,
naming the option, before any test runs, and left exactly as it was. What gpumatrix wrote before is
written over, through a temporary file and a rename, and no temporary file is left behind.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from coverage_reports import PATHS_YAML, report_json
from gpumatrix_trees import registered, run_pytest, write_tree

from gpumatrix import register

register(on=("cpu",), est_time=60)

TEST_FILE = registered(("cpu",), body="def test_ok():\n    pass\n")
TIMEOUT = 120


def _tree(root: Path) -> Path:
    return write_tree(root, {"tests/test_x.py": TEST_FILE, "ci/paths.yaml": PATHS_YAML})


def _gpumatrix(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "GPUMATRIX_HARDWARE": "cpu", **(env or {})}
    environ.pop("GITHUB_STEP_SUMMARY", None) if "GITHUB_STEP_SUMMARY" not in (env or {}) else None
    return subprocess.run(
        [sys.executable, "-m", "gpumatrix", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=TIMEOUT,  # a FIFO opened for writing would wait for a reader: the row fails, not the suite
    )


def _flat(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


@dataclass(frozen=True)
class Target:
    """What is at the path before the command: a file of the tree, a made-up one, a FIFO, a link."""

    make: str  # "tree-file", "empty", "fifo", "link", "devnull"
    path: str = ""  # the tree's file (tree-file)


# (id, option, what is at its path, the words the refusal says)
REFUSED = [
    (
        "report-over-a-test-file",
        "--report",
        Target("tree-file", "tests/test_x.py"),
        "exists and is not a report gpumatrix wrote",
    ),
    (
        "html-over-the-matrix",
        "--html",
        Target("tree-file", "ci/matrix.yaml"),
        "exists and is not a page gpumatrix wrote",
    ),
    (
        "junit-over-paths-yaml",
        "--junit-xml",
        Target("tree-file", "ci/paths.yaml"),
        "exists and is not a junit gpumatrix wrote",
    ),
    ("report-over-an-empty-file", "--report", Target("empty"), "exists and is not a report gpumatrix wrote"),
    ("report-at-a-null-device", "--report", Target("devnull"), "is a character device, not a regular file"),
    ("report-at-a-fifo", "--report", Target("fifo"), "is a FIFO, not a regular file"),
    ("html-at-a-fifo", "--html", Target("fifo"), "is a FIFO, not a regular file"),
    ("junit-at-a-fifo", "--junit-xml", Target("fifo"), "is a FIFO, not a regular file"),
    (
        "report-through-a-link-to-the-matrix",
        "--report",
        Target("link"),
        "exists and is not a report gpumatrix wrote",
    ),
    ("summary-at-a-fifo", "--summary-md", Target("fifo"), "is a FIFO, not a regular file to append to"),
]


def _make(root: Path, target: Target) -> Path:
    if target.make == "tree-file":
        return root / target.path
    path = root / "out" / "target"
    path.parent.mkdir(exist_ok=True)
    if target.make == "devnull":
        # A private node of /dev/null's device: were the refusal ever lost, this test must not take the
        # machine's own /dev/null with it (as root, the old code replaced it with a regular file).
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except (PermissionError, AttributeError):
            pytest.skip("making a device node needs root (CAP_MKNOD)")
    if target.make == "empty":
        path.write_bytes(b"")
    elif target.make == "fifo":
        os.mkfifo(path)
    elif target.make == "link":  # followed where the run resolves its paths: to what must not be clobbered
        path.symlink_to(root / "ci" / "matrix.yaml")
    return path


def _snapshot(path: Path) -> tuple[int, int, bytes | None]:
    found = os.lstat(path)
    data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found.st_mode, found.st_rdev, data


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
@pytest.mark.parametrize(("option", "target", "says"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_run_refuses_an_output_path_it_did_not_write_and_leaves_it_alone(
    tmp_path: Path, option: str, target: Target, says: str
) -> None:
    root = _tree(tmp_path / "tree")
    path = _make(root, target)
    shown = path.resolve() if path.is_symlink() else path  # the run names the file a link leads to
    before = _snapshot(shown)
    done = _gpumatrix(root, "run", "--runner", "cpu", "-n", "0", option, str(path))
    assert done.returncode == 2, _flat(done)
    assert f"{option}: {shown} {says}" in _flat(done)
    assert "test session starts" not in done.stdout  # refused before pytest started
    assert _snapshot(shown) == before
    assert not list((root / "reports").glob(".*.tmp")) if (root / "reports").is_dir() else True


@pytest.mark.parametrize(
    ("option", "tree_file", "says"),
    [
        ("--html", "ci/matrix.yaml", "exists and is not a page gpumatrix wrote"),
        ("--markdown", "tests/test_x.py", "exists and is not a markdown gpumatrix wrote"),
    ],
)
def test_coverage_refuses_an_output_path_it_did_not_write(
    tmp_path: Path, option: str, tree_file: str, says: str
) -> None:
    root = _tree(tmp_path / "tree")
    report = tmp_path / "cpu.json"
    report.write_text(json.dumps(report_json("cpu", "cpu", 0, {"tests/test_x.py::test_ok": "passed"})))
    before = (root / tree_file).read_bytes()
    done = _gpumatrix(root, "coverage", str(report), option, str(root / tree_file))
    assert done.returncode == 2, _flat(done)
    assert f"{option}: {root / tree_file} {says}" in _flat(done)
    assert (root / tree_file).read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_coverage_refuses_a_step_summary_that_is_a_fifo(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree")
    report = tmp_path / "cpu.json"
    report.write_text(json.dumps(report_json("cpu", "cpu", 0, {"tests/test_x.py::test_ok": "passed"})))
    os.mkfifo(tmp_path / "summary")
    done = _gpumatrix(root, "coverage", str(report), env={"GITHUB_STEP_SUMMARY": str(tmp_path / "summary")})
    assert done.returncode == 2 and "GITHUB_STEP_SUMMARY: " in _flat(done) and "is a FIFO" in _flat(done)


def test_run_writes_over_its_own_outputs_atomically_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree")
    out = tmp_path / "out"
    out.mkdir()
    args = ["--report", str(out / "r.json"), "--html", str(out / "r.html"), "--junit-xml", str(out / "j.xml")]
    for _ in range(2):  # the second run writes over the first's files: each is gpumatrix's own
        done = _gpumatrix(root, "run", "--runner", "cpu", "-n", "0", *args, "--summary-md", str(out / "s.md"))
        assert done.returncode == 0, _flat(done)
    assert sorted(p.name for p in out.iterdir()) == ["j.xml", "r.html", "r.json", "s.md"]
    assert json.loads((out / "r.json").read_text())["totals"]["passed"] == 1
    assert (out / "j.xml").read_text().startswith("<?xml")
    assert (out / "s.md").read_text().count("gpumatrix run on") == 2  # appended, not overwritten


def test_run_refuses_two_outputs_at_one_path(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree")
    done = _gpumatrix(
        root,
        "run",
        "--runner",
        "cpu",
        "-n",
        "0",
        "--report",
        str(tmp_path / "x"),
        "--html",
        str(tmp_path / "x"),
    )
    assert done.returncode == 2 and f"--html names the same file as --report: {tmp_path / 'x'}" in _flat(done)


def test_the_plugin_refuses_to_write_its_report_over_a_test_file(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree")
    before = (root / "tests" / "test_x.py").read_bytes()
    run = run_pytest(root, "--gpumatrix-report", "tests/test_x.py", hardware="cpu", report=False)
    assert run.returncode == 4, run.output
    assert "--gpumatrix-report: " in run.output and "exists and is not a report gpumatrix wrote" in run.output
    assert (root / "tests" / "test_x.py").read_bytes() == before
