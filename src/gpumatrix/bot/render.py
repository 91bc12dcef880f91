"""The status comment: its model, its Markdown, and the hidden state that lets `sync` rebuild it.

One status comment per command. Its body is rendered as a whole from a `StatusComment`, and that value
is also stored in the body as one hidden JSON marker, so `gpumatrix bot sync` can read the comment back,
refresh every run it references from the Actions API, and write the whole truth again: concurrent,
repeated or cancelled writers lose nothing because nobody edits a part of the comment.

Text that came from a comment or a PR (specs, the command line, registry messages) is shown only in
code spans or with HTML escaped, so it cannot mention people, inject markup or close the marker.

A `/rerun-test --repeat N` comment has two groups per runner, one on the head and one on the base
(`commit`), and once both runs are over, each group's tally of its reports and a verdict table per runner
(`gpumatrix.bot.repeat`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumatrix.bot.repeat import BASE, HEAD, Tally, comparison_lines
from gpumatrix.bot.resolve import Refusal
from gpumatrix.escape import markdown

__all__ = [
    "CHECK_KINDS",
    "STATE_EMOJI",
    "TERMINAL_STATES",
    "GroupStatus",
    "StatusComment",
    "hidden_json",
    "parse_status_comment",
    "render_listing",
    "render_status_comment",
    "run_state",
    "source_marker",
]

# pending: planned, not dispatched yet (or a dry run). error: the dispatch itself failed.
STATE_EMOJI = {
    "pending": "⏳",
    "queued": "⏳",
    "running": "🔄",
    "passed": "✅",
    "failed": "❌",
    "cancelled": "⚠️",
    "error": "❗",
}
TERMINAL_STATES = frozenset({"passed", "failed", "cancelled", "error"})
REFUSED = "⛔"
# Where each run's result is also published on the commit: GitHub check runs, or commit statuses when the
# token may not write checks (see gpumatrix.bot.publish).
CHECK_KINDS = ("check-runs", "commit-statuses")

_STATE_RE = re.compile(r"<!-- gpumatrix:state (\{.*?\}) -->", re.DOTALL)
_SINGLE_LINE_LIMIT = 100  # a longer pytest command is split one test per line


@dataclass(frozen=True)
class GroupStatus:
    """One runner group of a status comment and where its run stands."""

    label: str
    tests: tuple[str, ...]
    state: str = "pending"
    run_id: int | None = None
    url: str | None = None
    error: str | None = None  # why the dispatch failed: "HTTP 422: ..."
    include_disabled: bool = False  # the run runs tests disabled on this runner (--include-disabled)
    commit: str = HEAD  # `base`: a --repeat command's run on the PR's merge base
    tally: Tally | None = None  # a --repeat command's run, once over: its tests' passes of their runs

    def __post_init__(self) -> None:
        if self.state not in STATE_EMOJI:
            raise ValueError(f"state must be one of {', '.join(STATE_EMOJI)}, got {self.state!r}")
        if self.commit not in (HEAD, BASE):
            raise ValueError(f"commit must be {HEAD!r} or {BASE!r}, got {self.commit!r}")


@dataclass(frozen=True)
class StatusComment:
    source_comment_id: int
    command: str  # the command line as written
    author: str
    pr: int | None = None
    sha: str | None = None
    groups: tuple[GroupStatus, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    problem: str | None = None  # the whole command is refused
    checks: str | None = None  # one of CHECK_KINDS once the runs' results were published on the commit
    checks_note: str | None = None  # why commit statuses were used instead of check runs
    repeat: int | None = None  # --repeat N: every test N times on the head and N times on the base
    base_sha: str | None = None  # the merge base of the head with `base_ref`, pinned at plan time
    base_ref: str | None = None
    new_tests: tuple[str, ...] = ()  # selections the base does not have (the PR adds their files)

    def __post_init__(self) -> None:
        if self.checks is not None and self.checks not in CHECK_KINDS:
            raise ValueError(f"checks must be one of {', '.join(CHECK_KINDS)} or None, got {self.checks!r}")

    def with_groups(self, groups: Sequence[GroupStatus]) -> StatusComment:
        return replace(self, groups=tuple(groups))


def run_state(status: str | None, conclusion: str | None) -> str:
    """Map a workflow run's `status`/`conclusion` to a comment state; never `passed` unless `success`."""
    if status != "completed":
        return "running" if status == "in_progress" else "queued"
    if conclusion == "success":
        return "passed"
    if conclusion in ("cancelled", "skipped", "neutral", "stale"):
        return "cancelled"
    return "failed"  # failure, timed_out, startup_failure, action_required, and anything new


