"""Running tests: a runner's slice through pytest, its shards, its workers and their GPU leases.

run.py             `gpumatrix run`: plan the run, start pytest, judge what came of it
shard.py           the runner x shard matrix: files packed into shards within each runner's budget
session.py         the plan of one pytest session (runner, machine, registry), shared with workers
gating.py          what the plugin decides about a file before importing it (plain functions)
leases.py          exclusive GPU leases across threads and processes
child.py           a test that needs its own GPUs, run in a fresh pytest
reruns.py          flaky= files: tests that may run again after a failure, and how that is shown
compile_cache.py   the compile caches kept between runs (GPUMATRIX_CACHE_DIR)
outputs.py         output files written only where nothing, or gpumatrix's own output, was
pytest_failure.py  why pytest left no report, and pytest's output teed as it runs
"""

from __future__ import annotations

__all__: list[str] = []
