"""Sharding: LPT packing against brute force, shard counts against runner budgets, `--shard` parsing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumatrix import register
from gpumatrix.config import Runner
from gpumatrix.registry.model import Registration
from gpumatrix.running.shard import budget_seconds, lpt_pack, parse_shard_spec, plan_runner, split_shards

register(on=("cpu",), est_time=8)


def _optimal_makespan(times: list[float], shards: int) -> float:
    """Brute force over every assignment of items to shards."""
    best = float("inf")
    for assignment in itertools.product(range(shards), repeat=len(times)):
        loads = [0.0] * shards
        for item, shard in zip(times, assignment, strict=True):
            loads[shard] += item
        best = min(best, max(loads))
    return best


@settings(max_examples=150, deadline=None)
@given(
    times=st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=7),
    shards=st.integers(min_value=1, max_value=3),
)
def test_lpt_is_within_four_thirds_of_optimal(times, shards):
    items = [(f"t{i}", float(t)) for i, t in enumerate(times)]
    bins = lpt_pack(items, shards)
    # Every file lands in exactly one shard.
    assert sorted(name for b in bins for name, _ in b) == sorted(name for name, _ in items)
    makespan = max(sum(t for _, t in b) for b in bins)
    optimal = _optimal_makespan([float(t) for t in times], shards)
    assert makespan <= optimal * 4 / 3 + 1e-9, (times, shards, makespan, optimal)


def test_lpt_worked_example():
    # Each file, longest first, goes to the lighter shard: 7->A, 5->B, 4->B (9), 3->A (10), 3->B (12), 2->A (12).
    bins = lpt_pack([("a", 7), ("b", 5), ("c", 4), ("d", 3), ("e", 3), ("f", 2)], 2)
    assert [[n for n, _ in b] for b in bins] == [["a", "d", "f"], ["b", "c", "e"]]


# (id, items in the order given, shards, expected bins): longest first whatever the input order,
# ties in time broken by name.
LPT_UNSORTED = [
    ("short-first", [("a", 1), ("b", 1), ("c", 2)], 2, [["c"], ["a", "b"]]),
    (
        "shuffled",
        [("d", 3), ("a", 7), ("f", 2), ("c", 4), ("e", 3), ("b", 5)],
        2,
        [["a", "d", "f"], ["b", "c", "e"]],
    ),
    ("ties-by-name", [("z", 5), ("y", 5), ("x", 5)], 2, [["x", "z"], ["y"]]),
    (
        "ascending-three-bins",
        [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)],
        3,
        [["e"], ["d", "a"], ["c", "b"]],
    ),
]


@pytest.mark.parametrize(
    ("items", "shards", "expected"), [r[1:] for r in LPT_UNSORTED], ids=[r[0] for r in LPT_UNSORTED]
)
def test_lpt_packs_longest_first_whatever_the_input_order(items, shards, expected):
    assert [[name for name, _ in b] for b in lpt_pack(items, shards)] == expected


def test_lpt_rejects_zero_shards():
    with pytest.raises(ValueError, match="shards must be >= 1"):
        lpt_pack([("a", 1)], 0)


def _runner(timeout_minutes: int, max_shards: int) -> Runner:
    return Runner("r", "h100", 1, ("gpu",), timeout_minutes, max_shards)


def _files(*times: float) -> list[Registration]:
    return [Registration(f"tests/t/test_{i}.py", 1, ("h100",), 1, t, ("r",)) for i, t in enumerate(times)]


# (id, timeout minutes, max shards, file times, expected shard count, over budget)
PLANS = [
    ("fits-in-one", 10, 4, (100, 100, 100), 1, False),  # budget 480 s
    ("needs-two", 10, 4, (300, 300, 100), 2, False),  # 700 > 480; 2 shards: 400/300
    ("needs-three", 10, 4, (400, 400, 400), 3, False),
    ("capped-by-max-shards", 10, 2, (400, 400, 400), 2, True),
    ("single-file-over-budget", 1, 4, (1000,), 1, True),  # more shards cannot help one file
    ("never-more-shards-than-files", 1, 4, (1000, 1000), 2, True),
    ("exactly-the-budget-fits", 10, 4, (240, 240), 1, False),  # 480 <= 480
    ("a-second-over-the-budget", 10, 4, (240, 241), 2, False),  # 481 > 480
    ("unsorted-times", 10, 4, (50, 400, 10, 300), 2, False),  # 760 > 480; 410/350
]


@pytest.mark.parametrize(
    ("timeout", "max_shards", "times", "count", "over"), [r[1:] for r in PLANS], ids=[r[0] for r in PLANS]
)
def test_plan_runner_uses_fewest_shards_that_fit(timeout, max_shards, times, count, over):
    runner = _runner(timeout, max_shards)
    plan = plan_runner(runner, _files(*times))
    assert plan.count == count
    assert plan.over_budget is over
    assert sorted(f for s in plan.shards for f in s.files) == sorted(f.path for f in _files(*times))
    assert [s.index for s in plan.shards] == list(range(1, count + 1))
    if not over:
        assert max(s.est_time for s in plan.shards) <= budget_seconds(runner)


def test_split_shards_is_the_plans_split():
    files = _files(50, 400, 10, 300, 120)
    plan = plan_runner(_runner(10, 4), files)
    assert split_shards(files, plan.count) == plan.shards
    # 400 -> A, 300 -> B, 120 -> B (420), 50 -> A (450), 10 -> B (430): both within 480 s.
    assert [(s.files, s.est_time) for s in plan.shards] == [
        (("tests/t/test_0.py", "tests/t/test_1.py"), 450.0),
        (("tests/t/test_2.py", "tests/t/test_3.py", "tests/t/test_4.py"), 430.0),
    ]


def test_split_shards_may_leave_a_shard_empty():
    assert [s.files for s in split_shards(_files(5), 2)] == [("tests/t/test_0.py",), ()]


@pytest.mark.parametrize(("spec", "expected"), [("1/1", (1, 1)), ("2/4", (2, 4)), ("4/4", (4, 4))])
def test_parse_shard_spec(spec, expected):
    assert parse_shard_spec(spec) == expected


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2", "1/2/3", ""])
def test_parse_shard_spec_rejects(spec):
    with pytest.raises(ValueError, match="--shard must be I/N"):
        parse_shard_spec(spec)
