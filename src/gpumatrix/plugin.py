"""pytest plugin: run what this machine can, skip the rest with a reason, lease GPUs to each test.

Active only where the root (the rootdir, or `--gpumatrix-root`) has `ci/matrix.yaml`, or where a
`--gpumatrix-plan` names a resolved session, so installing the package disturbs no other project's
pytest. Once active, every `test_*.py` under the test roots of ci/matrix.yaml (`test_roots:`, default
`tests`) is decided on before it is imported
(`gpumatrix.running.gating.decide_file`):

- one that is not validly registered is a collection error naming the file and the problem;
- one that needs GPUs this machine lacks is skipped as a whole, one entry per file, with the reason
  `evaluate_hardware` gives ("needs 4 x b200|gb300; this machine: 1 x h100 (NVIDIA H200, sm_90)");
- with `--runner LABEL`, one outside the runner's slice is deselected; the run first checks that
  this machine is that runner's class and GPU count (whether the GPUs are idle is `gpumatrix run`'s
  pre-flight, which a person can waive); with `--suite NAME`, one of another suite is deselected;
- one disabled where it runs (`register(disabled=...)`, `disabled_on=`) is skipped as a whole with
  its reason, marked `disabled` in the report (never a hardware skip), unless `--include-disabled`;
- a test runs again after a failure only where its file is registered `flaky=` for the class it runs
  as, through pytest-rerunfailures (`gpumatrix.running.reruns`), and never in a repeated run (`--count N`);
- each test of a GPU file leases its GPUs (`gpumatrix.running.leases`), with or without xdist, seeing only
  them through CUDA_VISIBLE_DEVICES: a one-GPU test shares its GPU with at most `workers_per_gpu - 1`
  others (ci/matrix.yaml), unless its file is registered `gpu="exclusive"` or the test is marked
  `exclusive_gpu`; a test of several GPUs holds them alone; a test needing more GPUs than its
  process's CUDA is bound to runs in a fresh pytest child (`gpumatrix.running.child`), whose reports are
  replayed here;
- `--gpumatrix-report PATH` writes the JSON test report (`gpumatrix.report`: this plugin is its one
  writer) by file and test, with each file's duration and the code paths each test recorded
  (`gpumatrix.report.witnesses`, checked against `ci/paths.yaml`), for `gpumatrix run`, `coverage`,
  `estimate` and the bot.

What a session needs decided first (root, hardware, runner, suite, registry, declared paths) is a
`gpumatrix.running.session.SessionPlan`, resolved once: by `gpumatrix run`, which hands it over with
`--gpumatrix-plan`, or else by the controller, which hands it to xdist workers and to the child of a
test that needs more GPUs. Hooks stay thin; decisions are plain functions in `gpumatrix.running.gating`.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpumatrix import GpumatrixError, UsageError
from gpumatrix.config import Runner
from gpumatrix.coverage.paths import PATHS_FILE
from gpumatrix.git_commit import head_commit
from gpumatrix.hardware.detection import Hardware, preflight
from gpumatrix.problems import Problem
from gpumatrix.registry.model import Registration
from gpumatrix.registry.reader import read_registration
from gpumatrix.registry.refine import MARKER
from gpumatrix.registry.refine_items import refine_item
from gpumatrix.registry.source import read_source_bytes
from gpumatrix.report import dump_report
from gpumatrix.report.collect import HARDWARE_SKIP_ATTRIBUTE, RunOutcomes
from gpumatrix.report.witnesses import WitnessHooks
from gpumatrix.running.child import HELD_LEASE_ENV, REPLAY_TO_ENV, run_in_child
from gpumatrix.running.gating import (
    HardwareSkip,
    decide_file,
    evaluate_hardware,
    report_facts,
    unplugged_skip_reason,
)
from gpumatrix.running.leases import LeasePlan, LeaseSettings, ProcessLeases, lease_settings
from gpumatrix.running.outputs import Output, check_output, write_output
from gpumatrix.running.reruns import RerunHooks
from gpumatrix.running.session import SessionPlan, resolve_session

__all__ = ["EXCLUSIVE_MARKER", "HardwareSkip", "evaluate_hardware", "unplugged_collect_report"]

# `@pytest.mark.exclusive_gpu`: this test holds its GPUs alone, whatever its file's registration says.
EXCLUSIVE_MARKER = "exclusive_gpu"

_WORKER_PLAN = "gpumatrix_plan"
_WORKER_DESELECTED = "gpumatrix_deselected"
_OPTIONS = ("runner", "suite", "include-disabled", "gpumatrix-report", "gpumatrix-root", "gpumatrix-plan")


@dataclass
class _State:
    plan: SessionPlan
    report_path: Path | None
    leases: ProcessLeases | None
    replay_to: Path | None
    include_disabled: bool = False
    repeat: int = 1  # each test runs this many times (pytest-repeat's --count)
    report: RunOutcomes = field(default_factory=RunOutcomes)
    registrations: dict[str, Registration] = field(default_factory=dict)
    problems: dict[str, list[Problem]] = field(default_factory=dict)
    _relpaths: dict[Path, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.registrations = {r.path: r for r in self.plan.registry.files}
        for problem in self.plan.registry.problems:
            self.problems.setdefault(problem.source, []).append(problem)

    @property
    def root(self) -> Path:
        return self.plan.root

    @property
    def hardware(self) -> Hardware:
        return self.plan.hardware

    @property
    def runner(self) -> Runner | None:
        return self.plan.runner

    @property
    def suite(self) -> str | None:
        return self.plan.suite

    def relpath(self, path: Path) -> str | None:
        """Root-relative '/'-path of a file, as the registry names it; None outside the root."""
        if path not in self._relpaths:
            try:
                self._relpaths[path] = Path(path).resolve().relative_to(self.root).as_posix()
            except ValueError:
                self._relpaths[path] = None
        return self._relpaths[path]

    def file_of(self, config: pytest.Config, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return self.relpath(config.rootpath / path) or path


_STATE = pytest.StashKey[_State]()
_NEED = pytest.StashKey[int]()
_EXCLUSIVE = pytest.StashKey[bool]()  # the test holds its GPUs alone (register(gpu=...), the marker)
_HARDWARE_SKIP = pytest.StashKey[bool]()  # a refined test this machine cannot run
_REFINE_ERROR = pytest.StashKey[str]()
_PLAN = pytest.StashKey[LeasePlan]()  # a test leased in its own process


def _state(config: pytest.Config) -> _State | None:
    return config.stash.get(_STATE, None)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


# -- configuration ----------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpumatrix", "hardware-gated GPU test matrix (ci/matrix.yaml)")
    group.addoption(
        "--runner",
        metavar="LABEL",
        default=None,
        help="run only this runner's slice, after checking this machine is that runner",
    )
    group.addoption(
        "--suite",
        metavar="NAME",
        default=None,
        help="run only the files of this suite (ci/matrix.yaml suites; default: every suite)",
    )
    group.addoption(
        "--include-disabled",
        action="store_true",
        default=False,
        help="run files registered disabled= or disabled_on= this machine's class instead of skipping them",
    )
    group.addoption(
        "--gpumatrix-report",
        metavar="PATH",
        default=None,
        help="write a JSON summary of outcomes by file, with hardware skips marked",
    )
    group.addoption(
        "--gpumatrix-root",
        metavar="DIR",
        default=None,
        help="the tree holding ci/matrix.yaml and tests/ (default: the rootdir)",
    )
    group.addoption(
        "--gpumatrix-plan",
        metavar="FILE",
        default=None,
        help="the session plan `gpumatrix run` resolved (hardware, runner, registry): used as it is",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(on=CLASSES, gpus=N): narrow where this test runs within its file's registration "
        "(gpumatrix.registry.refine); read statically, like register(...)",
    )
    config.addinivalue_line(
        "markers",
        f"{EXCLUSIVE_MARKER}: this test holds its GPUs alone instead of sharing them with other tests "
        '(as register(gpu="exclusive") does for a whole file)',
    )
    try:  # every problem of configuration is one usage error before any test, never one per test
        plan = _session_plan(config)
        if plan is None:
            return
        leases = _process_leases(config, plan, lease_settings())
        reruns = RerunHooks.for_session(config, plan)
    except GpumatrixError as exc:
        raise pytest.UsageError(str(exc)) from None
    report_option = config.getoption("gpumatrix_report")
    if report_option:  # refused before any test runs: a test file or a device is never written over
        try:
            check_output(_report_output(Path(config.invocation_params.dir, report_option)))
        except GpumatrixError as exc:
            raise pytest.UsageError(str(exc)) from None
    replay_to = os.environ.get(REPLAY_TO_ENV)
    state = config.stash[_STATE] = _State(
        plan=plan,
        report_path=Path(config.invocation_params.dir, report_option) if report_option else None,
        leases=leases,
        replay_to=Path(replay_to) if replay_to else None,
        include_disabled=config.getoption("include_disabled"),
        repeat=reruns.repeat,
    )
    config.pluginmanager.register(WitnessHooks(plan.declared_paths, PATHS_FILE), "gpumatrix-witnesses")
    config.pluginmanager.register(reruns, "gpumatrix-reruns")
    if state.report_path is not None or state.replay_to is not None:
        config.pluginmanager.register(_Recorder(config, state), "gpumatrix-recorder")


def _session_plan(config: pytest.Config) -> SessionPlan | None:
    """The session's plan: the one handed over (`--gpumatrix-plan`, an xdist worker's input), or resolved
    here; None where the plugin is not active (no ci/matrix.yaml at the root)."""
    label, suite = config.getoption("runner"), config.getoption("suite")
    plan_option = config.getoption("gpumatrix_plan")
    if plan_option:
        plan = SessionPlan.read(Path(config.invocation_params.dir, plan_option))
        given = (plan.runner.label if plan.runner else None, plan.suite)
        if (label, suite) != given and (label, suite) != (None, None):
            raise UsageError(
                f"--runner {label} --suite {suite} disagree with the plan {plan_option} ({given})"
            )
        return plan
    if _is_worker(config) and _WORKER_PLAN in config.workerinput:  # type: ignore[attr-defined]
        return SessionPlan.from_json(config.workerinput[_WORKER_PLAN], source="the controller's plan")  # type: ignore[attr-defined]
    root_option = config.getoption("gpumatrix_root")
    root = (
        Path(config.invocation_params.dir, root_option).resolve()
        if root_option
        else config.rootpath.resolve()
    )
    matrix_path = root / "ci" / "matrix.yaml"
    if not matrix_path.is_file():
        asked = [f"--{name}" for name in _OPTIONS if config.getoption(name.replace("-", "_"))]
        if asked:
            raise UsageError(
                f"{', '.join(asked)} need(s) a runner matrix, and {matrix_path} does not "
                f"exist; pass --gpumatrix-root DIR"
            )
        return None
    return resolve_session(root, runner=label, suite=suite)


def _process_leases(
    config: pytest.Config, plan: SessionPlan, settings: LeaseSettings
) -> ProcessLeases | None:
    hardware = plan.hardware
    if not hardware.count or os.environ.get(HELD_LEASE_ENV):  # a child runs under its parent's lease
        return None
    settings.prepare()
    worker = config.workerinput["workerid"] if _is_worker(config) else "main"  # type: ignore[attr-defined]
    return ProcessLeases(
        devices=hardware.device_ids,
        lock_dir=settings.lock_dir,
        timeout=settings.timeout,
        log=settings.log,
        worker=worker,
        share=plan.workers_per_gpu,
        vendor=hardware.vendor,
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: workers take the controller's plan instead of probing, loading and parsing again."""
    state = _state(node.config)
    if state is not None:
        node.workerinput[_WORKER_PLAN] = state.plan.to_json()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = _state(config)
    if state is None:
        return None
    runner = f"; runner: {state.runner.label}" if state.runner else ""
    runner += f"; suite: {state.suite}" if state.suite else ""
    runner += "; disabled files included" if state.include_disabled else ""
    return [f"gpumatrix: this machine: {state.hardware.describe()} (from {state.hardware.source}){runner}"]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """With --runner, refuse to start on a machine that is not the runner it claims to be."""
    state = _state(session.config)
    if state is None or state.runner is None or _is_worker(session.config):
        return
    problems = preflight(state.hardware, state.runner, check_busy=False)
    if problems:
        _write_report(state, problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        raise pytest.UsageError(f"this machine cannot run runner {state.runner.label!r}:\n{lines}")


# -- collection -------------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    """A registered-kind test file is failed, skipped or deselected here, without being imported."""
    state = _state(collector.config)
    if state is None or not isinstance(collector, pytest.Module):
        return None
    path = state.relpath(collector.path)
    if path is None or not _is_registered_kind(path, state.plan.test_roots):
        return None
    decision = decide_file(
        path,
        state.registrations.get(path),
        state.problems.get(path, ()),
        hardware=state.hardware,
        runner=state.runner,
        suite=state.suite,
        include_disabled=state.include_disabled,
    )
    if decision.action == "error":
        return pytest.CollectReport(collector.nodeid, "failed", "\n".join(map(str, decision.problems)), [])
    if decision.action == "skip":
        return _skipped_file(collector, decision.reason)
    if decision.action == "deselect":
        # One entry for the whole file, which is never imported; terminal and report count files.
        collector.config.hook.pytest_deselected(items=[collector])
        return pytest.CollectReport(collector.nodeid, "passed", None, [])
    return None


def _skipped_file(collector: pytest.Collector, reason: str) -> pytest.CollectReport:
    # The longrepr a module-level pytest.skip() gives, without a line: -rs shows "path: reason".
    return pytest.CollectReport(
        collector.nodeid, "skipped", (str(collector.path), None, f"Skipped: {reason}"), []
    )


def unplugged_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    """For a conftest.py, when the gpumatrix plugin is disabled (`-p no:gpumatrix`): GPU files skip.

    Returns None whenever this plugin is registered (it then decides), for anything but a test
    module, and for files that name `cpu` or are not registered.
    """
    config = collector.config
    if config.pluginmanager.is_registered(sys.modules[__name__]) or not isinstance(collector, pytest.Module):
        return None
    try:
        data, size = read_source_bytes(str(collector.path))
    except OSError:
        return None
    reason = unplugged_skip_reason(read_registration(data, collector.nodeid, size=size)[0])
    return _skipped_file(collector, reason) if reason is not None else None


def _is_registered_kind(path: str, roots: tuple[str, ...]) -> bool:
    name = path.rsplit("/", 1)[-1]
    in_roots = any(path.startswith(f"{root}/") for root in roots)
    return in_roots and name.startswith("test_") and name.endswith(".py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --runner, tests that belong to no registered file of the slice are deselected too (a
    conftest's own items); the GPUs each collected test leases are noted."""
    state = _state(config)
    if state is None:
        return
    kept, deselected = [], []
    for item in items:
        path = state.relpath(item.path)
        registration = state.registrations.get(path) if path else None
        refined = refine_item(registration, item) if registration is not None else None
        runners = registration.base_runners if registration is not None else ()
        if refined is not None:
            registration, runners = refined.registration, refined.runners
        if state.runner and (registration is None or state.runner.label not in runners):
            deselected.append(item)
            continue
        kept.append(item)
        if refined is not None and refined.error:
            item.stash[_REFINE_ERROR] = refined.error
            continue
        skip = evaluate_hardware(registration, state.hardware) if refined is not None else None
        if skip is not None:
            item.add_marker(pytest.mark.skip(reason=f"{skip.reason} ({refined.why})"))
            item.stash[_HARDWARE_SKIP] = True
        elif (
            registration is not None
            and state.hardware.count
            and state.hardware.gpu_class in registration.on
            and evaluate_hardware(registration, state.hardware) is None
        ):
            item.stash[_NEED] = registration.gpus
            item.stash[_EXCLUSIVE] = (
                registration.exclusive or item.get_closest_marker(EXCLUSIVE_MARKER) is not None
            )
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items:
        return
    config = items[0].config
    state = _state(config)
    if state is None:
        return
    state.report.deselected.update(item.nodeid for item in items)
    if _is_worker(config):  # the controller collects nothing under xdist: tell it at the end
        config.workeroutput.setdefault(_WORKER_DESELECTED, []).extend(item.nodeid for item in items)  # type: ignore[attr-defined]


# -- running: leases --------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> bool | None:
    state = _state(item.config)
    need = item.stash.get(_NEED, 0)
    if state is None or state.leases is None or not need:
        return None
    plan = state.leases.plan(need, exclusive=item.stash.get(_EXCLUSIVE, False))
    if not plan.in_child:
        item.stash[_PLAN] = plan
        return None  # leased in setup, released in teardown
    run_in_child(item, state.leases, plan, state.plan, include_disabled=state.include_disabled)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A refined test skipped for this machine's hardware says so on its report (it travels to the
    controller, from xdist workers too), so the JSON report marks the skip `hardware`."""
    report = yield
    if item.stash.get(_HARDWARE_SKIP, False) and report.skipped:
        setattr(report, HARDWARE_SKIP_ATTRIBUTE, True)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Lease before any fixture runs, so fixtures see only the leased GPUs too."""
    error = item.stash.get(_REFINE_ERROR, None)
    if error is not None:
        raise GpumatrixError(error)
    state = _state(item.config)
    need = item.stash.get(_NEED, 0)
    if state is None or state.leases is None or not need:
        return
    plan = item.stash.get(_PLAN, None)
    if plan is None:  # another plugin ran this test's protocol (a rerun, say): plan here
        plan = state.leases.plan(need, exclusive=item.stash.get(_EXCLUSIVE, False))
        if plan.in_child:
            raise GpumatrixError(
                f"{plan.reason}; only gpumatrix's own test protocol can move it to a fresh "
                f"process, and another plugin ran this one"
            )
    else:
        del item.stash[_PLAN]
    state.leases.start(plan, holder=item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        state = _state(item.config)
        if state is not None and state.leases is not None:
            state.leases.finish()


# -- reporting --------------------------------------------------------------------------------------


class _Recorder:
    """Report hooks, registered per run: a report does not say which run it belongs to."""

    def __init__(self, config: pytest.Config, state: _State) -> None:
        self.config, self.state = config, state
        self.controller = not _is_worker(config)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hand outcomes to the parent (a child under a held lease), or record them (controller)."""
        if self.state.replay_to is not None:
            data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
            with open(self.state.replay_to, "a", encoding="utf-8") as stream:
                stream.write(json.dumps(data) + "\n")
        if self.state.report_path is not None and self.controller:
            self.state.report.add_test_report(report, self.state.file_of(self.config, report.nodeid))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if self.state.report_path is not None and self.controller:
            self.state.report.add_collect_report(report, self.state.file_of(self.config, report.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    state = _state(node.config)
    output = getattr(node, "workeroutput", None) or {}
    if state is not None:
        state.report.deselected.update(output.get(_WORKER_DESELECTED, ()))


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = _state(session.config)
    if state is not None and state.report_path is not None and not _is_worker(session.config):
        _write_report(state, [])


def _write_report(state: _State, problems: list[str]) -> None:
    facts = report_facts(
        state.registrations.values(), state.hardware, state.runner, include_disabled=state.include_disabled
    )
    report = state.report.to_report(
        hardware=state.hardware,
        runner=state.runner.label if state.runner else None,
        problems=problems,
        hardware_skips=facts.hardware_skips,
        disabled_skips=facts.disabled_skips,
        est_times=facts.est_times,
        repeat=state.repeat,
        commit=head_commit(state.root),
        suite=state.suite,
    )
    if state.report_path is not None:  # a regular file, renamed into place, never over what is not a report
        write_output(_report_output(state.report_path), dump_report(report))


def _report_output(path: Path) -> Output:
    return Output("--gpumatrix-report", path, "report")
