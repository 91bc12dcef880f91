"""`gpumatrix estimate --write`: measured seconds back into registrations, as edits of the one literal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from coverage_reports import report_json
from gpumatrix_trees import MATRIX_YAML, write_tree

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.estimate.proposals import FileEstimate
from gpumatrix.estimate.write import EstTimeEdit, EstTimeEditError, plan_edits, rewrite_est_time
from gpumatrix.registry.reader import read_registration

register(on=("cpu",), est_time=3)

_HEAD = '"""A kernel test."""\n\nimport torch  # comment kept\nfrom gpumatrix import register\n\n'


# (id, register call as written, seconds to write, the call as it must read after)
REWRITES = [
    ("number", 'register(on=("h100",), est_time=150)', {"h100": 42}, 'register(on=("h100",), est_time=42)'),
    (
        "number-with-spaces-and-comment",
        'register(on=("h100",),  gpus=1,est_time = 150.5 )  # why: compile',
        {"h100": 42},
        'register(on=("h100",),  gpus=1,est_time = 42 )  # why: compile',
    ),
    (
        "number-on-unmeasured-classes-becomes-a-mapping",
        'register(on=("h100", "b200", "5090"), gpus=1, est_time=150)',
        {"h100": 42},
        'register(on=("h100", "b200", "5090"), gpus=1, est_time={"h100": 42, "b200": 150, "5090": 150})',
    ),
    (
        "number-every-class-measured-alike",
        'register(on=("cpu", "h100"), est_time=9)',
        {"cpu": 4, "h100": 4},
        'register(on=("cpu", "h100"), est_time=4)',
    ),
    (
        "mapping-values-only",
        'register(\n    on=("h100", "b200"),\n    est_time={\n        "h100": 150,  # cold\n        "b200": 15,\n    },\n)',
        {"h100": 42},
        'register(\n    on=("h100", "b200"),\n    est_time={\n        "h100": 42,  # cold\n        "b200": 15,\n    },\n)',
    ),
    (
        "mapping-gains-a-class",
        'register(on=("h100", "b200"), est_time={"b200": 15})',
        {"h100": 42},
        'register(on=("h100", "b200"), est_time={"b200": 15, "h100": 42})',
    ),
    (
        "module-alias",
        'gpumatrix.register(on=("h100",), est_time=1)',
        {"h100": 8},
        'gpumatrix.register(on=("h100",), est_time=8)',
    ),
]


@pytest.mark.parametrize(
    ("call", "seconds", "after"), [row[1:] for row in REWRITES], ids=[row[0] for row in REWRITES]
)
def test_only_the_est_time_literal_changes(call: str, seconds: dict[str, int], after: str) -> None:
    head = _HEAD + ("import gpumatrix\n" if call.startswith("gpumatrix.") else "")
    tail = "\n\n\ndef test_x():\n    assert 'est_time=150' != ''  # the body is left alone\n"
    text = head + call + tail
    new = rewrite_est_time(text, "tests/t.py", seconds)
    assert new == head + after + tail
    registration, problems = read_registration(new, "tests/t.py")
    assert problems == [] and registration is not None
    assert {name: registration.estimate_for(name) for name in seconds} == seconds


@pytest.mark.parametrize("ending", ["\r\n", "\n"], ids=["crlf", "lf"])
def test_line_endings_a_bom_and_wide_characters_before_the_call_are_kept(ending: str) -> None:
    text = "\ufeff# Größen: µs\u2028still the comment" + ending + "from gpumatrix import register" + ending
    text += 'register(on=("h100",), est_time=150)  # ü' + ending
    new = rewrite_est_time(text, "tests/t.py", {"h100": 7})
    assert new == text.replace("est_time=150", "est_time=7")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("from gpumatrix import register\n", r"no register\(\.\.\.\) call at module top level"),
        ("from gpumatrix import register\nregister(on=ON, est_time=3)\n", "no literal on= and est_time="),
        ('from gpumatrix import register\nregister(on=("cpu",), est_time=T)\n', "not a number or a mapping"),
        ("from gpumatrix import register\nregister(on=(\n", "never closed|invalid syntax|was never closed"),
    ],
    ids=["no-call", "on-not-literal", "est-time-not-literal", "syntax-error"],
)
def test_a_file_without_a_literal_registration_is_an_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(EstTimeEditError, match=rf"tests/t.py: .*({message})"):
        rewrite_est_time(text, "tests/t.py", {"cpu": 1})


def test_plan_edits_leaves_registrations_within_the_tolerance() -> None:
    estimates = [
        FileEstimate("tests/a.py", "h100", 150.0, (40.0,), ()),  # 3.75x too long
        FileEstimate("tests/a.py", "b200", 15.0, (), ()),  # not measured
        FileEstimate("tests/b.py", "h100", 40.0, (35.0,), ()),  # within 1.25x
        FileEstimate("tests/c.py", "h100", 10.0, (30.2,), ()),  # 3x too short
        FileEstimate("tests/d.py", "h100", None, (30.0,), ()),  # no longer registered
    ]
    assert plan_edits(estimates) == [
        EstTimeEdit("tests/a.py", {"h100": 40}, {"h100": 150.0}),
        EstTimeEdit("tests/c.py", {"h100": 30}, {"h100": 10.0}),
    ]
    assert [e.path for e in plan_edits(estimates, tolerance=1.0)] == [
        "tests/a.py",
        "tests/b.py",
        "tests/c.py",
    ]
    with pytest.raises(ValueError, match="tolerance must be a factor >= 1"):
        plan_edits(estimates, tolerance=0.5)


def test_estimate_write_puts_the_measured_seconds_into_the_tree(tmp_path: Path) -> None:
    kernel = (
        "from gpumatrix import register\n\n"
        'register(on=("h100", "b200"), est_time=150)  # cold compile\n\ndef test_k():\n    pass\n'
    )
    close = (
        'from gpumatrix import register\n\nregister(on=("h100",), est_time=20)\n\ndef test_c():\n    pass\n'
    )
    root = write_tree(tmp_path, {"tests/test_kernel.py": kernel, "tests/test_close.py": close})
    report = report_json(
        "1-gpu-h100",
        "h100",
        1,
        {"tests/test_kernel.py::test_k": "passed", "tests/test_close.py::test_c": "passed"},
        durations={"tests/test_kernel.py::test_k": 41.6, "tests/test_close.py::test_c": 18.0},
    )
    (tmp_path / "r.json").write_text(json.dumps(report))
    result = CliRunner().invoke(main, ["estimate", str(tmp_path / "r.json"), "--write", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "wrote est_time of tests/test_kernel.py: h100 150 -> 42" in result.output
    assert "1 registration(s) rewritten" in result.output
    assert (root / "tests/test_kernel.py").read_text() == kernel.replace(
        "est_time=150", 'est_time={"h100": 42, "b200": 150}'
    )
    assert (root / "tests/test_close.py").read_text() == close  # 20 s registered, 18 measured
    check = CliRunner().invoke(main, ["check", "--root", str(root)])
    assert check.exit_code == 0, check.output
    again = CliRunner().invoke(main, ["estimate", str(tmp_path / "r.json"), "--write", "--root", str(root)])
    assert "0 registration(s) rewritten" in again.output


def test_tolerance_needs_write(tmp_path: Path) -> None:
    write_tree(tmp_path, {}, matrix=MATRIX_YAML)
    (tmp_path / "r.json").write_text("{}")
    result = CliRunner().invoke(
        main, ["estimate", str(tmp_path / "r.json"), "--tolerance", "2", "--root", str(tmp_path)]
    )
    assert result.exit_code == 2 and "--tolerance applies to --write only" in result.output