def source_marker(comment_id: int) -> str:
    return f"<!-- gpumatrix:source={comment_id} -->"


def render_status_comment(status: StatusComment) -> str:
    """The Markdown of a status comment, hidden markers included."""
    lines = [source_marker(status.source_comment_id), _header(status), ""]
    for group in status.groups:
        command = _pytest_command(group.tests, include_disabled=group.include_disabled, repeat=status.repeat)
        if group.commit == BASE:
            command = [f"git checkout {status.base_sha}", *command]
        lines += [_group_line(group, status.repeat), "", "```bash", *command, "```", ""]
    if status.new_tests:
        shown = ", ".join(markdown(test, style="code") for test in status.new_tests)
        lines += [f"🆕 Not on the base (this PR adds them): {shown}", ""]
    lines += comparison_lines(status)
    if status.problem:
        lines += [f"{REFUSED} {markdown(status.command, style='code')}: {markdown(status.problem)}", ""]
    lines += [f"{REFUSED} {markdown(r.spec, style='code')}: {markdown(r.message)}" for r in status.refusals]
    if status.refusals:
        lines.append("")
    if status.checks is not None and status.groups:
        lines += [_checks_line(status), ""]
    lines.append(f"<!-- gpumatrix:state {_dump_state(status)} -->")
    return "\n".join(lines)


def parse_status_comment(body: str) -> StatusComment | None:
    """Read the hidden state back; None when `body` is not a readable status comment."""
    match = _STATE_RE.search(body or "")
    if match is None:
        return None
    try:
        data = json.loads(match[1])
        return StatusComment(
            source_comment_id=int(data["source"]),
            command=str(data["command"]),
            author=str(data["author"]),
            pr=_optional_int(data.get("pr")),
            sha=str(data["sha"]) if data.get("sha") else None,
            groups=tuple(
                GroupStatus(
                    label=str(g["label"]),
                    tests=tuple(str(t) for t in g["tests"]),
                    state=str(g["state"]),
                    run_id=_optional_int(g.get("run_id")),
                    url=str(g["url"]) if g.get("url") else None,
                    error=str(g["error"]) if g.get("error") else None,
                    include_disabled=g.get("include_disabled") is True,
                    commit=str(g.get("commit", HEAD)),
                    tally=Tally.from_json(g["tally"]) if g.get("tally") is not None else None,
                )
                for g in data.get("groups", ())
            ),
            refusals=tuple(Refusal(str(spec), str(message)) for spec, message in data.get("refusals", ())),
            problem=str(data["problem"]) if data.get("problem") else None,
            checks=str(data["checks"]) if data.get("checks") else None,
            checks_note=str(data["checks_note"]) if data.get("checks_note") else None,
            repeat=_optional_int(data.get("repeat")),
            base_sha=str(data["base_sha"]) if data.get("base_sha") else None,
            base_ref=str(data["base_ref"]) if data.get("base_ref") else None,
            new_tests=tuple(str(t) for t in data.get("new_tests", ())),
        )
    except (KeyError, TypeError, ValueError):
        return None


def render_listing(
    groups: Mapping[str, Sequence[str]],
    *,
    source_comment_id: int,
    sha: str | None,
    notes: Mapping[str, Mapping[str, tuple[str, str | None]]] | None = None,
) -> str:
    """The reply to `/rerun-test ?`: the registered test files of each runner, each marked with its suite
    when that is not `pr` and with why it is disabled on that runner when it is (`notes`: label -> path ->
    (suite, why disabled or None), as `gpumatrix.bot.plan.listing_notes` gives them)."""
    where = f" at {markdown(sha, style='code')}" if sha else ""
    lines = [source_marker(source_comment_id), f"🧪 Registered test files{where}, by runner:", ""]
    if notes is not None:
        lines += ["Files are in the `pr` suite unless marked with another; a disabled file says why.", ""]
    for label, paths in groups.items():
        count = f"{len(paths)} file{'s' if len(paths) != 1 else ''}"
        if not paths:
            lines += [f"- {label}: no files", ""]
            continue
        noted = (notes or {}).get(label, {})
        rows = [(path, *noted.get(path, ("", None))) for path in paths]
        suites = Counter(suite for _, suite, _ in rows if suite and suite != "pr")
        disabled = sum(why is not None for _, _, why in rows)
        counts = [f"{number} {suite}" for suite, number in suites.items()]
        counts += [f"{disabled} disabled here"] if disabled else []
        summary = f"{label}: {count}" + (f" ({', '.join(counts)})" if counts else "")
        width = max(len(path) for path in paths)
        body = [
            " · ".join(
                [
                    *([suite] if suite not in ("", "pr") else []),
                    *([markdown(why, style="fenced")] if why else []),
                ]
            )
            for _, suite, why in rows
        ]
        body = [
            f"{path:<{width}}  {marks}" if marks else path
            for (path, _, _), marks in zip(rows, body, strict=True)
        ]
        lines += [f"<details><summary>{summary}</summary>", "", "```", *body, "```", "</details>", ""]
    lines.append("Re-run one with `/rerun-test <file>[::node] [--runner LABEL] [--include-disabled]`.")
    return "\n".join(lines)


