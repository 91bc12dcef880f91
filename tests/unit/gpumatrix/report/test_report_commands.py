"""Every command that reads JSON test reports, on every kind of bad report: one exit code, one message.

`coverage`, `estimate`, `matrix --durations` and `run --durations` read reports through `gpumatrix.report`
and answer a bad one the same way, as the README's exit-code table says: 2 and the file and field for a
report that cannot be read or is malformed, 1 for one that contradicts itself (coverage still writes its
page and summary, naming it), never a traceback. Where they could disagree before (a class the matrix
lacks, a report given twice, absurd durations) they agree.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from coverage_reports import PATHS_YAML, report_json
from gpumatrix_trees import registered, write_tree

from gpumatrix import register
from gpumatrix.cli import main

register(on=("cpu",), est_time=20)

BODY = "def test_t():\n    pass\n"
FILES = {
    "ci/paths.yaml": PATHS_YAML,
    "tests/unit/test_r.py": registered(("cpu",), est_time=4, body=BODY),
    "tests/kernels/test_k.py": registered(("h100",), est_time=30, body=BODY),
}
CPU = report_json(
    "cpu", "cpu", 0, {"tests/unit/test_r.py::t": "passed"}, {"tests/unit/test_r.py::t": ["ref.torch"]}
)
H100 = report_json(
    "1-gpu-h100",
    "h100",
    1,
    {"tests/kernels/test_k.py::pair": "passed", "tests/kernels/test_k.py::bf16": "passed"},
    {"tests/kernels/test_k.py::pair": ["k.pair"], "tests/kernels/test_k.py::bf16": ["k.bf16"]},
    {"tests/kernels/test_k.py::pair": 20.0, "tests/kernels/test_k.py::bf16": 5.0},
)


def _edit(change: Callable[[dict], None]) -> bytes:
    document = json.loads(json.dumps(H100))
    change(document)
    return json.dumps(document).encode()


def _as_cpu(document: dict) -> None:
    document["hardware"] = report_json("cpu", "cpu", 0, {})["hardware"]


def _ghost(document: dict) -> None:
    """A test that recorded a path, passing, but has no outcome at all."""
    witnessed = document["witnessed"]
    witnessed["tests/kernels/test_k.py::ghost"] = {**witnessed["tests/kernels/test_k.py::pair"]}


FILE = "files['tests/kernels/test_k.py']"
# (id, the report's bytes, the exit code, what the message says): each is given to every command
BAD = [
    ("not-json", b"{", 2, "is not a gpumatrix report: it is not JSON"),
    ("a-list", b"[]", 2, "the top level: must be an object, got a list"),
    ("deep", b"[" * 50_000 + b"]" * 50_000, 2, "nested deeper than any report"),
    ("nan-literal", json.dumps(H100).replace("25.0", "NaN").encode(), 2, "it holds NaN"),
    (
        "absurd-duration",
        _edit(lambda d: d["files"]["tests/kernels/test_k.py"].update(duration=1e300)),
        2,
        f"{FILE}.duration: must be a finite number of seconds at least 0 and at most 604800",
    ),
    (
        "huge-est-time",
        json.dumps(H100).replace('"est_time": null', '"est_time": 1e999').encode(),
        2,
        f"{FILE}.est_time: must be a finite number of seconds above 0",
    ),
    (
        "a-list-for-a-string",
        _edit(lambda d: d["files"]["tests/kernels/test_k.py"]["passed"].__setitem__(0, ["x"])),
        2,
        f"{FILE}.passed[0]: must be a string, got a list",
    ),
    (
        "unknown-class",
        _edit(lambda d: d["hardware"].update(gpu_class="h900")),
        2,
        "hardware.gpu_class: 'h900' is not a class of",
    ),
    (
        "markup-runner",
        _edit(lambda d: d.update(runner="[red]x[/red]")),
        2,
        "runner: '[red]x[/red]' is not a runner",
    ),
    (
        "runner-vs-hardware",
        _edit(_as_cpu),
        1,
        "contradicts itself: runner: 1-gpu-h100 is 1 x h100, but the report's hardware is cpu",
    ),
    (
        "witnessed-without-outcome",
        _edit(_ghost),
        1,
        "contradicts itself: witnessed['tests/kernels/test_k.py::ghost']: a test that recorded paths has no outcome",
    ),
]
COMMANDS = {
    "coverage": ("coverage", "{good}", "{bad}"),
    "estimate": ("estimate", "{good}", "{bad}", "--json"),
    "matrix": ("matrix", "--json", "--durations", "{bad}"),
    "run": ("run", "--runner", "cpu", "-n", "0", "--durations", "{bad}"),
}


def _invoke(root: Path, args: tuple[str, ...], **paths: Path):
    filled = [arg.format(**{k: str(v) for k, v in paths.items()}) for arg in args]
    return CliRunner().invoke(
        main, [*filled, "--root", str(root)], env={"GITHUB_STEP_SUMMARY": "", "GPUMATRIX_HARDWARE": "cpu"}
    )


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("data", "exit_code", "says"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_every_command_answers_a_bad_report_alike(
    tmp_path: Path, command: str, data: bytes, exit_code: int, says: str
) -> None:
    root = write_tree(tmp_path / "tree", FILES)
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(CPU))
    bad.write_bytes(data)
    result = _invoke(root, COMMANDS[command], good=good, bad=bad)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == exit_code, result.output
    output = " ".join(result.output.split())
    assert f"report {bad} " in output and says in output, output
    assert "Traceback" not in output and not (root / "reports").exists()  # run refused before pytest


def test_coverage_names_a_contradicting_report_in_the_terminal_the_summary_and_the_page(
    tmp_path: Path,
) -> None:
    root = write_tree(tmp_path / "tree", FILES)
    cpu, forged = tmp_path / "cpu.json", tmp_path / "forged.json"
    cpu.write_text(json.dumps(CPU))
    forged.write_bytes(_edit(_as_cpu))  # a CPU machine's passing tests claimed for 1-gpu-h100
    page, summary = tmp_path / "page.html", tmp_path / "summary.md"
    result = _invoke(
        root, ("coverage", str(cpu), str(forged), "--html", str(page), "--markdown", str(summary))
    )
    assert result.exit_code == 1
    said = f"report {forged} contradicts itself: runner: 1-gpu-h100 is 1 x h100, but the report's hardware is cpu"
    assert said in " ".join(result.output.split())
    markdown = summary.read_text()
    assert "❌ coverage failed" in markdown and "contradicts itself" in markdown
    assert "| `k.pair` | · | ⬜ | ⬜ required | ⬜ required | ⬜ |" in markdown  # h100 is not green
    html = page.read_text()
    assert "contradicts itself: runner: 1-gpu-h100" in html and "Coverage failed" in html
    # --warn-only lets required paths go missing, not a report that contradicts itself
    assert _invoke(root, ("coverage", str(cpu), str(forged), "--warn-only")).exit_code == 1


def test_a_refused_run_is_a_failure_of_coverage(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", FILES)
    cpu, refused = tmp_path / "cpu.json", tmp_path / "refused.json"
    cpu.write_text(json.dumps(CPU))
    document = report_json("1-gpu-h100", "cpu", 0, {})
    document["problems"] = ["runner '1-gpu-h100' claims 1 x h100; this machine: cpu"]
    refused.write_text(json.dumps(document))
    result = _invoke(root, ("coverage", str(cpu), str(refused)))
    assert result.exit_code == 1
    assert (
        f"report {refused}: runner 1-gpu-h100 refused to run: runner '1-gpu-h100' claims 1 x h100"
        in " ".join(result.output.split())
    )


def test_estimate_and_coverage_count_a_report_given_twice_once(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", FILES)
    h100 = tmp_path / "h100.json"
    h100.write_text(json.dumps(H100))
    again = tmp_path / "again.json"
    again.write_text(json.dumps(H100))
    rows = json.loads(_invoke(root, ("estimate", str(h100), str(again), "--json")).output)
    (kernel,) = [r for r in rows if r["path"] == "tests/kernels/test_k.py"]
    assert (kernel["samples"], kernel["proposed"], kernel["runners"]) == (1, 25, ["1-gpu-h100"])
    from gpumatrix.config import load_matrix
    from gpumatrix.coverage.merge import merge_reports
    from gpumatrix.coverage.paths import load_paths
    from gpumatrix.report import read_report

    matrix = load_matrix(root / "ci" / "matrix.yaml")
    merged = merge_reports(
        [read_report(h100, matrix), read_report(again, matrix)],
        matrix,
        load_paths(root / "ci" / "paths.yaml", matrix),
    )
    (column,) = [r for r in merged.runners if r.label == "1-gpu-h100"]
    assert (column.reports, column.totals["passed"]) == (1, 2)


# A test run whose code rewrites the run's own report after the plugin wrote it: the runner label now
# claims a GPU runner, as a forged report would.
FORGING_CONFTEST = """
import json
import pytest

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    path = session.config.getoption("gpumatrix_report")
    document = json.loads(open(path).read())
    document["runner"] = "1-gpu-h100"
    open(path, "w").write(json.dumps(document))
