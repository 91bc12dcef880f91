"""`gpumatrix flaky REPORT...`: pass rates per test and class over reports, every run a trial (repetitions and
failed attempts included), with the unregistered failures and the candidates to drop flaky=."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpumatrix_trees import register_call, write_tree
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.config import load_matrix
from gpumatrix.flaky.history import flaky_history, report_tallies
from gpumatrix.flaky.stats import PassRate
from gpumatrix.hardware.detection import Hardware
from gpumatrix.registry.discovery import build_registry
from gpumatrix.report import FileResult, Report, Rerun, report_to_json

register(on=("cpu",), est_time=5)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
H100 = Hardware("h100", 1, ("NVIDIA H200",), ((9, 0),), "575.51", "nvml", ("GPU-0",))

NCCL = "tests/e2e/test_nccl.py"  # flaky on h100
GEMM = "tests/kernels/test_gemm.py"  # not flaky
QUIET = "tests/kernels/test_quiet.py"  # flaky on h100, and never failed
UNIT = "tests/unit/test_unit.py"  # a CPU test: on an H100 machine it runs as cpu
SOURCES = {
    NCCL: register_call('on=("h100",), est_time=1, flaky={"h100": "NCCL timeout, #45"}'),
    GEMM: register_call('on=("h100",), est_time=1'),
    QUIET: register_call('on=("h100", "b200"), est_time=1, flaky={"h100": "was flaky once"}'),
    UNIT: register_call('on=("cpu",), est_time=1'),
}
REGISTRY = build_registry(SOURCES, MATRIX)


def h100_report(  # a plain pytest run on an H100 machine (make test): a CPU-only file runs as cpu there
    files: dict[str, FileResult], *, repeat: int = 1, problems: tuple[str, ...] = ()
) -> Report:
    return Report(
        hardware=H100,
        runner=None,
        files=files,
        repeat=repeat,
        problems=problems,
        finished="2026-01-31T02:00:00Z",
    )


FIRST = h100_report(
    {
        NCCL: FileResult(
            passed=(f"{NCCL}::test_all_reduce",),
            reruns=(
                Rerun(f"{NCCL}::test_all_reduce", 1, "call"),
                Rerun(f"{NCCL}::test_all_reduce", 2, "call"),
            ),
        ),
        GEMM: FileResult(failed=(f"{GEMM}::test_tile",), passed=(f"{GEMM}::test_small",)),
        QUIET: FileResult(passed=(f"{QUIET}::test_a", f"{QUIET}::test_b")),
        UNIT: FileResult(passed=(f"{UNIT}::test_u",)),
    }
)
SECOND = h100_report(
    {
        NCCL: FileResult(passed=(f"{NCCL}::test_all_reduce",)),
        GEMM: FileResult(passed=(f"{GEMM}::test_tile", f"{GEMM}::test_small")),
        QUIET: FileResult(passed=(f"{QUIET}::test_a",)),
        UNIT: FileResult(failed=(f"{UNIT}::test_u",)),
    }
)
REPEATED = h100_report(
    {
        GEMM: FileResult(
            passed=(f"{GEMM}::test_tile[1-3]", f"{GEMM}::test_tile[3-3]"), failed=(f"{GEMM}::test_tile[2-3]",)
        )
    },
    repeat=3,
)
REFUSED = h100_report({}, problems=("the GPUs are busy",))


def test_every_run_is_a_trial() -> None:
    assert report_tallies(FIRST)[f"{NCCL}::test_all_reduce"] == (
        NCCL,
        1,
        3,
        1,
    )  # passed after 2 reruns: 1 of 3
    assert report_tallies(REPEATED) == {f"{GEMM}::test_tile": (GEMM, 2, 3, 0)}


def test_history_of_several_reports() -> None:
    history = flaky_history([FIRST, SECOND, REPEATED, REFUSED], REGISTRY.files, MATRIX)
    assert history.reports == 3  # a refused run ran nothing
    rows = [(r.test, r.gpu_class, r.rate, r.reports, r.after_reruns, r.flaky) for r in history.tests]
    assert rows == [
        # flakiest first; at the same rate, more runs first
        (f"{NCCL}::test_all_reduce", "h100", PassRate(2, 4), 2, 1, "flaky on h100: NCCL timeout, #45"),
        (f"{UNIT}::test_u", "cpu", PassRate(1, 2), 2, 0, None),
        (f"{GEMM}::test_tile", "h100", PassRate(3, 5), 3, 0, None),
    ]
    assert [(r.test, r.gpu_class) for r in history.unregistered] == [
        (f"{UNIT}::test_u", "cpu"),
        (f"{GEMM}::test_tile", "h100"),
    ]
    assert [(s.file, s.gpu_class, s.rate, s.reports, s.reason) for s in history.steady] == [
        (QUIET, "h100", PassRate(3, 3), 2, "was flaky once")
    ]


def test_every_test_lists_the_clean_ones_too() -> None:
    history = flaky_history([SECOND], REGISTRY.files, MATRIX, every_test=True)
    assert [(r.test, r.rate) for r in history.tests] == [
        (f"{UNIT}::test_u", PassRate(0, 1)),
        (f"{NCCL}::test_all_reduce", PassRate(1, 1)),
        (f"{GEMM}::test_small", PassRate(1, 1)),
        (f"{GEMM}::test_tile", PassRate(1, 1)),
        (f"{QUIET}::test_a", PassRate(1, 1)),
    ]


def _tree(tmp_path: Path) -> Path:
    """The tree of SOURCES with this repository's matrix, and FIRST and SECOND as report files."""
    reports = {
        f"{name}.json": json.dumps(report_to_json(r)) for name, r in (("first", FIRST), ("second", SECOND))
    }
    return write_tree(tmp_path, {**SOURCES, **reports}, matrix=(REPO_ROOT / "ci" / "matrix.yaml").read_text())


