"""Text that came from a report, a file name or a comment, made safe to show in GitHub Markdown.

Step summaries, status comments and check runs are rendered by GitHub: text shown there must not turn
into markup (emphasis, links, HTML, a table cell's end) or mention anyone. Each helper gives one line
of bounded length.
"""

from __future__ import annotations

import html
import re

__all__ = ["NAME_LIMIT", "PROBLEM_LIMIT", "code_span", "plain_text"]

_TEXT_LIMIT = 400
_SPAN_LIMIT = 120  # a comment's spec, a SHA, a node id in a status comment
# A step summary shows a file, path or test name whole up to this many characters, a problem up to this.
NAME_LIMIT = 300
PROBLEM_LIMIT = 1000
# What makes emphasis, links, images and strikethrough in running text. A backtick is left as it is:
# it can only open a code span, inside which nothing is markup (and messages use spans on purpose).
_MARKUP = re.compile(r"([\\*_\[\]~])")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def plain_text(text: str, *, limit: int = _TEXT_LIMIT, in_table: bool = False) -> str:
    """`text` on one line as plain Markdown text: no markup, no HTML, and a fullwidth at sign so `@name`
    mentions no one; in a table cell, `|` is escaped too."""
    shown = _MARKUP.sub(r"\\\1", html.escape(_one_line(text, limit), quote=False)).replace("@", "\uff20")
    return shown.replace("|", "\\|") if in_table else shown


def code_span(text: str, *, limit: int = _SPAN_LIMIT, in_table: bool = False) -> str:
    """`text` as one inline code span: single line, no backticks (they would end it), bounded length; in a
    table cell, `|` is escaped (GitHub reads the cell's end before the span)."""
    flat = _one_line(str(text).replace("`", "'"), limit)
    span = f"`{flat}`" if flat else "` `"
    return span.replace("|", "\\|") if in_table else span
