"""Finding the command in a comment: quotes, code, invisible characters, options and usage problems."""

from __future__ import annotations

import pytest

from gpumatrix import register
from gpumatrix.bot.parse import (
    LIST,
    RERUN_FAILED,
    RERUN_TEST,
    Command,
    parse_comment,
    strip_format_characters,
)

register(on=("cpu",), est_time=20)

ZWSP, RLO, BOM, SHY = "\u200b", "\u202e", "\ufeff", "\u00ad"

# (id, comment body, expected command or None)
CASES = [
    (
        "Plain command.",
        "/rerun-test test_a.py",
        Command(RERUN_TEST, "/rerun-test test_a.py", specs=("test_a.py",)),
    ),
    (
        "Command after prose lines.",
        "Flaky again.\n\n/rerun-test test_a.py",
        Command(RERUN_TEST, "/rerun-test test_a.py", specs=("test_a.py",)),
    ),
    (
        "Only the first command counts.",
        "/rerun-test a.py\n/rerun-test b.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Up to three spaces of indent.",
        "   /rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    ("Four spaces is indented code.", "    /rerun-test a.py", None),
    ("Tab is indented code.", "\t/rerun-test a.py", None),
    ("Mid-line mention is not a command.", "please /rerun-test a.py", None),
    ("Command word needs a boundary.", "/rerun-testing a.py", None),
    ("Quoted command.", "> /rerun-test a.py", None),
    ("Quoted command with indent.", "  > /rerun-test a.py", None),
    ("Lazy continuation of a quote.", "> earlier words\n/rerun-test a.py", None),
    (
        "Command after the quote ends.",
        "> /rerun-test old.py\n\n/rerun-test new.py",
        Command(RERUN_TEST, "/rerun-test new.py", specs=("new.py",)),
    ),
    ("Inside a backtick fence.", "```\n/rerun-test a.py\n```", None),
    ("Inside a tilde fence.", "~~~bash\n/rerun-test a.py\n~~~", None),
    ("Unclosed fence runs to the end.", "```\n/rerun-test a.py", None),
    (
        "Longer closing fence closes.",
        "```\nx\n`````\n/rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    ("Shorter fence does not close.", "````\n```\n/rerun-test a.py\n````", None),
    ("Inline code span.", "`/rerun-test a.py`", None),
    ("Code span over three lines.", "Try `\n/rerun-test a.py\n` later.", None),
    ("Double-backtick span over lines.", "``\n/rerun-test a.py\n``", None),
    ("Span continued by an indented line.", "See `x\n/rerun-test a.py\n    y` there.", None),
    (
        "Closed span on the line before.",
        "`x` ran.\n/rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Unmatched backtick is literal.",
        "a ` b\n/rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Runs of other widths do not close.",
        "``x\n/rerun-test a.py\n`",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Escaped backtick opens nothing.",
        "a \\` b\n/rerun-test a.py\n` c",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "A blank line ends the paragraph and the span.",
        "`x\n\n/rerun-test a.py\n`",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    ("Inline HTML comment over lines.", "Note <!--\n/rerun-test a.py\n-->", None),
    (
        "Command after a closed inline HTML comment.",
        "a <!-- x --> b\n/rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Unclosed inline HTML comment is literal.",
        "a <!-- b\n/rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Escaped HTML comment opener.",
        "a \\<!-- b\n/rerun-test a.py\n-->",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Code span hides an HTML comment opener.",
        "a `<!--` b\n/rerun-test a.py\n-->",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "HTML comment hides a backtick.",
        "a <!-- ` --> b\n/rerun-test a.py\n`",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    ("Hidden HTML comment.", "<!--\n/rerun-test a.py\n-->", None),
    (
        "After a one-line HTML comment.",
        "<!-- note -->\n/rerun-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Zero-width space inside the word.",
        f"/rerun{ZWSP}-test a.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Bidi override and BOM removed.",
        f"{BOM}/rerun-test a{RLO}.py",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Soft hyphen removed.",
        f"/rerun-test te{SHY}st_a.py",
        Command(RERUN_TEST, "/rerun-test test_a.py", specs=("test_a.py",)),
    ),
    (
        "CRLF line endings.",
        "hi\r\n/rerun-test a.py\r\n",
        Command(RERUN_TEST, "/rerun-test a.py", specs=("a.py",)),
    ),
    (
        "Runner options, both spellings.",
        "/rerun-test a.py --runner 1-gpu-h100 --runner=4-gpu-b200",
        Command(
            RERUN_TEST,
            "/rerun-test a.py --runner 1-gpu-h100 --runner=4-gpu-b200",
            specs=("a.py",),
            runners=("1-gpu-h100", "4-gpu-b200"),
        ),
    ),
    (
        "Repeated runner collapses.",
        "/rerun-test a.py --runner x --runner x",
        Command(RERUN_TEST, "/rerun-test a.py --runner x --runner x", specs=("a.py",), runners=("x",)),
    ),
    (
        "Short SHA, upper case folded.",
        "/rerun-test a.py --sha ABCDEF1",
        Command(RERUN_TEST, "/rerun-test a.py --sha ABCDEF1", specs=("a.py",), sha="abcdef1"),
    ),
    (
        "Specs are split on whitespace only.",
        "/rerun-test 'a.py b.py'",
        Command(RERUN_TEST, "/rerun-test 'a.py b.py'", specs=("'a.py", "b.py'")),
    ),
    ("List.", "/rerun-test ?", Command(LIST, "/rerun-test ?")),
    (
        "List narrowed by runner.",
        "/rerun-test ? --runner cpu",
        Command(LIST, "/rerun-test ? --runner cpu", runners=("cpu",)),
    ),
    ("Rerun failed.", "/rerun-failed", Command(RERUN_FAILED, "/rerun-failed")),
    (
        "Rerun failed on one runner.",
        "/rerun-failed --runner cpu",
        Command(RERUN_FAILED, "/rerun-failed --runner cpu", runners=("cpu",)),
    ),
    ("No command at all.", "LGTM, thanks!", None),
    ("Empty body.", "", None),
]

# (id, comment body, the kind, a fragment of the problem)
PROBLEMS = [
    ("No spec.", "/rerun-test", RERUN_TEST, "no test given"),
    ("Only options.", "/rerun-test --runner cpu", RERUN_TEST, "no test given"),
    ("Unknown option.", "/rerun-test a.py --force", RERUN_TEST, "unknown option '--force'"),
    ("Short option is unknown.", "/rerun-test a.py -p evil", RERUN_TEST, "unknown option '-p'"),
    ("Runner without value.", "/rerun-test a.py --runner", RERUN_TEST, "--runner needs a value"),
    (
        "Runner followed by an option.",
        "/rerun-test a.py --runner --sha abcdef1",
        RERUN_TEST,
        "--runner needs a value",
    ),
    ("SHA not hex.", "/rerun-test a.py --sha zzzzzzz", RERUN_TEST, "is not a commit SHA"),
    ("SHA too short.", "/rerun-test a.py --sha abc12", RERUN_TEST, "is not a commit SHA"),
    ("SHA twice.", "/rerun-test a.py --sha abcdef1 --sha abcdef2", RERUN_TEST, "more than once"),
    ("51 specs.", "/rerun-test " + " ".join(f"t{i}.py" for i in range(51)), RERUN_TEST, "too many specs: 51"),
    ("List with a spec.", "/rerun-test ? a.py", RERUN_TEST, "cannot be combined"),
    ("List with a SHA.", "/rerun-test ? --sha abcdef1", LIST, "takes no --sha"),
    ("Rerun failed with a spec.", "/rerun-failed a.py", RERUN_FAILED, "takes no tests"),
]


@pytest.mark.parametrize(("body", "expected"), [row[1:] for row in CASES], ids=[row[0] for row in CASES])
def test_parse_comment(body: str, expected: Command | None) -> None:
    assert parse_comment(body) == expected


@pytest.mark.parametrize(
    ("body", "kind", "fragment"), [row[1:] for row in PROBLEMS], ids=[row[0] for row in PROBLEMS]
)
def test_usage_problems_refuse_the_whole_command(body: str, kind: str, fragment: str) -> None:
    command = parse_comment(body)
    assert command is not None
    assert command.kind == kind
    assert command.problem is not None and fragment in command.problem
    assert command.specs == ()


def test_fifty_specs_are_allowed() -> None:
    command = parse_comment("/rerun-test " + " ".join(f"t{i}.py" for i in range(50)))
    assert command is not None and command.problem is None
    assert len(command.specs) == 50


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        (f"a{ZWSP}b{RLO}c{BOM}d", "abcd"),
        ("caf\u00e9 \u00a0x", "caf\u00e9 \u00a0x"),  # letters and spaces are not format characters
    ],
)
def test_strip_format_characters(text: str, expected: str) -> None:
    assert strip_format_characters(text) == expected


def test_body_must_be_text() -> None:
    with pytest.raises(TypeError, match="body must be a str"):
        parse_comment(None)  # type: ignore[arg-type]
