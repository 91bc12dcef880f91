"""Text from reports, file names and comments, shown as text in every medium; bot events checked by type.

File names and report fields reach the terminal (rich, which reads `[...]` as markup), GitHub Markdown
(step summaries, where `|` ends a cell and `[x](url)` is a link) and the HTML page. Each shows them as
the characters they are. A comment event whose fields have the wrong type is a usage error naming the
field. `python -m gpumatrix` and `python -m gpumatrix.cli` are the `gpumatrix` command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from coverage_reports import PATHS_YAML, report_json
from github_emulator.webhooks import issue_comment_event
from gpumatrix_trees import registered, write_tree

from gpumatrix import register
from gpumatrix.bot.event import CommentEvent, EventError
from gpumatrix.cli import main
from gpumatrix.commands.bot import bot

register(on=("cpu",), est_time=25)

# A closing tag with no opening one is a rich MarkupError; an opening one silently styles and hides. pytest
# cannot be given such a file (brackets are a test's parameters to it): the registry says so.
ODD = "tests/[/bold]/test_odd.py"
STYLED = "tests/unit/test_[red]styled.py"
# What pytest can run, and Markdown must not read as markup.
PIPED = "tests/unit/test_a|b`c.py"
BODY = "def test_t():\n    pass\n"


def _invoke(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(main, list(args), env={"GITHUB_STEP_SUMMARY": "", **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path / "tree",
        {
            "ci/paths.yaml": PATHS_YAML,
            ODD: registered(("cpu",), body=BODY),
            STYLED: registered(("cpu",), body=BODY),
            PIPED: registered(("cpu",), body=BODY),
        },
    )


@pytest.mark.parametrize(
    "args", [("list",), ("list", "--runner", "cpu"), ("check",), ("run", "--runner", "cpu")]
)
def test_file_names_with_markup_are_shown_as_they_are(tree: Path, args: tuple[str, ...]) -> None:
    result = _invoke(*args, "--root", str(tree), env={"GPUMATRIX_HARDWARE": "cpu"})
    assert result.exit_code == 1, result.output  # registration problems
    for name in (ODD, STYLED):
        assert f"{name}: pytest cannot be given a path holding '[' or ']'" in _flat(result.output)


def test_run_shows_file_names_as_they_are_in_the_terminal_and_the_summary(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "tree", {PIPED: registered(("cpu",), body=BODY)})
    summary = tmp_path / "summary.md"
    result = _invoke(
        "run", "--runner", "cpu", "-n", "0", "--summary-md", str(summary), "--root", str(root),
        env={"GPUMATRIX_HARDWARE": "cpu"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert PIPED in result.output
    assert "| `tests/unit/test_a\\|b'c.py` | 1 | 0 | 0 | 0 |" in summary.read_text()


def _reports(tmp_path: Path) -> list[str]:
    """A CPU report whose test recorded an undeclared path with markup in its name, and a test of a file
    whose name holds markup, HTML, a pipe, a backtick and a mention (registered nowhere: a problem names it)."""
    file = "tests/unit/test_<b>|`@alice`[x](http://e.invalid).py"
    nodeid = f"{PIPED}::t"
    tests = {nodeid: "passed", f"{file}::t": "passed"}
    document = report_json("cpu", "cpu", 0, tests, {nodeid: ["ref.torch", "[/red]k.x|y"]})
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(document))
    return [str(path)]


def test_coverage_shows_report_text_as_text_in_the_terminal_markdown_and_page(
    tree: Path, tmp_path: Path
) -> None:
    reports = _reports(tmp_path)
    markdown, page = tmp_path / "summary.md", tmp_path / "page.html"
    result = _invoke(
        "coverage", *reports, "--root", str(tree), "--markdown", str(markdown), "--html", str(page)
    )
    assert result.exit_code == 1  # the undeclared path, and the test of a file registered nowhere
    assert "[/red]k.x|y" in result.output and "recorded path [/red]k.x|y, which ci/paths.yaml" in _flat(
        result.output
    )
    text = markdown.read_text()
    assert "| `[/red]k.x\\|y` |" in text  # a code span; the pipe escaped for the table
    assert "| `tests/unit/test_a\\|b'c.py` |" in text  # a span: no markup in it, the pipe escaped
    problem = " ".join(line for line in text.splitlines() if line.startswith("- ❗"))
    assert "&lt;b&gt;" in problem and "\\[/red\\]" in problem and "＠alice" in problem and "@" not in problem
    html = page.read_text()
    assert "<b>|" not in html and "&lt;b&gt;|" in html and "[/red]k.x|y" in html


def test_estimate_shows_file_names_as_they_are(tree: Path, tmp_path: Path) -> None:
    tests = {f"{name}::t": "passed" for name in (ODD, STYLED, PIPED)}
    document = report_json("cpu", "cpu", 0, tests, durations={f"{PIPED}::t": 30.0})
    report = tmp_path / "r.json"
    report.write_text(json.dumps(document))
    result = _invoke("estimate", str(report), "--root", str(tree))
    assert result.exit_code == 0, result.output
    assert ODD in result.output and STYLED in result.output  # measured, not registered
    assert f"1 registration(s) off by more than 2x: {PIPED} (cpu)" in _flat(result.output)


# (id, text, plain text, code span in a table cell)
MARKDOWN = [
    ("html", "<script>x</script>", "&lt;script&gt;x&lt;/script&gt;", "`<script>x</script>`"),
    ("mention", "@alice", "＠alice", "`@alice`"),
    ("link", "[a](http://e)", "\\[a\\](http://e)", "`[a](http://e)`"),
    ("emphasis", "*a* _b_ ~c~", "\\*a\\* \\_b\\_ \\~c\\~", "`*a* _b_ ~c~`"),
    ("pipe", "a|b", "a\\|b", "`a\\|b`"),
    ("backtick", "a`b", "a\\`b", "`a'b`"),
    ("lines", "a\n\nb", "a b", "`a b`"),
    ("backslash", "a\\*", "a\\\\\\*", "`a\\*`"),
]


@pytest.mark.parametrize(("text", "plain", "span"), [m[1:] for m in MARKDOWN], ids=[m[0] for m in MARKDOWN])
def test_markdown_escapes(text: str, plain: str, span: str) -> None:
    from gpumatrix.escape import markdown

    assert markdown(text, in_table=True) == plain
    assert markdown(text, style="code", in_table=True) == span


# -- bot events ------------------------------------------------------------------------------------------------


def _event(**changes: Any) -> dict[str, Any]:
    payload = issue_comment_event(body="/rerun-test test_x.py", login="alice", issue_number=7, is_pr=True)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = payload
        for key in parents:
            node = node[key]
        node[last] = value
    return payload


# (id, the field changed, its value, the field named); a field GitHub may omit or send null may be null
EVENTS = [
    ("body-number", "comment__body", 5, "comment.body"),
    ("body-list", "comment__body", ["/rerun-test x"], "comment.body"),
    ("user-type-object", "comment__user__type", {"x": 1}, "comment.user.type"),
    ("repository-name", "repository__full_name", 3, "repository.full_name"),
    ("repository-list", "repository", [], "repository"),
    ("pull-request-string", "issue__pull_request", "yes", "issue.pull_request"),
    ("id-bool", "comment__id", True, "comment.id"),
    ("login-null", "comment__user__login", None, "comment.user.login"),
]


@pytest.mark.parametrize(("field", "value", "named"), [e[1:] for e in EVENTS], ids=[e[0] for e in EVENTS])
def test_a_comment_event_field_of_the_wrong_type_is_named(field: str, value: Any, named: str) -> None:
    with pytest.raises(EventError, match=rf"`{named}` is missing or not a "):
        CommentEvent.from_payload(_event(**{field: value}))


@pytest.mark.parametrize("field", ["comment__body", "comment__user__type", "issue__pull_request"])
def test_a_field_github_may_send_as_null_reads_as_absent(field: str) -> None:
    assert isinstance(CommentEvent.from_payload(_event(**{field: None})), CommentEvent)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (json.dumps(_event(comment__body=5)), "`comment.body` is missing or not a str"),
        ("[" * 100_000 + "]" * 100_000, "is not JSON: RecursionError"),
    ],
    ids=["body-number", "deep"],
)
def test_bot_handle_exits_2_on_an_event_it_cannot_use(tmp_path: Path, content: str, says: str) -> None:
    event = tmp_path / "event.json"
    event.write_text(content)
    write_tree(tmp_path / "tree", {})
    result = CliRunner().invoke(bot, ["handle", "--event", str(event), "--root", str(tmp_path / "tree")])
    assert result.exit_code == 2 and says in result.output, result.output
    assert "Traceback" not in result.output


# -- python -m ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["gpumatrix", "gpumatrix.cli"])
def test_python_dash_m_runs_the_command(module: str, tmp_path: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and shown.stdout.startswith("Usage: gpumatrix "), shown.stdout + shown.stderr
    refused = subprocess.run(
        [sys.executable, "-m", module, "check", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "cannot read the runner matrix" in refused.stderr


# -- issue 36: control sequences and class names ---------------------------------------------------------------

ESCAPE = "\x1b[2K\r\x1b[32m✅ 40 passed\x1b[0m"  # erase the line, return, draw a green pass over it


def test_control_sequences_in_a_test_file_name_and_a_reports_problems_never_reach_the_terminal(
    tmp_path: Path,
) -> None:
    root = write_tree(
        tmp_path / "tree",
        {"tests/unit/test_ok\r\x1bM.py": registered(("cpu",), body=BODY), "ci/paths.yaml": PATHS_YAML},
    )
    listed = _invoke("list", "--root", str(root))
    assert listed.exit_code == 0, listed.output
    assert (
        "\x1b" not in listed.output and "\r" not in listed.output and "test_ok\\r\\x1bM.py" in listed.output
    )
    refused = report_json("1-gpu-h100", "cpu", 0, {})
    refused["problems"] = [f"the GPUs are busy{ESCAPE}"]
    (tmp_path / "refused.json").write_text(json.dumps(refused))
    result = _invoke("coverage", str(tmp_path / "refused.json"), "--root", str(root))
    assert result.exit_code == 1
    assert "\x1b" not in result.output and "\r" not in result.output
    assert "the GPUs are busy\\x1b[2K\\r\\x1b[32m✅ 40 passed\\x1b[0m" in result.output


def test_a_class_name_from_the_matrix_neither_breaks_the_summary_table_nor_mentions_anyone(
    tmp_path: Path,
) -> None:
    from gpumatrix_trees import MATRIX_YAML

    matrix = MATRIX_YAML.replace('"5090"', '"5090 | @org/gpu-team"').replace(
        'class: "5090"', 'class: "5090 | @org/gpu-team"'
    )
    root = write_tree(
        tmp_path / "tree",
        {"tests/unit/test_a.py": registered(("cpu",), body=BODY), "ci/paths.yaml": PATHS_YAML},
        matrix=matrix,
    )
    report = tmp_path / "cpu.json"
    report.write_text(json.dumps(report_json("cpu", "cpu", 0, {"tests/unit/test_a.py::t": "passed"})))
    markdown = tmp_path / "summary.md"
    result = _invoke("coverage", str(report), "--root", str(root), "--markdown", str(markdown), "--warn-only")
    assert result.exit_code == 0, result.output
    header = next(line for line in markdown.read_text().splitlines() if line.startswith("| path |"))
    assert "5090 \\| ＠org/gpu-team (not reported)" in header and "@" not in header
    assert len(re.findall(r"(?<!\\)\|", header)) == 7  # path and five classes: six cells, no more