def test_the_command_in_json(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    result = CliRunner().invoke(
        main,
        # the same report given twice counts once
        [
            "flaky",
            *(str(root / name) for name in ("first.json", "second.json", "first.json")),
            "--json",
            "--root",
            str(root),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["reports"] == 2
    first = document["tests"][0]
    assert (first["test"], first["passed"], first["runs"], first["passed_after_reruns"]) == (
        f"{NCCL}::test_all_reduce",
        2,
        4,
        1,
    )
    assert first["interval"] == [0.15, 0.85]  # Wilson 2/4: 0.1500-0.8500
    assert [t["test"] for t in document["unregistered_failures"]] == [f"{GEMM}::test_tile", f"{UNIT}::test_u"]
    assert document["drop_flaky_candidates"] == [
        {
            "file": QUIET,
            "class": "h100",
            "reason": "was flaky once",
            "runs": 3,
            "reports": 2,
            "interval": [0.4385, 1.0],
        }
    ]


def test_the_command_in_the_terminal(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    result = CliRunner().invoke(
        main, ["flaky", str(root / "first.json"), str(root / "second.json"), "--root", str(root)]
    )
    assert result.exit_code == 0, result.output
    assert "pass rates over 2 report(s), flakiest first" in result.output
    assert f"{UNIT}::test_u on cpu: 1 of 2 runs failed" in result.output
    assert f"{QUIET} on h100: 3/3 (44–100%) in 2 report(s) (flaky=: was flaky once)" in result.output


@pytest.mark.parametrize(
    ("content", "exit_code", "message"),
    [
        ("{", 2, "is not JSON"),
        ('{"format": 1}', 2, "is missing"),
    ],
)
def test_a_bad_report_is_named(tmp_path: Path, content: str, exit_code: int, message: str) -> None:
    root = _tree(tmp_path)
    (root / "bad.json").write_text(content)
    result = CliRunner().invoke(main, ["flaky", str(root / "bad.json"), "--root", str(root)])
    assert result.exit_code == exit_code and message in result.output and "bad.json" in result.output


def test_a_report_that_contradicts_itself_is_a_failure(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    document = report_to_json(FIRST)
    document["files"][NCCL]["reruns"][1]["attempt"] = 3
    (root / "bad.json").write_text(json.dumps(document))
    result = CliRunner().invoke(main, ["flaky", str(root / "bad.json"), "--root", str(root)])
    assert result.exit_code == 1 and "contradicts itself" in result.output


def test_a_missing_report_is_a_usage_error(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    result = CliRunner().invoke(main, ["flaky", str(root / "nope.json"), "--root", str(root)])
    assert result.exit_code == 2 and "cannot read report" in result.output


def test_one_report_saved_five_times_counts_once(tmp_path: Path) -> None:
    """Saved again with other spacing and key order (an editor, jq), a report is still one report: before,
    five copies of it were five runs of each test."""
    root = _tree(tmp_path)
    document = json.loads((root / "first.json").read_text())
    copies = []
    for index in range(5):
        copy = root / f"copy-{index}.json"
        shown = dict(reversed(list(document.items()))) if index % 2 else document
        copy.write_text(json.dumps(shown, indent=index or None))
        copies.append(str(copy))
    result = CliRunner().invoke(main, ["flaky", *copies, "--json", "--root", str(root)])
    assert result.exit_code == 0, result.output
    history = json.loads(result.output)
    assert history["reports"] == 1
    runs = {t["test"]: t["runs"] for t in history["tests"]}
    assert (runs[f"{NCCL}::test_all_reduce"], runs[f"{GEMM}::test_tile"]) == (3, 1)  # 1 run + 2 reruns; 1 run
