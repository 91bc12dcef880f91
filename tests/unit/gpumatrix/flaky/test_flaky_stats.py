"""The statistics behind repeated runs (`gpumatrix.flaky.stats`): intervals against published and hand-computed
values, the verdict rule row by row, and the runs that would decide."""

from __future__ import annotations

import math

import pytest

from gpumatrix import register
from gpumatrix.flaky.stats import (
    Interval,
    PassRate,
    decide_verdict,
    difference_interval,
    repeated_test,
    runs_to_decide,
    wilson_interval,
)

register(on=("cpu",), est_time=2)

Z2 = 1.959963984540054**2

# Newcombe (1998), "Two-sided confidence intervals for the single proportion: comparison of seven
# methods", Statistics in Medicine 17:857-872, Table II, method 3 (Wilson score, no continuity correction),
# rounded to 4 places there.
NEWCOMBE_SINGLE = [
    ("81/263", 81, 263, 0.2553, 0.3662),
    ("15/148", 15, 148, 0.0624, 0.1605),
    ("0/20", 0, 20, 0.0, 0.1611),
    ("1/29", 1, 29, 0.0061, 0.1718),
]


@pytest.mark.parametrize(
    ("case", "passed", "runs", "low", "high"), NEWCOMBE_SINGLE, ids=[r[0] for r in NEWCOMBE_SINGLE]
)
def test_wilson_interval_matches_newcombes_table(
    case: str, passed: int, runs: int, low: float, high: float
) -> None:
    interval = wilson_interval(passed, runs)
    assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)


# Closed forms worked by hand: at k = 0 the upper bound is z^2/(n + z^2), at k = n the lower is n/(n + z^2);
# at k = n/2 the interval is centred on 1/2.
HAND_SINGLE = [
    ("0/10", 0, 10, 0.0, Z2 / (10 + Z2)),  # 0.27753
    ("10/10", 10, 10, 10 / (10 + Z2), 1.0),  # 0.72247
    ("20/20", 20, 20, 20 / (20 + Z2), 1.0),  # 0.83888
    ("0/1", 0, 1, 0.0, Z2 / (1 + Z2)),  # 0.79345
    (
        "5/10",
        5,
        10,
        0.5 - 1.959963984540054 / (1 + Z2 / 10) * math.sqrt(0.025 + Z2 / 400),  # 0.23659
        0.5 + 1.959963984540054 / (1 + Z2 / 10) * math.sqrt(0.025 + Z2 / 400),  # 0.76341
    ),
]


@pytest.mark.parametrize(
    ("case", "passed", "runs", "low", "high"), HAND_SINGLE, ids=[r[0] for r in HAND_SINGLE]
)
def test_wilson_interval_closed_forms(case: str, passed: int, runs: int, low: float, high: float) -> None:
    interval = wilson_interval(passed, runs)
    assert interval.low == pytest.approx(low, abs=1e-12)
    assert interval.high == pytest.approx(high, abs=1e-12)


# Newcombe (1998), "Interval estimation for the difference between independent proportions: comparison of
# eleven methods", Statistics in Medicine 17:873-890, Table II, method 10 (hybrid score), and the 6/7 - 2/7
# example worked by hand from its two Wilson intervals (0.48687-0.97432 and 0.08222-0.64107).
NEWCOMBE_DIFFERENCE = [
    ("56/70-48/80", (56, 70), (48, 80), 0.0524, 0.3339),
    ("9/10-3/10", (9, 10), (3, 10), 0.1705, 0.8090),
    ("6/7-2/7", (6, 7), (2, 7), 0.0582, 0.8062),
    ("5/56-0/29", (5, 56), (0, 29), -0.0381, 0.1926),
    ("0/10-0/20", (0, 10), (0, 20), -0.1611, 0.2775),
    ("0/10-0/10", (0, 10), (0, 10), -0.2775, 0.2775),
    ("10/10-0/20", (10, 10), (0, 20), 0.6791, 1.0),
    ("10/10-0/10", (10, 10), (0, 10), 0.6075, 1.0),
]


@pytest.mark.parametrize(
    ("case", "first", "second", "low", "high"), NEWCOMBE_DIFFERENCE, ids=[r[0] for r in NEWCOMBE_DIFFERENCE]
)
def test_difference_interval_matches_newcombes_table(
    case: str, first: tuple[int, int], second: tuple[int, int], low: float, high: float
) -> None:
    interval = difference_interval(PassRate(*first), PassRate(*second))
    assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)


# (id, head k/n, base k/n, verdict, runs that would decide). The `needed` values were found by hand for
# 9/10 vs 10/10: at 43 runs each the lower bound is 0.1 - sqrt(0.08201^2 + 0.05916^2) = -0.0011, at 44 it is
# 0.1 - sqrt(0.08030^2 + 0.05876^2) = +0.0005.
VERDICT_ROWS = [
    ("clean on both", (10, 10), (10, 10), "passes", None),
    ("always fails on the head only", (0, 10), (10, 10), "broken", None),
    ("12 of 20 against 20 of 20", (12, 20), (20, 20), "broken", None),
    ("15 of 20 against 20 of 20", (15, 20), (20, 20), "broken", None),
    ("one failure in 10 against none", (9, 10), (10, 10), "inconclusive", 44),
    ("one failure in 20 against none", (19, 20), (20, 20), "inconclusive", 91),
    ("much worse than a flaky base, not yet shown", (5, 10), (9, 10), "inconclusive", 11),
    ("as flaky as the base", (5, 10), (8, 10), "flaky-before", None),
    ("clean head, flaky base", (10, 10), (8, 10), "flaky-before", None),
    ("a little better than a flaky base", (9, 10), (7, 10), "flaky-before", None),
    ("clean head, base nearly always failing", (10, 10), (2, 10), "passes", None),
    ("always fails on both", (0, 10), (0, 10), "flaky-before", None),
    ("worse than a flaky base, shown", (4, 10), (9, 10), "broken", None),
]