"""


def test_run_names_a_report_that_contradicts_itself_everywhere(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", {"conftest.py": FORGING_CONFTEST, **FILES})
    summary = tmp_path / "summary.md"
    result = _invoke(root, ("run", "--runner", "cpu", "-n", "0", "--summary-md", str(summary)))
    assert result.exit_code == 1, result.output
    said = "contradicts itself: runner: 1-gpu-h100 is 1 x h100, but the report's hardware is cpu"
    assert said in " ".join(result.output.split())
    assert said in summary.read_text() and "### ❌ gpumatrix run on `cpu`" in summary.read_text()
    page = html.unescape((root / "reports" / "gpumatrix-cpu.html").read_text())
    assert said in page and "Coverage failed" in page


@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "{good}", "{bad}"),
        ("estimate", "{bad}", "--json"),
        ("flaky", "{good}", "{bad}"),
        ("matrix", "--json", "--durations", "{bad}"),
        ("run", "--runner", "cpu", "-n", "0", "--durations", "{bad}"),
    ],
    ids=["estimate", "estimate-json", "flaky", "matrix-durations", "run-durations"],
)
def test_a_refused_run_is_a_failure_of_every_command_that_measures(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Before, estimate, flaky and matrix --durations exited 0 on a refused run's report, as if measured."""
    root = write_tree(tmp_path / "tree", FILES)
    good, bad = tmp_path / "good.json", tmp_path / "refused.json"
    good.write_text(json.dumps(CPU))
    document = report_json("1-gpu-h100", "cpu", 0, {})
    document["problems"] = ["runner '1-gpu-h100' claims 1 x h100; this machine: cpu"]
    bad.write_text(json.dumps(document))
    result = _invoke(root, args, good=good, bad=bad)
    assert result.exit_code == 1, result.output
    assert (
        f"report {bad} is of a run refused before any test: runner '1-gpu-h100' claims 1 x h100"
        in " ".join(result.output.split())
    )
