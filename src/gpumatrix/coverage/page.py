"""The report page and its Markdown twin: the runner x test-file matrix and the path x class matrix.

`render_html` fills one self-contained page (styles and script inline, nothing fetched when it is
viewed) from a merged `Coverage`; the tables are complete without JavaScript, which only adds
sorting by any column and a filter box. `render_markdown` draws the same two matrices for a GitHub
step summary. Both decide nothing: every state and count comes from `gpumatrix.coverage.merge`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpumatrix.coverage.merge import CELL_STATES, Coverage, FileCell
from gpumatrix.escape import NAME_LIMIT, PROBLEM_LIMIT, html, markdown, terminal
from gpumatrix.flaky.stats import passed_after_reruns
from gpumatrix.report import OUTCOMES

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "PATH_SYMBOLS",
    "page_context",
    "render_coverage",
    "render_html",
    "render_markdown",
]

PATH_SYMBOLS = {
    "passed": "✅",
    "failing": "❌",
    "missing": "⚠️",
    "not_required": "·",
    "not_reported": "⬜",
}
# The page draws states with glyphs every system font has (a machine without an emoji font shows the
# Markdown's emoji as empty boxes), and with short words; the legend and each cell's title give the
# full meaning.
_PAGE_SYMBOLS = {"passed": "✓", "failing": "✗", "missing": "!", "not_required": "·", "not_reported": "–"}
_PAGE_WORDS = {
    "passed": "exercised",
    "failing": "only failing",
    "missing": "missing",
    "not_required": "not required",
    "not_reported": "not reported",
}
_MAX_LISTED = 10  # tests listed under a cell; the rest are counted
# A measured file this far off its est_time, either way, is flagged (`gpumatrix estimate` proposes one).
_OFF_BY = 2.0


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def _file_cell(cell: FileCell | None, served: bool, est_time: float | None, reported: bool) -> dict[str, Any]:
    if cell is None:
        if not served:
            return {"state": "absent", "text": "–", "title": "not registered for this runner", "sort": -2}
        text = "no result" if reported else "not reported"
        return {"state": "noresult", "text": text, "title": f"registered here; {text}", "sort": -1}
    parts = [f"{cell.passed} passed"] if cell.passed else []
    if cell.after_reruns:  # an amber cell, never a plain pass
        (_, reruns), more = cell.after_reruns[0], len(cell.after_reruns)
        parts[0] += f" ({passed_after_reruns(reruns) if more == 1 else f'{more} passed after reruns'})"
    parts += [f"{cell.failed} failed"] if cell.failed else []
    parts += [f"{cell.errors} errors"] if cell.errors else []
    parts += [f"{len(cell.skipped)} skipped"] if cell.skipped else []
    # A file whose tests were all skipped measured nothing worth setting against its estimate.
    ratio = cell.duration / est_time if cell.duration is not None and est_time and cell.ran else None
    off = ratio is not None and (ratio > _OFF_BY or ratio < 1 / _OFF_BY)
    reasons: dict[str, list[str]] = {}
    for nodeid, reason in cell.skipped:
        reasons.setdefault(reason or "no reason given", []).append(nodeid)
    return {
        "state": cell.state,
        "text": ", ".join(parts) or "no tests",
        "passed": cell.passed,
        "failed": cell.failed,
        "errors": cell.errors,
        "skipped": len(cell.skipped),
        "duration": _seconds(cell.duration),
        "est": _seconds(est_time),
        "off": off,
        "ratio": f"{ratio:.2f}x" if ratio is not None else "",
        "reasons": [
            {
                "reason": reason,
                "count": len(ids),
                "tests": ids[:_MAX_LISTED],
                "more": max(0, len(ids) - _MAX_LISTED),
            }
            for reason, ids in sorted(reasons.items())
        ],
        "after_reruns": [
            f"{nodeid}: {passed_after_reruns(n)}" for nodeid, n in cell.after_reruns[:_MAX_LISTED]
        ],
        "sort": (cell.failed + cell.errors) * 1_000_000 + cell.ran,
    }


def page_context(coverage: Coverage, *, title: str, sources: Sequence[str]) -> dict[str, Any]:
    """Everything the template shows, as plain values."""
    runners = coverage.runners
    file_rows = []
    for file in coverage.files:
        est = coverage.est_times.get(file)
        cells = [
            _file_cell(
                coverage.file_cells.get((file, r.label)),
                coverage.served.get((file, r.label), False),
                coverage.class_estimates.get((file, r.gpu_class), est),
                r.reported,
            )
            for r in runners
        ]
        file_rows.append({"file": file, "est": _seconds(est), "est_sort": est or 0, "cells": cells})
    path_rows = []
    for path in coverage.paths:
        cells = []
        for column in coverage.classes:
            cell = coverage.path_cells[(path, column.name)]
            word, hint = _PAGE_WORDS[cell.state], CELL_STATES[cell.state]
            if cell.state == "not_reported" and cell.required:
                word, hint = f"{word} (required)", f"{hint}; required here"
            elif cell.state in ("passed", "failing") and not cell.required:
                hint += "; not required here"
            tests = [*(f"passed · {t}" for t in cell.passing), *(f"failed · {t}" for t in cell.failing)]
            cells.append(
                {
                    "state": cell.state,
                    "required": cell.required,
                    "symbol": _PAGE_SYMBOLS[cell.state],
                    "word": word,
                    "title": hint,
                    "passing": len(cell.passing),
                    "failing": len(cell.failing),
                    "tests": tests[:_MAX_LISTED],
                    "more": max(0, len(tests) - _MAX_LISTED),
                    "sort": {"missing": 0, "failing": 1, "not_reported": 2, "not_required": 3, "passed": 4}[
                        cell.state
                    ]
                    * 1000
                    + len(cell.passing),
                }
            )
        declared = path in coverage.descriptions
        path_rows.append(
            {
                "path": path,
                "description": coverage.descriptions.get(path, ""),
                "declared": declared,
                "cells": cells,
            }
        )
    totals = {key: sum(r.totals.get(key, 0) for r in runners) for key in OUTCOMES}
    return {
        "title": title,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sources": list(sources),
        "ok": coverage.exit_code == 0,
        "problems": coverage.problems(),
        "runners": runners,
        "classes": coverage.classes,
        "file_rows": file_rows,
        "path_rows": path_rows,
        "states": [(state, _PAGE_SYMBOLS[state], word) for state, word in CELL_STATES.items()],
        "totals": totals,
    }


def render_html(coverage: Coverage, *, title: str, sources: Sequence[str]) -> str:
    """The self-contained report page."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    environment = Environment(
        loader=PackageLoader("gpumatrix", "templates"),
        autoescape=select_autoescape(default=True),
        finalize=html,  # every value shown goes through the page's one escaping function
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return environment.get_template("report.html.j2").render(
        page_context(coverage, title=title, sources=sources)
    )


