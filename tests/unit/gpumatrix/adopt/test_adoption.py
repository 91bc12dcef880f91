"""Adopting gpumatrix in one pass, on a tree shaped like a public Triton-kernel project's: a `test/` root
named by pytest's testpaths, a heavy conftest guarded as docs/registry.md says, mixed files and
capability, availability and device-count skips. `init`, `register --suggest --write`, `check`, `list`
and `run` on the CPU end with every file placed and the CPU slice green."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpumatrix import register
from gpumatrix.cli import main

register(on=("cpu",), est_time=40)

HEAVY_CONFTEST = """\
import pytest

try:  # GPU-side helpers: absent on a plain CPU machine
    import heavy_gpu_only_library as gpu_helpers
except ImportError:
    gpu_helpers = None


@pytest.fixture(autouse=True)
def seed():
    yield
"""
TREE = {
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["test/"]\n',
    ".github/workflows/amd-ci.yml": "jobs:\n  t:\n    runs-on: linux-mi300-gpu-1\n    steps:\n      - run: pytest\n",
    "test/conftest.py": HEAVY_CONFTEST,
    "test/__init__.py": "",
    "test/test_utils.py": "def test_shapes():\n    assert [1, 2][::-1] == [2, 1]\n",
    "test/ops/test_gemm_sm90.py": "def test_wgmma():\n    raise AssertionError('needs Hopper')\n",
    "test/ops/test_rope.py": "DEVICE = 'cuda'\n\ndef test_rope():\n    raise AssertionError(DEVICE)\n",
    "test/ops/test_softmax.py": (
        "import pytest\nimport torch\n\n\ndef test_reference():\n    assert torch.ones(2).sum() == 2\n\n\n"
        "@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a GPU')\n"
        "def test_kernel():\n    raise AssertionError('GPU only')\n"
    ),
    "test/ops/test_fp8.py": (
        '"""FP8 GEMM."""\nfrom __future__ import annotations\n\nimport pytest\nimport torch\n\n'
        "pytestmark = pytest.mark.skipif(torch.cuda.get_device_capability() < (9, 0), reason='sm90')\n\n\n"
        "def test_fp8():\n    pass\n"
    ),
    "test/dist/test_allreduce.py": (
        "import pytest\nimport torch\n\n\n@pytest.mark.skipif(torch.cuda.device_count() < 2, reason='2 GPUs')\n"
        "def test_allreduce():\n    pass\n"
    ),
}


def _gpumatrix(root: Path, *args: str):
    return CliRunner().invoke(main, [*args, "--root", str(root)], env={"GPUMATRIX_HARDWARE": "cpu"})


def test_a_kernel_project_adopts_gpumatrix_in_one_pass(tmp_path: Path) -> None:
    for relative, text in TREE.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)

    init = _gpumatrix(tmp_path, "init", "--classes", "h100,mi300x", "--gpus", "1,2")
    assert init.exit_code == 0, init.output
    assert "test roots: test (testpaths in pyproject.toml)" in init.output

    unplaced = _gpumatrix(tmp_path, "check")
    assert unplaced.exit_code == 1
    assert unplaced.output.count("test file is not registered") == 6

    suggested = _gpumatrix(tmp_path, "register", "--suggest", "--write")
    assert suggested.exit_code == 0, suggested.output
    assert "6 file(s) registered" in suggested.output

    check = _gpumatrix(tmp_path, "check")
    assert check.exit_code == 0, check.output
    assert "ok: 5 runners, 6 registered test files (6 pr, 0 nightly) under test" in check.output

    listed = _gpumatrix(tmp_path, "list", "--json")
    assert listed.exit_code == 0, listed.output
    placed = {row["path"]: (tuple(row["on"]), row["gpus"]) for row in json.loads(listed.output)}
    assert placed == {
        "test/dist/test_allreduce.py": (("h100", "mi300x"), 2),
        "test/ops/test_fp8.py": (("h100",), 1),
        "test/ops/test_gemm_sm90.py": (("h100",), 1),
        "test/ops/test_rope.py": (("h100", "mi300x"), 1),
        "test/ops/test_softmax.py": (("cpu", "h100", "mi300x"), 1),
        "test/test_utils.py": (("cpu",), 1),
    }

    run = _gpumatrix(tmp_path, "run", "--runner", "cpu", "-n", "0")
    assert run.exit_code == 0, run.output
    report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
    assert report["totals"]["passed"] == 2, report["totals"]
    assert report["totals"]["failed"] == report["totals"]["errors"] == 0
