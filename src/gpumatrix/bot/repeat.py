"""`/rerun-test --repeat N`: the same tests N times on the PR head and N times on its base, compared per test.

"Is this failure mine?" For each runner group the bot plans, a second group runs the same tests on the base
commit: the merge base of the head with the PR's base branch (`gpumatrix.bot.tree.merge_base`), pinned at
plan time like the head. A test file the base does not have (the PR adds it) is left out of the base group
and is *new*. Both runs repeat every test N times (`gpumatrix run --repeat N`: pytest-repeat, no reruns).

When a run is over, its JSON reports are read once (`gpumatrix.bot.sync.fill_tallies`) into a `Tally`: each test's passes of
its runs (`gpumatrix.flaky.history.report_tallies`), kept in the status comment's hidden state so no later
sync reads them again. Once both runs of a runner are tallied, each test gets head k/N, base k/N, the 95%
interval of each and one verdict (`gpumatrix.flaky.stats.decide_verdict`, the rule of docs/flaky.md), in the
status comment (`comparison_lines`) and in the head's check run (`check_comparison`). The base run gets no
check run: its commit is the base branch's, not the PR's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gpumatrix.bot.model import HEAD, GroupStatus, StatusComment, Tally, partner
from gpumatrix.bot.plan import RunnerGroup, replan_group
from gpumatrix.bot.resolve import Refusal
from gpumatrix.config import Matrix
from gpumatrix.escape import markdown
from gpumatrix.flaky.stats import PassRate, Verdict, decide_verdict
from gpumatrix.registry.model import Registry

__all__ = [
    "MAX_TALLIED",
    "VERDICT_EMOJI",
    "Comparison",
    "base_groups",
    "check_comparison",
    "compare",
    "comparison_lines",
    "tally_documents",
    "within_budget",
]

# Tests kept per run in the status comment's hidden state, those with a failed run first: GitHub bounds a
# comment at 65,536 characters, and a command may fan out to every runner.
MAX_TALLIED = 60
VERDICT_EMOJI = {"broken": "❌", "flaky-before": "🟡", "passes": "✅", "inconclusive": "❔"}
_ORDER = ("broken", "inconclusive", "flaky-before", "passes")
_SHORT = {
    "broken": "broken by this PR",
    "flaky-before": "flaky before",
    "passes": "passing",
    "inconclusive": "inconclusive",
}
_RULE = (
    "Verdicts (docs/flaky.md): *broken by this PR* when Newcombe's 95% interval of base rate − head rate is "
    "above 0; *flaky before this PR* when the base fails too; *inconclusive* says how many runs each would "
    "decide if the rates held."
)


def tally_documents(documents: Iterable[tuple[str, bytes]], matrix: Matrix, *, complete: bool) -> Tally:
    """The tally of a run's JSON reports (name, bytes), read through `gpumatrix.report` against `matrix`; a
    report saved more than once (the same JSON, however spaced) counts once."""
    from gpumatrix.flaky.history import report_tallies
    from gpumatrix.report import ReportError, parse_report_bytes

    counts: dict[str, list[int]] = {}
    reports = unreadable = 0
    seen: set[str] = set()
    for name, data in documents:
        try:
            report = parse_report_bytes(data, source=name, matrix=matrix)
        except ReportError:
            unreadable += 1
            continue
        if report.digest in seen:  # one report saved more than once is one run of each test, not several
            continue
        seen.add(report.digest)
        reports += 1
        for test, (_, passed, runs, _) in report_tallies(report).items():
            entry = counts.setdefault(test, [0, 0])
            entry[0] += passed
            entry[1] += runs
    ordered = sorted(counts.items(), key=lambda item: (item[1][0] == item[1][1], item[0]))
    kept = tuple((test, passed, runs) for test, (passed, runs) in ordered[:MAX_TALLIED])
    return Tally(complete, kept, max(0, len(ordered) - MAX_TALLIED), reports, unreadable)


def base_groups(
    groups: Sequence[RunnerGroup], registry: Registry, matrix: Matrix, *, include_disabled: bool
) -> tuple[tuple[RunnerGroup, ...], tuple[str, ...], tuple[Refusal, ...]]:
    """The base's groups for the head's `groups`, checked against the base commit's `registry` (each test
    still registered for that runner, and not disabled there unless included); the selections the base does
    not have at all (new in this PR); and refusals for the ones the base has but cannot run there."""
    found: list[RunnerGroup] = []
    new: list[str] = []
    refusals: list[Refusal] = []
    for group in groups:
        present = [test for test in group.tests if registry.get(test.partition("::")[0]) is not None]
        new += [test for test in group.tests if test not in present and test not in new]
        base, dropped = replan_group(
            group.label, present, registry, matrix=matrix, include_disabled=include_disabled
        )
        refusals += [Refusal(r.spec, f"on the base: {r.message}") for r in dropped]
        if base is not None:
            found.append(base)
    return tuple(found), tuple(new), tuple(refusals)


def within_budget(
    groups: Sequence[RunnerGroup], registry: Registry, matrix: Matrix, *, repeat: int
) -> tuple[tuple[RunnerGroup, ...], tuple[Refusal, ...]]:
    """The groups whose N runs fit their runner's time budget (a job runs them as one shard), and a refusal
    for each that does not: N times the registered estimates of its files on the runner's class, as the wall
    time the shard planner counts (their share of the runner's GPUs x `workers_per_gpu`), against its budget
    (`gpumatrix.running.shard.budget_seconds`). A run cut off by its timeout would leave no report, and no
    verdict."""
    from gpumatrix.running.shard import budget_seconds, parallelism_of

    kept: list[RunnerGroup] = []
    refusals: list[Refusal] = []
    for group in groups:
        runner = matrix.runner(group.label)
        files = dict.fromkeys(test.partition("::")[0] for test in group.tests)
        registered = [registration for path in files if (registration := registry.get(path)) is not None]
        if runner is None:
            kept.append(group)
            continue
        slots = parallelism_of(matrix, runner)
        seconds = repeat * sum(slots.wall_seconds(r, r.estimate_for(runner.gpu_class)) for r in registered)
        if seconds <= budget_seconds(runner):
            kept.append(group)
            continue
        refusals.append(
            Refusal(
                f"--repeat {repeat} --runner {group.label}",
                f"{repeat} runs of {', '.join(files)} are estimated at {seconds:.0f} s on {group.label}, over "
                f"its budget of {budget_seconds(runner):.0f} s (est_time over its {slots.slots} test slot(s), "
                "against the job's timeout): ask for fewer runs or tests",
            )
        )
    return tuple(kept), tuple(refusals)


@dataclass(frozen=True)
class Comparison:
    """One runner's verdicts, once its head run (and its base run, when it has one) is tallied."""

    label: str
    repeat: int
    verdicts: tuple[
        tuple[str, Verdict], ...
    ]  # (test, verdict): broken first, then inconclusive, flaky, passing
    head_only: int = 0  # tests the head's record leaves out (each passed every run)
    notes: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for _, verdict in self.verdicts:
            found[verdict.kind] = found.get(verdict.kind, 0) + 1
        return found


def compare(status: StatusComment, label: str) -> Comparison | None:
    """The verdicts of `label`'s runs; None until they are both over and tallied."""
    head = next((g for g in status.groups if g.label == label and g.commit == HEAD), None)
    if head is None or head.tally is None:
        return None
    base = partner(status.groups, head)
    if base is not None and base.tally is None and base.state != "error":
        return None
    base_rates = base.tally.rates() if base is not None and base.tally is not None else {}
    omitted = base.tally.omitted if base is not None and base.tally is not None else 0
    new_files = {selection.partition("::")[0] for selection in status.new_tests}
    verdicts = []
    for test, rate in head.tally.rates().items():
        new = test.partition("::")[0] in new_files
        verdict = decide_verdict(rate, base_rates.get(test), new_in_head=new)
        if test not in base_rates and not new and omitted:
            verdict = replace(
                verdict, reason=f"{verdict.reason} (or among the {omitted} its record leaves out)"
            )
        verdicts.append((test, verdict))
    verdicts.sort(key=lambda item: (_ORDER.index(item[1].kind), item[0]))  # what a reader must act on first
    notes = []
    for group in (head, base):
        if group is not None and group.tally is not None and group.tally.unreadable:
            notes.append(
                f"{group.commit}: {group.tally.unreadable} report(s) could not be read and are not counted"
            )
        if group is not None and group.tally is not None and not group.tally.reports:
            notes.append(f"{group.commit}: the run uploaded no readable test report")
    if base is not None and base.state == "error":
        notes.append("base: the dispatch failed, so nothing ran there")
    return Comparison(label, status.repeat or 1, tuple(verdicts), head.tally.omitted, tuple(notes))


def _rate(rate: PassRate | None) -> str:
    return str(rate) if rate is not None else "–"


def _table(comparison: Comparison) -> list[str]:
    lines = ["| test | head | base | verdict |", "| --- | ---: | ---: | --- |"]
    for test, verdict in comparison.verdicts:
        lines.append(
            f"| {markdown(test, in_table=True, style='code')} | {_rate(verdict.head)} | {_rate(verdict.base)} | "
            f"{VERDICT_EMOJI[verdict.kind]} {markdown(verdict.label, in_table=True)} |"
        )
    lines.append("")
    if comparison.head_only:
        lines += [f"{comparison.head_only} more test(s) passed every run on the head (not listed).", ""]
    lines += [f"- {markdown(note)}" for note in comparison.notes]
    return lines + ([""] if comparison.notes else [])


def comparison_lines(status: StatusComment) -> list[str]:
    """The status comment's verdict tables, one per runner whose runs are both tallied."""
    lines: list[str] = []
    for label in dict.fromkeys(g.label for g in status.groups if g.commit == HEAD):
        comparison = compare(status, label)
        if comparison is None:
            continue
        lines += [
            f"**{label}**: {comparison.repeat} runs of each test on the head and on the base (95% intervals)",
            "",
            *_table(comparison),
        ]
    if lines:
        lines += [_RULE, ""]
    return lines


def check_comparison(status: StatusComment, group: GroupStatus) -> tuple[str, list[str]]:
    """(a title suffix, summary lines) for the head's check run of a repeated command; empty until both runs
    are tallied (the lines then say what is awaited)."""
    if not status.repeat or group.commit != HEAD or group.state == "error":  # a failed dispatch ran nothing
        return "", []
    comparison = compare(status, group.label)
    if comparison is None:
        waiting = "the head and base runs are" if group.tally is None else "the base run is"
        return "", [f"Verdicts against the base follow when {waiting} over.", ""]
    counts = comparison.counts()
    suffix = ", ".join(f"{counts[kind]} {_SHORT[kind]}" for kind in VERDICT_EMOJI if counts.get(kind))
    base = f" at {markdown(status.base_sha, style='code')}" if status.base_sha else ""
    return f" · {suffix}" if suffix else "", [
        f"{comparison.repeat} runs of each test on the head and on the base{base} (95% intervals):",
        "",
        *_table(comparison),
        _RULE,
        "",
    ]