def render_markdown(coverage: Coverage, *, title: str) -> str:
    """The same two matrices as GitHub-flavoured Markdown (a step summary)."""
    verdict = (
        "✅ every required path was exercised by a passing test"
        if coverage.exit_code == 0
        else "❌ coverage failed"
    )
    # The first line says gpumatrix wrote it (hidden on GitHub): `gpumatrix coverage --markdown` overwrites
    # only such a file (gpumatrix.running.outputs).
    lines = ["<!-- gpumatrix:coverage -->", f"### {markdown(title)}", "", verdict, ""]
    lines += [f"- ❗ {markdown(problem, limit=PROBLEM_LIMIT)}" for problem in coverage.problems()]
    classes = coverage.classes
    lines += ["", "#### Code paths by GPU class", ""]
    lines.append(
        "| path | "
        + " | ".join(
            markdown(f"{c.name}{'' if c.ran else ' (not reported)'}", in_table=True) for c in classes
        )
        + " |"
    )
    lines.append("| --- |" + " :---: |" * len(classes))
    for path in coverage.paths:
        cells = []
        for column in classes:
            cell = coverage.path_cells[(path, column.name)]
            mark = PATH_SYMBOLS[cell.state]
            if cell.state == "passed":
                mark += f" {len(cell.passing)}"
            elif cell.state == "failing":
                mark += f" {len(cell.failing)} failing"
            elif cell.state == "missing":
                mark += " missing"
            elif cell.state == "not_reported" and cell.required:
                mark += " required"
            cells.append(mark)
        lines.append(
            f"| {markdown(path, limit=NAME_LIMIT, in_table=True, style='code')} | " + " | ".join(cells) + " |"
        )
    lines += ["", " · ".join(f"{PATH_SYMBOLS[s]} {w}" for s, w in CELL_STATES.items()), ""]
    runners = coverage.runners
    lines += ["#### Test files by runner", ""]
    lines.append(
        "| file | est. | "
        + " | ".join(
            markdown(f"{r.label}{'' if r.reported else ' (not reported)'}", in_table=True) for r in runners
        )
        + " |"
    )
    lines.append("| --- | ---: |" + " --- |" * len(runners))
    for file in coverage.files:
        est = coverage.est_times.get(file)
        cells = []
        for runner in runners:
            cell = coverage.file_cells.get((file, runner.label))
            if cell is None:
                cells.append("" if not coverage.served.get((file, runner.label)) else "no result")
                continue
            icon = {"failed": "❌", "flaky": "🟡", "passed": "✅", "skipped": "⏭️"}.get(cell.state, "·")
            counts = f"{cell.passed}/{cell.ran}" if cell.ran else f"{len(cell.skipped)} skipped"
            if cell.after_reruns:
                counts += f" ({len(cell.after_reruns)} {passed_after_reruns(max(n for _, n in cell.after_reruns)).removeprefix('passed ')})"
            cells.append(f"{icon} {counts} · {_seconds(cell.duration)}")
        name = markdown(file, limit=NAME_LIMIT, in_table=True, style="code")
        lines.append(f"| {name} | {_seconds(est)} | " + " | ".join(cells) + " |")
    lines.append(
        "| **total** | | "
        + " | ".join(
            f"{r.totals.get('passed', 0)} passed, {r.totals.get('failed', 0) + r.totals.get('errors', 0)} failed, "
            f"{r.totals.get('skipped', 0)} skipped"
            if r.reported
            else "not reported"
            for r in runners
        )
        + " |"
    )
    return "\n".join(lines) + "\n\n"


