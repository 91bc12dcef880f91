"""Reruns of tests of files registered flaky= (pytest-rerunfailures, driven by the registry) and repeated runs
(pytest-repeat's --count), through the plugin on throwaway trees: what runs again, what never does, and what
the JSON report and the terminal say about it."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpumatrix_trees import FAKE_CUDA_CONFTEST, MATRIX_YAML, PytestRun, run_pytest, write_tree

from gpumatrix import register
from gpumatrix.config import parse_matrix
from gpumatrix.report import parse_report

register(on=("cpu",), est_time=40)

# Each test counts its own attempts in a file (ATTEMPTS names the directory): reruns run in the same
# process, xdist or not.
_ATTEMPTS = """
import os, pathlib

def attempt(name):
    path = pathlib.Path(os.environ["ATTEMPTS"]) / name
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    return count
"""

FLAKY = "tests/unit/test_flaky.py"
STEADY = "tests/unit/test_steady.py"
ELSEWHERE = "tests/unit/test_flaky_elsewhere.py"

FILES = {
    "tests/conftest.py": _ATTEMPTS,
    FLAKY: """\
from gpumatrix import register
from conftest import attempt

register(on=("cpu",), est_time=1, flaky={"cpu": "fails its first tries, #1"})

def test_third_time():
    count = attempt("third_time")
    assert count > 2, f"attempt {count}"

def test_always_fails():
    count = attempt("always")
    assert count < 0, f"attempt {count}"

def test_passes():
    attempt("passes")
""",
    # Not registered flaky: its own marker must not make it run again.
    STEADY: """\
import pytest
from gpumatrix import register
from conftest import attempt

register(on=("cpu",), est_time=1)

@pytest.mark.flaky(reruns=5)
def test_own_marker():
    count = attempt("own_marker")
    assert count > 1, f"attempt {count}"
""",
    # Flaky on h100 only: on a CPU machine it is a CPU test and never runs again.
    ELSEWHERE: """\
from gpumatrix import register
from conftest import attempt

register(on=("cpu", "h100"), est_time=1, flaky={"h100": "only there"})

def test_second_time():
    count = attempt("elsewhere")
    assert count > 1, f"attempt {count}"
