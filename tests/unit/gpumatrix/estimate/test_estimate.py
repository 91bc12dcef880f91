"""`est_time` from measured durations: the nearest-rank percentile, the proposal, the 2x flag, the planner."""

from __future__ import annotations

import pytest
from coverage_reports import report_json
from gpumatrix_trees import MATRIX_YAML

from gpumatrix import register
from gpumatrix.config import parse_matrix
from gpumatrix.estimate.proposals import FileEstimate, estimate_files, measured_durations, percentile
from gpumatrix.registry.model import Registration
from gpumatrix.report import parse_report
from gpumatrix.running.shard import split_shards

register(on=("cpu",), est_time=2)

MATRIX = parse_matrix(MATRIX_YAML)


@pytest.mark.parametrize(
    ("samples", "q", "expected"),
    [
        ([7.0], 90, 7.0),
        ([1.0, 2.0], 50, 1.0),
        ([3.0, 1.0, 2.0], 50, 2.0),
        ([float(i) for i in range(1, 11)], 90, 9.0),
        ([float(i) for i in range(1, 11)], 100, 10.0),
        ([float(i) for i in range(1, 21)], 90, 18.0),
    ],
)
def test_nearest_rank_percentile(samples, q, expected):
    assert percentile(samples, q) == expected


@pytest.mark.parametrize(("samples", "q"), [([], 50), ([1.0], 0), ([1.0], 101)])
def test_percentile_refuses_bad_input(samples, q):
    with pytest.raises(ValueError, match="samples must not be empty|q must be in"):
        percentile(samples, q)


# (registered, samples, proposed, off)
CASES = [
    (40, (30.2,), 30, False),  # the nearest second
    (40, (10.0, 12.0, 80.5), 81, True),  # over 2x the registration: the slow sample decides; half up
    (2, (1.009,), 1, False),  # 1.009 s is 1 s, not 2 (twice the measurement)
    (3, (1.009,), 1, True),
    (40, (19.0,), 19, True),  # under half the registration
    (40, (20.0,), 20, False),  # exactly half is not "more than 2x"
    (1, (0.01,), 1, False),  # never below a second
    (None, (5.0,), 5, False),  # a file no longer registered is not flagged
    (40, (), None, False),  # no samples: nothing to propose
]


@pytest.mark.parametrize(("registered", "samples", "proposed", "off"), CASES)
def test_proposal_and_flag(registered, samples, proposed, off):
    estimate = FileEstimate("tests/t.py", "cpu", registered, samples, ())
    assert (estimate.proposed, estimate.off) == (proposed, off)


def test_samples_come_only_from_reports_where_the_file_ran_by_class():
    ran = report_json(
        "cpu",
        "cpu",
        0,
        {"tests/a.py::t": "passed", "tests/b.py::t": "skipped"},
        durations={"tests/a.py::t": 4.0},
    )
    failed = report_json("cpu", "cpu", 0, {"tests/a.py::t": "failed"}, durations={"tests/a.py::t": 6.0})
    h100 = report_json(
        "1-gpu-h100", "h100", 1, {"tests/b.py::t": "passed"}, durations={"tests/b.py::t": 50.0}
    )
    reports = [parse_report(d, source=f"{i}.json", matrix=MATRIX) for i, d in enumerate((ran, failed, h100))]
    registrations = [
        Registration("tests/a.py", 1, ("cpu",), 0, 3.0),
        Registration("tests/b.py", 1, ("cpu", "h100"), 1, 40.0, est_times=(("cpu", 9.0), ("h100", 40.0))),
    ]
    found = {(e.path, e.gpu_class): e for e in estimate_files(reports, registrations, MATRIX)}
    assert sorted(found) == [("tests/a.py", "cpu"), ("tests/b.py", "cpu"), ("tests/b.py", "h100")]
    a = found["tests/a.py", "cpu"]
    assert (a.samples, a.runners) == ((4.0, 6.0), ("cpu",))
    assert found["tests/b.py", "cpu"].samples == ()  # every test skipped: its seconds say nothing
    assert found["tests/b.py", "cpu"].registered == 9.0  # the class's own estimate
    b = found["tests/b.py", "h100"]
    assert (b.registered, b.samples, b.proposed, b.off) == (40.0, (50.0,), 50, False)
    assert measured_durations(list(found.values())) == {
        "cpu": {"tests/a.py": 6.0},
        "h100": {"tests/b.py": 50.0},
    }


def test_the_planner_packs_by_measured_durations_of_the_runners_class():
    files = [
        Registration(f"tests/{n}.py", 1, ("cpu", "h100"), 1, est)
        for n, est in (("a", 100), ("b", 90), ("c", 10))
    ]
    assert [s.files for s in split_shards(files, 2, gpu_class="cpu")] == [
        ("tests/a.py",),
        ("tests/b.py", "tests/c.py"),
    ]
    measured = {"cpu": {"tests/c.py": 500.0}, "h100": {"tests/a.py": 1.0}}  # b keeps its estimate
    shards = split_shards(files, 2, gpu_class="cpu", durations=measured)
    assert [(s.files, s.est_time) for s in shards] == [
        (("tests/c.py",), 500.0),
        (("tests/a.py", "tests/b.py"), 190.0),
    ]
    assert [s.files for s in split_shards(files, 2, gpu_class="h100", durations=measured)] == [
        ("tests/b.py",),
        ("tests/a.py", "tests/c.py"),
    ]
