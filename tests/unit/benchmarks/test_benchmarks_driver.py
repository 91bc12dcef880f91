"""`python -m benchmarks`: one driver naming every routine; an unknown one is a usage error (exit 2)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from benchmarks.__main__ import ROUTINES
from gpumatrix import register

register(on=("cpu",), est_time=4)

ROOT = REPO_ROOT
PACKAGE = ROOT / "benchmarks"


def _driver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _defines_main(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)


def test_the_routine_table_names_exactly_the_modules_with_a_main() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__main__" and _defines_main(p)}
    assert set(ROUTINES) == modules


def test_no_module_edits_sys_path() -> None:
    offenders = [
        p.name
        for p in PACKAGE.glob("*.py")
        if "sys.path.insert" in p.read_text() or "sys.path[" in p.read_text()
    ]
    assert offenders == []


@pytest.mark.parametrize("args", [["list"], ["--help"]], ids=["list", "help"])
def test_the_listing_names_each_routine_with_its_purpose(args: list[str]) -> None:
    done = _driver(*args)
    assert done.returncode == 0, done.stderr
    for name, purpose in ROUTINES.items():
        assert any(name in line and purpose[:30] in line for line in done.stdout.splitlines()), name


def test_an_unknown_routine_names_the_known_ones() -> None:
    done = _driver("quantise")
    assert done.returncode == 2
    assert (
        "unknown routine 'quantise'" in done.stderr
        and "quantize" in done.stderr
        and "Traceback" not in done.stderr
    )


def test_a_routine_gets_its_arguments_and_its_name_in_usage() -> None:
    done = _driver("lease_log", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m benchmarks lease_log"), (
        done.stdout
    )
