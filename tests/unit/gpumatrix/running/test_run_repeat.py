"""`gpumatrix run --repeat N`: a real repeated run of a CPU test that fails on a known fraction of seeds, and
how a run shows a test that passed only after reruns (terminal, Markdown summary, report page)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpumatrix_trees import write_tree
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.coverage.merge import load_coverage
from gpumatrix.coverage.page import render_markdown

register(on=("cpu",), est_time=60)

SEEDED = "tests/unit/test_seeded.py"

# The run number pytest-repeat gives each repetition (`[i-N]`) is the seed; seeds divisible by 4 fail, as a
# reduction whose order depends on the seed would for a quarter of them. 20 runs: seeds 4, 8, 12, 16, 20 fail.
_SEEDED_TEST = """\
from gpumatrix import register

register(on=("cpu",), est_time=1)


def _seed(request):
    return int(request.node.name.rsplit("[", 1)[1].split("-")[0])


def test_seeded(request):
    assert _seed(request) % 4 != 0, f"seed {_seed(request)}"


def test_steady():
    pass
"""

_FLAKY_TEST = """\
import os, pathlib
from gpumatrix import register

register(on=("cpu",), est_time=1, flaky={"cpu": "fails its first try, #7"})


def test_second_try():
    marker = pathlib.Path(os.environ["ATTEMPTS"], "second_try")
    first = not marker.exists()
    marker.touch()
    assert not first, "first try"


def test_plain():
    pass
"""


def make_tree(root: Path, files: dict[str, str]) -> Path:
    return write_tree(root, files, matrix=(REPO_ROOT / "ci" / "matrix.yaml").read_text())


def run(root: Path, *args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "0", "--root", str(root), *args],
        env={"GPUMATRIX_HARDWARE": "cpu", **(env or {})},
        catch_exceptions=False,
    )


def test_a_repeated_run_measures_the_fraction_of_seeds_that_fail(tmp_path: Path) -> None:
    make_tree(tmp_path, {SEEDED: _SEEDED_TEST})
    summary = tmp_path / "summary.md"
    result = run(tmp_path, "--repeat", "20", "--summary-md", str(summary))
    assert result.exit_code == 1, result.output  # five runs failed
    report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
    assert report["repeat"] == 20
    failed = report["files"][SEEDED]["failed"]
    assert failed == [f"{SEEDED}::test_seeded[{seed}-20]" for seed in (12, 16, 20, 4, 8)]  # sorted as text
    # 15 of 20 passed: the Wilson interval is 53.1%-88.8% (centre (0.75 + 0.0960)/1.1921, half 0.1788).
    lines = result.output.splitlines()
    seeded = next(
        line for line in lines if f"{SEEDED}::test_seeded " in line or f"{SEEDED}::test_seeded│" in line
    )
    assert "15/20" in seeded and "53–89%" in seeded, result.output
    steady = next(line for line in lines if f"{SEEDED}::test_steady" in line)
    assert "20/20" in steady and "84–100%" in steady
    text = summary.read_text()
    assert f"| `{SEEDED}::test_seeded` | cpu | 15/20 | 53–89% |" in text
    assert f"| `{SEEDED}::test_steady` | cpu | 20/20 | 84–100% |" in text


def test_repeat_is_bounded(tmp_path: Path) -> None:
    make_tree(tmp_path, {SEEDED: _SEEDED_TEST})
    result = CliRunner().invoke(main, ["run", "--repeat", "1001", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "1001 is not in the range 1<=x<=1000" in result.output


def test_a_test_that_passed_after_a_rerun_is_never_a_plain_pass(tmp_path: Path) -> None:
    make_tree(tmp_path, {"tests/unit/test_flaky.py": _FLAKY_TEST})
    (tmp_path / "attempts").mkdir()
    summary = tmp_path / "summary.md"
    result = run(tmp_path, "--summary-md", str(summary), env={"ATTEMPTS": str(tmp_path / "attempts")})
    assert result.exit_code == 0, result.output
    nodeid = "tests/unit/test_flaky.py::test_second_try"
    # the terminal: the run's table and list (pytest's own lines are test_plugin_reruns.py's)
    assert "2 (1 after reruns)" in result.output
    assert f"{nodeid}: passed after 1 rerun" in result.output
    # the Markdown summary
    text = summary.read_text()
    assert "| `tests/unit/test_flaky.py` | 2 (🟡 1 after reruns) | 0 | 0 | 0 |" in text
    assert f"- 🟡 `{nodeid}`: passed after 1 rerun" in text
    # the page: an amber cell that says so
    page = (tmp_path / "reports" / "gpumatrix-cpu.html").read_text()
    assert 'class="flaky" data-state="flaky"' in page
    assert "2 passed (passed after 1 rerun)" in page
    assert f"{nodeid}: passed after 1 rerun" in page
    # and the merged matrix's Markdown (`gpumatrix coverage`)
    coverage = load_coverage(tmp_path, [tmp_path / "reports" / "gpumatrix-cpu.json"], require_paths=False)
    row = next(line for line in render_markdown(coverage, title="t").splitlines() if "test_flaky.py" in line)
    assert "🟡 2/2 (1 after 1 rerun)" in row


@pytest.mark.parametrize(
    ("args", "exit_code", "message"),
    [
        (("--repeat", "0"), 2, "0 is not in the range 1<=x<=1000"),
        (("--repeat", "x"), 2, "'x' is not a valid integer"),
    ],
)
def test_bad_repeat_is_a_usage_error(
    tmp_path: Path, args: tuple[str, ...], exit_code: int, message: str
) -> None:
    make_tree(tmp_path, {SEEDED: _SEEDED_TEST})
    result = CliRunner().invoke(main, ["run", *args, "--root", str(tmp_path)])
    assert result.exit_code == exit_code and message in result.output
