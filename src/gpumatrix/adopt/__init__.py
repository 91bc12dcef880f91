"""Adopting gpumatrix in a repository: `gpumatrix init` and `gpumatrix register --suggest`.

init.py             ci/matrix.yaml, the conftest fallback and .gitignore, from what the tree says
suggest.py          a registration for each unregistered test file, from what it already says
evidence.py         the GPU signs of a test file (skips, device strings, imports, names), read as data
local_helpers.py    the helpers a test file imports from the tree's own modules, read the same way
class_survey.py     the classes and GPU counts the test files need, and why
tree_survey.py      where pytest would collect test files, and those the test roots do not hold
pytest_settings.py  pytest's settings (testpaths, python_files, norecursedirs) read from the tree
"""

from __future__ import annotations

__all__: list[str] = []
