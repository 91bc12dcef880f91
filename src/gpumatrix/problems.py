"""Problems in files a person edits (ci/matrix.yaml, ci/paths.yaml, test files), each at its place."""

from __future__ import annotations

from dataclasses import dataclass

from gpumatrix import GpumatrixError

__all__ = ["Problem", "ProblemsError"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration or test file, at a place a person can open."""

    source: str
    line: int  # 1-based; 0 when the problem concerns the whole file
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}" if self.line else f"{self.source}: {self.message}"


class ProblemsError(GpumatrixError):
    """Problems in files a person edits, every one found, each at its place; its text lists them all."""

    summary = "problems"

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{self.summary} ({len(self.problems)} problem(s)):\n{lines}")
