"""gpumatrix.registry.source: the plain-form reading agrees with parsing, and declines whatever it cannot vouch for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumatrix.registry.reader
from gpumatrix import register
from gpumatrix.registry.reader import read_registration
from gpumatrix.registry.source import CanonicalCall, canonical_call

register(on=("cpu",), est_time=8)

IMPORT = "from gpumatrix import register"
CALL = 'register(on=("h100", "b200"), gpus=2, est_time=40)'

# (id, source, what canonical_call gives)
PLAIN = [
    ("bare", f"{IMPORT}\n{CALL}\n", CanonicalCall(2, ("h100", "b200"), 2, 40.0)),
    (
        "docstring-imports-comments",
        f'"""Tests.\n\nMore."""\n\nfrom __future__ import annotations\n\n'
        f"import pytest\nimport torch as t, numpy\nfrom a.b import c as d, e\n"
        f"# a comment\n{IMPORT}  # the one source of truth\n\n{CALL}  # seconds\n",
        CanonicalCall(13, ("h100", "b200"), 2, 40.0),
    ),
    (
        "no-gpus-single-quotes",
        f"{IMPORT}\nregister(on=('cpu',), est_time=2.5)\ndef test_a():\n    pass\n",
        CanonicalCall(2, ("cpu",), None, 2.5),
    ),
    (
        "parenthesised-string",
        f'{IMPORT}\nregister(on=("cpu"), est_time=1)\n',
        CanonicalCall(2, ("cpu",), None, 1.0),
    ),
    ("single-line-docstring", f"'''Doc.'''\n{IMPORT}\n{CALL}\n", CanonicalCall(3, ("h100", "b200"), 2, 40.0)),
]
# (id, source): forms the regular expressions must leave to the parser.
DECLINED = [
    ("import-inside-the-docstring", f'"""\n{IMPORT}\n"""\n{CALL}\n'),
    ("call-inside-the-docstring", f'"""\n{IMPORT}\n{CALL}\n"""\n'),
    ("call-after-an-if", f"{IMPORT}\nif True:\n{CALL}\n"),
    ("a-third-mention", f"{IMPORT}\n{CALL}\n# register is called above\n"),
    ("aliased", "from gpumatrix import register as reg\nreg(on=('cpu',), est_time=1)\n"),
    ("module-import", "import gpumatrix\ngpumatrix.register(on=('cpu',), est_time=1)\n"),
    ("keyword-as-module", f"import if\n{IMPORT}\n{CALL}\n"),
    ("backslash-continuation", f"import a, \\\n  b\n{IMPORT}\n{CALL}\n"),
    ("carriage-returns", f"{IMPORT}\r\n{CALL}\r\n"),
    ("nul-byte", f"import a\0\n{IMPORT}\n{CALL}\n"),
    ("statement-before", f"X = 1\n{IMPORT}\n{CALL}\n"),
    ("duplicate-class", f'{IMPORT}\nregister(on=("cpu", "cpu"), est_time=1)\n'),
    ("zero-seconds", f'{IMPORT}\nregister(on=("cpu",), est_time=0.0)\n'),
    ("zero-gpus", f'{IMPORT}\nregister(on=("cpu",), gpus=0, est_time=1)\n'),
    ("exponent", f'{IMPORT}\nregister(on=("cpu",), est_time=1e3)\n'),
    ("keywords-reordered", f'{IMPORT}\nregister(est_time=1, on=("cpu",))\n'),
    ("import-after-call", f"{CALL}\n{IMPORT}\n"),
    ("unterminated-docstring", f'"""Doc.\n{IMPORT}\n{CALL}\n'),
    ("code-after-docstring-close", f'"""Doc.""" + X\n{IMPORT}\n{CALL}\n'),
    ("raw-docstring", f'r"""Doc."""\n{IMPORT}\n{CALL}\n'),
    ("star-import", f"from torch import *\n{IMPORT}\n{CALL}\n"),
    ("parenthesised-import", f"from a import (b)\n{IMPORT}\n{CALL}\n"),
    ("indented-call", f"{IMPORT}\n    {CALL}\n"),
    ("leading-zeros", f'{IMPORT}\nregister(on=("cpu",), est_time=007)\n'),
]


@pytest.mark.parametrize(("source", "expected"), [r[1:] for r in PLAIN], ids=[r[0] for r in PLAIN])
def test_the_plain_form_is_read_without_a_parser(source: str, expected: CanonicalCall) -> None:
    assert canonical_call(source) == expected


