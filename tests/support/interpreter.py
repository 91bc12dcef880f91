"""Running Triton kernels under the interpreter from a test: one child process per run, once per session.

Triton decides at decoration time (import) whether a kernel is interpreted, and the standard-library
functions a kernel calls (``tl.max``, ``tl.sum``) are decorated the same way, so interpreting a kernel in
a process that imported Triton normally does not work. A test therefore hands its cases to a child
process started with ``TRITON_INTERPRET=1`` (``run_interpreted``): a worker script, given as source text,
loads the cases from ``sys.argv[1]`` (``torch.load``), runs the kernels on CPU tensors and saves its
results to ``sys.argv[2]`` (``torch.save``); the test compares them with its references.

Under pytest-xdist every worker would run the child for its share of the cases: the run is made once per
session, in the session's shared temporary directory under a file lock, and the other workers read its
file. A failed child raises with the tail of its output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from filelock import FileLock

import mxfuse

__all__ = ["run_interpreted", "shared_tmp"]


def shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary directory, shared by the xdist workers of one session."""
    tmp = tmp_path_factory.getbasetemp()
    return tmp.parent if os.environ.get("PYTEST_XDIST_WORKER") else tmp


def run_interpreted(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    worker: str,
    cases: Callable[[], object],
    *,
    timeout: float = 900,
) -> object:
    """The results of ``worker`` (Python source) run once per session on ``cases()`` under the Triton
    interpreter, loaded with ``torch.load(weights_only=False)``. ``name`` names the run's files (one per
    session and name: two runs of a test file take two names)."""
    tmp = shared_tmp(tmp_path_factory)
    results = tmp / f"{name}.pt"
    with FileLock(str(results) + ".lock"):
        if not results.exists():
            payload = tmp / f"{name}_cases.pt"
            torch.save(cases(), payload)
            partial = Path(str(results) + ".partial")
            _run_child(worker, payload, partial, timeout=timeout)
            os.replace(partial, results)
    return torch.load(results, weights_only=False)


def _run_child(worker: str, payload: Path, results: Path, *, timeout: float) -> None:
    paths = [str(Path(mxfuse.__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", worker, str(payload), str(results)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"interpreter run failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
