"""A pytest fixture: a serving emulator that fails the test at teardown if the contract was broken."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .emulator import GitHubEmulator

__all__ = ["github_emulator"]


@pytest.fixture
def github_emulator() -> Iterator[GitHubEmulator]:
    """`acme/mxfuse` served on 127.0.0.1. Import it into a test module (or a conftest) to use it:
    `from github_emulator import github_emulator  # noqa: F401`."""
    with GitHubEmulator(owner="acme", repo="mxfuse") as gh:
        yield gh
    gh.assert_no_violations()
