"""Text that came from a report, a file name, ci/matrix.yaml or a comment, made safe for the medium it is shown in.

One function per medium, and every place that shows such text goes through it:

- `terminal`: for rich (gpumatrix's console output). rich reads `[...]` as markup, and a terminal obeys the
  control characters it is sent: ESC starts a sequence that can move the cursor, recolour or erase what
  was printed (a fake green line drawn over a failure), CR returns to the line's start, and the bidi
  controls (U+202E) reorder what is shown. Markup is escaped with rich's own `escape`; every character
  that is not printable (Python's `str.isprintable`: the C0 and C1 controls, DEL, format characters, line
  and paragraph separators, lone surrogates) is shown as its escape (`\\x1b`). Newlines may stay where a
  message has lines.
- `markdown`: for GitHub Markdown (step summaries, status comments, check-run summaries). As plain text: no
  emphasis, links, images or HTML, and a fullwidth at sign so `@name` mentions no one; as a code span (in
  which nothing is markup and no one is mentioned), without backticks, which would end it; in a fenced
  block, without backticks and at signs. Always one line of bounded length; in a table cell `|` is escaped,
  since GitHub ends the cell there even inside a code span.
- `html`: for the report page. markupsafe's escape (what Jinja's autoescape applies) over the text with
  its control characters shown as escapes (they are parse errors in HTML). The page's template
  environment runs every value it shows through this function (`finalize`).
"""

from __future__ import annotations

import html as _html
import re
from typing import Literal

from markupsafe import Markup
from markupsafe import escape as _markup_escape

__all__ = ["NAME_LIMIT", "PROBLEM_LIMIT", "TEXT_LIMIT", "html", "markdown", "terminal", "visible"]

TEXT_LIMIT = 400
_SPAN_LIMIT = 120  # a comment's spec, a SHA, a node id in a status comment
# A step summary shows a file, path or test name whole up to this many characters, a problem up to this.
NAME_LIMIT = 300
PROBLEM_LIMIT = 1000
# What makes emphasis, links, images, strikethrough and code spans in running text. A backtick is
# escaped too: left as it is, one in a login or a message pairs with the next span's opening backtick,
# and text that span was keeping inert (an `@team` in a test's name) falls outside it.
_MARKUP = re.compile(r"([\\*_\[\]~`])")
# An at sign that mentions no one.
_FULLWIDTH_AT = "\uff20"


def visible(text: object, *, newlines: bool = False) -> str:
    """`text` with every character that is not printable shown as its Python escape (`\\x1b`,
    `\\u202e`); with `newlines`, a newline stays one."""
    shown = str(text)
    if shown.isprintable():
        return shown
    kept = "\n" if newlines else ""
    return "".join(
        c if c.isprintable() or c in kept else c.encode("unicode_escape", "backslashreplace").decode("ascii")
        for c in shown
    )


def terminal(text: object, *, newlines: bool = False, markup: bool = True) -> str:
    """`text` for the terminal: its control characters shown as escapes (`visible`) and, for rich
    (`markup`, the default), its markup escaped; `markup=False` for a plain `click.echo`."""
    shown = visible(text, newlines=newlines)
    if not markup:
        return shown
    from rich.markup import escape

    return escape(shown)


def _one_line(text: object, limit: int) -> str:
    flat = " ".join(visible(" ".join(str(text).split())).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def markdown(
    text: object,
    *,
    style: Literal["text", "code", "fenced"] = "text",
    in_table: bool = False,
    limit: int | None = None,
) -> str:
    """`text` on one line of GitHub Markdown: plain text (`text`), an inline code span (`code`) or a line
    inside a fenced code block (`fenced`); in a table cell (`in_table`), `|` is escaped too."""
    if style == "text":
        flat = _one_line(text, limit or TEXT_LIMIT)
        shown = _MARKUP.sub(r"\\\1", _html.escape(flat, quote=False)).replace("@", _FULLWIDTH_AT)
    elif style == "code":
        flat = _one_line(str(text).replace("`", "'"), limit or _SPAN_LIMIT)
        shown = f"`{flat}`" if flat else "` `"
    elif style == "fenced":
        shown = _one_line(str(text).replace("`", "'").replace("@", _FULLWIDTH_AT), limit or NAME_LIMIT)
    else:
        raise ValueError(f"style must be 'text', 'code' or 'fenced', got {style!r}")
    return shown.replace("|", "\\|") if in_table else shown


def html(text: object) -> object:
    """`text` for the report page: control characters shown as escapes, then HTML-escaped. Markup (what
    the template itself built) and values that are not text (numbers, Jinja's undefined) pass as they are:
    autoescape renders those."""
    if not isinstance(text, str) or isinstance(text, Markup):
        return text
    return _markup_escape(visible(text, newlines=True))
