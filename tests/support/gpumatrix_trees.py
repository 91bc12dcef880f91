"""Throwaway test trees for the gpumatrix pytest plugin, and a way to run pytest on them.

A tree has its own ci/matrix.yaml (so the plugin is active in it) and its own pytest.ini (so it is
its own rootdir). pytest runs in a subprocess with a clean environment: the fake hardware, the
lease directory and the lease log are set per run, and nothing leaks from the outer test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FAKE_CUDA_CONFTEST",
    "GIT_ENV",
    "MATRIX_YAML",
    "REGISTER_IMPORT",
    "RESOLVING_CONFTEST",
    "PytestRun",
    "most_at_once",
    "overlapping_leases",
    "read_jsonl",
    "register_call",
    "registered",
    "run_pytest",
    "write_tree",
]

# The classes of docs/registry.md and a runner set like ci/matrix.yaml's; kept literal here so these
# tests do not change meaning when the project's own matrix grows.
MATRIX_YAML = """\
classes:
  cpu: {description: no GPU, compute_capability: []}
  "5090": {description: RTX 5090, compute_capability: ["12.0"]}
  h100: {description: Hopper, compute_capability: ["9.0"]}
  b200: {description: Blackwell, compute_capability: ["10.0"]}
  gb300: {description: Blackwell Ultra, compute_capability: ["10.3"]}
runners:
  - {label: cpu, class: cpu, gpus: 0, runs_on: [ubuntu-latest], timeout_minutes: 30}
  - {label: 1-gpu-5090, class: "5090", gpus: 1, runs_on: [gpu-5090], timeout_minutes: 30}
  - {label: 1-gpu-h100, class: h100, gpus: 1, runs_on: [gpu-h100], timeout_minutes: 30}
  - {label: 2-gpu-h100, class: h100, gpus: 2, runs_on: [gpu-h100-2], timeout_minutes: 30}
  - {label: 4-gpu-b200, class: b200, gpus: 4, runs_on: [gpu-b200], timeout_minutes: 30}
  - {label: 4-gpu-gb300, class: gb300, gpus: 4, runs_on: [gpu-gb300], timeout_minutes: 30}
"""


# git for throwaway repositories: a fixed identity, no user or system configuration.
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

# A root conftest that notes every time a process resolves a session itself (detects the hardware,
# discovers the registry) instead of being handed the plan.
RESOLVING_CONFTEST = """
import json, os
import gpumatrix.running.session

def _noting(name, real):
    def noted(*args, **kwargs):
        with open(os.environ["RESOLVED"], "a") as stream:
            stream.write(json.dumps({"call": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                                     "child": bool(os.environ.get("GPUMATRIX_HELD_LEASE"))}) + "\\n")
        return real(*args, **kwargs)
    return noted

gpumatrix.running.session.detect = _noting("detect", gpumatrix.running.session.detect)
gpumatrix.running.session.discover = _noting("discover", gpumatrix.running.session.discover)
"""


# A conftest standing in for CUDA: the first use of the `cuda` fixture fixes the visible devices of the
# process, as cuInit does, so a test needing more GPUs than that runs in the plugin's child pytest.
FAKE_CUDA_CONFTEST = """
import os, pytest
import gpumatrix.running.leases

# Stands in for CUDA: the first use fixes the visible devices of the process, as cuInit does.
_BOUND = []
gpumatrix.running.leases.cuda_initialized = lambda **_: bool(_BOUND)

@pytest.fixture
def cuda():
    if not _BOUND:
        _BOUND.append(os.environ["CUDA_VISIBLE_DEVICES"])
    return _BOUND[0].split(",")
"""


REGISTER_IMPORT = "from gpumatrix import register\n"


def register_call(arguments: str) -> str:
    """Source of a test file that is only its registration: `register(ARGUMENTS)`, written as given."""
    return f"{REGISTER_IMPORT}register({arguments})\n"


def registered(on: Sequence[str], *, gpus: int = 1, est_time: float = 1, body: str = "") -> str:
    """Source of a test file registered with these (literal) arguments, followed by `body`."""
    header = (
        f"from gpumatrix import register\n\nregister(on={tuple(on)!r}, gpus={gpus}, est_time={est_time})\n"
    )
    return header + textwrap.dedent(body)


def write_tree(root: Path, files: Mapping[str, str], *, matrix: str | None = MATRIX_YAML) -> Path:
    """Write `files` ({relative path: source}) under `root`, with pytest.ini and ci/matrix.yaml (unless None)."""
    extra = {"ci/matrix.yaml": matrix} if matrix is not None else {}
    for relative, text in {**extra, "pytest.ini": "[pytest]\n", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@dataclass(frozen=True)
class PytestRun:
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_pytest(
    root: Path,
    *args: str,
    hardware: str | None,
    env: Mapping[str, str] | None = None,
    report: bool = True,
    timeout: float = 180,
) -> PytestRun:
    """`python -m pytest ARGS` in `root` under `GPUMATRIX_HARDWARE=hardware` (None: unset).

    Leases go to `root/.leases`, so concurrent runs of different tests never contend.
    """
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GPUMATRIX_", "PYTEST_", "CUDA_VISIBLE_DEVICES"))
    }
    clean |= {"GPUMATRIX_LEASE_DIR": str(root / ".leases"), "PYTHONDONTWRITEBYTECODE": "1"}
    if hardware is not None:
        clean["GPUMATRIX_HARDWARE"] = hardware
    clean |= dict(env or {})
    report_path = root / f"gpumatrix-report-{uuid.uuid4().hex}.json"  # runs on one tree may overlap
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    if report:
        command += ["--gpumatrix-report", str(report_path)]
    done = subprocess.run(command, cwd=root, env=clean, capture_output=True, text=True, timeout=timeout)
    data = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else None
    report_path.unlink(missing_ok=True)
    return PytestRun(done.returncode, done.stdout, done.stderr, data)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def overlapping_leases(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(device, holder, holder) for every two lease-log records that held one device at once when they
    may not: one of them held it alone (`share` 1), or both held the same slot of it."""
    found = []
    for i, first in enumerate(records):
        for second in records[i + 1 :]:
            shared = set(first["devices"]) & set(second["devices"])
            alone = first.get("share", 1) == 1 or second.get("share", 1) == 1
            if (
                shared
                and (alone or first.get("slot") == second.get("slot"))
                and first["acquired"] < second["released"]
                and second["acquired"] < first["released"]
            ):
                found.extend((device, first["nodeid"], second["nodeid"]) for device in sorted(shared))
    return found


def most_at_once(records: Sequence[Mapping[str, Any]], device: str) -> int:
    """The most lease-log records that held `device` at the same moment."""
    events = sorted(
        (moment, step)
        for record in records
        if device in record["devices"]
        for moment, step in ((record["acquired"], 1), (record["released"], -1))
    )
    most = held = 0
    for _, step in events:  # a release sorts before an acquisition at the same moment
        held += step
        most = max(most, held)
    return most
