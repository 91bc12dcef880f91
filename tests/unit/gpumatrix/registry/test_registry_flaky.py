"""register(flaky={class: reason}) read statically like disabled_on=, and the matrix's `flaky: reruns:` and
`bot: max_repeat:`: each misuse a problem at its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpumatrix_trees import MATRIX_YAML, REGISTER_IMPORT, register_call
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.config import DEFAULT_FLAKY_RERUNS, MatrixError, load_matrix, parse_matrix
from gpumatrix.registry.discovery import build_registry, discover

register(on=("cpu",), est_time=2)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
PATH = "tests/kernels/test_k.py"


# (id, source, flaky as read, (class, why_flaky there) pairs)
VALID = [
    ("not flaky", register_call('on=("h100",), est_time=40'), (), [("h100", None)]),
    (
        "flaky on one class",
        register_call(
            'on=("h100", "b200"), est_time=40, flaky={"h100": "NCCL timeout on shared runners, #45"}'
        ),
        (("h100", "NCCL timeout on shared runners, #45"),),
        [("h100", "flaky on h100: NCCL timeout on shared runners, #45"), ("b200", None), (None, None)],
    ),
    (
        "flaky on two classes, in order",
        REGISTER_IMPORT
        + 'register(\n    on=("h100", "b200"),\n    est_time=4,\n    flaky={"b200": "a", "h100": "b"},\n)\n',
        (("b200", "a"), ("h100", "b")),
        [("b200", "flaky on b200: a"), ("h100", "flaky on h100: b")],
    ),
    (
        "flaky and disabled on another class",
        register_call('on=("h100", "gb300"), est_time=4, flaky={"h100": "x"}, disabled_on={"gb300": "y"}'),
        (("h100", "x"),),
        [("h100", "flaky on h100: x"), ("gb300", None)],
    ),
]


@pytest.mark.parametrize(("source", "flaky", "reasons"), [r[1:] for r in VALID], ids=[r[0] for r in VALID])
def test_flaky_is_read_per_class(
    source: str, flaky: tuple, reasons: list[tuple[str | None, str | None]]
) -> None:
    registry = build_registry({PATH: source}, MATRIX)
    assert [str(p) for p in registry.problems] == []
    (registration,) = registry.files
    assert registration.flaky == flaky
    assert [(name, registration.why_flaky(name)) for name, _ in reasons] == reasons


ERRORS = [
    (
        "not a mapping",
        register_call('on=("h100",), est_time=1, flaky="h100"'),
        [(2, 'register(flaky=...) must map classes to reasons, such as {"h100": "NCCL timeout, #45"}')],
    ),
    (
        "empty",
        register_call('on=("h100",), est_time=1, flaky={}'),
        [(2, "register(flaky=...) names no class")],
    ),
    (
        "class not in on",
        register_call('on=("h100",), est_time=1, flaky={"gb300": "x"}'),
        [(2, "register(flaky=...) names class 'gb300', which is not in on=('h100',)")],
    ),
    (
        "empty reason",
        register_call('on=("h100",), est_time=1, flaky={"h100": " "}'),
        [(2, "register(flaky=...) for 'h100' gives an empty reason: say why")],
    ),
    (
        "reason not a string",
        register_call('on=("h100",), est_time=1, flaky={"h100": True}'),
        [(2, "register(flaky=...) for 'h100' must be the reason, a string, got True")],
    ),
    (
        "not a literal",
        REGISTER_IMPORT + 'WHY = {"h100": "x"}\nregister(on=("h100",), est_time=1, flaky=WHY)\n',
        [(3, "register(flaky=...) must be a literal, got `WHY`")],
    ),
    (
        "entry at its own line",
        REGISTER_IMPORT + 'register(\n    on=("h100",),\n    est_time=1,\n    flaky={\n        "h100": "a",\n'
        '        "b200": "b",\n    },\n)\n',
        [(7, "names class 'b200', which is not in on=('h100',)")],
    ),
]


@pytest.mark.parametrize(("source", "expected"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_each_misuse_is_a_problem_at_its_line(source: str, expected: list[tuple[int, str]]) -> None:
    registry = build_registry({PATH: source}, MATRIX)
    assert registry.files == ()
    found = [(p.line, p.message) for p in registry.problems]
    assert len(found) == len(expected), found
    for (line, message), (want_line, fragment) in zip(found, expected, strict=True):
        assert line == want_line and fragment in message, (line, message)


def test_the_cache_keeps_flaky(tmp_path: Path) -> None:
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "matrix.yaml").write_text(MATRIX_YAML)
    source = register_call('on=("h100", "b200"), est_time=4, flaky={"b200": "timeouts"}')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_k.py").write_text(source)
    matrix = load_matrix(tmp_path / "ci" / "matrix.yaml")
    first = discover(tmp_path, matrix)
    second = discover(tmp_path, matrix)  # read back from .gpumatrix/registry-cache.json
    assert first.files[0].flaky == second.files[0].flaky == (("b200", "timeouts"),)


@pytest.mark.parametrize(
    ("extra", "reruns", "max_repeat"),
    [
        ("", DEFAULT_FLAKY_RERUNS, 20),
        ("flaky: {reruns: 0}\n", 0, 20),
        ("flaky: {reruns: 5}\nbot: {max_repeat: 50}\n", 5, 50),
        ("flaky: {}\nbot: {max_repeat: 2}\n", DEFAULT_FLAKY_RERUNS, 2),
    ],
)
def test_matrix_reruns_and_repeat_cap(extra: str, reruns: int, max_repeat: int) -> None:
    matrix = parse_matrix(MATRIX_YAML + extra)
    assert (matrix.flaky_reruns, matrix.bot.max_repeat) == (reruns, max_repeat)


@pytest.mark.parametrize(
    ("extra", "line", "fragment"),
    [
        ("flaky: {reruns: 6}\n", 14, "flaky reruns must be at most 5, got 6"),
        ("flaky: {reruns: -1}\n", 14, "flaky reruns must be >= 0, got -1"),
        ("flaky: {reruns: two}\n", 14, "flaky reruns must be an integer, got 'two'"),
        ("flaky: {retries: 2}\n", 14, "unknown key 'retries'"),
        ("bot: {max_repeat: 1}\n", 14, "bot max_repeat must be from 2 to 1000, got 1"),
        ("bot: {max_repeat: 5000}\n", 14, "bot max_repeat must be from 2 to 1000, got 5000"),
        ("bot: {max_repeat: 0}\n", 14, "bot max_repeat must be positive, got 0"),
    ],
)
def test_matrix_misuse_is_a_problem_at_its_line(extra: str, line: int, fragment: str) -> None:
    with pytest.raises(MatrixError) as caught:
        parse_matrix(MATRIX_YAML + extra)
    problems = [(p.line, p.message) for p in caught.value.problems]
    assert len(problems) == 1 and problems[0][0] == line and fragment in problems[0][1], problems


def test_this_repositorys_matrix_sets_both() -> None:
    assert (MATRIX.flaky_reruns, MATRIX.bot.max_repeat) == (2, 20)
