"""The JSON test report: typed, frozen records with one writer (the pytest plugin) and one reader.

`gpumatrix run`, `gpumatrix coverage`, `gpumatrix estimate`, `matrix --durations` and the bot read
reports through `read_report` / `parse_report_bytes` and nothing else; each returns a `Report` whose
every field was checked, or raises `ReportError` naming the file and the field. A report whose fields
disagree (`ReportError.contradiction`) is a failure found (exit 1), never a green cell; one that cannot
be read or is malformed is a usage error (exit 2). `gpumatrix.report.model` holds the records and the
writer's JSON, `gpumatrix.report.read` the reader, `gpumatrix.report.collect` what the plugin collects.
"""

from __future__ import annotations

from gpumatrix.report.model import (
    FORMAT,
    OUTCOME_RANK,
    OUTCOMES,
    PHASES,
    RAN,
    READ_FORMATS,
    FileResult,
    PathRecord,
    Report,
    ReportError,
    Rerun,
    Skip,
    Witnessed,
    distinct_reports,
    dump_report,
    mixed_provenance,
    report_to_json,
    require_ran,
    worse,
)
from gpumatrix.report.read import MAX_REPORT_BYTES, parse_report, parse_report_bytes, read_report

__all__ = [
    "FORMAT",
    "MAX_REPORT_BYTES",
    "OUTCOMES",
    "OUTCOME_RANK",
    "PHASES",
    "RAN",
    "READ_FORMATS",
    "FileResult",
    "PathRecord",
    "Report",
    "ReportError",
    "Rerun",
    "Skip",
    "Witnessed",
    "distinct_reports",
    "dump_report",
    "mixed_provenance",
    "parse_report",
    "parse_report_bytes",
    "read_report",
    "report_to_json",
    "require_ran",
    "worse",
]
