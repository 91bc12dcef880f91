"""Sharding: LPT packing against brute force, shard counts against runner budgets, `--shard` parsing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumatrix import register
from gpumatrix.config import DEFAULT_WORKERS_PER_GPU, Runner
from gpumatrix.registry.model import Registration
from gpumatrix.running.shard import (
    Parallelism,
    budget_seconds,
    lpt_pack,
    parallelism_of,
    parse_shard_spec,
    plan_runner,
    split_shards,
)

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


# -- wall time: a runner runs GPUs x workers_per_gpu tests at once ----------------------------------------------


def _registration(path: str, seconds: float, *, gpus: int = 1, exclusive: bool = False) -> Registration:
    return Registration(path, 1, ("h100",), gpus, seconds, ("r",), exclusive=exclusive)


# (id, gpus, per_gpu, file gpus, exclusive, worker-seconds, expected wall seconds)
WALL = [
    ("one-slot-of-one", 1, 1, 1, False, 80.0, 80.0),
    ("shared-one-of-eight", 1, 8, 1, False, 80.0, 10.0),
    ("shared-one-of-sixteen", 2, 8, 1, False, 80.0, 5.0),
    ("exclusive-holds-its-gpu", 1, 8, 1, True, 80.0, 80.0),
    ("exclusive-one-of-two-gpus", 2, 8, 1, True, 80.0, 40.0),
    ("two-gpu-test-on-two-gpus", 2, 8, 2, False, 80.0, 80.0),
    ("two-gpu-test-on-four-gpus", 4, 8, 2, False, 80.0, 40.0),
    ("wants-more-than-the-runner-has", 1, 8, 4, False, 80.0, 80.0),
]


@pytest.mark.parametrize(
    ("gpus", "per_gpu", "file_gpus", "exclusive", "seconds", "wall"),
    [r[1:] for r in WALL],
    ids=[r[0] for r in WALL],
)
def test_wall_seconds_is_the_files_share_of_the_runners_slots(
    gpus, per_gpu, file_gpus, exclusive, seconds, wall
):
    registration = _registration("tests/t/test_a.py", seconds, gpus=file_gpus, exclusive=exclusive)
    assert Parallelism(gpus, per_gpu).wall_seconds(registration, seconds) == wall


@pytest.mark.parametrize(("gpus", "per_gpu"), [(0, 8), (1, 0), (-1, 1)])
def test_parallelism_refuses_an_empty_runner(gpus, per_gpu):
    with pytest.raises(ValueError, match="Parallelism needs gpus >= 1 and per_gpu >= 1"):
        Parallelism(gpus, per_gpu)


def test_a_shared_gpu_fits_more_work_in_a_shard():
    # 3 x 1,200 worker-seconds: 3,600 s alone is over a 10-minute runner's 480 s even in 3 shards, but 8 tests
    # at a time make each file 150 s of wall: 450 s, one shard.
    files = [_registration(f"tests/t/test_{i}.py", 1200.0) for i in range(3)]
    alone = plan_runner(_runner(10, 3), files)
    shared = plan_runner(_runner(10, 3), files, parallelism=Parallelism(1, 8))
    assert (alone.count, alone.over_budget) == (3, True)
    assert (shared.count, shared.over_budget, [s.est_time for s in shared.shards]) == (1, False, [450.0])


def test_an_exclusive_file_is_packed_by_the_whole_gpu_it_holds():
    # Shared: 400 / 8 = 50 s each. The exclusive file holds the GPU: 300 s. LPT puts it alone.
    files = [
        _registration("tests/t/test_a.py", 400.0),
        _registration("tests/t/test_b.py", 400.0),
        _registration("tests/t/test_x.py", 300.0, exclusive=True),
    ]
    shards = split_shards(files, 2, parallelism=Parallelism(1, 8))
    assert [(s.files, s.est_time) for s in shards] == [
        (("tests/t/test_x.py",), 300.0),
        (("tests/t/test_a.py", "tests/t/test_b.py"), 100.0),
    ]
    # One worker at a time, the exclusive file is the shortest: 400 -> A, 400 -> B, 300 -> A.
    assert [s.files for s in split_shards(files, 2)] == [
        ("tests/t/test_a.py", "tests/t/test_x.py"),
        ("tests/t/test_b.py",),
    ]


def test_parallelism_of_reads_the_matrix_not_the_environment(tmp_path, monkeypatch):
    from gpumatrix.config import load_matrix

    path = tmp_path / "matrix.yaml"
    path.write_text(
        "classes:\n"
        "  cpu: {description: no GPU, compute_capability: []}\n"
        "  h100: {description: Hopper, compute_capability: ['9.0'], workers_per_gpu: 4}\n"
        "  b200: {description: Blackwell, compute_capability: ['10.0']}\n"
        "runners:\n"
        "  - {label: cpu, class: cpu, gpus: 0, runs_on: [x], timeout_minutes: 10}\n"
        "  - {label: 1-gpu-h100, class: h100, gpus: 1, runs_on: [x], timeout_minutes: 10}\n"
        "  - {label: 2-gpu-h100, class: h100, gpus: 2, runs_on: [x], timeout_minutes: 10, workers_per_gpu: 2}\n"
        "  - {label: 4-gpu-b200, class: b200, gpus: 4, runs_on: [x], timeout_minutes: 10}\n"
    )
    monkeypatch.setenv("GPUMATRIX_WORKERS_PER_GPU", "1")
    matrix = load_matrix(path)
    assert [parallelism_of(matrix, runner) for runner in matrix.runners] == [
        Parallelism(1, 1),  # a CPU runner's workers are its CPUs, unknown when planning
        Parallelism(1, 4),  # its class's
        Parallelism(2, 2),  # its own
        Parallelism(4, DEFAULT_WORKERS_PER_GPU),
    ]
