"""ci/matrix.yaml validation: every problem reported together, with its line."""

from __future__ import annotations

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.config import DEFAULT_WORKERS_PER_GPU, BotConfig, MatrixError, load_matrix, parse_matrix

register(on=("cpu",), est_time=2)


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
    # Inputs the safe loader refuses or cannot convert: a problem at their line, never a traceback.
    (
        "tagged-int-not-a-number",
        VALID.replace("gpus: 1", "gpus: !!int two"),
        [(14, "runner '1-gpu-h100' gpus: cannot read the value 'two'")],
    ),
    (
        "python-object-tag",
        VALID.replace("gpus: 1", "gpus: !!python/object:os.system ls"),
        [(14, "could not determine a constructor")],
    ),
    (
        "python-name-tag-as-label",
        VALID.replace("label: cpu", "label: !!python/name:os.system"),
        [(7, "runner #1 label must be a plain string")],
    ),
    (
        "binary-tag-as-text",
        VALID.replace("runs_on: [gpu]", "runs_on: [!!binary aGVsbG8=]"),
        [(15, "runs_on item must be a plain string")],
    ),
    (
        "huge-integer",
        VALID.replace("max_shards: 3", "max_shards: 1" + "0" * 5000),
        [(17, "max_shards must be an integer from 1 to 256, got an integer literal of 5001 digits")],
    ),
    (
        "bot-login-not-a-login",
        VALID + "bot:\n  login: 'any bot @team'\n",
        [(19, "bot login 'any bot @team' is not a GitHub login")],
    ),
    (
        "deep-flow-nesting",
        VALID + "bot:\n  ref: " + "[" * 5000 + "]" * 5000 + "\n",
        [(19, "nested more than 32 levels deep")],
    ),
    (
        "deep-block-nesting",
        VALID + "".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "x: 1\n",
        [(18 + 32, "nested more than 32 levels deep")],
    ),
    ("nul-character", VALID + "\x00", [(18, "the character U+0000 is not allowed")]),
    # Null or empty text would become the string "None" or "".
    ("null-label", VALID.replace("label: cpu", "label: ~"), [(7, "runner #1 label must not be empty")]),
    ("empty-label", VALID.replace("label: cpu", "label: ''"), [(7, "runner #1 label must not be empty")]),
    ("empty-workflow", VALID + "bot:\n  workflow:\n", [(19, "bot workflow must not be empty")]),
    ("null-ref", VALID + "bot:\n  ref: null\n", [(19, "bot ref must not be empty")]),
    ("empty-ref", VALID + "bot:\n  ref: ''\n", [(19, "bot ref must not be empty")]),
    ("boolean-ref", VALID + "bot:\n  ref: yes\n", [(19, "bot ref must be a string, got the boolean yes")]),
    (
        "null-class",
        VALID.replace("class: h100", "class: ~"),
        [(13, "runner '1-gpu-h100' class must not be empty")],
    ),
    ("null-class-name", VALID.replace("  h100:\n", "  ~:\n"), [(4, "a key in classes must not be empty")]),
    (
        "list-as-description",
        VALID.replace("  h100:\n", "  h100:\n    description: [a, b]\n"),
        [(5, "class 'h100' description must be a string, got a list")],
    ),
    # Files go to the first runner of a class with the fewest GPUs that fit: a twin never gets one.
    (
        "same-class-and-gpus",
        VALID + "  - {label: also-h100, class: h100, gpus: 1, runs_on: [g], timeout_minutes: 9}\n",
        [(18, "runner 'also-h100' has the class 'h100' and GPU count 1 of runner '1-gpu-h100' (line 12)")],
    ),
    (
        "two-cpu-runners",
        VALID + "  - {label: cpu2, class: cpu, runs_on: [u], timeout_minutes: 9}\n",
        [(18, "runner 'cpu2' has the class 'cpu' and GPU count 0 of runner 'cpu' (line 7)")],
    ),
    # workers_per_gpu: how many tests one GPU runs at a time, 1 to 32, never on the cpu class or runner.
    (
        "workers-per-gpu-zero",
        VALID + "    workers_per_gpu: 0\n",
        [(18, "runner '1-gpu-h100' workers_per_gpu must be positive, got 0")],
    ),
    (
        "workers-per-gpu-past-the-slots",
        VALID + "    workers_per_gpu: 33\n",
        [(18, "runner '1-gpu-h100' workers_per_gpu must be from 1 to 32, got 33")],
    ),
    (
        "workers-per-gpu-text",
        VALID + "    workers_per_gpu: many\n",
        [(18, "runner '1-gpu-h100' workers_per_gpu must be an integer")],
    ),
    (
        "workers-per-gpu-on-the-cpu-runner",
        VALID.replace("    timeout_minutes: 30\n", "    timeout_minutes: 30\n    workers_per_gpu: 2\n"),
        [(12, "runner 'cpu': a 'cpu' runner has no GPU to share")],
    ),
    (
        "workers-per-gpu-on-the-cpu-class",
        VALID.replace("    compute_capability: []\n", "    compute_capability: []\n    workers_per_gpu: 2\n"),
        [(4, "class 'cpu' has no GPU to share")],
    ),
    (
        "workers-per-gpu-of-a-class-negative",
        VALID.replace('["9.0"]\n', '["9.0"]\n    workers_per_gpu: -1\n'),
        [(6, "class 'h100' workers_per_gpu must be positive, got -1")],
    ),
    # suites: {name: description}; names travel into workflow inputs, and `all` means every suite.
    ("suites-not-a-mapping", VALID + "suites: [pr, nightly]\n", [(18, "suites must be a mapping")]),
    ("suite-named-all", VALID + "suites:\n  all: everything\n", [(19, "'all' cannot name a suite")]),
    ("suite-bad-name", VALID + "suites:\n  'every night': x\n", [(19, "suite names use letters, digits")]),
    (
        "suite-no-description",
        VALID + "suites:\n  weekly:\n",
        [(19, "suite 'weekly' description must not be empty")],
    ),
    (
        "suite-twice",
        VALID + "suites:\n  weekly: a\n  weekly: b\n",
        [(20, "duplicate key 'weekly' in suites")],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [row[1:] for row in INVALID], ids=[row[0] for row in INVALID])
