"""Every printed field, fed arbitrary text, stays text in its medium (hypothesis).

Each renderer that shows text from a report, a file name, ci/matrix.yaml or a comment is given the same
arbitrary string in every such field, and its output is checked:

- terminal (rich, as the CLI prints): no control character but a newline reaches the output (no ESC
  sequence can recolour or redraw a line, no CR overwrite it, no bidi control reorder it), and no text is
  read as markup (a stray `[/red]` would raise);
- Markdown (step summaries, status comments, check runs, CI states): the document's structure does not
  depend on the text. Rendered once with the arbitrary text and once with plain letters, both have the
  same lines outside code fences, the same number of cells in every table row, and the same HTML tags;
  and no `@` outside a code span mentions anyone but the commenter the status comment is for;
- HTML (the report page): the same tags and attributes, in the same order, as with plain letters, and no
  control character.
"""

from __future__ import annotations

import io
import re
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from types import MappingProxyType

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpumatrix import GpumatrixError, register
from gpumatrix.bot.checks import check_spec
from gpumatrix.bot.ci_states import render_ci_states
from gpumatrix.bot.model import CiStates, GroupStatus, ReportMark, StatusComment, Suite
from gpumatrix.bot.render import render_listing, render_status_comment
from gpumatrix.bot.report import ReportSummary
from gpumatrix.bot.resolve import Refusal
from gpumatrix.commands.run import render_gated, render_run_result, summary_markdown
from gpumatrix.commands.tree import render_file_table
from gpumatrix.config import BotConfig, GpuClass, Matrix, Runner
from gpumatrix.console import render_error, render_problems
from gpumatrix.coverage.merge import merge_reports
from gpumatrix.coverage.page import render_coverage, render_html, render_markdown
from gpumatrix.coverage.paths import DeclaredPath, PathCatalog
from gpumatrix.estimate.proposals import FileEstimate, render_estimates
from gpumatrix.flaky.history import FlakyHistory, PassRecord, SteadyFile, render_history
from gpumatrix.flaky.stats import PassRate
from gpumatrix.hardware.detection import Hardware
from gpumatrix.problems import Problem
from gpumatrix.registry.model import Registration
from gpumatrix.report import FileResult, PathRecord, Report, Rerun, Skip, Witnessed
from gpumatrix.running.run import RunPlan, RunResult, RunSummary

register(on=("cpu",), est_time=60)

# What an attacker would write, beside whatever hypothesis draws.
HOSTILE = [
    "\x1b[32m✓ 40 passed\x1b[0m",
    "\r✅ all green",
    "\x1b]0;title\x07",
    "[/red]",
    "[bold]x[/bold]",
    "a|b",
    "| x | y |",
    "@org/team",
    "mail @alice now",
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "\u202egnp.exe",
    "`code` ``x``",
    "*em* _x_ [link](http://e.invalid) ![i](x)",
    "\x00\x08\x7f\x85\u2028\u2029",
    "line\nbreak",
    "&amp; &lt;",
    "\ud800 lone",
    "<!-- gpumatrix:state {} -->",
    "```",
]
TEXT = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(min_size=1, max_size=30),
    st.text(st.characters(max_codepoint=0x2FFF), min_size=1, max_size=30),
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHA = "0123456789abcdef0123456789abcdef01234567"


# -- the renderers, each fed one text in every field ---------------------------------------------------------


def _matrix(text: str) -> Matrix:
    cls = f"k{text}"  # a class name: whatever ci/matrix.yaml gives
    return Matrix(
        classes={"cpu": GpuClass("cpu", "no GPU", ()), cls: GpuClass(cls, text, ((9, 0),))},
        runners=(Runner("cpu", "cpu", 0, ("ubuntu",), 30), Runner(f"r{text}", cls, 1, (text,), 30)),
        bot=BotConfig(),
    )


def _registration(text: str) -> Registration:
    return Registration(
        path=f"tests/test_{text}.py",
        line=1,
        on=(f"k{text}", "cpu"),
        gpus=1,
        est_time=3.0,
        runners=(f"r{text}", "cpu"),
        suite=text,
        disabled=text,
        disabled_on=((f"k{text}", text),),
        est_times=((f"k{text}", 2.0),),
        flaky=((f"k{text}", text),),
    )


