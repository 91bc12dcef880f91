"""ci/matrix.yaml validation: every problem reported together, with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumatrix import register
from gpumatrix.config import BotConfig, MatrixError, load_matrix, parse_matrix

register(on=("cpu",), est_time=2)

REPO_ROOT = Path(__file__).resolve().parents[2]

VALID = """\
classes:
  cpu:
    compute_capability: []
  h100:
    compute_capability: ["9.0"]
runners:
  - label: cpu
    class: cpu
    gpus: 0
    runs_on: [ubuntu-latest]
    timeout_minutes: 30
  - label: 1-gpu-h100
    class: h100
    gpus: 1
    runs_on: [gpu]
    timeout_minutes: 45
    max_shards: 3
"""


def test_repository_matrix_has_the_designed_classes_and_runners():
    matrix = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
    assert list(matrix.classes) == ["cpu", "5090", "h100", "b200", "gb300"]
    assert [(r.label, r.gpu_class, r.gpus) for r in matrix.runners] == [
        ("cpu", "cpu", 0),
        ("1-gpu-5090", "5090", 1),
        ("1-gpu-h100", "h100", 1),
        ("2-gpu-h100", "h100", 2),
        ("4-gpu-b200", "b200", 4),
        ("4-gpu-gb300", "gb300", 4),
    ]
    assert matrix.classes["h100"].compute_capabilities == ((9, 0),)
    assert matrix.classes["gb300"].compute_capabilities == ((10, 3),)
    assert matrix.classes["5090"].compute_capabilities == ((12, 0),)
    assert matrix.bot == BotConfig(
        permission="write", allow_edits=False, workflow="gpu-tests.yml", ref="main"
    )


def test_valid_matrix_loads_into_frozen_dataclasses():
    matrix = parse_matrix(VALID)
    runner = matrix.runner("1-gpu-h100")
    assert runner is not None and runner.max_shards == 3 and runner.runs_on == ("gpu",)
    assert matrix.runner("nope") is None
    assert matrix.class_for_capability((9, 0)).name == "h100"
    assert matrix.class_for_capability((8, 0)) is None
    with pytest.raises(AttributeError):
        runner.gpus = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [(1, "1-gpu-h100"), (2, "2-gpu-h100"), (3, "4-gpu-h100"), (4, "4-gpu-h100"), (5, None)],
    ids=["1", "2", "3-rounds-up", "4", "5-none"],
)
def test_runner_for_picks_fewest_gpus_that_fit(gpus, expected):
    text = (
        VALID
        + """\
  - {label: 4-gpu-h100, class: h100, gpus: 4, runs_on: [g4], timeout_minutes: 60}
  - {label: 2-gpu-h100, class: h100, gpus: 2, runs_on: [g2], timeout_minutes: 60}
"""
    )
    runner = parse_matrix(text).runner_for("h100", gpus)
    assert (runner.label if runner else None) == expected


# (id, yaml text, [(line, substring)]) — every expected problem must be reported, in one error.
INVALID = [
    ("unknown-top-key", VALID + "extra: 1\n", [(18, "unknown key 'extra'")]),
    (
        "unknown-class-key",
        VALID.replace('    compute_capability: ["9.0"]', '    compute_capability: ["9.0"]\n    colour: red'),
        [(6, "unknown key 'colour' in class 'h100'")],
    ),
    ("unknown-runner-key", VALID + "    flavour: x\n", [(18, "unknown key 'flavour' in runner #2")]),
    (
        "duplicate-label",
        VALID.replace("label: 1-gpu-h100", "label: cpu"),
        [(12, "duplicate runner label 'cpu'")],
    ),
    ("unknown-class", VALID.replace("class: h100", "class: a100"), [(13, "unknown class 'a100'")]),
    ("zero-gpus", VALID.replace("gpus: 1", "gpus: 0"), [(14, "gpus must be positive, got 0")]),
    ("negative-gpus", VALID.replace("gpus: 1", "gpus: -2"), [(14, "gpus must be positive, got -2")]),
    (
        "zero-timeout",
        VALID.replace("timeout_minutes: 45", "timeout_minutes: 0"),
        [(16, "timeout_minutes must be positive, got 0")],
    ),
    (
        "negative-timeout",
        VALID.replace("timeout_minutes: 30", "timeout_minutes: -5"),
        [(11, "timeout_minutes must be positive, got -5")],
    ),
    ("zero-shards", VALID.replace("max_shards: 3", "max_shards: 0"), [(17, "max_shards must be positive")]),
    ("string-gpus", VALID.replace("gpus: 1", "gpus: one"), [(14, "gpus must be an integer")]),
    (
        "bool-timeout",
        VALID.replace("timeout_minutes: 45", "timeout_minutes: true"),
        [(16, "timeout_minutes must be an integer")],
    ),
    ("cpu-runner-with-gpus", VALID.replace("gpus: 0", "gpus: 2"), [(9, "has no GPUs")]),
    ("missing-gpus", VALID.replace("    gpus: 1\n", ""), [(12, "missing required key 'gpus'")]),
    ("missing-runs-on", VALID.replace("    runs_on: [gpu]\n", ""), [(12, "missing required key 'runs_on'")]),
    ("bad-capability", VALID.replace('["9.0"]', '["sm90"]'), [(5, "not of the form 'major.minor'")]),
    (
        "shared-capability",
        VALID.replace("runners:", '  h200:\n    compute_capability: ["9.0"]\nrunners:'),
        [(7, "already belongs to class 'h100'")],
    ),
    (
        "no-cpu-class",
        VALID.replace("  cpu:\n    compute_capability: []\n", ""),
        [(2, "the class 'cpu' (no GPU) must be defined")],
    ),
    ("bad-label", VALID.replace("label: 1-gpu-h100", "label: 'x; rm -rf /'"), [(12, "labels use letters")]),
    ("bad-permission", VALID + "bot:\n  permission: superuser\n", [(19, "not one of none, read")]),
    ("bad-allow-edits", VALID + "bot:\n  allow_edits: maybe\n", [(19, "allow_edits must be true or false")]),
    (
        "duplicate-key",
        VALID.replace("    gpus: 1\n", "    gpus: 1\n    gpus: 2\n"),
        [(15, "duplicate key 'gpus'")],
    ),
    ("not-yaml", "classes: [\n", [(2, "not valid YAML")]),
    ("empty", "", [(0, "empty")]),
]


@pytest.mark.parametrize(("text", "expected"), [row[1:] for row in INVALID], ids=[row[0] for row in INVALID])
def test_invalid_matrix_reports_problem_with_location(text, expected):
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, source="ci/matrix.yaml")
    rendered = [str(p) for p in info.value.problems]
    for line, fragment in expected:
        prefix = f"ci/matrix.yaml:{line}: " if line else "ci/matrix.yaml: "
        assert any(r.startswith(prefix) and fragment in r for r in rendered), rendered


def test_all_problems_are_reported_together():
    text = VALID.replace("class: h100", "class: a100").replace("timeout_minutes: 30", "timeout_minutes: 0")
    text += "    colour: red\nextra: 1\n"
    with pytest.raises(MatrixError) as info:
        parse_matrix(text)
    messages = [p.message for p in info.value.problems]
    assert len(messages) == 4, messages
    assert [p.line for p in info.value.problems] == sorted(p.line for p in info.value.problems)


def test_missing_file_is_a_matrix_error(tmp_path):
    with pytest.raises(MatrixError, match="cannot read the runner matrix"):
        load_matrix(tmp_path / "nope.yaml")
