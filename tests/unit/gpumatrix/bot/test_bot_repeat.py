"""`/rerun-test --repeat N`'s pure parts: parsing, the base's groups, the time budget, tallies of reports, the
comparison, and the status comment's hidden state."""

from __future__ import annotations

import json

import pytest
from coverage_reports import report_json
from gpumatrix_trees import register_call
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.bot.dispatch import dispatch_inputs
from gpumatrix.bot.model import BASE, GroupStatus, StatusComment, Tally
from gpumatrix.bot.parse import LIST, RERUN_FAILED, RERUN_TEST, parse_comment
from gpumatrix.bot.plan import RunnerGroup
from gpumatrix.bot.render import render_status_comment
from gpumatrix.bot.repeat import (
    MAX_TALLIED,
    base_groups,
    check_comparison,
    compare,
    tally_documents,
    within_budget,
)
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.config import load_matrix
from gpumatrix.registry.discovery import build_registry

register(on=("cpu",), est_time=3)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")  # 1-gpu-h100: 45 minutes, a budget of 2160 s
K = "tests/kernels/test_k.py"
SLOW = "tests/kernels/test_slow.py"
OFF = "tests/kernels/test_off.py"


@pytest.mark.parametrize(
    ("body", "kind", "repeat", "problem"),
    [
        ("/rerun-test --repeat 20 test_k.py", RERUN_TEST, 20, None),
        ("/rerun-test test_k.py --repeat=5 --runner 1-gpu-h100", RERUN_TEST, 5, None),
        ("/rerun-test test_k.py", RERUN_TEST, None, None),
        ("/rerun-test --repeat 1 test_k.py", RERUN_TEST, None, "is not a number of runs of at least 2"),
        ("/rerun-test --repeat x test_k.py", RERUN_TEST, None, "'x' is not a number of runs"),
        ("/rerun-test --repeat -3 test_k.py", RERUN_TEST, None, "--repeat needs a value"),
        ("/rerun-test --repeat 1234567 test_k.py", RERUN_TEST, None, "is not a number of runs"),
        ("/rerun-test --repeat 2 --repeat 3 test_k.py", RERUN_TEST, None, "--repeat is given more than once"),
        ("/rerun-test test_k.py --repeat", RERUN_TEST, None, "--repeat needs a value"),
        ("/rerun-test ? --repeat 3", LIST, None, "/rerun-test ? takes no --repeat"),
        ("/rerun-failed --repeat 3", RERUN_FAILED, None, "/rerun-failed takes no --repeat"),
    ],
)
def test_parse_repeat(body: str, kind: str, repeat: int | None, problem: str | None) -> None:
    command = parse_comment(body)
    assert command is not None and command.kind == kind
    assert command.repeat == repeat
    assert (problem is None and command.problem is None) or (
        problem is not None and problem in command.problem
    )


BASE_REGISTRY = build_registry(
    {
        K: register_call('on=("h100", "b200"), est_time=30'),
        OFF: register_call('on=("h100",), est_time=30, disabled_on={"h100": "broken on the base"}'),
    },
    MATRIX,
)


def test_base_groups_leave_out_what_the_base_lacks_or_cannot_run() -> None:
    groups = (
        RunnerGroup("1-gpu-h100", (K, "tests/kernels/test_new.py::test_x", OFF)),
        RunnerGroup("4-gpu-b200", ("tests/kernels/test_new.py",)),
    )
    on_base, new, refused = base_groups(groups, BASE_REGISTRY, MATRIX, include_disabled=False)
    assert on_base == (RunnerGroup("1-gpu-h100", (K,)),)
    assert new == ("tests/kernels/test_new.py::test_x", "tests/kernels/test_new.py")
    assert [(r.spec, r.message.split(";")[0]) for r in refused] == [
        (OFF, "on the base: is disabled on h100: broken on the base")
    ]
    included, _, refused = base_groups(groups, BASE_REGISTRY, MATRIX, include_disabled=True)
    assert included == (RunnerGroup("1-gpu-h100", (K, OFF), include_disabled=True),) and refused == ()


def test_a_repeat_that_cannot_fit_the_job_is_refused() -> None:
    registry = build_registry(
        {
            K: register_call('on=("h100",), est_time=30'),
            SLOW: register_call('on=("h100",), est_time=1200'),
        },
        MATRIX,
    )
    groups = (RunnerGroup("1-gpu-h100", (K,)), RunnerGroup("1-gpu-h100", (f"{K}::test_a", SLOW)))
    # 1-gpu-h100 runs 8 tests at a time (workers_per_gpu of the h100 class): 20 x 30 / 8 = 75 s, and
    # 20 x 1,230 / 8 = 3,075 s against 2,160 s.
    kept, refused = within_budget(groups, registry, MATRIX, repeat=20)
    assert kept == (groups[0],)
    assert [r.message for r in refused] == [
        f"20 runs of {K}, {SLOW} are estimated at 3075 s on 1-gpu-h100, over its budget of 2160 s "
        "(est_time over its 8 test slot(s), against the job's timeout): ask for fewer runs or tests"
    ]
    assert within_budget(groups[:1], registry, MATRIX, repeat=576) == (groups[:1], ())  # 2160 s: just fits
    assert within_budget(groups[:1], registry, MATRIX, repeat=577)[0] == ()


def test_an_exclusive_file_repeats_on_the_whole_gpu() -> None:
    registry = build_registry({SLOW: register_call('on=("h100",), est_time=120, gpu="exclusive"')}, MATRIX)
    group = RunnerGroup("1-gpu-h100", (SLOW,))
    assert within_budget((group,), registry, MATRIX, repeat=18) == ((group,), ())  # 2,160 s
    _, (refusal,) = within_budget((group,), registry, MATRIX, repeat=19)
    assert "estimated at 2280 s on 1-gpu-h100" in refusal.message