def test_invalid_matrix_reports_problem_with_location(text, expected):
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, source="ci/matrix.yaml")
    rendered = [str(p) for p in info.value.problems]
    for line, fragment in expected:
        prefix = f"ci/matrix.yaml:{line}: " if line else "ci/matrix.yaml: "
        assert any(r.startswith(prefix) and fragment in r for r in rendered), rendered


@pytest.mark.parametrize(
    ("class_setting", "runner_setting", "expected"),
    [
        ("", "", (DEFAULT_WORKERS_PER_GPU, "the default")),
        ("    workers_per_gpu: 3\n", "", (3, "class h100")),
        ("    workers_per_gpu: 3\n", "    workers_per_gpu: 5\n", (5, "runner 1-gpu-h100")),
        ("", "    workers_per_gpu: 1\n", (1, "runner 1-gpu-h100")),
    ],
    ids=["default", "class", "runner-over-class", "runner-alone"],
)
def test_workers_per_gpu_comes_from_the_runner_then_its_class_then_the_default(
    class_setting: str, runner_setting: str, expected: tuple[int, str]
) -> None:
    text = VALID.replace('["9.0"]\n', '["9.0"]\n' + class_setting) + runner_setting
    matrix = parse_matrix(text)
    chosen = matrix.workers_per_gpu("h100", matrix.runner("1-gpu-h100"))
    assert (chosen.count, chosen.source) == expected
    assert matrix.workers_per_gpu("h100").count == (3 if class_setting else DEFAULT_WORKERS_PER_GPU)


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


def test_a_file_that_is_not_utf8_is_a_problem_at_the_line_of_the_bad_byte(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_bytes(VALID.replace("runs_on: [gpu]", "runs_on: [g\xe9pu]").encode("latin-1"))
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert [str(p) for p in info.value.problems] == [
        f"{path}:15: not UTF-8 text (byte 0xe9): save the runner matrix as UTF-8"
    ]


def test_a_utf8_bom_is_read_as_utf8(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + VALID.encode())
    assert load_matrix(path).runner("1-gpu-h100") is not None


def test_numbers_as_text_stay_as_written():
    matrix = parse_matrix(VALID.replace("label: 1-gpu-h100", "label: 007") + "bot:\n  ref: 1.10\n")
    assert matrix.runner("007") is not None and matrix.bot.ref == "1.10"


def test_a_matrix_error_is_a_usage_error_listing_every_problem():
    from gpumatrix import UsageError

    with pytest.raises(MatrixError) as info:
        parse_matrix(VALID.replace("label: cpu", "label: ~").replace("gpus: 1", "gpus: x"))
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2
    assert str(info.value).splitlines() == [
        "invalid runner matrix (2 problem(s)):",
        "  ci/matrix.yaml:7: runner #1 label must not be empty (got ~)",
        "  ci/matrix.yaml:14: runner '1-gpu-h100' gpus must be an integer, got 'x'",
    ]


def test_require_runner_is_the_one_check_of_a_runner_label():
    from gpumatrix import UsageError

    matrix = parse_matrix(VALID)
    assert matrix.require_runner("cpu").label == "cpu"
    with pytest.raises(
        UsageError,
        match=r"^--runner '8-gpu' is not a runner of ci/matrix.yaml "
        r"\(labels: cpu, 1-gpu-h100\)$",
    ):
        matrix.require_runner("8-gpu")


def test_the_built_in_suites_are_there_declared_or_not() -> None:
    assert list(parse_matrix(VALID).suites) == ["pr", "nightly"]
    declared = parse_matrix(VALID + "suites:\n  nightly: at 02:23\n  weekly: on Sundays\n").suites
    assert dict(declared) == {
        "pr": parse_matrix(VALID).suites["pr"],
        "nightly": "at 02:23",
        "weekly": "on Sundays",
    }
    assert list(load_matrix(REPO_ROOT / "ci" / "matrix.yaml").suites) == ["pr", "nightly"]


def test_require_suite_is_the_one_check_of_a_suite_option() -> None:
    from gpumatrix import UsageError

    matrix = parse_matrix(VALID + "suites:\n  weekly: on Sundays\n")
    assert [matrix.require_suite(name) for name in ("pr", "nightly", "weekly", "all")] == [
        "pr",
        "nightly",
        "weekly",
        None,
    ]
    with pytest.raises(
        UsageError,
        match=r"^--suite 'daily' is not a suite of ci/matrix.yaml \(suites: pr, nightly, weekly, or all\)$",
    ):
        matrix.require_suite("daily")


def test_the_bots_own_login_is_a_setting() -> None:
    """Its status comments are the comments of this login, not of any Bot account."""
    assert parse_matrix(VALID).bot.login == "github-actions[bot]"
    assert parse_matrix(VALID + "bot:\n  login: gpumatrix-ci[bot]\n").bot.login == "gpumatrix-ci[bot]"
