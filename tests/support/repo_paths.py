"""Where the repository's own files are, for tests at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES", "REPO_ROOT", "TESTS"]

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
FIXTURES = TESTS / "fixtures"
