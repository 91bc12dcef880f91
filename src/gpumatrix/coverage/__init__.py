"""Which code paths ran where: the declared paths, the merged matrices, and their page.

    paths.py  ci/paths.yaml: the code paths a project declares, with the classes that must exercise each
    merge.py  `gpumatrix coverage`: runners' JSON reports merged into the file x runner and path x class
              matrices, checked against the declared paths
    page.py   those matrices as a terminal table, Markdown and the HTML report page (templates/)

The rules are docs/coverage.md's.
"""

from __future__ import annotations

__all__: list[str] = []
