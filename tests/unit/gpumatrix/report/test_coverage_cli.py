"""`gpumatrix coverage`, `gpumatrix estimate` and `--durations`: exit codes, the page, Markdown, the step summary."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from coverage_reports import PATHS_YAML, report_json
from gpumatrix_trees import MATRIX_YAML, registered, write_tree

from gpumatrix import register
from gpumatrix.cli import main

register(on=("cpu",), est_time=12)

FILES = {
    "ci/paths.yaml": PATHS_YAML,
    "tests/unit/test_r.py": registered(("cpu",), est_time=4, body="def test_t():\n    pass\n"),
    "tests/kernels/test_k.py": registered(("h100", "b200"), est_time=30),
    "tests/kernels/test_slow.py": registered(("h100",), est_time=2),
}
CPU = report_json(
    "cpu", "cpu", 0, {"tests/unit/test_r.py::t": "passed"}, {"tests/unit/test_r.py::t": ["ref.torch"]}
)
H100 = report_json(
    "1-gpu-h100",
    "h100",
    1,
    {
        "tests/kernels/test_k.py::pair": "passed",
        "tests/kernels/test_k.py::bf16": "passed",
        "tests/kernels/test_k.py::deepgemm": "skipped",
        "tests/kernels/test_slow.py::big": "passed",
    },
    {"tests/kernels/test_k.py::pair": ["k.pair"], "tests/kernels/test_k.py::bf16": ["k.bf16"]},
    {
        "tests/kernels/test_k.py::pair": 12.0,
        "tests/kernels/test_k.py::bf16": 3.0,
        "tests/kernels/test_slow.py::big": 9.5,
    },
    reasons={"tests/kernels/test_k.py::deepgemm": "deepgemm needs sm_100 <and> sm_103"},
)


def _tree(tmp_path: Path, **reports: dict) -> tuple[Path, list[str]]:
    root = write_tree(tmp_path / "tree", FILES)
    paths = []
    for name, document in reports.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        paths.append(str(path))
    return root, paths


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(
        main, list(args), env={"GITHUB_STEP_SUMMARY": "", **(env or {})}, catch_exceptions=False
    )


def test_coverage_passes_writes_the_page_and_markdown(tmp_path: Path) -> None:
    root, reports = _tree(tmp_path, cpu=CPU, h100=H100)
    page, markdown = tmp_path / "out" / "page.html", tmp_path / "out" / "summary.md"
    result = invoke(
        "coverage", *reports, "--root", str(root), "--html", str(page), "--markdown", str(markdown)
    )
    assert result.exit_code == 0, result.output
    assert f"report page: {page}" in result.output
    text = markdown.read_text()
    assert "| `k.pair` | · | ⬜ | ✅ 1 | ⬜ required | ⬜ |" in text
    assert "| `tests/kernels/test_k.py` | 30.0 s |  |  | ✅ 2/2 · 16.0 s |  | no result |  |" in text
    assert "✅ every required path was exercised by a passing test" in text


def test_coverage_fails_on_a_required_path_not_exercised_and_says_which(tmp_path: Path) -> None:
    b200 = report_json("4-gpu-b200", "b200", 4, {"tests/kernels/test_k.py::bf16": "passed"})
    root, reports = _tree(tmp_path, cpu=CPU, h100=H100, b200=b200)
    result = invoke("coverage", *reports, "--root", str(root))
    assert result.exit_code == 1
    assert "path k.pair is required on b200, which ran, and no test exercised it" in result.output
    # --warn-only: a partial run shows what is missing without failing
    assert invoke("coverage", *reports, "--root", str(root), "--warn-only").exit_code == 0


def test_coverage_appends_markdown_to_the_step_summary(tmp_path: Path) -> None:
    root, reports = _tree(tmp_path, cpu=CPU)
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    result = invoke("coverage", *reports, "--root", str(root), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 0, result.output
    text = summary.read_text()
    assert text.startswith("earlier step\n<!-- gpumatrix:coverage -->\n### gpumatrix coverage\n")
    assert "| path | cpu | 5090 (not reported) | h100 (not reported) |" in text


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root, reports: (root / "ci" / "paths.yaml").unlink(), "ci/paths.yaml does not exist"),
        (
            lambda root, reports: Path(reports[0]).write_text("[]"),
            "the top level: must be an object, got a list",
        ),
        (lambda root, reports: Path(reports[0]).unlink(), "cannot read report"),
        (
            lambda root, reports: (root / "ci" / "paths.yaml").write_text(
                "paths:\n  k.x:\n    required_on: [tpu]\n"
            ),
            "ci/paths.yaml:3: path 'k.x' required_on names unknown class 'tpu'",
        ),
    ],
    ids=["no paths file", "not a report", "missing report", "invalid paths file"],
)
def test_coverage_usage_errors_exit_2(tmp_path: Path, setup, message) -> None:
    root, reports = _tree(tmp_path, cpu=CPU)
    setup(root, reports)
    result = invoke("coverage", *reports, "--root", str(root))
    assert result.exit_code == 2
    assert message in result.output


def test_check_validates_the_paths_file(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path)
    result = invoke("check", "--root", str(root))
    assert result.exit_code == 0 and "4 declared code paths" in result.output
    (root / "ci" / "paths.yaml").write_text("paths:\n  k.x:\n    required_on: []\n")
    result = invoke("check", "--root", str(root))
    assert result.exit_code == 2 and "ci/paths.yaml:3: path 'k.x' is required on no class" in result.output


class _Resources(HTMLParser):
    """Every tag and every attribute that could fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.fetching: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "data") or (value and "url(" in value):
                self.fetching.append((tag, name, value or ""))


