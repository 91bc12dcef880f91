"""`gpumatrix init`: ci/matrix.yaml, the conftest fallback and .gitignore from what a repository says."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpumatrix import UsageError, register
from gpumatrix.adopt.init import FALLBACK_MARK, InitOptions, plan_init, survey_repository
from gpumatrix.cli import main
from gpumatrix.config import parse_matrix
from gpumatrix.hardware.known_classes import classes_in_label
from gpumatrix.yamlfile import MAX_DEPTH, is_plain_scalar, load_yaml_data

register(on=("cpu",), est_time=15)

AMD_WORKFLOW = "jobs:\n  t:\n    runs-on: linux-mi300-gpu-1\n    steps:\n      - run: make test\n"
INTEL_WORKFLOW = "jobs:\n  t:\n    runs-on: [linux-max1550-pvc-8]\n    steps:\n      - run: pytest test\n"


def _nested(levels: int) -> tuple[str, object]:
    """`jobs:` holding lists `levels` deep, as YAML text and as the data it means."""
    data: list = []
    for _ in range(levels - 1):
        data = [data]
    return "jobs: " + "[" * levels + "]" * levels + "\n", {"jobs": data}


# The mapping is one level, so MAX_DEPTH - 1 lists reach the limit and MAX_DEPTH pass it.
DEEP, _ = _nested(MAX_DEPTH)
ENOUGH, ENOUGH_DATA = _nested(MAX_DEPTH - 1)


@pytest.mark.parametrize(
    ("text", "data"),
    [
        ("jobs:\n  t:\n    runs-on: x\n", {"jobs": {"t": {"runs-on": "x"}}}),
        ("jobs: [\n", None),  # not YAML
        (DEEP, None),  # deeper than any workflow needs: never handed to the recursive loader
        (ENOUGH, ENOUGH_DATA),
        ("", None),
    ],
    ids=["workflow", "invalid", "too deep", "deep enough", "empty"],
)
def test_init_reads_workflows_through_yamlfile(text: str, data: object) -> None:
    assert load_yaml_data(text) == data


@pytest.mark.parametrize(
    ("text", "plain"),
    [("h100", True), ("1-gpu-h100", True), ("5090", False), ("yes", False), ("a: b", False), ("[x", False)],
)
def test_a_label_is_written_plain_only_where_yaml_reads_it_back(text: str, plain: bool) -> None:
    assert is_plain_scalar(text) is plain


def test_a_workflow_that_does_not_read_names_no_class(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            ".github/workflows/broken.yml": "jobs: [\n  runs-on: linux-mi300-gpu-1\n",
            ".github/workflows/deep.yml": DEEP,
            ".github/workflows/list.yml": ENOUGH,
            ".github/workflows/amd.yml": AMD_WORKFLOW,
            "tests/test_a.py": "def test_a():\n    pass\n",
        },
    )
    survey = survey_repository(tmp_path)
    assert survey.labels == ((".github/workflows/amd.yml", "linux-mi300-gpu-1"),)


def _write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


@pytest.mark.parametrize(
    ("label", "classes"),
    [
        ("linux-mi300-gpu-1", ("mi300x",)),
        ("linux-max1550-pvc-8", ("pvc",)),
        ("self-hosted-h200", ("h100",)),
        ("ubuntu-latest", ()),
        ("gpu-h100x", ()),  # a word, not a part of one
    ],
)
def test_runner_labels_name_known_classes(label: str, classes: tuple[str, ...]) -> None:
    assert classes_in_label(label) == classes


@pytest.mark.parametrize(
    ("files", "options", "roots", "classes", "reason"),
    [
        (
            {"pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["test/"]\n', "test/test_a.py": ""},
            InitOptions(),
            ("test",),
            ("h100",),
            "(testpaths in pyproject.toml)",
        ),
        (
            {"test/ops/test_a.py": "", "bench/test_b.py": "", ".github/workflows/amd.yml": AMD_WORKFLOW},
            InitOptions(),
            ("bench", "test"),
            ("mi300x",),
            "mi300x (linux-mi300-gpu-1) (runner labels",
        ),
        ({}, InitOptions(classes=("h100", "pvc")), ("tests",), ("h100", "pvc"), "(--classes)"),
        ({"t/test_a.py": ""}, InitOptions(test_roots=("t",)), ("t",), ("h100",), "(--test-root)"),
    ],
    ids=["testpaths", "test-dirs-and-workflows", "asked", "given-root"],
)
def test_plan_chooses_roots_and_classes(
    tmp_path: Path, files: dict[str, str], options: InitOptions, roots, classes, reason: str
) -> None:
    plan = plan_init(survey_repository(_write(tmp_path, files)), options)
    assert (plan.test_roots, plan.classes) == (roots, classes)
    assert any(reason in line for line in plan.reasons), plan.reasons
    matrix_text = plan.files[0].text
    assert matrix_text is not None
    matrix = parse_matrix(matrix_text)
    assert matrix.test_roots == roots
    assert tuple(matrix.classes) == ("cpu", *classes)


def test_runners_use_the_workflow_labels_and_the_gpu_counts(tmp_path: Path) -> None:
    _write(tmp_path, {".github/workflows/a.yml": AMD_WORKFLOW, ".github/workflows/i.yml": INTEL_WORKFLOW})
    plan = plan_init(survey_repository(tmp_path), InitOptions(classes=("h100", "mi300x", "pvc"), gpus=(1, 2)))
    matrix = parse_matrix(plan.files[0].text or "")
    assert {r.label: (r.gpu_class, r.gpus, r.runs_on) for r in matrix.runners} == {
        "cpu": ("cpu", 0, ("ubuntu-latest",)),
        "1-gpu-h100": ("h100", 1, ("self-hosted", "linux", "gpu-h100")),
        "2-gpu-h100": ("h100", 2, ("self-hosted", "linux", "gpu-h100")),
        "1-gpu-mi300x": ("mi300x", 1, ("linux-mi300-gpu-1",)),
        "2-gpu-mi300x": ("mi300x", 2, ("linux-mi300-gpu-1",)),
        "1-gpu-pvc": ("pvc", 1, ("linux-max1550-pvc-8",)),
        "2-gpu-pvc": ("pvc", 2, ("linux-max1550-pvc-8",)),
    }
    assert matrix.classes["mi300x"].architectures == ("gfx942",)
    assert ".github/workflows/a.yml" in plan.next_steps[-1]


def test_unknown_class_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown class"):
        plan_init(survey_repository(tmp_path), InitOptions(classes=("h900",)))


def _init(root: Path, *args: str):
    return CliRunner().invoke(main, ["init", "--root", str(root), *args], catch_exceptions=False)


def test_init_writes_once_then_changes_nothing_and_refuses_to_overwrite(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "test/conftest.py": "import os\n",
            "test/test_a.py": "",
            ".gitignore": "/build/\n.gpumatrix/",
        },
    )
    first = _init(tmp_path, "--classes", "h100,mi300x")
    assert first.exit_code == 0, first.output
    assert "create  ci/matrix.yaml" in first.output
    assert "gpumatrix register --suggest" in first.output
    conftest = (tmp_path / "test/conftest.py").read_text()
    assert conftest.startswith("import os\n") and FALLBACK_MARK in conftest
    assert (
        tmp_path / ".gitignore"
    ).read_text() == "/build/\n.gpumatrix/\n# gpumatrix run's reports and pages\nreports/\n"
    written = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    again = _init(tmp_path, "--classes", "h100,mi300x")
    assert again.exit_code == 0, again.output
    assert again.output.count("unchanged") == 3
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == written

    refused = CliRunner().invoke(main, ["init", "--root", str(tmp_path), "--classes", "pvc"])
    assert refused.exit_code == 2
    assert "ci/matrix.yaml exists and differs" in refused.output
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == written

    forced = _init(tmp_path, "--classes", "pvc", "--force")
    assert forced.exit_code == 0, forced.output
    assert "pvc" in parse_matrix((tmp_path / "ci/matrix.yaml").read_text()).classes


def test_a_conftest_with_its_own_hook_is_left_alone(tmp_path: Path) -> None:
    original = "def pytest_make_collect_report(collector):\n    return None\n"
    _write(tmp_path, {"tests/conftest.py": original, "tests/test_a.py": ""})
    result = _init(tmp_path)
    assert "skipped  tests/conftest.py (it defines pytest_make_collect_report already" in result.output
    assert (tmp_path / "tests/conftest.py").read_text() == original


def test_the_written_conftest_skips_gpu_files_without_the_plugin(tmp_path: Path) -> None:
    from gpumatrix_trees import registered, run_pytest

    _write(
        tmp_path,
        {
            "tests/test_gpu.py": registered(("h100",), body="def test_g():\n    pass\n"),
            "tests/test_cpu.py": registered(("cpu",), body="def test_c():\n    pass\n"),
            "pytest.ini": "[pytest]\n",
        },
    )
    assert _init(tmp_path).exit_code == 0
    run = run_pytest(tmp_path, "-p", "no:gpumatrix", "-rs", hardware=None, report=False)
    assert run.returncode == 0, run.output
    assert "tests/test_gpu.py: registered for h100 and the gpumatrix plugin is disabled" in run.output
    assert "1 passed, 1 skipped" in run.output