def _header(status: StatusComment) -> str:
    # The one mention the bot makes: the commenter, by the login GitHub gave (escaped all the same).
    parts = [markdown(status.command, style="code"), f"from @{markdown(status.author)}"]
    if status.pr is not None:
        parts.append(f"on #{status.pr}")
    if status.sha:
        parts.append(f"at {markdown(status.sha, style='code')}")
    if status.repeat and status.base_sha:
        parts.append(
            f"against its base {markdown(status.base_sha, style='code')} (the merge base with {markdown(status.base_ref or '', style='code')})"
        )
    return " ".join(parts)


def _checks_line(status: StatusComment) -> str:
    where = f"on {markdown(status.sha, style='code')}" if status.sha else "on the commit"
    if status.checks == "check-runs":
        return f"☑️ Each runner's result is also a check run `rerun / <runner>` {where}."
    why = f" (check runs could not be written: {markdown(status.checks_note)})" if status.checks_note else ""
    return f"☑️ Each runner's result is also a commit status `rerun / <runner>` {where}{why}."


def _group_line(group: GroupStatus, repeat: int | None = None) -> str:
    count = f"{len(group.tests)} test{'s' if len(group.tests) != 1 else ''}"
    if repeat:
        count += f" × {repeat} on the {group.commit}"
    if group.include_disabled:
        count += ", disabled ones included"
    emoji = STATE_EMOJI[group.state]
    if group.state == "error":
        detail = f"dispatch failed: {markdown(group.error or 'unknown error')}"
    elif group.url:
        detail = f"[View workflow run]({group.url})"
    else:
        detail = "not dispatched yet"
    return f"🚀 {group.label} ({count}): {emoji} {detail}"


def _pytest_command(
    tests: Sequence[str], *, include_disabled: bool = False, repeat: int | None = None
) -> list[str]:
    # Node ids may hold `[...]`, a shell glob: quote every argument so the line pastes as it ran.
    args = ["--include-disabled"] * include_disabled + [shlex.quote(test) for test in tests]
    if repeat:
        args = ["--count", str(repeat), *args]
    single = " ".join(["pytest", *args])
    if len(single) <= _SINGLE_LINE_LIMIT:
        return [single]
    return ["pytest \\", *(f"  {arg} \\" for arg in args[:-1]), f"  {args[-1]}"]


def hidden_json(data: Any) -> str:
    """`data` as JSON that can sit inside an HTML comment: `<`, `>` and `@` escaped, so neither `-->` nor
    `--!>` (which end a comment) nor a mention can occur in it."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("@", "\\u0040")


def _dump_state(status: StatusComment) -> str:
    data = {
        "v": 1,
        "source": status.source_comment_id,
        "command": status.command,
        "author": status.author,
        "pr": status.pr,
        "sha": status.sha,
        "groups": [
            {
                "label": g.label,
                "tests": list(g.tests),
                "state": g.state,
                "run_id": g.run_id,
                "url": g.url,
                "error": g.error,
                # absent unless set, so comments written before it read back the same
                **({"include_disabled": True} if g.include_disabled else {}),
                **({"commit": g.commit} if g.commit != HEAD else {}),
                **({"tally": g.tally.to_json()} if g.tally is not None else {}),
            }
            for g in status.groups
        ],
        "refusals": [[r.spec, r.message] for r in status.refusals],
        "problem": status.problem,
    }
    if status.checks is not None:  # absent, not null, so comments written before checks read back the same
        data.update(checks=status.checks, checks_note=status.checks_note)
    if status.repeat:
        data.update(
            repeat=status.repeat,
            base_sha=status.base_sha,
            base_ref=status.base_ref,
            new_tests=list(status.new_tests),
        )
    return hidden_json(data)


def _optional_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value
