"""Running one test in a fresh pytest whose CUDA sees only the GPUs it leased, and replaying its reports.

A process's CUDA is bound to the devices it saw when it first initialised; a test that needs more GPUs
than that (two, in a process an xdist worker bound to one) cannot have them there. The plugin leases
them and runs the test here instead: a child `pytest NODEID` with CUDA_VISIBLE_DEVICES set to the lease,
the parent's session plan narrowed to those GPUs (`--gpumatrix-plan`: the child detects and discovers
nothing), and the options that change what a test does (`gating.forwarded_options`). The child writes
each report it makes as a JSON line (`REPLAY_TO_ENV`); the parent logs them as its own, so the
terminal, xdist, JUnit and the JSON report see one test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpumatrix.hardware.visibility import visible_environment
from gpumatrix.running.gating import forwarded_options
from gpumatrix.running.leases import LeasePlan, ProcessLeases
from gpumatrix.running.reruns import repeat_options
from gpumatrix.running.session import SessionPlan

__all__ = ["HELD_LEASE_ENV", "REPLAY_TO_ENV", "log_setup_error", "run_in_child"]

# Set for a child pytest that runs one test under a lease its parent holds.
HELD_LEASE_ENV = "GPUMATRIX_HELD_LEASE"
REPLAY_TO_ENV = "GPUMATRIX_REPLAY_TO"


def run_in_child(
    item: pytest.Item, leases: ProcessLeases, plan: LeasePlan, session: SessionPlan, *, include_disabled: bool
) -> None:
    """Lease `plan`'s GPUs for `item`, run it in a child pytest, and log the child's reports here."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    try:
        leased = leases.start(plan, holder=item.nodeid)
    except Exception as exc:  # a lease timeout: report it as this test's setup error
        log_setup_error(item, exc)
    else:
        try:
            reports = _child_reports(item, leased, session.narrowed(leased), include_disabled)
        finally:
            leases.finish()
        for report in reports:
            ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def log_setup_error(item: pytest.Item, error: BaseException) -> None:
    """Log `error` as the setup error of `item`."""

    def fail() -> None:
        raise error

    call = pytest.CallInfo.from_call(fail, when="setup")
    item.ihook.pytest_runtest_logreport(report=item.ihook.pytest_runtest_makereport(item=item, call=call))


def _child_reports(
    item: pytest.Item, leased: tuple[str, ...], session: SessionPlan, include_disabled: bool
) -> list[pytest.TestReport]:
    """Run `item` alone in a fresh pytest whose CUDA sees `leased`; its reports, as this process's."""
    config = item.config
    with tempfile.TemporaryDirectory(prefix="gpumatrix-child-") as scratch:
        replay = Path(scratch, "reports.jsonl")
        plan_file = Path(scratch, "plan.json")
        session.write(plan_file)
        env = {
            **os.environ,
            **visible_environment(session.hardware.vendor, leased),
            HELD_LEASE_ENV: ",".join(leased),
            REPLAY_TO_ENV: str(replay),
        }
        args = _child_args(item, Path(scratch), plan_file, include_disabled)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args],
            cwd=config.invocation_params.dir,
            env=env,
            capture_output=True,
            text=True,
        )
        lines = replay.read_text(encoding="utf-8").splitlines() if replay.exists() else []
    reports = [
        config.hook.pytest_report_from_serializable(config=config, data=json.loads(line)) for line in lines
    ]
    if not any(report.when == "setup" for report in reports):  # it never ran: collection failed
        log_setup_error(
            item,
            RuntimeError(
                f"the child pytest running {item.nodeid} on GPUs {', '.join(leased)} reported no test "
                f"(exit {done.returncode}):\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
            ),
        )
        return []
    return reports


def _child_args(item: pytest.Item, scratch: Path, plan_file: Path, include_disabled: bool) -> list[str]:
    config = item.config
    _, _, selector = item.nodeid.partition("::")
    args = [
        f"{item.path}::{selector}" if selector else str(item.path),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={config.rootpath}",
        f"--basetemp={scratch / 'tmp'}",
        f"--import-mode={config.option.importmode}",
        f"--gpumatrix-plan={plan_file}",  # one argument each: never taken for a test path
    ]
    if config.inipath is not None:
        args.append(f"--config-file={config.inipath}")
    if include_disabled:  # the child decides on the file again
        args.append("--include-disabled")
    if config.pluginmanager.has_plugin("xdist"):
        args += ["-n", "0"]  # overrides a -n from addopts
    return args + repeat_options(config) + forwarded_options(list(config.invocation_params.args))
