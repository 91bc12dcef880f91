"""`gpumatrix run` names a conftest that fails to import, with its error, instead of "wrote no report"."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from gpumatrix_trees import registered, write_tree

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.running.pytest_failure import explain_no_report

register(on=("cpu",), est_time=10)

PYTEST_OUTPUT = """\
ImportError while loading conftest '/repo/test/conftest.py'.
test/conftest.py:2: in <module>
    import cuda_only_library
E   ModuleNotFoundError: No module named 'cuda_only_library'
"""


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            PYTEST_OUTPUT,
            "the conftest /repo/test/conftest.py failed to import at test/conftest.py:2: "
            "ModuleNotFoundError: No module named 'cuda_only_library'. A conftest must import cleanly",
        ),
        ("ERROR: usage: pytest [options]\n", "pytest (exit 4) wrote no report to r.json"),
        ("", "pytest (exit 4) wrote no report to r.json"),
    ],
    ids=["conftest", "other-usage-error", "silent"],
)
def test_explain_no_report(output: str, expected: str) -> None:
    assert explain_no_report(4, output, Path("r.json")).startswith(expected)


def test_run_reports_the_conftest_import_error(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/conftest.py": "import cuda_only_library_that_is_not_here\n",
            "tests/test_a.py": registered(("cpu",), body="def test_a():\n    pass\n"),
        },
    )
    result = CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "0", "--root", str(tmp_path)],
        env={"GPUMATRIX_HARDWARE": "cpu", "PYTEST_ADDOPTS": ""},
    )
    assert result.exit_code == 2, result.output
    assert f"the conftest {tmp_path / 'tests' / 'conftest.py'} failed to import" in result.output
    assert "No module named 'cuda_only_library_that_is_not_here'" in result.output
    assert "wrote no report" not in result.output
