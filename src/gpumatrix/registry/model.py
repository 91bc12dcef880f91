"""The registry's values: one test file's `Registration`, the `Registry` of a tree, and their errors.

A registration is what a file's `register(...)` call says (read by `gpumatrix.registry.reader`), with the
runner of each class it names once `gpumatrix.registry.resolution` has placed it. Plain values: nothing
here reads a file or the matrix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpumatrix.config import CPU_CLASS, DEFAULT_SUITE
from gpumatrix.problems import Problem, ProblemsError

__all__ = ["FileReading", "Registration", "Registry", "RegistryError", "assembled"]


@dataclass(frozen=True)
class Registration:
    """One test file's registration, with the runner that serves each class it names.

    `est_time` is the file's estimate in seconds; when the file gives one per class (`est_times`),
    it is the largest of them, which is also the estimate of a class of `on` the mapping leaves out.
    """

    path: str  # repository-relative, '/'-separated: tests/kernels/mxfuse/quantize/test_quantize_mxfp8.py
    line: int
    on: tuple[str, ...]
    gpus: int
    est_time: float
    runners: tuple[str, ...] = ()  # runner labels, one per class of `on`, in the same order
    # (argument, line) of each argument given: problems found later name the argument's own line.
    arg_lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)
    suite: str = DEFAULT_SUITE
    disabled: str | None = None  # why the whole file is switched off, everywhere
    disabled_on: tuple[tuple[str, str], ...] = ()  # (class, why the file is switched off there)
    est_times: tuple[tuple[str, float], ...] = ()  # (class, seconds) as written; empty: est_time everywhere
    flaky: tuple[tuple[str, str], ...] = ()  # (class, why its tests may run again after a failure there)
    # Tests that narrow where they run (`gpumatrix.registry.refine`), each (on, runners, test, gpus, line): a list
    # leads each entry so the cache reads it back as tuples. `runners` then serves them too, and
    # `own_runners` are the runners of the file's other tests.
    refined: tuple[tuple[tuple[str, ...], tuple[str, ...], str, int, int], ...] = ()
    own_runners: tuple[str, ...] = ()
    exclusive: bool = False  # register(gpu="exclusive"): each test holds its GPUs alone, never shared

    @property
    def base_runners(self) -> tuple[str, ...]:
        """The runners of the tests no marker refines."""
        return self.own_runners if self.refined else self.runners

    def refined_runners(self, test: str) -> tuple[str, ...] | None:
        """The runners of a refined test (`Class::test` or `test`); None when it is not refined."""
        for _, runners, name, _, _ in self.refined:
            if name == test:
                return runners
        return None

    @property
    def needs_gpu(self) -> bool:
        return any(name != CPU_CLASS for name in self.on)

    def estimate_for(self, class_name: str | None) -> float:
        """Seconds this file takes on a runner of `class_name`: its own estimate, else `est_time`."""
        for name, seconds in self.est_times:
            if name == class_name:
                return seconds
        return self.est_time

    def why_disabled(self, class_name: str | None = None) -> str | None:
        """`disabled: REASON` or `disabled on CLASS: REASON` when the file is off on `class_name`
        (None: wherever it runs), else None."""
        if self.disabled is not None:
            return f"disabled: {self.disabled}"
        for name, reason in self.disabled_on:
            if name == class_name:
                return f"disabled on {name}: {reason}"
        return None

    def why_flaky(self, class_name: str | None) -> str | None:
        """`flaky on CLASS: REASON` when the file's tests run again after a failure on `class_name`
        (`register(flaky=...)`, docs/flaky.md), else None: a file not registered flaky there never reruns."""
        for name, reason in self.flaky:
            if name == class_name:
                return f"flaky on {name}: {reason}"
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields (xdist workers get registrations so)."""
        return dict(zip(_FIELDS, self.to_values(), strict=True))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Registration:
        return cls(**{key: _frozen(value) for key, value in data.items()})

    def to_values(self) -> list[Any]:
        """The fields in declaration order (`_FIELDS`), as the registry cache stores them."""
        return [getattr(self, name) for name in _FIELDS]

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> Registration:
        """From `to_values()` read back from JSON: its lists become the tuples they were."""
        # strict: a list of another length (another code's cache) is a ValueError, never a half record.
        return assembled(dict(zip(_FIELDS, map(_frozen, values), strict=True)))


_FIELDS = tuple(field.name for field in dataclasses.fields(Registration))


def assembled(fields: dict[str, Any]) -> Registration:
    """The registration holding `fields` (every field, already frozen), built without `__init__`.

    A frozen dataclass's `__init__` sets each of its 11 fields through `object.__setattr__`: 2.3 us,
    against 0.4 us for filling the instance's dict (timeit). Discovery builds a registration twice per
    file, from the cache and with its runners, and a warm run of 5,000 files is 80 ms in all.
    """
    registration = object.__new__(Registration)
    registration.__dict__.update(fields)
    return registration


def _frozen(value: Any) -> Any:
    """A field read back from JSON: lists become tuples (of tuples, for lists of lists like arg_lines)."""
    if value.__class__ is not list:
        return value
    # Fields hold lists of one kind, so the first item tells; 5,000 registrations a warm run read this.
    return tuple(map(_frozen, value)) if value and value[0].__class__ is list else tuple(value)


# What reading one file gave: its registration (runners not yet resolved) or the problems found.
FileReading = tuple[Registration | None, list[Problem]]


class RegistryError(ProblemsError):
    """Test files with registration problems (exit 1): `problems` lists each with file and line."""

    summary = "test files with registration problems"


@dataclass(frozen=True)
class Registry:
    files: tuple[Registration, ...]
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def get(self, path: str) -> Registration | None:
        for registration in self.files:
            if registration.path == path:
                return registration
        return None

    def for_runner(self, label: str, *, suite: str | None = None) -> tuple[Registration, ...]:
        """The files `label` runs: of every suite, or of `suite` only."""
        return tuple(r for r in self.files if label in r.runners and (suite is None or r.suite == suite))

    def require_ok(self) -> Registry:
        """This registry; `RegistryError` listing its problems when it has any."""
        if self.problems:
            raise RegistryError(self.problems)
        return self
