"""The static registry: every error names file and line; files are parsed, never imported."""

from __future__ import annotations

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.config import load_matrix, parse_matrix
from gpumatrix.registry.discovery import build_registry, discover, find_test_files, load_tree
from gpumatrix.registry.reader import read_registration
from gpumatrix.registry.source import READ_LIMIT, read_source_bytes

register(on=("cpu",), est_time=3)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
HEADER = "from gpumatrix import register\n"


# (id, source, [(line, substring)])
ERRORS = [
    ("no-register", "import torch\n\ndef test_x():\n    pass\n", [(1, "test file is not registered")]),
    ("imported-but-not-called", HEADER + "def test_x():\n    pass\n", [(1, "test file is not registered")]),
    (
        "two-calls",
        HEADER + 'register(on=("cpu",), est_time=1)\nregister(on=("cpu",), est_time=2)\n',
        [(3, "called 2 times (lines 2, 3)")],
    ),
    (
        "non-literal-est-time",
        HEADER + 'T = 3\nregister(on=("cpu",), est_time=T)\n',
        [(3, "register(est_time=...) must be a literal, got `T`")],
    ),
    (
        "non-literal-on",
        HEADER + 'CLASSES = ("cpu",)\nregister(on=CLASSES, est_time=1)\n',
        [(3, "register(on=...) must be a literal")],
    ),
    (
        "non-literal-gpus",
        HEADER + 'import os\nregister(on=("h100",), gpus=int(os.environ["N"]), est_time=1)\n',
        [(3, "register(gpus=...) must be a literal")],
    ),
    ("positional", HEADER + 'register(("cpu",), est_time=1)\n', [(2, "keyword arguments only")]),
    ("kwargs", HEADER + 'register(**{"on": ("cpu",)}, est_time=1)\n', [(2, "cannot take **kwargs")]),
    (
        "unknown-kwarg",
        HEADER + 'register(on=("cpu",), est_time=1, timeout=3)\n',
        [(2, "unknown argument 'timeout'")],
    ),
    ("unknown-class", HEADER + 'register(on=("h100", "a100"), est_time=1)\n', [(2, "unknown class 'a100'")]),
    ("empty-on", HEADER + "register(on=(), est_time=1)\n", [(2, "non-empty tuple")]),
    ("duplicate-class", HEADER + 'register(on=("h100", "h100"), est_time=1)\n', [(2, "names a class twice")]),
    (
        "gpus-no-runner",
        HEADER + 'register(on=("h100",), gpus=8, est_time=1)\n',
        [
            (
                2,
                "needs 8 x h100, but no runner of class 'h100' has that many GPUs (its runners have 1, 2 GPU(s))",
            )
        ],
    ),
    (
        "gpus-no-runner-second-class",
        HEADER + 'register(on=("b200", "5090"), gpus=4, est_time=1)\n',
        [(2, "needs 4 x 5090")],
    ),
    (
        "gpus-zero",
        HEADER + 'register(on=("h100",), gpus=0, est_time=1)\n',
        [(2, "gpus=...) must be a positive")],
    ),
    (
        "gpus-bool",
        HEADER + 'register(on=("h100",), gpus=True, est_time=1)\n',
        [(2, "gpus=...) must be a positive")],
    ),
    ("est-time-missing", HEADER + 'register(on=("h100",))\n', [(2, "missing est_time")]),
    (
        "est-time-zero",
        HEADER + 'register(on=("cpu",), est_time=0)\n',
        [(2, "est_time=...) must be a positive")],
    ),
    (
        "est-time-negative",
        HEADER + 'register(on=("cpu",), est_time=-4.5)\n',
        [(2, "est_time=...) must be a positive")],
    ),
    (
        "est-time-string",
        HEADER + 'register(on=("cpu",), est_time="30")\n',
        [(2, "est_time=...) must be a positive")],
    ),
    ("on-missing", HEADER + "register(est_time=3)\n", [(2, "missing on=")]),
    ("nested-in-if", HEADER + 'if True:\n    register(on=("cpu",), est_time=1)\n', [(3, "module top level")]),
    (
        "nested-in-function",
        HEADER + 'def setup():\n    register(on=("cpu",), est_time=1)\n',
        [(3, "module top level")],
    ),
    ("syntax-error", HEADER + 'register(on=("cpu",), est_time=1\n', [(2, "cannot parse test file")]),
    # literal_eval raises TypeError, not ValueError, on a literal it cannot build.
    (
        "unhashable-set-literal",
        HEADER + "register(on={[]}, est_time=1)\n",
        [(2, "register(on=...) must be a literal")],
    ),
    (
        "unhashable-dict-key",
        HEADER + 'register(on=("cpu",), est_time={[1]: 2})\n',
        [(2, "register(est_time=...) must be a literal")],
    ),
    (
        "repeated-keyword",
        HEADER + 'register(on=("cpu",), est_time=1, est_time=2)\n',
        [(2, "repeats the argument est_time=")],
    ),
    # A value problem names the line of its argument, not of the call.
    (
        "bad-gpus-on-its-line",
        HEADER + 'register(\n    on=("h100",),\n    gpus=0,\n    est_time=1,\n)\n',
        [(4, "register(gpus=...) must be a positive integer (at most 1024), got 0")],
    ),
    (
        "bad-est-time-on-its-line",
        HEADER + 'register(on=("cpu",),\n         est_time=-1)\n',
        [(3, "register(est_time=...) must be a positive number")],
    ),
    ("empty-on-on-its-line", HEADER + "register(est_time=1,\n         on=())\n", [(3, "non-empty tuple")]),
    (
        "unknown-class-on-its-line",
        HEADER + 'register(\n    on=("h100", "a100"),\n    est_time=1)\n',
        [(3, "unknown class 'a100'")],
    ),
    (
        "no-runner-names-gpus-line",
        HEADER + 'register(on=("h100",),\n         gpus=8,\n         est_time=1)\n',
        [(3, "needs 8 x h100, but no runner of class 'h100' has that many GPUs")],
    ),
    (
        "nested-call-after-a-valid-one",
        HEADER + 'register(on=("cpu",), est_time=1)\n\ndef test_a():\n'
        '    register(on=("cpu",), est_time=1)\n',
        [(5, "module top level")],
    ),
    (
        "second-call-after-a-docstring",
        HEADER + 'register(on=("cpu",), est_time=1)\n"""\nregister\n"""\nregister(on=("cpu",), est_time=2)\n',
        [(6, "called 2 times (lines 2, 6)")],
    ),
    (
        "alias-called-in-a-function",
        'from gpumatrix import register as reg\nreg(on=("cpu",), est_time=1)\n'
        'def f():\n    reg(on=("cpu",), est_time=1)\n',
        [(4, "module top level")],
    ),
    # Inputs Python's parser cannot take: a problem with a line, not a traceback.
    # (Python 3.12 reports some of these as syntax errors; the line is the same.)
    (
        "expression-too-deep",
        HEADER + "X = " + "-" * 100_000 + '1\nregister(on=("cpu",), est_time=1)\n',
        [(2, "cannot parse test file")],
    ),
    (
        "call-chain-too-deep",
        HEADER + "X = f" + "()" * 100_000 + '\nregister(on=("cpu",), est_time=1)\n',
        [(2, "cannot parse test file")],
    ),
    (
        "deep-argument",
        HEADER + 'register(on=("cpu",), est_time=' + "(" * 300 + "1" + ")" * 300 + ")\n",
        [(2, "cannot parse test file")],
    ),
    (
        "literal-too-deep-to-show",
        HEADER + 'register(on=("cpu",), est_time=' + "[" * 90 + "]" * 90 + ")\n",
        [(2, "register(est_time=...) must be a positive number")],
    ),
    # Bytes are read as Python reads a module.
    (
        "undecodable-bytes",
        HEADER.encode() + b'register(on=("cpu",), est_time=1)\nX = "\xe9"\n',
        [(3, "not valid utf-8 text (byte 0xe9)")],
    ),
    ("unknown-coding", b"# -*- coding: klingon -*-\n" + HEADER.encode(), [(1, "unknown encoding: klingon")]),
]


