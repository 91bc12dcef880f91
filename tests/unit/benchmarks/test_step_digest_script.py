"""`python -m benchmarks step_digest` on the CPU (--dry-run): the digests repeat, and a changed bit is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=20)

ROOT = REPO_ROOT


def _digest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "step_digest", "--dry-run", "--tokens", "1,3", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_digests_repeat_and_a_changed_field_fails_the_comparison(tmp_path: Path) -> None:
    first = _digest("--json", str(tmp_path / "a.json"))
    assert first.returncode == 0, first.stderr
    data = json.loads((tmp_path / "a.json").read_text())
    assert set(data["digests"]) == {f"T={t} {p}" for t in (1, 3) for p in ("fused", "unfused", "bf16")}
    # the fused and unfused paths compute the same bits; bf16 does not
    assert data["digests"]["T=3 fused"] == data["digests"]["T=3 unfused"] != data["digests"]["T=3 bf16"]
    same = _digest("--json", str(tmp_path / "b.json"), "--against", str(tmp_path / "a.json"))
    assert same.returncode == 0 and "0 field(s) changed" in same.stdout, same.stdout + same.stderr
    data["digests"]["T=1 fused"]["y"] = "0" * 64
    (tmp_path / "c.json").write_text(json.dumps(data))
    changed = _digest("--json", str(tmp_path / "d.json"), "--against", str(tmp_path / "c.json"))
    assert changed.returncode == 1 and "changed: T=1 fused y" in changed.stdout
