"""Pass rates of repeated runs, their 95% intervals, and the verdict on a test run on a PR head and its base.

One question every PR author on a GPU project asks: *is this failure mine?* Runs answer it with numbers:
the same tests run N times on the PR head and N times on the base commit (the merge base of the head with
the PR's base branch), and each test gets its pass rate on both, with a 95% interval, and one verdict.
docs/flaky.md states the rule with the formulas; this module is the rule.

Intervals (`wilson_interval`): the Wilson score interval of a binomial proportion (Wilson 1927),
    p = k/n, z = 1.959964 (the 97.5% normal quantile),
    centre = (p + z^2/2n) / (1 + z^2/n),  half = z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2).
It stays inside [0, 1], is not empty at k = 0 or k = n (0/10 gives 0-27.8%, where the textbook
p +- z*sqrt(p(1-p)/n) gives 0-0%), and covers near 95% at the small n a GPU runner can afford
(Newcombe 1998, "Two-sided confidence intervals for the single proportion", Stat. Med. 17:857, method 3;
tests/unit/gpumatrix/flaky/test_flaky_stats.py checks it against that paper's table).

The difference of two pass rates (`difference_interval`): Newcombe's hybrid score interval (Newcombe
1998, "Interval estimation for the difference between independent proportions", Stat. Med. 17:873,
method 10), built from the two Wilson intervals shown beside the counts, so the verdict follows from the
numbers a reader sees: for theta = base rate - head rate,
    lower = theta - sqrt((p_b - l_b)^2 + (u_h - p_h)^2),  upper = theta + sqrt((u_b - p_b)^2 + (p_h - l_h)^2).

The verdict (`decide_verdict`), first rule that holds:
1. neither the head nor the base failed: passes;
2. lower > 0 (the base passes more often than the head, beyond what N runs can show by chance):
   broken by this PR;
3. the head never failed (so the base did): passes when upper < 0 (the head passes more often: this PR
   fixes it), else flaky before this PR;
4. the base failed too, and the head's rate is not below the base's interval: flaky before this PR;
5. otherwise inconclusive, with the runs per commit that would decide (`runs_to_decide`): the least n
   at which the rates seen so far, if they held, would give rule 2.
A test the base does not have (the PR adds it) passes when the head never failed, else is broken by this
PR; a test the base run has no result for is inconclusive.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "MAX_DECIDING_RUNS",
    "VERDICTS",
    "Z95",
    "Interval",
    "PassRate",
    "Verdict",
    "decide_verdict",
    "difference_interval",
    "passed_after_reruns",
    "repeated_test",
    "runs_to_decide",
    "wilson_interval",
]

#: The 97.5% quantile of the standard normal: a two-sided 95% interval.
Z95 = 1.959963984540054
#: `runs_to_decide` looks no further: past it a difference is too small to chase with repeated runs.
MAX_DECIDING_RUNS = 10_000
#: Each verdict, with the words the status comment, the check run and the CLI show.
VERDICTS = {
    "broken": "broken by this PR",
    "flaky-before": "flaky before this PR",
    "passes": "passes",
    "inconclusive": "inconclusive",
}


@dataclass(frozen=True)
class Interval:
    """A closed interval [low, high] of rates (fractions, not percent)."""

    low: float
    high: float

    def percent(self) -> str:
        """`38–81%` (whole percent, an en dash): an interval of a pass rate, as tables show it."""
        return f"{_whole_percent(self.low)}–{_whole_percent(self.high)}%"

    def points(self) -> str:
        """`-19 to +40 points`: an interval of a difference of rates, in percentage points."""
        return f"{_signed_points(self.low)} to {_signed_points(self.high)} points"


def _whole_percent(rate: float) -> str:
    # Rounded half up: 0.995 shows 100, never a misleading 99 next to a k = n count.
    return str(int(math.floor(rate * 100 + 0.5)))


def _signed_points(difference: float) -> str:
    points = int(math.floor(difference * 100 + 0.5))
    return f"+{points}" if points > 0 else str(points)


def wilson_interval(passed: float, runs: float, *, z: float = Z95) -> Interval:
    """The Wilson score interval of `passed` successes in `runs` trials (counts may be fractional: the
    rates seen so far, scaled to more runs, for `runs_to_decide`)."""
    _check_counts(passed, runs)
    rate = passed / runs
    z2 = z * z
    denominator = 1 + z2 / runs
    centre = (rate + z2 / (2 * runs)) / denominator
    half = z / denominator * math.sqrt(rate * (1 - rate) / runs + z2 / (4 * runs * runs))
    # At k = 0 and k = n one bound is exactly 0 or 1; the float sum above lands within 1e-16 of it.
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == runs else min(1.0, centre + half)
    return Interval(low, high)


def difference_interval(first: PassRate, second: PassRate, *, z: float = Z95) -> Interval:
    """Newcombe's hybrid score interval of `first.rate - second.rate` (method 10 of his 1998 paper)."""
    p1, p2 = first.rate, second.rate
    one, two = (
        wilson_interval(first.passed, first.runs, z=z),
        wilson_interval(second.passed, second.runs, z=z),
    )
    theta = p1 - p2
    lower = theta - math.sqrt((p1 - one.low) ** 2 + (two.high - p2) ** 2)
    upper = theta + math.sqrt((one.high - p1) ** 2 + (p2 - two.low) ** 2)
    return Interval(max(-1.0, lower), min(1.0, upper))


