"""Code cites only documents that are in this repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=2)

# A Markdown document named in code or scripts: `docs/mxfp8.md`, `../DESIGN.md`, `RESULTS.md`.
_CITED = re.compile(r"(?<![\w/.-])((?:\.\./|[\w.-]+/)*[\w.-]+\.md)\b")


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO_ROOT / name for name in listed]


def _resolves(citation: str, citing: Path, documents: set[Path]) -> bool:
    for base in (REPO_ROOT, citing.parent):
        target = (base / citation).resolve()
        if target in documents:
            return True
    # A bare name ("RESULTS.md") is fine when exactly one document of the repository has it.
    return "/" not in citation and sum(doc.name == citation for doc in documents) == 1


def test_every_cited_document_is_in_the_repository() -> None:
    documents = {path.resolve() for path in _tracked("*.md")}
    missing = []
    for path in _tracked("src/*.py", "benchmarks/*.py", "benchmarks/*.sh", "tests/*.py"):
        if path.is_relative_to(REPO_ROOT / "tests" / "support" / "github_emulator") or path.name.startswith(
            "test_"
        ):
            continue  # the emulator and tests name files of fake repositories (README.md of a fixture)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            missing += [
                f"{path.relative_to(REPO_ROOT)}:{number}: {c}"
                for c in _CITED.findall(line)
                if not _resolves(c, path, documents)
            ]
    assert missing == []


@pytest.mark.parametrize(
    ("citation", "resolves"),
    [("docs/mxfp8.md", True), ("../DESIGN.md", False), ("DESIGN.md", False), ("RESULTS.md", True)],
)
def test_the_citation_check_itself(citation: str, resolves: bool) -> None:
    documents = {path.resolve() for path in _tracked("*.md")}
    assert (
        _resolves(citation, REPO_ROOT / "src" / "mxfuse" / "formats" / "reference.py", documents) is resolves
    )
