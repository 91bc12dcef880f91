"""Options several `gpumatrix` commands share, and what the `--durations` reports measure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gpumatrix.config import Matrix
    from gpumatrix.registry.model import Registration
    from gpumatrix.running.shard import Durations

__all__ = ["durations_option", "measured_durations", "root_option", "suite_option"]

durations_option = click.option(
    "--durations",
    "duration_reports",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A JSON report whose measured file durations pack the shards instead of est_time "
    "(repeatable; `matrix` and `run --shard` must be given the same ones).",
)

root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Tree holding ci/matrix.yaml and tests/ (default: the repository root).",
)


def suite_option(default: str):
    """`--suite NAME` (the `suite_name` parameter), with `default` shown."""
    return click.option(
        "--suite",
        "suite_name",
        default=default,
        show_default=True,
        help="Only the files of this suite (ci/matrix.yaml suites), or 'all'.",
    )


def measured_durations(
    reports: Sequence[Path], registrations: Sequence[Registration], matrix: Matrix
) -> Durations | None:
    """--durations: the proposals of `gpumatrix estimate`, by class and file; None without reports."""
    if not reports:
        return None
    from gpumatrix.estimate.proposals import estimate_files
    from gpumatrix.estimate.proposals import measured_durations as proposed_durations
    from gpumatrix.report import read_report, require_ran

    found = [require_ran(read_report(p, matrix)) for p in reports]  # a refused run measured nothing: exit 1
    return proposed_durations(estimate_files(found, registrations, matrix))
