"""The report page in a real headless browser: both matrices render with the JSON's counts, the filter box hides
rows, the headers sort, and without JavaScript the tables are all there.

The browser is the system's Chromium (Debian's `chromium`, which `make install` installs where apt can), driven
by Playwright for Python through `executable_path`; Playwright's own browser download is never used. Where no
Chromium can be found the test skips, except under CI (`CI` set), where it fails: CI must run it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from coverage_reports import PATHS_YAML, report_json
from gpumatrix_trees import registered, write_tree

from gpumatrix import register
from gpumatrix.cli import main

register(on=("cpu",), est_time=10)

# Flags that let Chromium run headless as root in a container, with nothing fetched in the background.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str:
    found = os.environ.get("GPUMATRIX_CHROMIUM") or next(filter(None, map(shutil.which, _CANDIDATES)), None)
    if found:
        return found
    message = (
        "no Chromium on this machine (looked for $GPUMATRIX_CHROMIUM and "
        f"{', '.join(_CANDIDATES)} on PATH); `make install` installs Debian's chromium where apt-get can"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the report page's browser test: {message}")
    pytest.skip(message)


CPU = report_json(
    "cpu",
    "cpu",
    0,
    {
        "tests/unit/test_r.py::a": "passed",
        "tests/unit/test_r.py::b": "passed",
        "tests/unit/test_r.py::c": "skipped",
    },
    {"tests/unit/test_r.py::a": ["ref.torch"]},
    reasons={"tests/unit/test_r.py::c": "needs a <b>network</b>"},
)
H100 = report_json(
    "1-gpu-h100",
    "h100",
    1,
    {
        "tests/kernels/test_k.py::pair": "passed",
        "tests/kernels/test_k.py::bf16": "failed",
        "tests/kernels/test_slow.py::big": "passed",
        "tests/kernels/test_slow.py::bigger": "errors",
    },
    {"tests/kernels/test_k.py::pair": ["k.pair"], "tests/kernels/test_k.py::bf16": ["k.bf16"]},
    {"tests/kernels/test_slow.py::big": 30.0},
)
FILES = {
    "ci/paths.yaml": PATHS_YAML,
    "tests/unit/test_r.py": registered(("cpu",), est_time=4),
    "tests/kernels/test_k.py": registered(("h100", "b200"), est_time=30),
    "tests/kernels/test_slow.py": registered(("h100",), est_time=2),
}


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("page")
    root = write_tree(tmp / "tree", FILES)
    reports = []
    for name, document in (("cpu", CPU), ("h100", H100)):
        reports.append(tmp / f"{name}.json")
        reports[-1].write_text(json.dumps(document))
    page = tmp / "coverage.html"
    result = CliRunner().invoke(
        main,
        ["coverage", *map(str, reports), "--root", str(root), "--html", str(page)],
        env={"GITHUB_STEP_SUMMARY": ""},
        catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output  # k.bf16 is required on h100 and only a failing test ran it
    return page


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser, page_path: Path):
    context = browser.new_context()
    opened = context.new_page()
    opened.goto(page_path.as_uri())
    yield opened
    context.close()


def _visible(page, table: str, attribute: str) -> list[str]:
    return page.eval_on_selector_all(
        f"#{table} tbody tr", f"rows => rows.filter(r => !r.hidden).map(r => r.dataset.{attribute})"
    )


def _count(page, selector: str) -> int:
    return int(page.text_content(selector))


def test_both_matrices_render_with_the_counts_of_the_json(page) -> None:
    assert _visible(page, "path-matrix", "path") == ["k.pair", "k.bf16", "ref.torch", "extra.path"]
    assert _visible(page, "file-matrix", "file") == [
        "tests/kernels/test_k.py",
        "tests/kernels/test_slow.py",
        "tests/unit/test_r.py",
    ]
    for label, document in (("cpu", CPU), ("1-gpu-h100", H100)):
        for kind in ("passed", "failed", "errors", "skipped"):
            assert (
                _count(page, f'#totals td[data-runner="{label}"] [data-count="{kind}"]')
                == (document["totals"][kind])
            ), (label, kind)
    for kind in ("passed", "failed", "errors", "skipped"):
        assert (
            _count(page, f'#grand-total [data-total="{kind}"]') == CPU["totals"][kind] + H100["totals"][kind]
        )
    states = page.eval_on_selector_all(
        '#path-matrix tr[data-path="k.bf16"] td[data-state]', "cells => cells.map(c => c.dataset.state)"
    )
    assert states == ["not_required", "not_reported", "failing", "not_reported", "not_reported"]
    assert page.text_content("#verdict").strip() == "Coverage failed: 1 problem(s)."
    assert "needs a <b>network</b>" in page.text_content("#file-matrix")  # shown as text, not markup


def test_the_filter_box_hides_rows_of_both_tables(page) -> None:
    page.fill("#filter", "ref.torch")
    assert _visible(page, "path-matrix", "path") == ["ref.torch"]
    assert _visible(page, "file-matrix", "file") == []
    assert page.text_content("#filter-count") == "1 of 7 rows"
    page.fill("#filter", "test_slow")
    assert _visible(page, "path-matrix", "path") == []
    assert _visible(page, "file-matrix", "file") == ["tests/kernels/test_slow.py"]
    page.fill("#filter", "")
    assert len(_visible(page, "path-matrix", "path")) == 4 and len(_visible(page, "file-matrix", "file")) == 3


def test_a_header_click_sorts_its_table(page) -> None:
    est = page.locator("#file-matrix thead th", has_text="est_time")
    est.click()
    assert _visible(page, "file-matrix", "file") == [
        "tests/kernels/test_slow.py",
        "tests/unit/test_r.py",
        "tests/kernels/test_k.py",
    ]
    assert est.get_attribute("aria-sort") == "ascending"
    est.click()
    assert _visible(page, "file-matrix", "file") == [
        "tests/kernels/test_k.py",
        "tests/unit/test_r.py",
        "tests/kernels/test_slow.py",
    ]
    page.locator("#path-matrix thead th", has_text="path").click()
    assert _visible(page, "path-matrix", "path") == ["extra.path", "k.bf16", "k.pair", "ref.torch"]


def test_without_javascript_the_tables_are_all_there(browser, page_path: Path) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        opened = context.new_page()
        opened.goto(page_path.as_uri())
        assert opened.locator("#path-matrix tbody tr").count() == 4
        assert opened.locator("#file-matrix tbody tr").count() == 3
        assert not opened.is_visible("#filter-box")  # no dead controls
        assert _count(opened, '#totals td[data-runner="cpu"] [data-count="passed"]') == 2
    finally:
        context.close()
