"""The status comment's Markdown, and the reply to `/rerun-test ?`.

One status comment per command. Its body is rendered as a whole from a `StatusComment`
(`gpumatrix.bot.model`), and that value is also stored in the body as one hidden marker
(`gpumatrix.bot.state`), so `gpumatrix bot sync` can read the comment back, refresh every run it references
from the Actions API, and write the whole truth again: concurrent, repeated or cancelled writers lose nothing
because nobody edits a part of the comment.

Text that came from a comment or a PR (specs, the command line, registry messages) is shown only in
code spans or with HTML escaped, so it cannot mention people, inject markup or close the marker.

A `/rerun-test --repeat N` comment has two groups per runner, one on the head and one on the base
(`commit`), and once both runs are over, a verdict table per runner (`gpumatrix.bot.repeat`).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence

from gpumatrix.bot.model import BASE, STATE_EMOJI, GroupStatus, StatusComment
from gpumatrix.bot.repeat import comparison_lines
from gpumatrix.bot.state import encode_status
from gpumatrix.escape import markdown

__all__ = ["REFUSED", "render_listing", "render_status_comment", "source_marker"]

REFUSED = "⛔"
_SINGLE_LINE_LIMIT = 100  # a longer pytest command is split one test per line


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
    lines.append(encode_status(status))
    return "\n".join(lines)


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
