"""How the plugin applies a file's refined tests (`gpumatrix.registry.refine`) to the items pytest collected.

`refine_item` looks up an item's refinement in its file's registration (read statically, by the test's
name) and returns the registration narrowed to that test's need, with the runners that run it. A test
that carries the marker but has no static refinement (a marker added at run time, on a parameter, or
through `pytestmark`) is an error: the registry could not have placed it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpumatrix.registry.model import Registration
from gpumatrix.registry.refine import MARKER, refined_key

__all__ = ["RefinedItem", "refine_item"]


@dataclass(frozen=True)
class RefinedItem:
    registration: Registration  # narrowed to the test's own need
    runners: tuple[str, ...]  # the runners that run this test
    why: str  # shown in its skip reason
    error: str = ""


def refine_item(registration: Registration, item: Any) -> RefinedItem | None:
    """The refinement of `item` (a pytest item of `registration`'s file); None for a test the file's
    registration governs as it is."""
    cls = getattr(item, "cls", None)
    test = refined_key(cls.__name__ if cls is not None else None, getattr(item, "originalname", item.name))
    for on, runners, name, gpus, line in registration.refined:
        if name == test:
            narrowed = dataclasses.replace(registration, on=on, gpus=gpus)
            return RefinedItem(narrowed, runners, f"refined by @pytest.mark.{MARKER} on line {line}")
    if item.get_closest_marker(MARKER) is None or not registration.base_runners:
        return None
    return RefinedItem(
        registration,
        registration.base_runners,
        "",
        error=(
            f"{item.nodeid}: @pytest.mark.{MARKER} is read without importing the file, so it must decorate "
            f"the test function, its Test* class or a method of it, with literal arguments"
        ),
    )
