"""The mutation run's configuration (benchmarks/mutation.py) names what exists and covers what it must.

The run itself takes hours and is not part of the suite; a group that names a moved module or test file
would fail only then, so the names are checked here, with the mutmut table each group gets.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=1)

ROOT = REPO_ROOT
# The modules the mutation review must cover (the issue that asked for it names them).
REQUIRED = (
    "src/mxfuse/formats/layouts.py",
    "src/mxfuse/formats/reference.py",
    "src/mxfuse/gemm/api.py",
    "src/mxfuse/gemm/weights.py",
    "src/mxfuse/gemm/torch_backend.py",
    "src/mxfuse/layers/mx_linear.py",
    "src/mxfuse/layers/gating.py",
    "src/mxfuse/hc/reference.py",
    "src/mxfuse/einsum.py",
    "src/gpumatrix/compare/__init__.py",
)


@pytest.fixture(scope="module")
def mutation():
    return importlib.import_module("benchmarks.mutation")


def test_every_group_names_existing_files_and_cpu_tests(mutation):
    for name, group in mutation.GROUPS.items():
        for pattern in group.mutate:
            assert list(ROOT.glob(pattern)), f"{name}: {pattern} matches no file"
        for test in group.tests:
            text = (ROOT / test).read_text(encoding="utf-8")
            assert re.search(r'register\(on=\("cpu",\)', text), f"{name}: {test} is not a CPU test"


def test_the_required_modules_are_mutated(mutation):
    mutated = {
        str(p.relative_to(ROOT)) for g in mutation.GROUPS.values() for pat in g.mutate for p in ROOT.glob(pat)
    }
    assert set(REQUIRED) <= mutated, sorted(set(REQUIRED) - mutated)
    assert "src/mxfuse/gemm/triton_backend.py" not in mutated  # GPU-only code: no CPU test can kill it


def test_each_group_gets_a_valid_mutmut_table(mutation):
    tomllib = pytest.importorskip("tomllib")
    for group in mutation.GROUPS.values():
        table = tomllib.loads(mutation.mutmut_config(group))["tool"]["mutmut"]
        assert table["only_mutate"] == list(group.mutate)
        assert table["pytest_add_cli_args_test_selection"] == list(group.tests)
        assert table["source_paths"] == ["src/"]
        assert table["mutate_only_covered_lines"] is True
        assert table["timeout_constant"] >= 60  # pytest's start in a forked worker on a loaded machine


def test_the_command_is_wired_and_documented():
    assert re.search(
        r"^mutation: .*\n\t\$\(PY\) -m benchmarks mutation$", (ROOT / "Makefile").read_text(), re.M
    )
    assert "make mutation" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert '"mutmut>=' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert (ROOT / "docs" / "mutation.md").exists()


def test_a_changed_test_file_makes_mutmut_map_its_tests_again(mutation, tmp_path):
    # mutmut maps a test name to the functions it calls once; an edited test must be mapped again.
    (tmp_path / "tests").mkdir()
    (tmp_path / "mutants").mkdir()
    test_file, stats = tmp_path / "tests" / "test_a.py", tmp_path / "mutants" / "mutmut-stats.json"
    test_file.write_text("def test_a(): pass\n")
    stats.write_text("{}")
    mutation._forget_stale_test_map(tmp_path)  # no record of the tests yet: the map goes
    assert not stats.exists()
    stats.write_text("{}")
    mutation._forget_stale_test_map(tmp_path)  # the same tests: the map stays
    assert stats.exists()
    test_file.write_text("def test_a(): assert f() == 1\n")
    mutation._forget_stale_test_map(tmp_path)
    assert not stats.exists()