def render_coverage(console: Console, errors: Console, coverage: Coverage) -> None:
    """The path x class matrix in the terminal, then what fails it."""
    from rich.table import Table

    from gpumatrix.console import render_problems

    table = Table(title="code paths by GPU class")
    table.add_column("path")
    for column in coverage.classes:
        name = terminal(column.name)
        table.add_column(name if column.ran else f"{name}\n(not reported)", justify="center")
    for path in coverage.paths:
        row = []
        for column in coverage.classes:
            cell = coverage.path_cells[(path, column.name)]
            mark = PATH_SYMBOLS[cell.state]
            if cell.state == "passed":
                mark += f" {len(cell.passing)}"
            elif cell.state in ("missing", "failing") or (cell.state == "not_reported" and cell.required):
                mark += " " + ("required" if cell.state == "not_reported" else cell.state)
            row.append(mark)
        table.add_row(terminal(path), *row)
    console.print(table)
    console.print(" · ".join(f"{PATH_SYMBOLS[s]} {w}" for s, w in CELL_STATES.items()), highlight=False)
    reported = [r for r in coverage.runners if r.reported]
    console.print(
        f"{len(reported)} runner(s) reported: "
        + (
            ", ".join(terminal(f"{r.label} ({r.totals.get('passed', 0)} passed)") for r in reported) or "none"
        ),
        soft_wrap=True,
        highlight=False,
    )
    render_problems(errors, coverage.problems(), summary="coverage failed")
