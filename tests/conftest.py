"""The one guard this suite needs when its pytest plugin is disabled (`pytest -p no:gpumatrix`).

The gpumatrix plugin decides, before importing a test file, whether this machine can run it. With
the plugin disabled nothing does, so a file registered for GPU classes only is skipped, one entry
per file with a reason saying so; CPU files run as usual. With the plugin active this returns None
and the plugin decides.
"""

from __future__ import annotations

import pytest

from gpumatrix.plugin import unplugged_collect_report


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    return unplugged_collect_report(collector)
