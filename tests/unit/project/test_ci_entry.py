"""`.ci/run` (CI's entry point) runs `make test`, and fails unless pytest passed: no test collected fails too."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=3)


# A stand-in for .venv/bin/python: logs its arguments and, for `-m pytest`, exits with STATUS.
_FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls.log"
if [ "$1 $2" = "-m pytest" ]; then exit {status}; fi
exit 0
"""

# (id, pytest's exit status, whether .ci/run succeeds)
CASES = [
    ("all-passed", 0, True),
    ("a-test-failed", 1, False),
    ("usage-error", 4, False),
    ("no-test-collected", 5, False),
]


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("status", "passes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ci_run_fails_unless_pytest_passed(tmp_path: Path, status: int, passes: bool) -> None:
    for relative in ("Makefile", ".ci/run", "pyproject.toml", "packaging/gpumatrix/pyproject.toml"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, tmp_path / relative)
    _executable(tmp_path / ".venv" / "bin" / "python", _FAKE_PYTHON.format(status=status))
    _executable(tmp_path / ".venv" / "bin" / "ruff", "#!/usr/bin/env bash\nexit 0\n")
    _executable(tmp_path / ".venv" / "bin" / "gpumatrix", "#!/usr/bin/env bash\nexit 0\n")  # coverage
    stamp = tmp_path / ".venv" / ".installed"
    stamp.touch()
    later = (tmp_path / "Makefile").stat().st_mtime + 3600
    os.utime(stamp, (later, later))  # installed: make must not try to set up a real environment
    # BROWSERS: a command every machine has stands in for Chromium, so `make browser` never runs apt-get here.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "BROWSERS": "bash"}
    done = subprocess.run(
        [str(tmp_path / ".ci" / "run")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    calls = (tmp_path / ".venv" / "calls.log").read_text(encoding="utf-8").splitlines()
    assert [call for call in calls if call.startswith("-m pytest")], calls  # pytest was really run
    assert (done.returncode == 0) == passes, done.stdout + done.stderr
