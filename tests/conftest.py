"""Two bridges between this suite and gpumatrix, which never imports mxfuse.

- Path coverage: mxfuse emits a plain record whenever a producer, a GEMM or a layer chooses a path
  (`mxfuse.witness`); a session-wide subscriber hands each one to `gpumatrix.report.witnesses.record`, which
  files it under the running test (or, in a process a test started, in the file the plugin names).
  `mxfuse.witness` imports nothing but the standard library, so subscribing costs no torch import on
  a plain runner; where mxfuse is not installed there is nothing to forward.
- The one guard this suite needs when its pytest plugin is disabled (`pytest -p no:gpumatrix`): the
  gpumatrix plugin decides, before importing a test file, whether this machine can run it. With the
  plugin disabled nothing does, so a file registered for GPU classes only is skipped, one entry per
  file with a reason saying so; CPU files run as usual. With the plugin active this returns None and
  the plugin decides.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

from gpumatrix.plugin import unplugged_collect_report
from gpumatrix.report.witnesses import record


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    return unplugged_collect_report(collector)


def _mxfuse_witness() -> ModuleType | None:
    """`mxfuse.witness` if it is imported or importable (its package imports no torch), else None."""
    module = sys.modules.get("mxfuse.witness")
    if module is not None:
        return module
    try:
        if importlib.util.find_spec("mxfuse") is None:
            return None
        return importlib.import_module("mxfuse.witness")
    except ImportError:
        return None


@pytest.fixture(autouse=True, scope="session")
def _witnesses_to_path_coverage() -> Iterator[None]:
    witness = _mxfuse_witness()
    if witness is None:
        yield
        return
    unsubscribe = witness.subscribe(record)
    try:
        yield
    finally:
        unsubscribe()
