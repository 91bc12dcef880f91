"""Flaky tests, in numbers: pass rates with their intervals, and the history of many reports.

    stats.py    `PassRate`, Wilson and Newcombe intervals, the verdict of head against base
    history.py  `gpumatrix flaky`: pass rates per test and GPU class over JSON reports

The rule, the formulas and the values they are tested against are in docs/flaky.md.
"""

from __future__ import annotations

__all__: list[str] = []
