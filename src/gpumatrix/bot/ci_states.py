"""The CI-states summary of a pull request: the latest run of every suite on its current head, in one block.

    **CI states** of #7 at `0123456789ab` (the head), each suite's latest run:

    | suite | state | run |
    | CI | ✅ passed | [Run #41](...) |
    | rerun / 4-gpu-gb300 | 🔄 running | [View run](...) · [status comment](...) |

    **Stale**: ran on an earlier head, not yet on this one:
    | rerun / 1-gpu-h100 | ✅ passed | `fedcba987654` | [View run](...) |

A suite is a workflow that an event ran on the head (push, pull_request: CI, PR GPU tests) or a runner that
`/rerun-test` dispatched to for that head (`rerun / <runner>`, from the PR's status comments). After a push,
what ran on an earlier head is listed apart as stale until the suite runs on the new head, never as current.
The block is rendered whole from a `CiStates` value, which is also stored in it as a hidden marker
(`gpumatrix.bot.state`): the stale
part of a workflow suite can only come from an earlier render, since GitHub lists runs by one head at a time.
Pure: `gpumatrix.bot.ci_states_sync` reads the runs and writes the comment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpumatrix.bot.checks import check_name
from gpumatrix.bot.github import RunInfo
from gpumatrix.bot.model import HEAD, STATE_EMOJI, TERMINAL_STATES, CiStates, StatusComment, Suite, run_state
from gpumatrix.bot.state import MarkerError, decode_ci_states, encode_ci_states
from gpumatrix.escape import markdown

__all__ = [
    "CI_STATES_MARKER",
    "SUITE_EVENTS",
    "RerunSource",
    "build_ci_states",
    "parse_ci_states",
    "render_ci_states",
    "with_runs",
]

CI_STATES_MARKER = "<!-- gpumatrix:ci-states -->"
# Events that run a suite on the PR's head itself. Dispatched runs (the reruns) run the default branch's
# workflow and show through the status comments instead; workflow_run and issue_comment runs are the bot's.
SUITE_EVENTS = frozenset({"push", "pull_request", "pull_request_target", "merge_group"})
_SHORT = 12


@dataclass(frozen=True)
class RerunSource:
    """A status comment, as the block reads it: its id orders commands, its URL links them."""

    comment_id: int
    comment_url: str
    status: StatusComment


def build_ci_states(
    pr: int,
    head: str,
    *,
    runs: Iterable[RunInfo],
    reruns: Iterable[RerunSource],
    previous: CiStates | None = None,
) -> CiStates:
    """The block for `head` from the runs GitHub lists for it, the PR's status comments, and the last block."""
    current: dict[str, Suite] = {}
    for run in _latest_per_workflow(r for r in runs if r.head_sha == head and r.event in SUITE_EVENTS):
        current[run.name] = Suite(
            run.name,
            run_state(run.status, run.conclusion),
            head,
            run.html_url or None,
            run.id,
            run.run_number or None,
        )
    earlier: dict[str, Suite] = {}
    for source in sorted(reruns, key=lambda s: s.comment_id):  # a later command supersedes an earlier one
        for group in source.status.groups:
            if source.status.sha is None or (group.run_id is None and group.state != "error"):
                continue
            if group.commit != HEAD:  # a --repeat command's run on the base commit: not a state of the PR
                continue
            suite = Suite(
                check_name(group.label),
                group.state,
                source.status.sha,
                group.url,
                group.run_id,
                comment_url=source.comment_url or None,
            )
            (current if suite.sha == head else earlier)[suite.name] = suite
    for suite in (*(previous.suites if previous else ()), *(previous.stale if previous else ())):
        if suite.sha != head and suite.name not in earlier:  # status comments are fresher than the last block
            earlier[suite.name] = suite
    stale = [suite for name, suite in earlier.items() if name not in current]
    return CiStates(pr, head, tuple(sorted(current.values(), key=_order)), tuple(sorted(stale, key=_order)))


def with_runs(states: CiStates, runs: dict[int, RunInfo]) -> CiStates:
    """`states` with every unfinished suite whose run is in `runs` showing that run's state. A finished one
    stays: it may show failed from a failed job before GitHub completes its run."""

    def fresh(suite: Suite) -> Suite:
        run = runs.get(suite.run_id) if suite.run_id is not None else None
        if run is None or suite.state in TERMINAL_STATES:
            return suite
        return replace(suite, state=run_state(run.status, run.conclusion))

    return replace(states, suites=tuple(map(fresh, states.suites)), stale=tuple(map(fresh, states.stale)))


def render_ci_states(states: CiStates) -> str:
    lines = [
        CI_STATES_MARKER,
        f"**CI states** of #{states.pr} at {markdown(states.head[:_SHORT], style='code')} (the head), each suite's latest run:",
        "",
    ]
    if states.suites:
        lines += ["| suite | state | run |", "| --- | --- | --- |"]
        lines += [f"| {_cell(s.name)} | {_state(s)} | {_links(s)} |" for s in states.suites]
    else:
        lines.append("No run on this head yet.")
    lines.append("")
    if states.stale:
        lines += [
            f"**Stale**: ran on an earlier head, not yet on {markdown(states.head[:_SHORT], style='code')}:",
            "",
            "| suite | state | head | run |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| {_cell(s.name)} | {_state(s)} | {markdown(s.sha[:_SHORT], style='code')} | {_links(s)} |"
            for s in states.stale
        ]
        lines.append("")
    lines.append(encode_ci_states(states))
    return "\n".join(lines)


def parse_ci_states(body: str) -> CiStates | None:
    """The block's stored value; None when `body` is not a CI-states comment this code can read (one a newer
    gpumatrix wrote included: it is then written anew from the runs)."""
    if not (body or "").startswith(CI_STATES_MARKER):
        return None
    try:
        return decode_ci_states(body)
    except MarkerError:
        return None


def _latest_per_workflow(runs: Iterable[RunInfo]) -> list[RunInfo]:
    """Each workflow's newest run, passing over runs that did nothing (all jobs skipped: a label that is not
    the one a workflow waits for) while the workflow has a run that did something."""
    by_workflow: dict[int | str, list[RunInfo]] = {}
    for run in runs:
        by_workflow.setdefault(run.workflow_id or run.name, []).append(run)
    chosen = []
    for found in by_workflow.values():
        acted = [r for r in found if r.conclusion != "skipped"] or found
        chosen.append(max(acted, key=lambda r: r.id))
    return chosen


def _order(suite: Suite) -> tuple[bool, str]:
    return suite.name.startswith("rerun / "), suite.name  # workflow suites first, then reruns, by name


def _state(suite: Suite) -> str:
    words = {
        "pending": "pending",
        "queued": "queued",
        "running": "running",
        "passed": "passed",
        "failed": "failed",
        "cancelled": "cancelled",
        "error": "dispatch failed",
    }
    return f"{STATE_EMOJI[suite.state]} {words[suite.state]}"


def _links(suite: Suite) -> str:
    links = []
    if suite.url:
        links.append(f"[Run #{suite.number}]({suite.url})" if suite.number else f"[View run]({suite.url})")
    if suite.comment_url:
        links.append(f"[status comment]({suite.comment_url})")
    return " · ".join(links) or "—"


def _cell(text: str) -> str:
    # A workflow's name comes from the PR's own workflow file: plain text, and no `|` to break the table.
    return markdown(text, in_table=True)