def _report(text: str) -> Report:
    file = f"tests/test_{text}.py"
    node = f"{file}::t[{text}]"
    return Report(
        hardware=Hardware(
            f"k{text}", 1, names=(text,), capabilities=((9, 0),), driver=text, device_ids=(text,)
        ),
        runner=f"r{text}",
        files={
            file: FileResult(
                passed=(node,),
                failed=(f"{node}-f",),
                skipped=(Skip(f"{node}-s", text),),
                duration=2.0,
                est_time=1.0,
                reruns=(Rerun(node, 1, "call", text),),
            )
        },
        witnessed={node: Witnessed(file, "passed", MappingProxyType({f"p{text}": PathRecord(1, (text,))}))},
        note=text,
        source=f"{text}.json",
    )


def _coverage(text: str):
    catalog = PathCatalog(paths={f"p{text}": DeclaredPath(f"p{text}", (f"k{text}",), 1, text)})
    return merge_reports([_report(text)], _matrix(text), catalog, registrations=[_registration(text)])


def _run_result(text: str) -> RunResult:
    matrix = _matrix(text)
    plan = RunPlan(
        root=Path("."),
        matrix=matrix,
        runner=matrix.runners[1],
        hardware=Hardware("cpu", 0),
        hardware_matches=True,
        targets=(text,),
        gated=(_registration(text),),
        command=(),
        env={},
        report_path=Path(f"{text}.json"),
        junit_path=Path("junit.xml"),
    )
    summary = RunSummary(
        runner=f"r{text}",
        executed=2,
        passed=1,
        failed=1,
        errors=0,
        skipped=0,
        per_file={f"tests/test_{text}.py": {"passed": 1, "failed": 1, "errors": 0, "skipped": 0}},
        problems=(text,),
        disabled=((f"tests/test_{text}.py", text),),
        after_reruns=((f"tests/test_{text}.py::t", 1),),
        pass_rates=(_pass_record(text),),
        repeat=3,
    )
    return RunResult(plan, 1, summary, (text, f"runner r{text} ran zero tests"), 1)


def _pass_record(text: str) -> PassRecord:
    return PassRecord(
        f"tests/test_{text}.py::t", f"tests/test_{text}.py", f"k{text}", PassRate(1, 3), 1, 1, text
    )


def _status(text: str) -> StatusComment:
    return StatusComment(
        source_comment_id=1,
        command=f"/rerun-test {text}",
        author=text,
        pr=7,
        sha=SHA,
        groups=(
            GroupStatus("cpu", (f"tests/test_{text}.py::t",), state="error", error=text),
            GroupStatus(
                "cpu", (f"tests/test_{text}.py",), state="failed", run_id=3, url="https://e.invalid/r/3"
            ),
        ),
        refusals=(Refusal(text, text),),
        problem=text,
        checks="commit-statuses",
        checks_note=text,
        new_tests=(text,),
    )


def terminal_outputs(text: str) -> list[str]:
    """What each terminal renderer prints, as a CI log (no terminal, so rich adds no colour of its own)."""
    from rich.console import Console

    from gpumatrix.commands.bot import _echo

    outputs = []

    def console() -> Console:
        return Console(
            file=io.StringIO(), color_system=None, force_terminal=False, width=200, highlight=False
        )

    def capture(draw) -> None:
        out, err = console(), console()
        draw(out, err)
        outputs.append(out.file.getvalue() + err.file.getvalue())  # type: ignore[attr-defined]

    capture(lambda out, err: render_problems(out, [Problem(text, 3, text), text], summary=text))
    capture(lambda out, err: render_error(out, GpumatrixError(f"{text}\n{text}")))
    capture(lambda out, err: render_file_table(out, [_registration(text)], title=text))
    capture(lambda out, err: render_gated(out, [_registration(text)]))
    capture(lambda out, err: render_run_result(out, err, _run_result(text)))
    capture(lambda out, err: render_coverage(out, err, _coverage(text)))
    capture(
        lambda out, err: render_estimates(
            out, [FileEstimate(f"tests/test_{text}.py", f"k{text}", 1.0, (30.0,), (f"r{text}",))]
        )
    )
    history = FlakyHistory(
        2,
        (_pass_record(text),),
        (_pass_record(text),),
        (SteadyFile(f"tests/test_{text}.py", f"k{text}", text, PassRate(3, 3), 1),),
    )
    capture(lambda out, err: render_history(out, history))

    import contextlib

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _echo(f"ignore: {text}")
    outputs.append(printed.getvalue())
    return outputs


