"""The bot's route runs one way: an event followed through `handle` and a run's `sync`, call by call.

- `handle_event` enters each step of its route once, in order: parse (`authorize.screen`), read
  (`gather.arrive`), decide (`decide.decide`), carry out (`dispatch`); the GitHub client it is handed is
  not a step (its calls are the ones the emulator counts).
- No call goes back up: a module never calls into a module that imports it (directly or through others),
  which is how two modules "call each other back and forth" without an import cycle (a callback).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from architecture import import_graph, reachable, read_package
from bot_world import PR, BotWorld, make_based_world, make_world, report_json
from github_emulator import GitHubEmulator, github_emulator  # noqa: F401  (the fixture)

import gpumatrix
from gpumatrix import register

register(on=("cpu",), est_time=10)

SOURCE = Path(gpumatrix.__file__).resolve().parent
CLIENT = "gpumatrix.bot.github"


def _module(frame: Any) -> str | None:
    """The gpumatrix module a frame runs code of (None: another package's, or generated code such as a
    dataclass's `__init__`)."""
    name = frame.f_globals.get("__name__", "")
    if not name.startswith("gpumatrix") or not frame.f_code.co_filename.endswith(".py"):
        return None
    return name


def _traced(action: Callable[[], Any]) -> tuple[Any, list[tuple[str, str, str]]]:
    """`action()` and every call from gpumatrix code into other gpumatrix code it made, in order:
    (caller module, caller function, callee module). Calls through other packages' code (pathlib,
    httpx, the standard library) are seen from the gpumatrix frame below them."""
    calls: list[tuple[str, str, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if callee is None:
            return
        caller = frame.f_back
        while caller is not None and _module(caller) is None:
            caller = caller.f_back
        if caller is not None:
            calls.append((_module(caller), caller.f_code.co_name, callee))  # type: ignore[arg-type]

    sys.setprofile(profile)
    try:
        result = action()
    finally:
        sys.setprofile(None)
    return result, calls


def _stages(calls: list[tuple[str, str, str]]) -> list[str]:
    """The modules `handle_event` calls into itself, in order, a module once per stretch."""
    stages: list[str] = []
    for caller, function, callee in calls:
        if caller == "gpumatrix.bot.handle" and function == "handle_event" and callee not in (caller, CLIENT):
            if not stages or stages[-1] != callee:
                stages.append(callee)
    return stages


def _calls_back_up(calls: list[tuple[str, str, str]]) -> list[str]:
    """Each call from a module into one that imports it: the route turning back."""
    graph = import_graph(read_package(SOURCE))
    found = []
    for caller, function, callee in dict.fromkeys(calls):
        if caller != callee and caller in reachable(graph, callee):
            found.append(f"{caller}.{function} -> {callee}, which imports {caller}")
    return found


@pytest.fixture
def world(github_emulator: GitHubEmulator, tmp_path: Path) -> BotWorld:  # noqa: F811
    return make_world(github_emulator, tmp_path, permissions={"alice": "write"})


def test_a_dispatch_goes_parse_read_decide_carry_out(world: BotWorld) -> None:
    event = world.comment("/rerun-test test_quantize.py")
    (result, _), calls = _traced(lambda: world.handle(event))
    assert result.action == "dispatch"
    assert _stages(calls) == [
        "gpumatrix.bot.authorize",
        "gpumatrix.bot.gather",
        "gpumatrix.bot.decide",
        "gpumatrix.bot.dispatch",
    ]
    assert _calls_back_up(calls) == []


def test_a_comment_handled_again_is_resynced_and_decides_nothing(world: BotWorld) -> None:
    event = world.comment("/rerun-test test_quantize.py")
    world.handle(event)
    (result, _), calls = _traced(lambda: world.handle(event))
    assert result.action == "ignore" and "re-synced" in result.reason
    assert _stages(calls) == ["gpumatrix.bot.authorize", "gpumatrix.bot.gather", "gpumatrix.bot.dispatch"]
    assert _calls_back_up(calls) == []


def test_a_comment_without_a_command_stops_at_the_parse(world: BotWorld) -> None:
    event = world.comment("Looks good to me.")
    (result, count), calls = _traced(lambda: world.handle(event))
    assert result.action == "ignore" and count == 0
    assert _stages(calls) == ["gpumatrix.bot.authorize"]


CONFIG = "tests/unit/gpumatrix/registry/test_config.py"
_CONFIG_TEXT = (
    'from gpumatrix import register\nregister(on=("cpu",), est_time=5)\n\ndef test_a():\n    pass\n'
)


def test_a_sync_after_the_runs_never_calls_back_up(
    github_emulator: GitHubEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    world = make_based_world(
        github_emulator,
        tmp_path,
        base_files={CONFIG: _CONFIG_TEXT},
        head_files={CONFIG: _CONFIG_TEXT.replace("pass", "pass  # changed")},
        later_main_files={"README.md": "main moved on\n"},
    )
    result, _ = world.handle(world.comment("/rerun-test --repeat 2 test_config.py"))
    assert result.action == "dispatch" and result.status is not None and result.comment_id is not None
    assert [group.commit for group in result.status.groups] == ["head", "base"]
    for group in result.status.groups:
        world.gh.set_run_state(group.run_id, "completed", "success")
        world.upload_report(group.run_id, report_json(CONFIG, passed=2))
    head_run = result.status.groups[0].run_id
    synced, calls = _traced(lambda: world.sync(result.comment_id, run_id=head_run))
    assert synced.ci_states is not None and synced.ci_states.comment_id  # the whole sync ran
    assert all(group.tally is not None for group in synced.status.groups)  # --repeat tallies included
    assert any(callee == "gpumatrix.bot.state" for _, _, callee in calls)  # markers written and read
    assert _calls_back_up(calls) == []


def test_the_check_finds_a_call_back_up() -> None:
    """The check itself: a call from a module into one that imports it is named."""
    calls = [
        ("gpumatrix.bot.model", "f", "gpumatrix.bot.render"),
        ("gpumatrix.bot.render", "g", "gpumatrix.bot.model"),
    ]
    assert _calls_back_up(calls) == [
        "gpumatrix.bot.model.f -> gpumatrix.bot.render, which imports gpumatrix.bot.model"
    ]
    assert PR == 7  # the world's pull request, which every event above comments on
