"""benchmarks/RESULTS.md: one section per plotted op with its run and a plot that exists; the log indexed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from benchmarks.plot import PLOTS
from gpumatrix import register

register(on=("cpu",), est_time=1)

BENCH = REPO_ROOT / "benchmarks"
RESULTS = (BENCH / "RESULTS.md").read_text(encoding="utf-8")


def _sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", RESULTS, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_link_resolves() -> None:
    links = re.findall(r"\]\(([^)]+)\)", RESULTS)
    assert links and [link for link in links if not (BENCH / link).is_file()] == []


@pytest.mark.parametrize("op", sorted(PLOTS))
def test_each_plotted_op_has_a_section_with_its_run_and_plot(op: str) -> None:
    (body,) = [body for body in _sections().values() if f"(plots/{op}.png)" in body]
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", body) and "H200" in body
    assert f"data/{PLOTS[op][0]}" in body, "the section must name the data file its plot is drawn from"
    assert re.search(r"^\| .+ \| \d+\.\d", body, flags=re.M), "a table of current numbers"


def test_the_log_is_indexed_and_each_file_is_one_piece_of_work() -> None:
    logs = sorted(p.name for p in (BENCH / "log").glob("*.md"))
    index = sorted(Path(link).name for link in re.findall(r"\]\((log/[^)]+\.md)\)", _sections()["Log"]))
    assert logs and index == logs
    for name in logs:
        first = (BENCH / "log" / name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("## "), name


def test_results_stays_one_screen_per_op() -> None:
    assert len(RESULTS.splitlines()) <= 20 * len(_sections())
