"""Ruff bans the comparisons that let NaN through, in tests/, pointing at gpumatrix.compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=3)


# (id, test source, banned names it uses; empty for sources that must pass)
CASES = [
    (
        "torch-allclose",
        "import torch\n\nok = torch.allclose(torch.ones(1), torch.ones(1))\n",
        ["torch.allclose"],
    ),
    ("numpy-allclose-alias", "import numpy as np\n\nok = np.allclose(1.0, 1.0)\n", ["numpy.allclose"]),
    (
        "torch-testing-from-import",
        "from torch.testing import assert_close\n\nassert_close(1.0, 1.0)\n",
        ["torch.testing.assert_close"],
    ),
    (
        "numpy-testing-attribute",
        "import numpy\n\nnumpy.testing.assert_allclose(1.0, 1.0)\n",
        ["numpy.testing.assert_allclose"],
    ),
    ("gpumatrix-compare", "from gpumatrix.compare import assert_close\n\nassert_close(1.0, 1.0)\n", []),
]


@pytest.mark.parametrize(("source", "banned"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ruff_bans_nan_blind_comparisons_in_tests(tmp_path: Path, source: str, banned: list[str]) -> None:
    target = tmp_path / "tests" / "unit" / "test_sample.py"
    target.parent.mkdir(parents=True)
    target.write_text(source, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--config",
            str(REPO_ROOT / "pyproject.toml"),
            "--select",
            "TID251",
            "--output-format",
            "json",
            "--no-cache",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr  # 0 clean, 1 findings; anything else is ruff failing
    findings = json.loads(done.stdout)
    assert [f["code"] for f in findings] == ["TID251"] * len(banned), findings
    for finding, name in zip(findings, banned, strict=True):
        assert f"`{name}` is banned" in finding["message"]
        assert "gpumatrix.compare.assert_close" in finding["message"]