@pytest.mark.parametrize("source", [r[1] for r in DECLINED], ids=[r[0] for r in DECLINED])
def test_anything_else_is_left_to_the_parser(source: str) -> None:
    assert canonical_call(source) is None


def _parsed_only(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, list[str], tuple[object, ...]]:
    with monkeypatch.context() as patch:
        patch.setattr(gpumatrix.registry.reader, "canonical_call", lambda text: None)
        return _summary(read_registration(source, "tests/test_x.py"))


def _summary(reading: tuple[object, list]) -> tuple[object, list[str], tuple[object, ...]]:
    registration, problems = reading
    lines = getattr(registration, "arg_lines", ())
    return registration, [str(p) for p in problems], lines


@pytest.mark.parametrize("source", [r[1] for r in PLAIN + DECLINED], ids=[r[0] for r in PLAIN + DECLINED])
def test_both_readings_agree_on_the_table(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _summary(read_registration(source, "tests/test_x.py")) == _parsed_only(source, monkeypatch)


_LINES = st.sampled_from(
    [
        "",
        "   ",
        "# comment",
        "    # indented comment",
        '"""',
        '"""Doc."""',
        "'''",
        "Doc text",
        "import pytest",
        "import torch as t, numpy",
        "from a.b import c as d, e",
        "from __future__ import annotations",
        "import if",
        "x = 1",
        "if True:",
        "    pass",
        "def test_a():",
        IMPORT,
        "from gpumatrix import register as reg",
        "import gpumatrix",
        "import gpumatrix.compare",
        "from torch import *",
        'X = """',
        "import a, \\",
    ]
)
_CALLS = st.builds(
    lambda indent, classes, gpus, est, tail: (
        f"{indent}register(on=({', '.join(classes)}{',' if len(classes) == 1 else ''}), "
        f"{gpus}est_time={est}){tail}"
    ),
    st.sampled_from(["", "", "    "]),
    st.lists(st.sampled_from(['"cpu"', '"h100"', "'b200'", '"a100"', '"h100"']), min_size=1, max_size=3),
    st.sampled_from(["", "", "gpus=1, ", "gpus=2, ", "gpus=0, ", "gpus=8, "]),
    st.sampled_from(["1", "40", "2.5", "0", "0.0", "1e3", "007", "00.5", "0.25", "10.0"]),
    st.sampled_from(["", "", "  # seconds", " \\"]),
)


_PLAIN_LINES = st.sampled_from(
    [
        "",
        "# comment",
        "import pytest",
        "import torch as t, numpy",
        "from a.b import c as d, e",
        "from __future__ import annotations",
    ]
)
_PLAIN_CALLS = st.builds(
    lambda classes, gpus, est: f"register(on=({', '.join(classes)},), {gpus}est_time={est})",
    st.lists(st.sampled_from(['"cpu"', '"h100"', "'b200'", '"5090"']), min_size=1, max_size=3, unique=True),
    st.sampled_from(["", "gpus=1, ", "gpus=4, ", "gpus=0, "]),
    st.sampled_from(["1", "40", "2.5", "10.0", "0", "007", "00.5", "0.0"]),
)
_DOCSTRINGS = st.sampled_from(
    [[], ['"""Doc."""'], ['"""', "Doc text", '"""'], ["'" * 3 + "Doc." + "'" * 3, ""]]
)


@st.composite
def _files(draw: st.DrawFn) -> list[str]:
    """Files in the plain form, about half of them with one line from anywhere put anywhere."""
    lines = [
        *draw(_DOCSTRINGS),
        *draw(st.lists(_PLAIN_LINES, max_size=3)),
        IMPORT,
        *draw(st.lists(_PLAIN_LINES, max_size=2)),
        draw(_PLAIN_CALLS),
        *draw(st.lists(st.sampled_from(["", "def test_a():", "    pass"]), max_size=3)),
    ]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.one_of(_LINES, _CALLS)))
    return lines


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(_files(), st.lists(st.one_of(_LINES, _CALLS), min_size=1, max_size=9)),
    st.sampled_from(["\n", "\n", "\r\n"]),
)
def test_both_readings_agree_on_any_mix_of_lines(lines: list[str], newline: str) -> None:
    source = newline.join(lines) + newline
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _summary(read_registration(source, "tests/test_x.py")) == _parsed_only(source, monkeypatch)