def markdown_outputs(text: str) -> list[str]:
    status = _status(text)
    report = ReportSummary(1, 1, 0, (f"tests/test_{text}.py::t",), 0, 1, 1, (text,))
    failed = status.groups[1]
    return [
        summary_markdown(_run_result(text)),
        render_markdown(_coverage(text), title=text),
        render_status_comment(status),
        check_spec(
            failed, status=status, comment_id=2, comment_url=None, mark=ReportMark(3, 1, True, report)
        ).summary,  # type: ignore[union-attr]
        check_spec(status.groups[0], status=status, comment_id=2, comment_url=None, mark=None).summary,  # type: ignore[union-attr]
        render_listing(
            {"cpu": [f"tests/test_{text}.py"]},
            source_comment_id=1,
            sha=SHA,
            notes={"cpu": {f"tests/test_{text}.py": ("nightly", text)}},
        ),
        render_ci_states(
            CiStates(7, SHA, (Suite(text, "passed", SHA),), (Suite(text, "failed", SHA[::-1]),))
        ),
    ]


# -- what must hold ------------------------------------------------------------------------------------------

_CONTROL = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _controls(output: str) -> list[str]:
    return [repr(c) for c in output if c != "\n" and unicodedata.category(c) in _CONTROL]


def _markdown_skeleton(document: str) -> list[tuple]:
    """The structure of a Markdown document: lines outside code fences (a table row by its number of
    cells, any line by the HTML tags outside its code spans) and the fences themselves."""
    skeleton: list[tuple] = []
    fenced = False
    for line in document.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            skeleton.append(("fence",))
            continue
        if fenced:
            continue
        cells = len(re.findall(r"(?<!\\)\|", line)) if line.startswith("|") else None
        prose = re.sub(r"`[^`]*`", "", line)  # nothing in a code span is HTML
        skeleton.append(("line", cells, tuple(re.findall(r"</?[A-Za-z!][^<>\s]*", prose))))
    return skeleton


def _mentions(document: str, author: str) -> list[str]:
    """Each `@name` outside code spans and fences that would mention someone, bar the commenter."""
    from gpumatrix.escape import markdown

    outside = re.sub(r"```.*?```", "", document, flags=re.DOTALL)
    outside = outside.replace("\\`", "'")  # an escaped backtick opens no span
    outside = re.sub(r"`[^`\n]*`", "", outside)
    outside = outside.replace(f"from @{markdown(author)}".replace("\\`", "'"), "")
    return re.findall(r"@[A-Za-z0-9]", outside)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, tuple(name for name, _ in attrs)))

    def handle_endtag(self, tag) -> None:
        self.tags.append(("/" + tag,))


def _html_tags(page: str) -> list[tuple]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def _plain(text: str) -> str:
    return "x" * max(1, len(text))


@SETTINGS
@given(TEXT)
def test_no_control_character_or_markup_reaches_the_terminal(text: str) -> None:
    for output in terminal_outputs(text):
        assert not _controls(output), output


@SETTINGS
@given(TEXT)
@example("`")  # a login of one backtick paired with the next code span's opening one
def test_no_markdown_table_break_tag_or_mention(text: str) -> None:
    for hostile, plain in zip(markdown_outputs(text), markdown_outputs(_plain(text)), strict=True):
        assert _markdown_skeleton(hostile) == _markdown_skeleton(plain), hostile
        assert not _mentions(hostile, text), hostile


@SETTINGS
@given(TEXT)
def test_no_unescaped_html_on_the_report_page(text: str) -> None:
    hostile = render_html(_coverage(text), title=text, sources=[text])
    plain = render_html(_coverage(_plain(text)), title=_plain(text), sources=[_plain(text)])
    assert _html_tags(hostile) == _html_tags(plain)
    assert not [c for c in _controls(hostile) if c not in ("'\\t'", "'\\r'")], (
        "control characters on the page"
    )


def test_the_hostile_examples_are_caught_by_the_checks_themselves() -> None:
    """The checks can fail: raw text breaks each of them."""
    assert _controls("\x1b[32m") and _controls("a\u202eb")
    assert _markdown_skeleton("| a | b |\n| c|d | e |") != _markdown_skeleton("| a | b |\n| c | e |")
    assert _mentions("hi @team", "alice") == ["@t"]
    assert _html_tags("<p><script>x</script></p>") != _html_tags("<p>x</p>")
