"""`gpumatrix estimate`: each test file's est_time from the durations runners measured.

proposals.py  the proposal per file and class (p90 of the samples), and the registrations off by 2x
write.py      `--write`: the proposals put into the registrations' est_time= literals
"""

from __future__ import annotations

__all__: list[str] = []