def test_the_page_is_self_contained_and_escapes_what_reports_say(tmp_path: Path) -> None:
    root, reports = _tree(tmp_path, cpu=CPU, h100=H100)
    page = tmp_path / "page.html"
    assert invoke("coverage", *reports, "--root", str(root), "--html", str(page)).exit_code == 0
    html = page.read_text()
    parser = _Resources()
    parser.feed(html)
    assert parser.fetching == [] and "link" not in parser.tags and "url(" not in html
    assert parser.tags.count("table") == 2 and parser.tags.count("script") == 1
    assert "deepgemm needs sm_100 &lt;and&gt; sm_103" in html and "<and>" not in html
    assert 'id="path-matrix"' in html and 'id="file-matrix"' in html


def test_run_writes_the_page_of_its_own_slice_and_says_where(tmp_path: Path) -> None:
    body = (
        "from gpumatrix.report.witnesses import record\n\n"
        "def test_t():\n    record({'path': 'ref.torch', 'reason': 'CPU tensors'})\n"
    )
    root = write_tree(
        tmp_path, {"ci/paths.yaml": PATHS_YAML, "tests/unit/test_r.py": registered(("cpu",), body=body)}
    )
    result = invoke(
        "run", "--runner", "cpu", "--root", str(root), "-n", "0", env={"GPUMATRIX_HARDWARE": "cpu"}
    )
    assert result.exit_code == 0, result.output
    page = root / "reports" / "gpumatrix-cpu.html"
    assert f"report page: {page}" in result.output.replace("\n", "")
    html = page.read_text()
    assert "gpumatrix run on cpu" in html and "ref.torch" in html and "✓ exercised" in html


# -- estimate and measured durations ----------------------------------------------------------------


def test_estimate_proposes_from_samples_and_flags_registrations_off_by_2x(tmp_path: Path) -> None:
    slower = json.loads(json.dumps(H100))
    slower["files"]["tests/kernels/test_k.py"]["duration"] = 40.0
    root, reports = _tree(tmp_path, cpu=CPU, h100=H100, again=slower)
    result = invoke("estimate", *reports, "--root", str(root), "--json")
    assert result.exit_code == 0, result.output
    rows = {(row["path"], row["class"]): row for row in json.loads(result.output)}
    kernel = rows["tests/kernels/test_k.py", "h100"]
    assert (kernel["samples"], kernel["median"], kernel["p90"], kernel["proposed"]) == (2, 16.0, 40.0, 40)
    assert kernel["off_by_more_than_2x"] is False  # registered 30, proposed 40
    assert rows["tests/kernels/test_k.py", "b200"]["samples"] == 0  # registered there, never measured
    slow = rows["tests/kernels/test_slow.py", "h100"]
    assert (slow["registered"], slow["proposed"], slow["off_by_more_than_2x"]) == (2, 10, True)
    assert rows["tests/unit/test_r.py", "cpu"]["samples"] == 1
    table = invoke("estimate", *reports, "--root", str(root))
    assert (
        "2 registration(s) off by more than 2x: tests/kernels/test_slow.py (h100), tests/unit/test_r.py (cpu)"
        in " ".join(table.output.split())
    )


def test_matrix_and_run_shard_agree_on_measured_durations(tmp_path: Path) -> None:
    body = "def test_t():\n    pass\n"
    files = {f"tests/unit/test_{name}.py": registered(("cpu",), est_time=est, body=body) for name, est in
             (("a", 100), ("b", 100), ("c", 1))}  # fmt: skip
    matrix = MATRIX_YAML.replace(
        "runs_on: [ubuntu-latest], timeout_minutes: 30}", "runs_on: [x], timeout_minutes: 30, max_shards: 4}"
    )
    root = write_tree(tmp_path / "tree", files, matrix=matrix)
    # By est_time the three files (201 s) fit one shard of the cpu runner's 1440 s budget; measured, b and c
    # (1900 s) need two, and LPT puts b alone.
    measured = report_json(
        "cpu",
        "cpu",
        0,
        {f"tests/unit/test_{name}.py::test_t": "passed" for name in "abc"},
        durations={
            "tests/unit/test_a.py::test_t": 1,
            "tests/unit/test_b.py::test_t": 1000,
            "tests/unit/test_c.py::test_t": 900,
        },
    )
    report = tmp_path / "measured.json"
    report.write_text(json.dumps(measured))
    by_est = invoke("matrix", "--json", "--runner", "cpu", "--root", str(root))
    by_measure = invoke(
        "matrix", "--json", "--runner", "cpu", "--root", str(root), "--durations", str(report)
    )
    assert len(json.loads(by_est.output)["include"]) == 1
    assert [entry["shard"] for entry in json.loads(by_measure.output)["include"]] == [1, 2]
    seen = []
    for shard in ("1/2", "2/2"):
        result = invoke(
            "run", "--runner", "cpu", "--shard", shard, "--durations", str(report), "--root", str(root), "-n", "0",
            env={"GPUMATRIX_HARDWARE": "cpu"},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        seen.append(sorted(json.loads((root / "reports" / "gpumatrix-cpu.json").read_text())["files"]))
    assert seen == [["tests/unit/test_b.py"], ["tests/unit/test_a.py", "tests/unit/test_c.py"]]
