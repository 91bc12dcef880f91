"""The gpumatrix distribution (packaging/gpumatrix): a wheel of the CI service alone, built from this
repository offline, that installs into a fresh environment without torch or mxfuse and runs."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import __version__, register

register(on=("cpu",), est_time=40)

REPO = REPO_ROOT
# No PYTHONPATH: a checkout's src/ on it would pass for an installed gpumatrix.
CLEAN_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
PACKAGING = REPO / "packaging" / "gpumatrix"
# Makes torch, triton and mxfuse unimportable, as on a plain runner that never installed them.
HIDE = """
import importlib.abc, sys
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton", "mxfuse"):
            raise ImportError(f"No module named {name!r} (not installed here)")
sys.meta_path.insert(0, Hidden())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Offline: the setuptools of this environment, no index.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(PACKAGING),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=CLEAN_ENV,
    )
    (found,) = out.glob("gpumatrix-*.whl")
    return found


def test_the_wheel_holds_gpumatrix_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"gpumatrix", f"gpumatrix-{__version__}.dist-info"}
    assert "gpumatrix/templates/report.html.j2" in names
    assert "gpumatrix/cli.py" in names and "gpumatrix/bot/handle.py" in names
    metadata = zipfile.ZipFile(wheel).read(f"gpumatrix-{__version__}.dist-info/METADATA").decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not any(word in line for line in requires for word in ("torch", "triton", "mxfuse"))
    entry_points = zipfile.ZipFile(wheel).read(f"gpumatrix-{__version__}.dist-info/entry_points.txt").decode()
    assert "gpumatrix = gpumatrix.cli:main" in entry_points
    assert "[pytest11]" in entry_points and "gpumatrix = gpumatrix.plugin" in entry_points


def test_the_wheel_installs_into_a_fresh_environment_and_runs_without_torch(
    wheel: Path, tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=CLEAN_ENV,
    )
    installed = {p.name.split("-")[0] for p in (fresh / "lib").glob("python*/site-packages/*")}
    assert "gpumatrix" in installed and not installed & {"torch", "triton", "mxfuse"}
    assert (fresh / "bin" / "gpumatrix").is_file()
    # Its dependencies (click, rich, pyyaml, ...) from this environment, after the fresh one's own.
    dependencies = sysconfig.get_paths()["purelib"]
    code = (
        HIDE
        + f"sys.path.append({dependencies!r})\n"
        + "import gpumatrix, gpumatrix.plugin, gpumatrix.bot.handle\n"
        + f"assert gpumatrix.__file__.startswith({str(fresh)!r}), gpumatrix.__file__\n"
        + "from gpumatrix.cli import main\nmain(['--version'])\n"
    )
    done = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"gpumatrix, version {__version__}"