def _check_counts(passed: float, runs: float) -> None:
    if isinstance(runs, bool) or not isinstance(runs, (int, float)) or not runs > 0 or math.isinf(runs):
        raise ValueError(f"runs must be a positive finite number, got {runs!r}")
    if isinstance(passed, bool) or not isinstance(passed, (int, float)) or not 0 <= passed <= runs:
        raise ValueError(f"passed must be a number from 0 to runs ({runs}), got {passed!r}")


@dataclass(frozen=True)
class PassRate:
    """`passed` of `runs` runs of one test passed."""

    passed: int
    runs: int

    def __post_init__(self) -> None:
        for name in ("passed", "runs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if self.runs < 1 or not 0 <= self.passed <= self.runs:
            raise ValueError(
                f"a pass rate needs 0 <= passed <= runs and runs >= 1, got {self.passed}/{self.runs}"
            )

    @property
    def failed(self) -> int:
        return self.runs - self.passed

    @property
    def rate(self) -> float:
        return self.passed / self.runs

    @property
    def interval(self) -> Interval:
        return wilson_interval(self.passed, self.runs)

    def __str__(self) -> str:
        """`12/20 (38–81%)`: the count, and the 95% interval of the pass rate."""
        return f"{self.passed}/{self.runs} ({self.interval.percent()})"


@dataclass(frozen=True)
class Verdict:
    """One test's verdict (`kind`, a key of VERDICTS), why, and the numbers it came from. `needed` is the
    runs per commit that would decide an inconclusive test (None: none up to MAX_DECIDING_RUNS, or no
    rate to scale)."""

    kind: str
    reason: str
    head: PassRate
    base: PassRate | None = None
    difference: Interval | None = None  # of base rate - head rate
    needed: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in VERDICTS:
            raise ValueError(f"kind must be one of {', '.join(VERDICTS)}, got {self.kind!r}")

    @property
    def label(self) -> str:
        """`broken by this PR`, ...; an inconclusive one says what would decide it."""
        if self.kind != "inconclusive":
            return VERDICTS[self.kind]
        if self.needed is not None:
            return f"inconclusive: {self.needed} runs each would decide"
        return "inconclusive"


def decide_verdict(head: PassRate, base: PassRate | None, *, new_in_head: bool = False) -> Verdict:
    """The verdict on one test from its runs on the PR head and on the base (the rule in the module
    docstring). `base` None: the base has no result for it; `new_in_head` says the base does not have the
    test at all (the PR adds it)."""
    if base is None:
        if new_in_head:
            if not head.failed:
                return Verdict("passes", f"new in this PR; passed all {head.runs} runs", head)
            return Verdict("broken", f"new in this PR; failed {head.failed} of {head.runs} runs", head)
        return Verdict("inconclusive", "the base run has no result for this test", head)
    if not head.failed and not base.failed:
        return Verdict(
            "passes", f"passed every run on the head and the base ({head.runs} and {base.runs})", head, base
        )
    difference = difference_interval(base, head)
    if difference.low > 0:
        return Verdict(
            "broken",
            f"passes less often on the head ({_percent(head.rate)}) than on the base ({_percent(base.rate)}); "
            f"the difference is {difference.points()} (95%), above 0",
            head,
            base,
            difference,
        )
    if not head.failed:
        if difference.high < 0:
            return Verdict(
                "passes",
                f"passed all {head.runs} runs on the head; the base fails more often ({base.failed} of "
                f"{base.runs}): this PR appears to fix it",
                head,
                base,
                difference,
            )
        return Verdict(
            "flaky-before",
            f"the base fails too ({base.failed} of {base.runs}); the head's {head.runs} clean runs are "
            "within what that rate gives",
            head,
            base,
            difference,
        )
    if base.failed and head.rate >= base.interval.low:
        return Verdict(
            "flaky-before",
            f"the base fails too ({base.failed} of {base.runs}), and the head's rate ({_percent(head.rate)}) is "
            f"within the base's interval ({base.interval.percent()})",
            head,
            base,
            difference,
        )
    needed = runs_to_decide(head.rate, base.rate, start=max(head.runs, base.runs))
    more = (
        f"{needed} runs each would decide if these rates held"
        if needed is not None
        else f"no number of runs up to {MAX_DECIDING_RUNS} would decide at these rates"
    )
    return Verdict(
        "inconclusive",
        f"failed {head.failed} of {head.runs} on the head and {base.failed} of {base.runs} on the base: "
        f"the difference ({difference.points()}) could be chance; {more}",
        head,
        base,
        difference,
        needed,
    )


def runs_to_decide(head_rate: float, base_rate: float, *, start: int = 1) -> int | None:
    """The least number of runs per commit, above `start`, at which pass rates `head_rate` and `base_rate`
    (fractions) give a difference interval above 0 (rule 2); None when none does up to MAX_DECIDING_RUNS
    (the head's rate is not below the base's, or the gap is too small)."""
    for rate, name in ((head_rate, "head_rate"), (base_rate, "base_rate")):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise ValueError(f"{name} must be a rate from 0 to 1, got {rate!r}")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an int >= 0, got {start!r}")
    if head_rate >= base_rate:
        return None
    for runs in range(start + 1, MAX_DECIDING_RUNS + 1):
        if _scaled_difference_low(head_rate, base_rate, runs) > 0:
            return runs
    return None


def _scaled_difference_low(head_rate: float, base_rate: float, runs: int) -> float:
    """The lower bound of `difference_interval` for the rates scaled to `runs` runs each."""
    base = wilson_interval(base_rate * runs, runs)
    head = wilson_interval(head_rate * runs, runs)
    return base_rate - head_rate - math.sqrt((base_rate - base.low) ** 2 + (head.high - head_rate) ** 2)


def passed_after_reruns(reruns: int) -> str:
    """`passed after 2 reruns`: how a test that passed only after running again is shown, wherever it is."""
    return f"passed after {reruns} rerun{'s' if reruns != 1 else ''}"


def _percent(rate: float) -> str:
    return f"{_whole_percent(rate)}%"


# pytest-repeat appends `<i>-<n>` (run i of n) as the last id of a repeated test's parameters:
# `test_x[3-20]`, `test_x[bf16-3-20]`.
def repeated_test(nodeid: str, repeat: int) -> tuple[str, int | None]:
    """(the test's own node id, which run it was) of a node id from a run repeated `repeat` times
    (`--count`); (nodeid, None) for one that carries no run number (a collection error, a run of 1)."""
    if repeat > 1:
        found = re.search(rf"(\[|-)(\d+)-{repeat}\]$", nodeid)
        if found is not None and 1 <= int(found[2]) <= repeat:
            head = nodeid[: found.start()]
            return (head if found[1] == "[" else head + "]"), int(found[2])
    return nodeid, None
