"""The `gpumatrix` commands, one module per group: each computes a result and one renderer prints it.

    detect.py   detect: this machine's GPU class, count, names and driver
    tree.py     list, check, matrix: the registry of the tree and the runner x shard matrix
    run.py      run: this machine's slice of a suite, with its guards, report and page
    reports.py  coverage, estimate, flaky: what JSON reports add up to
    adopt.py    init, register --suggest: set a repository up
    bot.py      bot handle, bot sync, plan: the /rerun-test bot
    options.py  the options several commands share

`gpumatrix.cli` gathers them into the `gpumatrix` group, where `GpumatrixError` becomes the exit status.
"""

from __future__ import annotations

__all__: list[str] = []
