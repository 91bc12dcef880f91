"""The static test registry: which test file runs on which runner, read by parsing, never importing.

    model.py         `Registration` (one file's register(...) call, with its runners) and `Registry`
    source.py        a test file's bytes read as Python reads them, in bounded time, as far as the call
    reader.py        the `register(...)` call read with `ast` (`read_registration`)
    refine.py        `@pytest.mark.gpumatrix(...)` on one test, read the same way
    refine_items.py  a refinement applied to the items pytest collected (for the plugin)
    resolution.py    the runner that serves each class a registration names; the class a file runs as
    discovery.py     the registry of a tree on disk or of files read as data (`discover`, `load_tree`)
    cache.py         what reading each file gave, kept between runs

Imports run down that list's dependencies: model <- source <- refine <- reader <- resolution <- discovery.
The rules are docs/registry.md's.
"""

from __future__ import annotations

__all__: list[str] = []