@pytest.mark.parametrize(("source", "expected"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_registration_errors_name_file_and_line(source, expected):
    registry = build_registry({"tests/unit/test_x.py": source}, MATRIX)
    assert registry.files == ()
    rendered = [str(p) for p in registry.problems]
    for line, fragment in expected:
        assert any(r.startswith(f"tests/unit/test_x.py:{line}: ") and fragment in r for r in rendered), (
            rendered
        )


# (id, source, (on, gpus, est_time, runners))
VALID = [
    ("cpu", HEADER + 'register(on=("cpu",), est_time=3)\n', (("cpu",), 1, 3.0, ("cpu",))),
    (
        "single-string-class",
        HEADER + 'register(on="h100", est_time=3)\n',
        (("h100",), 1, 3.0, ("1-gpu-h100",)),
    ),
    (
        "all-gpu-classes",
        HEADER + 'register(on=("h100", "b200", "gb300", "5090"), gpus=1, est_time=40)\n',
        (
            ("h100", "b200", "gb300", "5090"),
            1,
            40.0,
            ("1-gpu-h100", "4-gpu-b200", "4-gpu-gb300", "1-gpu-5090"),
        ),
    ),
    (
        "two-gpus-rounds-to-2-gpu-runner",
        HEADER + 'register(on=("h100", "b200"), gpus=2, est_time=9.5)\n',
        (("h100", "b200"), 2, 9.5, ("2-gpu-h100", "4-gpu-b200")),
    ),
    (
        "three-gpus-on-four-gpu-runner",
        HEADER + 'register(on=["gb300"], gpus=3, est_time=1)\n',
        (("gb300",), 3, 1.0, ("4-gpu-gb300",)),
    ),
    (
        "module-alias",
        'import gpumatrix as gm\ngm.register(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "name-alias",
        'from gpumatrix import register as reg\nreg(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "cpu-and-gpu",
        HEADER + 'register(on=("cpu", "h100"), gpus=2, est_time=5)\n',
        (("cpu", "h100"), 2, 5.0, ("cpu", "2-gpu-h100")),
    ),
    (
        "import-gpumatrix-submodule",
        'import gpumatrix.compare\n\ngpumatrix.register(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "import-gpumatrix-then-attribute",
        'import pytest, gpumatrix\ngpumatrix.register(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "star-import",
        'from gpumatrix import *\nregister(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "call-over-several-lines",
        HEADER + 'register(\n    on=("h100",),\n    gpus=2,\n    est_time=7,\n)\ndef test_a():\n    pass\n',
        (("h100",), 2, 7.0, ("2-gpu-h100",)),
    ),
    (
        "mention-in-a-later-docstring",
        HEADER + 'register(on=("cpu",), est_time=2)\n\ndef test_a():\n'
        '    """register is\n    not called here."""\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "syntax-error-after-the-call-is-pytest's",
        HEADER + 'register(on=("cpu",), est_time=2)\ndef (:\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "utf8-bom",
        b"\xef\xbb\xbf" + HEADER.encode() + b'register(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "utf8-bom-in-text",
        "\ufeff" + HEADER + 'register(on=("cpu",), est_time=2)\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "pep-263-latin-1",
        b"# -*- coding: latin-1 -*-\n"
        + HEADER.encode()
        + b'register(on=("cpu",), est_time=2)\nNAME = "caf\xe9"\n',
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
    (
        "bom-and-utf8-coding-line",
        b"\xef\xbb\xbf# coding: utf-8\n"
        + HEADER.encode()
        + 'register(on=("cpu",), est_time=2)\nNAME = "café"\n'.encode(),
        (("cpu",), 1, 2.0, ("cpu",)),
    ),
]


@pytest.mark.parametrize(("source", "expected"), [r[1:] for r in VALID], ids=[r[0] for r in VALID])
def test_valid_registrations_resolve_runners(source, expected):
    registry = build_registry({"tests/kernels/test_k.py": source}, MATRIX)
    assert registry.problems == ()
    (registration,) = registry.files
    assert (registration.on, registration.gpus, registration.est_time, registration.runners) == expected


def test_files_without_register_are_not_parsed():
    """The pre-filter: no mention of register, no parse (this source would be a syntax error)."""
    registration, problems = read_registration(b"def (:\n" * 1000, "tests/test_x.py")
    assert registration is None and [p.message.split(":")[0] for p in problems] == [
        "test file is not registered"
    ]


def test_a_40_mb_file_is_read_only_as_far_as_the_limit(tmp_path):
    big = tmp_path / "tests" / "test_big.py"
    big.parent.mkdir()
    filler = b"DATA = [" + b"1.0, " * (40 * 2**20 // 5) + b"]\n"
    big.write_bytes(HEADER.encode() + b'register(on=("cpu",), est_time=2)\n' + filler)
    data, size = read_source_bytes(str(big))
    assert len(data) <= READ_LIMIT and size == big.stat().st_size > 40 * 2**20
    registry = discover(tmp_path, MATRIX, cache=False)
    assert registry.problems == () and [f.path for f in registry.files] == ["tests/test_big.py"]
    # A registration past the limit is not seen, and the problem says why.
    big.write_bytes(
        b"X = 1\n" * (READ_LIMIT // 6 + 10) + HEADER.encode() + b'register(on=("cpu",), est_time=2)\n'
    )
    (problem,) = discover(tmp_path, MATRIX, cache=False).problems
    assert "only the first 1 MiB of this 1.0 MiB file are read: put the call near the top" in str(problem)


def test_a_class_no_runner_serves_says_so():
    matrix = parse_matrix(
        "classes:\n  cpu: {compute_capability: []}\n  h100: {compute_capability: ['9.0']}\n"
        "runners:\n  - {label: h, class: h100, gpus: 1, runs_on: [x], timeout_minutes: 5}\n"
    )
    registry = build_registry({"tests/test_a.py": HEADER + 'register(on=("cpu",), est_time=1)\n'}, matrix)
    assert [str(p) for p in registry.problems] == [
        "tests/test_a.py:2: register(on=...) names class 'cpu', which no runner of ci/matrix.yaml serves: "
        "add a runner of that class or drop it from on="
    ]


def test_registry_is_built_without_importing(tmp_path):
    """A file that would raise (or exit) on import is still read."""
    tests = tmp_path / "tests" / "unit"
    tests.mkdir(parents=True)
    (tests / "test_boom.py").write_text(
        "import sys\nraise SystemExit('imported!')\nfrom gpumatrix import register\n"
        'register(on=("cpu",), est_time=1)\n'
    )
    (tests / "helper.py").write_text("raise RuntimeError('not a test file')\n")
    registry = discover(tmp_path, MATRIX)
    assert [f.path for f in registry.files] == ["tests/unit/test_boom.py"]
    assert registry.problems == ()


def test_find_test_files_sorted_and_filtered(tmp_path):
    for rel in (
        "tests/b/test_2.py",
        "tests/a/test_1.py",
        "tests/a/conftest.py",
        "tests/a/x_test.py",
        "tests/a/__pycache__/test_cached.py",
        "tests/a/test_data.txt",
        "src/test_not_here.py",
    ):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert find_test_files(tmp_path) == ["tests/a/test_1.py", "tests/b/test_2.py"]


def test_read_registration_returns_line():
    registration, problems = read_registration(HEADER + "\n\nregister(on=('cpu',), est_time=1)\n", "t.py")
    assert problems == [] and registration is not None and registration.line == 4


def test_for_runner_and_get():
    registry = build_registry(
        {
            "tests/a/test_1.py": HEADER + 'register(on=("h100", "b200"), est_time=1)\n',
            "tests/a/test_2.py": HEADER + 'register(on=("h100",), gpus=2, est_time=1)\n',
        },
        MATRIX,
    )
    assert [f.path for f in registry.for_runner("1-gpu-h100")] == ["tests/a/test_1.py"]
    assert [f.path for f in registry.for_runner("2-gpu-h100")] == ["tests/a/test_2.py"]
    assert [f.path for f in registry.for_runner("4-gpu-b200")] == ["tests/a/test_1.py"]
    assert registry.for_runner("cpu") == ()
    assert registry.get("tests/a/test_2.py").gpus == 2
    assert registry.get("tests/a/missing.py") is None


def test_repository_itself_is_clean():
    matrix, registry = load_tree(REPO_ROOT)
    assert [str(p) for p in registry.problems] == []
    assert registry.get("tests/unit/gpumatrix/registry/test_registry.py") is not None