def _document(counts: dict[str, tuple[int, int]], repeat: int = 20) -> bytes:
    tests = {}
    for test, (passed, runs) in counts.items():
        tests |= {f"{test}[{i}-{repeat}]": "passed" if i <= passed else "failed" for i in range(1, runs + 1)}
    return json.dumps(report_json("cpu", "cpu", 0, tests) | {"repeat": repeat}).encode()


def test_tally_of_several_reports() -> None:
    tally = tally_documents(
        [
            (
                "shard-1/report.json",
                _document({f"{K}::test_a": (7, 10), f"{K}::test_b": (10, 10)}, repeat=10),
            ),
            ("shard-2/report.json", _document({f"{K}::test_c": (10, 10)}, repeat=10)),
            ("shard-3/report.json", b"{not json"),
        ],
        MATRIX,
        complete=True,
    )
    assert tally == Tally(
        True, ((f"{K}::test_a", 7, 10), (f"{K}::test_b", 10, 10), (f"{K}::test_c", 10, 10)), 0, 2, 1
    )
    assert Tally.from_json(json.loads(json.dumps(tally.to_json()))) == tally


def test_a_tally_keeps_the_failing_tests_first() -> None:
    counts = {f"{K}::test_{i:03}": (2, 2) for i in range(MAX_TALLIED + 5)}
    counts[f"{K}::test_zzz"] = (1, 2)
    tally = tally_documents([("r.json", _document(counts, repeat=2))], MATRIX, complete=False)
    assert tally.tests[0] == (f"{K}::test_zzz", 1, 2)
    assert len(tally.tests) == MAX_TALLIED and tally.omitted == 6


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"complete": "yes"},
        {"complete": True, "tests": [["t", 3, 2]]},
        {"complete": True, "omitted": -1},
    ],
    ids=["not an object", "complete not a boolean", "more passes than runs", "a negative count"],
)
def test_a_tally_that_is_not_one(data: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        Tally.from_json(data)


def _status(
    head: Tally | None, base: Tally | None, *, base_state: str = "passed", new: tuple[str, ...] = ()
) -> StatusComment:
    return StatusComment(
        source_comment_id=1,
        command="/rerun-test --repeat 10 test_k.py",
        author="alice",
        pr=7,
        sha="a" * 40,
        groups=(
            GroupStatus("1-gpu-h100", (K,), state="failed", run_id=11, url="u", tally=head),
            GroupStatus("1-gpu-h100", (K,), state=base_state, run_id=12, url="u", commit=BASE, tally=base),
        ),
        repeat=10,
        base_sha="b" * 40,
        base_ref="main",
        new_tests=new,
    )


HEAD_TALLY = Tally(True, ((f"{K}::test_a", 4, 10), (f"{K}::test_b", 10, 10)), omitted=3, reports=1)


def test_the_comparison_waits_for_both_tallies() -> None:
    assert compare(_status(None, HEAD_TALLY), "1-gpu-h100") is None
    assert compare(_status(HEAD_TALLY, None), "1-gpu-h100") is None
    title, lines = check_comparison(_status(HEAD_TALLY, None), _status(HEAD_TALLY, None).groups[0])
    assert (title, lines[0]) == ("", "Verdicts against the base follow when the base run is over.")


def test_the_comparison_of_two_tallies() -> None:
    base = Tally(True, ((f"{K}::test_a", 10, 10),), omitted=1, reports=1, unreadable=1)
    comparison = compare(_status(HEAD_TALLY, base), "1-gpu-h100")
    assert comparison is not None
    assert [(test, v.kind) for test, v in comparison.verdicts] == [
        (f"{K}::test_a", "broken"),  # 4/10 against 10/10
        (f"{K}::test_b", "inconclusive"),  # not in the base's record, which leaves one out
    ]
    assert "or among the 1 its record leaves out" in comparison.verdicts[1][1].reason
    assert comparison.head_only == 3
    assert comparison.notes == ("base: 1 report(s) could not be read and are not counted",)


def test_a_base_whose_dispatch_failed_compares_with_nothing() -> None:
    comparison = compare(_status(HEAD_TALLY, None, base_state="error", new=()), "1-gpu-h100")
    assert comparison is not None and {v.kind for _, v in comparison.verdicts} == {"inconclusive"}
    assert "base: the dispatch failed, so nothing ran there" in comparison.notes


def test_the_hidden_state_reads_back() -> None:
    status = _status(HEAD_TALLY, Tally(False, (), reports=0), new=("tests/kernels/test_new.py",))
    assert parse_status_comment(render_status_comment(status)) == status


def test_a_base_group_is_dispatched_at_the_base() -> None:
    status = _status(None, None)
    head, base = status.groups
    assert dispatch_inputs(head, status, 5)["sha"] == "a" * 40
    assert dispatch_inputs(base, status, 5) == {
        "runner": "1-gpu-h100",
        "tests": K,
        "pr_number": "7",
        "sha": "b" * 40,
        "status_comment_id": "5",
        "repeat": "10",
    }


def test_a_group_names_its_commit() -> None:
    with pytest.raises(ValueError, match="commit must be 'head' or 'base'"):
        GroupStatus("cpu", (), commit="tip")


def test_a_report_saved_twice_is_tallied_once() -> None:
    """Two artifacts holding one report (respaced, as a copy through an editor leaves it): one run of
    each test, not two."""
    document = _document({f"{K}::test_a": (7, 10)}, repeat=10)
    respaced = json.dumps(json.loads(document), indent=4).encode()
    tally = tally_documents([("a/report.json", document), ("b/report.json", respaced)], MATRIX, complete=True)
    assert (tally.reports, tally.tests) == (1, ((f"{K}::test_a", 7, 10),))