""",
}


def _run(tmp_path: Path, *args: str, matrix: str = MATRIX_YAML, files: dict[str, str] = FILES) -> PytestRun:
    write_tree(tmp_path, files, matrix=matrix)
    attempts = tmp_path / "attempts"
    attempts.mkdir(exist_ok=True)
    return run_pytest(tmp_path, *args, hardware="cpu", env={"ATTEMPTS": str(attempts)})


def _attempts(tmp_path: Path) -> dict[str, int]:
    return {path.name: int(path.read_text()) for path in (tmp_path / "attempts").iterdir()}


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_only_tests_of_a_file_flaky_on_its_class_run_again(tmp_path: Path, workers: tuple[str, ...]) -> None:
    run = _run(tmp_path, *workers)
    assert run.returncode == 1, run.output
    # K = 2 (ci/matrix.yaml's default): two reruns after the first failure, three attempts in all.
    assert _attempts(tmp_path) == {"third_time": 3, "always": 3, "passes": 1, "own_marker": 1, "elsewhere": 1}
    files = run.report["files"]
    assert files[FLAKY]["passed"] == [f"{FLAKY}::test_passes", f"{FLAKY}::test_third_time"]
    assert files[FLAKY]["failed"] == [f"{FLAKY}::test_always_fails"]
    assert files[FLAKY]["reruns"] == [
        {
            "nodeid": f"{FLAKY}::test_always_fails",
            "attempt": 1,
            "when": "call",
            "message": "AssertionError: attempt 1",
        },
        {
            "nodeid": f"{FLAKY}::test_always_fails",
            "attempt": 2,
            "when": "call",
            "message": "AssertionError: attempt 2",
        },
        {
            "nodeid": f"{FLAKY}::test_third_time",
            "attempt": 1,
            "when": "call",
            "message": "AssertionError: attempt 1",
        },
        {
            "nodeid": f"{FLAKY}::test_third_time",
            "attempt": 2,
            "when": "call",
            "message": "AssertionError: attempt 2",
        },
    ]
    assert files[STEADY]["failed"] == [f"{STEADY}::test_own_marker"] and "reruns" not in files[STEADY]
    assert (
        files[ELSEWHERE]["failed"] == [f"{ELSEWHERE}::test_second_time"] and "reruns" not in files[ELSEWHERE]
    )
    # The one reader reads what the one writer wrote, and says which test passed only after reruns.
    report = parse_report(run.report, source="report.json", matrix=parse_matrix(MATRIX_YAML))
    assert report.files[FLAKY].passed_after_reruns() == ((f"{FLAKY}::test_third_time", 2),)
    assert report.totals()["passed"] == 2  # the test that passed after reruns is one test, counted once
    # The terminal says it too, never only as a pass.
    assert (
        f"{FLAKY}::test_third_time passed after 2 reruns (flaky on cpu: fails its first tries, #1)"
        in run.stdout
    )


def test_the_matrix_sets_how_many_times(tmp_path: Path) -> None:
    run = _run(tmp_path, FLAKY, matrix=MATRIX_YAML + "flaky: {reruns: 1}\n")
    assert _attempts(tmp_path) == {"third_time": 2, "always": 2, "passes": 1}
    assert run.report["files"][FLAKY]["failed"] == [
        f"{FLAKY}::test_always_fails",
        f"{FLAKY}::test_third_time",
    ]


def test_no_reruns_at_all_when_the_matrix_says_zero(tmp_path: Path) -> None:
    run = _run(tmp_path, FLAKY, matrix=MATRIX_YAML + "flaky: {reruns: 0}\n")
    assert _attempts(tmp_path) == {"third_time": 1, "always": 1, "passes": 1}
    assert "reruns" not in run.report["files"][FLAKY]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--reruns", "2"), "--reruns"),
        (("--force-reruns", "1"), "--force-reruns"),
        (("-o", "reruns=3"), "the reruns ini value"),
    ],
)
def test_options_that_rerun_any_test_are_refused(tmp_path: Path, args: tuple[str, ...], named: str) -> None:
    run = _run(tmp_path, *args)
    assert run.returncode == 4, run.output
    assert f"{named} would run any failing test again" in run.stderr
    assert not (tmp_path / "attempts").exists() or _attempts(tmp_path) == {}


def test_a_repeated_run_measures_every_failure(tmp_path: Path) -> None:
    run = _run(tmp_path, FLAKY, "--count", "3")
    # Each test runs 3 times as 3 items; none runs again after a failure.
    assert _attempts(tmp_path) == {"third_time": 3, "always": 3, "passes": 3}
    result = run.report["files"][FLAKY]
    assert run.report["repeat"] == 3 and "reruns" not in result
    assert result["failed"] == [
        *(f"{FLAKY}::test_always_fails[{i}-3]" for i in (1, 2, 3)),
        *(f"{FLAKY}::test_third_time[{i}-3]" for i in (1, 2)),
    ]
    assert f"{FLAKY}::test_third_time[3-3]" in result["passed"]


def test_a_flaky_test_in_the_plugins_child_pytest_runs_again_there(tmp_path: Path) -> None:
    """A 2-GPU test after CUDA was bound to one GPU runs in a fresh pytest: its reruns happen there and
    come back with its outcome; in a repeated run the child is given the same --count."""
    files = {
        "tests/conftest.py": FAKE_CUDA_CONFTEST + _ATTEMPTS,
        "tests/kernels/test_first.py": (
            "from gpumatrix import register\nregister(on=('h100',), est_time=1)\n\n"
            "def test_first(cuda):\n    assert len(cuda) == 1\n"
        ),
        "tests/e2e/test_pair.py": """\
from gpumatrix import register
from conftest import attempt

register(on=("h100",), gpus=2, est_time=1, flaky={"h100": "NCCL timeout, #45"})

def test_pair(cuda):
    count = attempt("pair")
    assert len(set(cuda)) == 2 and count > 1, f"attempt {count}"
""",
    }
    write_tree(tmp_path, files)
    (tmp_path / "attempts").mkdir()
    env = {"ATTEMPTS": str(tmp_path / "attempts")}
    run = run_pytest(
        tmp_path, "tests/kernels/test_first.py", "tests/e2e/test_pair.py", hardware="2xh100", env=env
    )
    pair = run.report["files"]["tests/e2e/test_pair.py"]
    assert run.returncode == 0, run.output
    assert pair["passed"] == ["tests/e2e/test_pair.py::test_pair"]
    assert [(r["attempt"], r["message"]) for r in pair["reruns"]] == [(1, "AssertionError: attempt 1")]
    assert (
        "tests/e2e/test_pair.py::test_pair passed after 1 rerun (flaky on h100: NCCL timeout, #45)"
        in run.stdout
    )

    repeated = run_pytest(
        tmp_path,
        "tests/kernels/test_first.py",
        "tests/e2e/test_pair.py",
        "--count",
        "2",
        hardware="2xh100",
        env=env,
    )
    pair = repeated.report["files"]["tests/e2e/test_pair.py"]
    assert pair["passed"] == [f"tests/e2e/test_pair.py::test_pair[{i}-2]" for i in (1, 2)], repeated.output
    assert "reruns" not in pair
