"""Per-test refinement (`@pytest.mark.gpumatrix`): narrows one test's classes or raises its GPU count,
never widens; the registry places the file on the refined tests' runners too; their skips are hardware
skips."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpumatrix_trees import MATRIX_YAML, registered, run_pytest, write_tree

from gpumatrix import register
from gpumatrix.config import parse_matrix
from gpumatrix.registry.discovery import build_registry

register(on=("cpu",), est_time=20)

MATRIX = parse_matrix(MATRIX_YAML)
BODY = """
import pytest

def test_one():
    pass

@pytest.mark.gpumatrix(gpus=2)
def test_two():
    pass

class TestBlackwell:
    @pytest.mark.gpumatrix(on=("b200",))
    def test_b(self):
        pass
"""


def test_registry_places_the_file_on_the_refined_tests_runners_too() -> None:
    source = registered(("h100", "b200"), body=BODY)
    registry = build_registry({"tests/test_x.py": source}, MATRIX).require_ok()
    (registration,) = registry.files
    assert registration.base_runners == ("1-gpu-h100", "4-gpu-b200")
    assert registration.runners == ("1-gpu-h100", "4-gpu-b200", "2-gpu-h100")
    assert registration.refined_runners("test_two") == ("2-gpu-h100", "4-gpu-b200")
    assert registration.refined_runners("TestBlackwell::test_b") == ("4-gpu-b200",)
    assert registration.refined_runners("test_one") is None


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('@pytest.mark.gpumatrix(on=("gb300",))', "widens the file's registration: class 'gb300' is not in"),
        (
            "@pytest.mark.gpumatrix(gpus=1)",
            "widens the file's registration: gpus=1 is fewer than the file's gpus=2",
        ),
        ("@pytest.mark.gpumatrix(on=CLASSES)", "on= is not a literal"),
        ("@pytest.mark.gpumatrix", "takes keyword arguments with literal values"),
        ("@pytest.mark.gpumatrix(gpus=0)", "gpus= must be a positive integer"),
    ],
    ids=["class", "gpus", "not-literal", "bare", "zero"],
)
def test_a_marker_that_widens_or_is_not_literal_is_a_problem_at_its_line(marker: str, message: str) -> None:
    body = f"import pytest\n\n{marker}\ndef test_a():\n    pass\n"
    source = registered(("h100",), gpus=2, body=body)
    registry = build_registry({"tests/test_x.py": source}, MATRIX)
    (problem,) = registry.problems
    assert message in problem.message
    assert problem.line == source.splitlines().index(marker) + 1


def test_a_refined_need_no_runner_meets_is_a_problem() -> None:
    body = "import pytest\n\n@pytest.mark.gpumatrix(gpus=8)\ndef test_a():\n    pass\n"
    registry = build_registry({"tests/test_x.py": registered(("h100",), body=body)}, MATRIX)
    (problem,) = registry.problems
    assert "needs 8 x h100, but no runner of class 'h100' has that many GPUs" in problem.message


@pytest.mark.parametrize(
    ("hardware", "runner", "outcomes"),
    [
        ("1xh100", None, {"test_one": "passed", "test_two": "hardware", "TestBlackwell::test_b": "hardware"}),
        ("2xh100", "2-gpu-h100", {"test_two": "passed", "TestBlackwell::test_b": "deselected"}),
        ("1xh100", "1-gpu-h100", {"test_one": "passed"}),
        (
            "4xb200",
            "4-gpu-b200",
            {"test_one": "passed", "test_two": "passed", "TestBlackwell::test_b": "passed"},
        ),
    ],
    ids=["local-one-h100", "runner-two-h100", "runner-one-h100", "runner-b200"],
)
def test_plugin_runs_each_refined_test_where_it_belongs(
    tmp_path: Path, hardware: str, runner: str | None, outcomes: dict[str, str]
) -> None:
    write_tree(tmp_path, {"tests/test_x.py": registered(("h100", "b200"), body=BODY)})
    args = ["-p", "no:xdist"] + (["--runner", runner] if runner else [])
    run = run_pytest(tmp_path, *args, hardware=hardware)
    assert run.returncode == 0, run.output
    assert run.report is not None
    result = run.report["files"]["tests/test_x.py"]
    seen = {nodeid.split("::", 1)[1]: "passed" for nodeid in result["passed"]}
    seen |= {
        s["nodeid"].split("::", 1)[1]: "hardware" if s["hardware"] else "skipped" for s in result["skipped"]
    }
    expected = {test: outcome for test, outcome in outcomes.items() if outcome != "deselected"}
    assert seen == expected
    for skip in result["skipped"]:
        assert "refined by @pytest.mark.gpumatrix on line" in skip["reason"]


def test_a_marker_the_registry_cannot_see_fails_the_test(tmp_path: Path) -> None:
    body = "import pytest\n\nMARK = pytest.mark.gpumatrix(gpus=2)\n\n@MARK\ndef test_a():\n    pass\n"
    write_tree(tmp_path, {"tests/test_x.py": registered(("h100",), body=body)})
    run = run_pytest(tmp_path, "-p", "no:xdist", hardware="2xh100")
    assert run.returncode == 1
    assert "must decorate the test function" in run.output
