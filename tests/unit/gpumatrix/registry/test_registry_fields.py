"""register(suite=, disabled=, disabled_on=, est_time={class: seconds}): each field read statically, each
misuse a problem at the line of its argument (or of the mapping entry at fault)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpumatrix_trees import MATRIX_YAML
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.config import load_matrix, parse_matrix
from gpumatrix.registry.discovery import build_registry, discover
from gpumatrix.registry.model import Registration

register(on=("cpu",), est_time=3)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
HEADER = "from gpumatrix import register\n"
PATH = "tests/kernels/test_k.py"


def _call(arguments: str) -> str:
    return f"{HEADER}register({arguments})\n"


# (id, source, (suite, disabled, disabled_on, est_time, est_times))
VALID = [
    ("defaults", _call('on=("h100",), est_time=40'), ("pr", None, (), 40.0, ())),
    (
        "nightly",
        _call('on=("b200", "gb300"), gpus=4, est_time=1200, suite="nightly"'),
        ("nightly", None, (), 1200.0, ()),
    ),
    ("pr-named", _call('on=("cpu",), est_time=1, suite="pr"'), ("pr", None, (), 1.0, ())),
    (
        "disabled",
        _call('on=("cpu",), est_time=1, disabled="hangs on the new image; @alice is on it"'),
        ("pr", "hangs on the new image; @alice is on it", (), 1.0, ()),
    ),
    (
        "disabled-on-one-class",
        _call('on=("h100", "gb300"), est_time=40, disabled_on={"gb300": "NaN in split-K, #123"}'),
        ("pr", None, (("gb300", "NaN in split-K, #123"),), 40.0, ()),
    ),
    (
        "disabled-on-two-classes-in-order",
        _call('on=("h100", "b200", "gb300"), est_time=4, disabled_on={"gb300": "a", "h100": "b"}'),
        ("pr", None, (("gb300", "a"), ("h100", "b")), 4.0, ()),
    ),
    (
        "disabled-and-disabled-on",
        _call('on=("h100", "gb300"), est_time=4, disabled="all off", disabled_on={"gb300": "and this"}'),
        ("pr", "all off", (("gb300", "and this"),), 4.0, ()),
    ),
    (
        "seconds-per-class",
        _call('on=("h100", "b200"), est_time={"h100": 40, "b200": 15.5}'),
        ("pr", None, (), 40.0, (("h100", 40.0), ("b200", 15.5))),
    ),
    (
        "seconds-for-some-classes",  # est_time is the largest given: the fallback of the classes left out
        _call('on=("h100", "b200", "gb300"), est_time={"b200": 15, "gb300": 12}'),
        ("pr", None, (), 15.0, (("b200", 15.0), ("gb300", 12.0))),
    ),
    (
        "everything-over-several-lines",
        HEADER
        + "register(\n"
        + '    on=("h100", "gb300"),\n'
        + "    gpus=1,\n"
        + '    est_time={"h100": 40, "gb300": 15},\n'
        + '    suite="nightly",\n'
        + '    disabled_on={"gb300": "flaky since driver 575"},\n'
        + ")\n",
        ("nightly", None, (("gb300", "flaky since driver 575"),), 40.0, (("h100", 40.0), ("gb300", 15.0))),
    ),
    (
        "module-attribute",
        "import gpumatrix\ngpumatrix.register(on='cpu', est_time=2, suite='nightly')\n",
        ("nightly", None, (), 2.0, ()),
    ),
]


@pytest.mark.parametrize(("source", "expected"), [r[1:] for r in VALID], ids=[r[0] for r in VALID])
def test_valid_fields(source: str, expected: tuple[object, ...]) -> None:
    registry = build_registry({PATH: source}, MATRIX)
    assert [str(p) for p in registry.problems] == []
    (registration,) = registry.files
    assert (
        registration.suite,
        registration.disabled,
        registration.disabled_on,
        registration.est_time,
        registration.est_times,
    ) == expected


# (id, source, [(line, message fragment)]): every misuse at the line of its argument or entry.
ERRORS = [
    (
        "suite-not-a-string",
        _call('on=("cpu",), est_time=1, suite=1'),
        [(2, "register(suite=...) must be a suite name")],
    ),
    (
        "suite-with-a-space",
        _call('on=("cpu",), est_time=1, suite="every night"'),
        [(2, "must be a suite name such as")],
    ),
    ("suite-empty", _call('on=("cpu",), est_time=1, suite=""'), [(2, "must be a suite name")]),
    (
        "suite-unknown",
        HEADER + 'register(\n    on=("cpu",),\n    est_time=1,\n    suite="weekly",\n)\n',
        [
            (
                5,
                "register(suite=...) names unknown suite 'weekly' (known: pr, nightly); declare it under suites:",
            )
        ],
    ),
    (
        "suite-all-is-no-suite",
        _call('on=("cpu",), est_time=1, suite="all"'),
        [(2, "names unknown suite 'all'")],
    ),
    (
        "suite-non-literal",
        HEADER + 'SUITE = "nightly"\nregister(on=("cpu",), est_time=1, suite=SUITE)\n',
        [(3, "register(suite=...) must be a literal, got `SUITE`")],
    ),
    (
        "disabled-empty",
        _call('on=("cpu",), est_time=1, disabled=""'),
        [(2, "register(disabled=...) gives an empty reason")],
    ),
    (
        "disabled-blank",
        _call('on=("cpu",), est_time=1, disabled="   "'),
        [(2, "gives an empty reason: say why")],
    ),
    (
        "disabled-none",
        _call('on=("cpu",), est_time=1, disabled=None'),
        [(2, "register(disabled=...) must be the reason, a string, got None")],
    ),
    (
        "disabled-true",
        _call('on=("cpu",), est_time=1, disabled=True'),
        [(2, "must be the reason, a string, got True")],
    ),
    (
        "disabled-two-lines",
        _call('on=("cpu",), est_time=1, disabled="flaky\\nsee #1"'),
        [(2, "must be one line of printable text of at most 200 characters")],
    ),
    (
        "disabled-too-long",
        _call('on=("cpu",), est_time=1, disabled="' + "x" * 201 + '"'),
        [(2, "at most 200 characters")],
    ),
    (
        "disabled-hidden-characters",
        _call('on=("cpu",), est_time=1, disabled="ok\\u200b"'),
        [(2, "printable text")],
    ),
    (
        "disabled-on-its-line",
        HEADER + 'register(\n    on=("cpu",),\n    est_time=1,\n    disabled="",\n)\n',
        [(5, "register(disabled=...) gives an empty reason")],
    ),
    (
        "disabled-on-not-a-mapping",
        _call('on=("gb300",), est_time=1, disabled_on="gb300"'),
        [(2, 'register(disabled_on=...) must map classes to reasons, such as {"gb300": "why"}')],
    ),
    (
        "disabled-on-empty",
        _call('on=("gb300",), est_time=1, disabled_on={}'),
        [(2, "register(disabled_on=...) names no class")],
    ),
    (
        "disabled-on-class-not-in-on",
        _call('on=("h100",), est_time=1, disabled_on={"gb300": "flaky"}'),
        [(2, "register(disabled_on=...) names class 'gb300', which is not in on=('h100',)")],
    ),
    (
        "disabled-on-unknown-class",
        _call('on=("h100",), est_time=1, disabled_on={"a100": "flaky"}'),
        [(2, "names class 'a100', which is not in on=('h100',)")],
    ),
    (
        "disabled-on-empty-reason",
        _call('on=("h100", "gb300"), est_time=1, disabled_on={"gb300": ""}'),
        [(2, "register(disabled_on=...) for 'gb300' gives an empty reason")],
    ),
    (
        "disabled-on-reason-not-a-string",
        _call('on=("h100", "gb300"), est_time=1, disabled_on={"gb300": 123}'),
        [(2, "for 'gb300' must be the reason, a string, got 123")],
    ),
    (
        "disabled-on-key-not-a-string",
        _call('on=("h100", "gb300"), est_time=1, disabled_on={1: "x"}'),
        [(2, "register(disabled_on=...) keys must be class names, got 1")],
    ),
    (
        "disabled-on-class-twice",
        HEADER + 'register(\n    on=("h100", "gb300"),\n    est_time=1,\n    disabled_on={\n'
        '        "gb300": "a",\n        "gb300": "b",\n    },\n)\n',
        [(7, "register(disabled_on=...) names class 'gb300' twice")],
    ),
    (
        "disabled-on-entry-at-its-own-line",
        HEADER + 'register(\n    on=("h100", "gb300"),\n    est_time=1,\n    disabled_on={\n'
        '        "gb300": "fine",\n        "b200": "not in on",\n    },\n)\n',
        [(7, "names class 'b200', which is not in on=('h100', 'gb300')")],
    ),
    (
        "two-misuses-both-reported",
        HEADER + 'register(\n    on=("h100",),\n    est_time=1,\n    disabled="",\n'
        '    disabled_on={"gb300": "x"},\n)\n',
        [
            (5, "register(disabled=...) gives an empty reason"),
            (6, "names class 'gb300', which is not in on="),
        ],
    ),
    (
        "est-time-empty-mapping",
        _call('on=("h100",), est_time={}'),
        [(2, "register(est_time=...) names no class")],
    ),
    (
        "est-time-class-not-in-on",
        _call('on=("h100",), est_time={"h100": 40, "b200": 15}'),
        [(2, "register(est_time=...) names class 'b200', which is not in on=('h100',)")],
    ),
    (
        "est-time-zero-for-a-class",
        _call('on=("h100", "b200"), est_time={"h100": 40, "b200": 0}'),
        [
            (
                2,
                "register(est_time=...) for 'b200' must be a positive number of seconds (at most 604800, a week), got 0",
            )
        ],
    ),
    (
        "est-time-bool-for-a-class",
        _call('on=("h100",), est_time={"h100": True}'),
        [(2, "for 'h100' must be a positive number of seconds (at most 604800, a week), got True")],
    ),
    (
        "est-time-text-for-a-class",
        _call('on=("h100",), est_time={"h100": "40"}'),
        [(2, "for 'h100' must be a positive number of seconds (at most 604800, a week), got '40'")],
    ),
    (
        "est-time-infinite-for-a-class",
        _call('on=("h100",), est_time={"h100": 1e999}'),
        [(2, "for 'h100' must be a positive number of seconds (at most 604800, a week), got inf")],
    ),
    (
        "est-time-past-a-week",
        _call('on=("h100",), est_time=604801'),
        [(2, "register(est_time=...) must be a positive number of seconds (at most 604800, a week)")],
    ),
    (
        "est-time-integer-past-a-float",
        _call('on=("h100",), est_time=1' + "0" * 400),
        [
            (
                2,
                'a week), or seconds per class ({"h100": 40, "b200": 15}), got an integer of 1329 bits',
            )
        ],
    ),
    (
        "est-time-integer-past-a-float-for-a-class",
        _call('on=("h100",), est_time={"h100": 1' + "0" * 400 + "}"),
        [
            (
                2,
                "for 'h100' must be a positive number of seconds (at most 604800, a week), got an integer of 1329",
            )
        ],
    ),
    (
        "est-time-class-twice",
        _call('on=("h100",), est_time={"h100": 4, "h100": 5}'),
        [(2, "register(est_time=...) names class 'h100' twice")],
    ),
    (
        "est-time-entry-at-its-own-line",
        HEADER + 'register(\n    on=("h100", "b200"),\n    est_time={\n        "h100": 40,\n'
        '        "b200": -1,\n    },\n)\n',
        [
            (
                6,
                "register(est_time=...) for 'b200' must be a positive number of seconds (at most 604800, a week), got -1",
            )
        ],
    ),
    (
        "est-time-list",
        _call('on=("h100",), est_time=[40]'),
        [
            (
                2,
                'register(est_time=...) must be a positive number of seconds (at most 604800, a week), or seconds per class ({"h100": 40',
            )
        ],
    ),
    (
        "unknown-argument-names-the-new-ones",
        _call('on=("cpu",), est_time=1, nightly=True'),
        [(2, "unknown argument 'nightly' (expected on, gpus, est_time, suite, disabled, disabled_on, flaky")],
    ),
    (
        "repeated-new-argument",
        _call('on=("cpu",), est_time=1, suite="pr", suite="nightly"'),
        [(2, "repeats the argument suite=")],
    ),
    (
        "gpu-use-unknown",
        _call('on=("h100",), est_time=1, gpu="alone"'),
        [(2, 'register(gpu=...) must be "shared" (the default: tests may share a GPU) or "exclusive"')],
    ),
    (
        "gpu-use-not-a-string",
        _call('on=("h100",), est_time=1, gpu=True'),
        [(2, 'or "exclusive" (each test holds its GPUs alone), got True')],
    ),
]


@pytest.mark.parametrize(
    ("arguments", "exclusive"),
    [('gpu="exclusive"', True), ('gpu="shared"', False), ("gpus=1", False)],
    ids=["exclusive", "shared", "default"],
)
def test_gpu_says_whether_a_files_tests_hold_their_gpus_alone(arguments: str, exclusive: bool) -> None:
    (registration,) = build_registry({PATH: _call(f'on=("h100",), est_time=3, {arguments}')}, MATRIX).files
    assert registration.exclusive is exclusive
    assert Registration.from_dict(registration.to_dict()) == registration


@pytest.mark.parametrize(("source", "expected"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_each_misuse_is_a_problem_at_its_line(source: str, expected: list[tuple[int, str]]) -> None:
    registry = build_registry({PATH: source}, MATRIX)
    assert registry.files == ()
    rendered = [str(p) for p in registry.problems]
    assert len(rendered) == len(expected), rendered
    for (line, fragment), problem in zip(expected, rendered, strict=True):
        assert problem.startswith(f"{PATH}:{line}: ") and fragment in problem, rendered


def test_a_suite_declared_in_the_matrix_may_be_named() -> None:
    matrix = parse_matrix(MATRIX_YAML + "suites:\n  weekly: once a week\n")
    assert list(matrix.suites) == ["pr", "nightly", "weekly"]
    registry = build_registry({PATH: _call('on=("cpu",), est_time=1, suite="weekly"')}, matrix)
    assert registry.problems == () and registry.files[0].suite == "weekly"


ON = ("h100", "b200", "gb300")


@pytest.mark.parametrize(
    ("registration", "class_name", "seconds", "why"),
    [
        (Registration(PATH, 2, ON, 1, 40.0), "b200", 40.0, None),
        (Registration(PATH, 2, ON, 1, 40.0, est_times=(("h100", 40.0), ("b200", 15.0))), "b200", 15.0, None),
        # a class the mapping leaves out takes est_time, the largest estimate given
        (Registration(PATH, 2, ON, 1, 40.0, est_times=(("h100", 40.0), ("b200", 15.0))), "gb300", 40.0, None),
        (Registration(PATH, 2, ON, 1, 5.0, disabled="off"), "h100", 5.0, "disabled: off"),
        (Registration(PATH, 2, ON, 1, 5.0, disabled="off"), None, 5.0, "disabled: off"),
        (
            Registration(PATH, 2, ON, 1, 5.0, disabled_on=(("gb300", "NaN"),)),
            "gb300",
            5.0,
            "disabled on gb300: NaN",
        ),
        (Registration(PATH, 2, ON, 1, 5.0, disabled_on=(("gb300", "NaN"),)), "h100", 5.0, None),
        (Registration(PATH, 2, ON, 1, 5.0, disabled_on=(("gb300", "NaN"),)), None, 5.0, None),
    ],
    ids=[
        "one-number",
        "its-class",
        "fallback",
        "disabled",
        "disabled-anywhere",
        "off-here",
        "on-elsewhere",
        "no-class",
    ],
)
def test_estimate_and_disabled_state_by_class(
    registration: Registration, class_name: str | None, seconds: float, why: str | None
) -> None:
    assert (registration.estimate_for(class_name), registration.why_disabled(class_name)) == (seconds, why)


def test_for_runner_narrows_by_suite() -> None:
    registry = build_registry(
        {
            "tests/a/test_pr.py": _call('on=("h100",), est_time=1'),
            "tests/a/test_night.py": _call('on=("h100",), est_time=1, suite="nightly"'),
        },
        MATRIX,
    )
    assert [f.path for f in registry.for_runner("1-gpu-h100")] == [
        "tests/a/test_night.py",
        "tests/a/test_pr.py",
    ]
    assert [f.path for f in registry.for_runner("1-gpu-h100", suite="pr")] == ["tests/a/test_pr.py"]
    assert [f.path for f in registry.for_runner("1-gpu-h100", suite="nightly")] == ["tests/a/test_night.py"]


def test_the_cache_keeps_every_new_field(tmp_path: Path) -> None:
    """A warm run (no file read) gives the same registrations, new fields included."""
    sources = {
        "tests/test_all.py": _call(
            'on=("h100", "gb300"), est_time={"h100": 40, "gb300": 15}, suite="nightly", '
            'disabled="x", disabled_on={"gb300": "y"}'
        ),
        "tests/test_plain.py": _call('on=("cpu",), est_time=2'),
        "tests/test_alone.py": _call('on=("h100",), est_time=2, gpu="exclusive"'),
    }
    for relative, text in sources.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_700_000_000, 1_700_000_000))
    cold = discover(tmp_path, MATRIX)
    warm = discover(tmp_path, MATRIX)
    assert (tmp_path / ".gpumatrix" / "registry-cache.json").is_file()
    assert warm == cold == build_registry(sources, MATRIX)
    assert warm.get("tests/test_all.py") == Registration(
        "tests/test_all.py",
        2,
        ("h100", "gb300"),
        1,
        40.0,
        ("1-gpu-h100", "4-gpu-gb300"),
        suite="nightly",
        disabled="x",
        disabled_on=(("gb300", "y"),),
        est_times=(("h100", 40.0), ("gb300", 15.0)),
    )
    alone = warm.get("tests/test_alone.py")
    assert alone is not None and alone.exclusive


def test_a_registration_crosses_to_xdist_workers_whole() -> None:
    (registration,) = build_registry(
        {PATH: _call('on=("gb300",), est_time={"gb300": 3}, suite="nightly", disabled_on={"gb300": "z"}')},
        MATRIX,
    ).files
    assert Registration.from_dict(registration.to_dict()) == registration
