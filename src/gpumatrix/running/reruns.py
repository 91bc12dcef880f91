"""Which tests run again after a failure, and how a repeated run is told to the processes that share it.

The registry is the one source of truth: a test runs again after a failure only where its file is
registered `flaky={class: reason}` for the class it runs as (`gpumatrix.running.gating.running_class`), up to
`flaky: reruns:` of ci/matrix.yaml (K) times, and never in a repeated run (`--count N`, `gpumatrix run
--repeat N`), which measures every failure. The reruns themselves are pytest-rerunfailures': each item gets
its `flaky(reruns=...)` marker first in line, so a test's own `@pytest.mark.flaky` in a file that is not
registered flaky is overridden with 0 reruns; the options that would rerun every test (`--reruns`,
`--force-reruns`, the `reruns` ini value) are refused while this plugin decides. Repetition is
pytest-repeat's (`--count N`, every test run N times as N items); a child pytest running one of them is
given the same `--count` so that its node id exists there.

A test that passed only after running again is shown as such at the end of the terminal output
("passed after 2 reruns"), and its failed attempts go to the JSON report (`gpumatrix.report.Rerun`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpumatrix import UsageError
from gpumatrix.flaky.stats import passed_after_reruns
from gpumatrix.registry.model import Registration
from gpumatrix.registry.resolution import running_class
from gpumatrix.running.session import SessionPlan

__all__ = ["RerunHooks", "check_rerun_options", "repeat_count", "repeat_options", "reruns_for"]

RERUN_PLUGIN = "rerunfailures"  # pytest-rerunfailures' entry point
REPEAT_PLUGIN = "repeat"  # pytest-repeat's


def repeat_count(config: pytest.Config) -> int:
    """How many times each test runs (pytest-repeat's `--count`; 1 without the plugin)."""
    count = config.getoption("count", 1) if config.pluginmanager.hasplugin(REPEAT_PLUGIN) else 1
    return count if isinstance(count, int) and count > 1 else 1


def repeat_options(config: pytest.Config) -> list[str]:
    """The options that make a child pytest repeat as this one does: its node ids are this one's."""
    count = repeat_count(config)
    if count == 1:
        return []
    return ["--count", str(count), "--repeat-scope", str(config.getoption("repeat_scope"))]


def reruns_for(registration: Registration | None, class_name: str | None, *, reruns: int, repeat: int) -> int:
    """How many times a test of `registration`'s file may run again after a failure where it runs as
    `class_name`: `reruns` (K) where the file is registered flaky on that class, else 0; 0 in a repeated run."""
    if repeat > 1 or registration is None or registration.why_flaky(class_name) is None:
        return 0
    return reruns


def check_rerun_options(config: pytest.Config, *, needed: bool) -> None:
    """A `UsageError` when pytest-rerunfailures is told to rerun tests the registry does not name, or when
    some file is registered flaky here (`needed`) and pytest-rerunfailures is not installed."""
    if not config.pluginmanager.hasplugin(RERUN_PLUGIN):
        if needed:
            raise UsageError(
                "test files registered flaky= run again after a failure through pytest-rerunfailures, "
                "which is not installed (or was disabled with -p no:rerunfailures): "
                "pip install pytest-rerunfailures"
            )
        return
    asked = [
        option
        for option, value in (
            ("--reruns", config.getoption("reruns", None)),
            ("--force-reruns", config.getoption("force_reruns", None)),
            ("the reruns ini value", config.getini("reruns")),
        )
        if value not in (None, "", 0, "0")
    ]
    if asked:
        raise UsageError(
            f"{' and '.join(asked)} would run any failing test again; here only files registered "
            'flaky={"class": "reason"} run again, on those classes (ci/matrix.yaml flaky: reruns)'
        )


@dataclass
class RerunHooks:
    """The rerun policy of one session on its collected items, and the terminal's list of the tests that
    passed only after running again. `repeat`: each test runs this many times (1: not a repeated run)."""

    plan: SessionPlan
    repeat: int = 1
    _paths: dict[Path, str | None] = field(default_factory=dict)
    _files: dict[str, Registration] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._files = {registration.path: registration for registration in self.plan.registry.files}

    @classmethod
    def for_session(cls, config: pytest.Config, plan: SessionPlan) -> RerunHooks:
        """The hooks of a session; a `UsageError` when its options would rerun what the registry does not
        name, or when a file runs again here and pytest-rerunfailures is missing (`check_rerun_options`)."""
        hooks = cls(plan, repeat_count(config))
        check_rerun_options(config, needed=any(hooks.reruns(r) for r in plan.registry.files))
        return hooks

    def running_class(self, registration: Registration) -> str | None:
        return running_class(registration, self.plan.hardware, self.plan.runner)

    def reruns(self, registration: Registration | None) -> int:
        if registration is None:
            return 0
        return reruns_for(
            registration, self.running_class(registration), reruns=self.plan.flaky_reruns, repeat=self.repeat
        )

    def registration(self, path: Path) -> Registration | None:
        """The registration of the file at `path` (a test's), as the registry names it."""
        if path not in self._paths:
            try:
                self._paths[path] = Path(path).resolve().relative_to(self.plan.root.resolve()).as_posix()
            except ValueError:
                self._paths[path] = None
        relative = self._paths[path]
        return self._files.get(relative) if relative is not None else None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            reruns = self.reruns(self.registration(item.path))
            # First in line: pytest-rerunfailures reads the closest `flaky` marker, and a test's own marker in
            # a file not registered flaky must not make it run again.
            if reruns or item.get_closest_marker("flaky") is not None:
                item.add_marker(pytest.mark.flaky(reruns=reruns), append=False)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = []
        for nodeid, count in passed_after(terminalreporter.stats.values()):
            registration = self.registration(terminalreporter.config.rootpath / nodeid.split("::", 1)[0])
            why = registration.why_flaky(self.running_class(registration)) if registration else None
            lines.append(f"{nodeid} {passed_after_reruns(count)}" + (f" ({why})" if why else ""))
        if lines:
            terminalreporter.write_sep("=", "passed only after running again (flaky)", yellow=True)
            for line in lines:
                terminalreporter.write_line(line, yellow=True)


def passed_after(reports_by_kind: Iterable[Iterable[object]]) -> list[tuple[str, int]]:
    """(nodeid, reruns) of each test whose call passed after failed attempts, from a terminal's reports."""
    attempts: dict[str, set[object]] = {}
    passed: list[str] = []
    for reports in reports_by_kind:
        for report in reports:
            outcome, nodeid = getattr(report, "outcome", None), getattr(report, "nodeid", "")
            if outcome == "rerun":
                attempts.setdefault(nodeid, set()).add(
                    getattr(report, "rerun", len(attempts.get(nodeid, ())))
                )
            elif outcome == "passed" and getattr(report, "when", None) == "call":
                passed.append(nodeid)
    return [(nodeid, len(attempts[nodeid])) for nodeid in dict.fromkeys(passed) if nodeid in attempts]
