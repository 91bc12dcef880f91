"""`gpumatrix plan`: the offline dry run, its exact JSON document, and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpumatrix import register
from gpumatrix.commands.bot import plan

register(on=("cpu",), est_time=20)

MATRIX = """\
classes:
  cpu: {compute_capability: []}
  h100: {compute_capability: ["9.0"]}
  b200: {compute_capability: ["10.0"]}
runners:
  - {label: cpu, class: cpu, gpus: 0, runs_on: [ubuntu-latest], timeout_minutes: 60}
  - {label: 1-gpu-h100, class: h100, gpus: 1, runs_on: [gpu-h100], timeout_minutes: 45}
  - {label: 4-gpu-b200, class: b200, gpus: 4, runs_on: [gpu-b200], timeout_minutes: 60}
"""
FILES = {
    "tests/kernels/test_quantize.py": 'from gpumatrix import register\nregister(on=("h100", "b200"), est_time=9)\n',
    "tests/unit/gpumatrix/registry/test_config.py": 'from gpumatrix import register\nregister(on=("cpu",), est_time=1)\n',
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "matrix.yaml").write_text(MATRIX)
    for path, text in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


def run_plan(root: Path, *args: str) -> tuple[int, str]:
    outcome = CliRunner().invoke(plan, ["--root", str(root), *args])
    return outcome.exit_code, outcome.output


def test_json_document_is_exactly_the_documented_one(root: Path) -> None:
    code, out = run_plan(
        root, "--json", "--pr", "12", "/rerun-test test_quantize.py nope.py --runner 4-gpu-b200"
    )
    assert code == 0
    document = json.loads(out)
    assert sorted(document) == ["action", "comment", "errors", "runners"]
    assert document["action"] == "dispatch"
    assert document["runners"] == [{"label": "4-gpu-b200", "tests": ["tests/kernels/test_quantize.py"]}]
    assert document["errors"] == [
        {
            "spec": "nope.py",
            "message": "is not a registered test file; `/rerun-test ?` lists the registered tests",
        }
    ]
    assert document["comment"].startswith(
        "<!-- gpumatrix:source=0 -->\n`/rerun-test test_quantize.py nope.py "
        "--runner 4-gpu-b200` from @author on #12\n"
    )
    assert "🚀 4-gpu-b200 (1 test): ⏳ not dispatched yet" in document["comment"].splitlines()


# (id, extra arguments, comment text, expected action, expected runner labels, fragment of an error or "")
CASES = [
    ("Dispatch.", [], "/rerun-test test_quantize.py", "dispatch", ["1-gpu-h100", "4-gpu-b200"], ""),
    ("List.", [], "/rerun-test ?", "list", ["cpu", "1-gpu-h100", "4-gpu-b200"], ""),
    ("Refuse.", [], "/rerun-test ../x.py", "refuse", [], "no `..`"),
    ("Ignore, no command.", [], "thanks!", "ignore", [], "No /rerun-test"),
    (
        "Ignore, too little permission.",
        ["--author-permission", "triage"],
        "/rerun-test test_config.py",
        "ignore",
        [],
        "has triage permission",
    ),
    (
        "Admin is enough.",
        ["--author-permission", "admin"],
        "/rerun-test test_config.py",
        "dispatch",
        ["cpu"],
        "",
    ),
    ("Rerun failed needs the PR's comments.", [], "/rerun-failed", "rerun-failed", [], "offline"),
    (
        "SHA cannot be checked outside git.",
        [],
        "/rerun-test test_config.py --sha abcdef1",
        "refuse",
        [],
        "cannot be checked",
    ),
]


@pytest.mark.parametrize(
    ("args", "text", "action", "labels", "fragment"), [r[1:] for r in CASES], ids=[r[0] for r in CASES]
)
def test_plan_json(
    root: Path, args: list[str], text: str, action: str, labels: list[str], fragment: str
) -> None:
    code, out = run_plan(root, "--json", *args, text)
    assert code == 0
    document = json.loads(out)
    assert document["action"] == action
    assert [r["label"] for r in document["runners"]] == labels
    if fragment:
        assert any(fragment in e["message"] for e in document["errors"]), document["errors"]
    else:
        assert document["errors"] == []


def test_plan_text(root: Path) -> None:
    code, out = run_plan(root, "/rerun-test test_quantize.py::test_a[x] bad$")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "action: dispatch (2 runner group(s), 2 test(s))"
    assert "runner 1-gpu-h100: 1 test(s)" in lines
    assert "  tests/kernels/test_quantize.py::test_a[x]" in lines
    assert lines[lines.index("--- comment ---") + 1] == "<!-- gpumatrix:source=0 -->"
    assert any(line.startswith("refused 'bad$': contains '$'") for line in lines)


def test_default_root_is_the_git_top_level(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    monkeypatch.chdir(root / "tests" / "kernels")
    outcome = CliRunner().invoke(plan, ["--json", "/rerun-test test_config.py"])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.output)["runners"] == [
        {"label": "cpu", "tests": ["tests/unit/gpumatrix/registry/test_config.py"]}
    ]


# (id, matrix text or None to delete it, extra arguments, expected exit code, fragment)
ERRORS = [
    ("Invalid matrix.", "classes: {}\n", [], 2, "invalid runner matrix"),
    ("Missing matrix.", None, [], 2, "cannot read the runner matrix"),
    (
        "Unknown permission level.",
        MATRIX,
        ["--author-permission", "owner"],
        2,
        "Invalid value for '--author-permission'",
    ),
    ("PR number must be positive.", MATRIX, ["--pr", "0"], 2, "Invalid value for '--pr'"),
]


@pytest.mark.parametrize(
    ("matrix", "args", "code", "fragment"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS]
)
def test_plan_errors(root: Path, matrix: str | None, args: list[str], code: int, fragment: str) -> None:
    if matrix is None:
        (root / "ci" / "matrix.yaml").unlink()
    else:
        (root / "ci" / "matrix.yaml").write_text(matrix)
    exit_code, out = run_plan(root, *args, "/rerun-test test_config.py")
    assert exit_code == code
    assert fragment in out
