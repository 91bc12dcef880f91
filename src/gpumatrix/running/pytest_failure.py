"""Why a pytest that `gpumatrix run` started wrote no report: read from what it printed.

A conftest.py that fails to import stops pytest before any plugin hook that could write a report
(pytest prints `ImportError while loading conftest '...'` and exits 4). `run` keeps the end of
pytest's output (`run_teed`, which still shows every line as it comes) and `explain_no_report`
turns it into a problem naming the conftest and its error, instead of "wrote no report".
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["explain_no_report", "run_teed"]

_KEPT_LINES = 400
_CONFTEST_RE = re.compile(r"^ImportError while loading conftest '([^']+)'\.$", re.MULTILINE)
_ERROR_LINE_RE = re.compile(r"^E\s{1,3}(\S.*)$")


def run_teed(command: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> tuple[int, str]:
    """Run `command`, echoing its output (stderr merged into stdout) as it comes; its exit code and
    the last lines it printed."""
    kept: deque[str] = deque(maxlen=_KEPT_LINES)
    with subprocess.Popen(
        list(command),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as process:
        assert process.stdout is not None  # PIPE was asked for
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            kept.append(line)
        exit_code = process.wait()
    return exit_code, "".join(kept)


def explain_no_report(pytest_exit: int, output: str, report_path: Path) -> str:
    """The problem of a pytest run that wrote no report: a conftest that failed to import, with its
    error, when the output says so; else that pytest wrote none."""
    found = _CONFTEST_RE.search(output)
    if found is None:
        return f"pytest (exit {pytest_exit}) wrote no report to {report_path}"
    lines = output[found.end() :].splitlines()
    errors = [m[1] for m in map(_ERROR_LINE_RE.match, lines) if m]
    where = next((line.strip() for line in lines if re.match(r"^\S.*:\d+: in ", line)), "")
    error = "; ".join(errors[:3]) or "see pytest's output above"
    at = f" at {where.removesuffix(' in <module>').rstrip(':')}" if where else ""
    return (
        f"the conftest {found[1]} failed to import{at}: {error}. A conftest must import cleanly on a "
        f"machine without GPU libraries (the plugin gates GPU test files only once it has loaded): "
        f"import GPU libraries inside fixtures or behind try/except ImportError"
    )