@pytest.mark.parametrize(
    ("case", "head", "base", "kind", "needed"), VERDICT_ROWS, ids=[r[0] for r in VERDICT_ROWS]
)
def test_verdict(
    case: str, head: tuple[int, int], base: tuple[int, int], kind: str, needed: int | None
) -> None:
    verdict = decide_verdict(PassRate(*head), PassRate(*base))
    assert (verdict.kind, verdict.needed) == (kind, needed)
    assert verdict.reason


def test_the_runs_that_would_decide_do_decide() -> None:
    verdict = decide_verdict(PassRate(9, 10), PassRate(10, 10))
    assert verdict.label == "inconclusive: 44 runs each would decide"
    at_44 = decide_verdict(PassRate(int(0.9 * 440), 440), PassRate(440, 440))  # the same rates, 10x the runs
    assert at_44.kind == "broken"


@pytest.mark.parametrize(
    ("case", "head", "new", "kind"),
    [
        ("a new test that passes", (20, 20), True, "passes"),
        ("a new test that fails once", (19, 20), True, "broken"),
        ("no base result", (19, 20), False, "inconclusive"),
        ("no base result, clean head", (20, 20), False, "inconclusive"),
    ],
)
def test_verdict_without_a_base(case: str, head: tuple[int, int], new: bool, kind: str) -> None:
    assert decide_verdict(PassRate(*head), None, new_in_head=new).kind == kind


@pytest.mark.parametrize(
    ("head", "base", "start", "expected"),
    [
        (0.9, 1.0, 0, 44),
        (0.9, 1.0, 50, 51),  # already decided at 44: the next count above start
        (1.0, 1.0, 0, None),  # no difference
        (1.0, 0.9, 0, None),  # the head is the better one
        (0.9999, 1.0, 0, None),  # too small a gap to chase: none up to MAX_DECIDING_RUNS
    ],
)
def test_runs_to_decide(head: float, base: float, start: int, expected: int | None) -> None:
    assert runs_to_decide(head, base, start=start) == expected


@pytest.mark.parametrize(
    ("interval", "percent", "points"),
    [
        (Interval(0.38, 0.8145), "38–81%", "+38 to +81 points"),
        (Interval(0.0, 0.995), "0–100%", "0 to +100 points"),
        (Interval(-0.194, 0.4), "-19–40%", "-19 to +40 points"),
    ],
)
def test_interval_text(interval: Interval, percent: str, points: str) -> None:
    assert (interval.percent(), interval.points()) == (percent, points)


def test_pass_rate_text() -> None:
    assert str(PassRate(12, 20)) == "12/20 (39–78%)"
    assert str(PassRate(20, 20)) == "20/20 (84–100%)"


@pytest.mark.parametrize(
    ("nodeid", "repeat", "expected"),
    [
        ("t.py::test_x[3-20]", 20, ("t.py::test_x", 3)),
        ("t.py::test_x[bf16-20-20]", 20, ("t.py::test_x[bf16]", 20)),
        ("t.py::C::test_x[1-2]", 2, ("t.py::C::test_x", 1)),
        ("t.py::test_x[3-2]", 20, ("t.py::test_x[3-2]", None)),  # a parameter, not run 3 of 20
        ("t.py::test_x[21-20]", 20, ("t.py::test_x[21-20]", None)),
        ("t.py::test_x[3-20]", 1, ("t.py::test_x[3-20]", None)),  # not a repeated run
        ("t.py", 20, ("t.py", None)),  # a whole file's collection error
    ],
)
def test_repeated_test(nodeid: str, repeat: int, expected: tuple[str, int | None]) -> None:
    assert repeated_test(nodeid, repeat) == expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: wilson_interval(3, 0), "runs must be a positive finite number"),
        (lambda: wilson_interval(4, 3), "passed must be a number from 0 to runs"),
        (lambda: wilson_interval(-1, 3), "passed must be a number from 0 to runs"),
        (lambda: PassRate(3, 2), "0 <= passed <= runs"),
        (lambda: PassRate(0, 0), "runs >= 1"),
        (lambda: runs_to_decide(1.5, 1.0), "head_rate must be a rate from 0 to 1"),
        (lambda: runs_to_decide(0.5, 1.0, start=-1), "start must be an int >= 0"),
    ],
)
def test_bad_input_names_the_argument(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_a_pass_rate_takes_counts_only() -> None:
    with pytest.raises(TypeError, match="passed must be an int"):
        PassRate(2.5, 3)  # type: ignore[arg-type]
