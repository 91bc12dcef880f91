"""gpumatrix imports and its pytest plugin runs where torch is not installed (plain CI runners, the bot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpumatrix_trees import registered, write_tree
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=4)

# Makes `import torch` fail as it does where torch is not installed, then runs the given code.
_WITHOUT_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r} (hidden for this test)")
        return None

sys.meta_path.insert(0, NoTorch())
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("the finder did not hide torch")
"""


@pytest.mark.parametrize(
    "module",
    [
        "gpumatrix",
        "gpumatrix.config",
        "gpumatrix.registry.discovery",
        "gpumatrix.hardware.detection",
        "gpumatrix.plugin",
        "gpumatrix.running.leases",
        "gpumatrix.running.shard",
        "gpumatrix.running.run",
        "gpumatrix.commands.tree",
        "gpumatrix.commands.run",
        "gpumatrix.console",
        "gpumatrix.running.gating",
        "gpumatrix.registry.source",
        "gpumatrix.registry.cache",
        "gpumatrix.cli",
        "gpumatrix.compare",
        "gpumatrix.coverage.paths",
        "gpumatrix.report.witnesses",
        "gpumatrix.coverage.merge",
        "gpumatrix.coverage.page",
        "gpumatrix.estimate.proposals",
        "gpumatrix.problems",
        "gpumatrix.yamlfile",
        "gpumatrix.report",
        "gpumatrix.report.collect",
        "gpumatrix.running.session",
        "gpumatrix.running.child",
    ],
)
def test_module_imports_without_torch(module: str) -> None:
    code = _WITHOUT_TORCH + f"import {module}\nassert 'torch' not in sys.modules, 'torch was imported'\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_plugin_gates_and_leases_without_torch(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/test_cpu.py": registered(("cpu",), body="def test_a():\n    pass\n"),
            "tests/test_gpu.py": registered(
                ("h100",),
                gpus=2,
                body="import os\n\ndef test_a():\n"
                "    assert len(os.environ['CUDA_VISIBLE_DEVICES'].split(',')) == 2\n",
            ),
        },
    )
    code = _WITHOUT_TORCH + (
        "import os, pytest\n"
        f"os.environ.update(GPUMATRIX_HARDWARE='2xh100', GPUMATRIX_LEASE_DIR={str(tmp_path / 'leases')!r})\n"
        "status = pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:xdist'])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "raise SystemExit(status)\n"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GPUMATRIX_", "PYTEST_", "CUDA_VISIBLE_DEVICES"))
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


# (id, command): the CLI commands a plain runner uses, run where torch cannot be imported.
CLI_WITHOUT_TORCH = [
    ("check", ["check"]),
    ("list-json", ["list", "--json"]),
    ("matrix-json", ["matrix", "--json"]),
    ("detect-json", ["detect", "--json"]),
]


@pytest.mark.parametrize("args", [c[1] for c in CLI_WITHOUT_TORCH], ids=[c[0] for c in CLI_WITHOUT_TORCH])
def test_cli_commands_run_without_torch(tmp_path: Path, args: list[str]) -> None:
    write_tree(tmp_path, {"tests/test_cpu.py": registered(("cpu",), body="def test_a():\n    pass\n")})
    code = _WITHOUT_TORCH + (
        "from gpumatrix.cli import main\n"
        f"try:\n    main({[*args, '--root', str(tmp_path)]!r})\n"
        "except SystemExit as exc:\n    status = exc.code or 0\nelse:\n    status = 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "raise SystemExit(status)\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GPUMATRIX_", "PYTEST_"))}
    env["GPUMATRIX_HARDWARE"] = "cpu"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_suites_witness_bridge_and_coverage_run_without_torch(tmp_path: Path) -> None:
    """tests/conftest.py forwards mxfuse's witnesses (mxfuse.witness imports no torch), and the coverage job
    of a plain runner merges the report and writes the page, all where torch cannot be imported."""
    root = REPO_ROOT
    report, page = tmp_path / "report.json", tmp_path / "page.html"
    code = _WITHOUT_TORCH + (
        "import pytest\n"
        "status = pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:xdist', 'tests/unit/mxfuse/formats/test_witness.py',\n"
        f"                      '--gpumatrix-report', {str(report)!r}])\n"
        "assert status == 0, status\n"
        "from gpumatrix.cli import main\n"
        f"try:\n    main(['coverage', {str(report)!r}, '--warn-only', '--html', {str(page)!r}])\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GPUMATRIX_", "PYTEST_"))}
    env |= {"GPUMATRIX_HARDWARE": "cpu", "GITHUB_STEP_SUMMARY": ""}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "gemm.torch"
        in json.loads(report.read_text())["witnessed"][
            "tests/unit/mxfuse/formats/test_witness.py::test_capture_collects_records_in_order_and_stops_after_the_block"
        ]["paths"]
    )
    assert 'id="path-matrix"' in page.read_text()
