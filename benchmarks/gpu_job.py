"""The GPU job as a user runs it: `gpumatrix run --runner LABEL`, timed cold and warm, per sharing.

    python -m benchmarks gpu_job [--runner 1-gpu-h100] [--runs cold,warm] [--budget SECONDS] [--json PATH]

Each run is the command the GPU workflow runs, `gpumatrix run --runner LABEL`, in a child process:
`cold` with an empty compile cache (a new GPUMATRIX_CACHE_DIR), `warm` with the cache the last run
left. A run named `cold@N` or `warm@N` sets GPUMATRIX_WORKERS_PER_GPU=N for it (the sweep that chose
ci/matrix.yaml's `workers_per_gpu`); a plain `cold`/`warm` uses the configuration as it is. For each run:
its wall time, exit code, the workers and compiles its header and footer report, and the outcome counts
of its JSON report. A run that would not fit in what is left of `--budget` is not started. Reports, logs
and the table go to $OUT (or ./reports); `--json` writes the rows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_WORKERS_RE = re.compile(r"^workers: (\S+) \((.*)\)$", re.MULTILINE)
_COMPILED_RE = re.compile(r"compile cache (cold|warm, (\d+) kernels); (\d+) kernel\(s\) compiled")
# Rough seconds a run takes, to decide whether another fits in the budget.
_EXPECTED = {"cold": 200.0, "warm": 90.0}


def _run(label: str, name: str, cache: Path, out: Path, timeout: float) -> dict[str, object]:
    kind, _, per_gpu = name.partition("@")
    env = {**os.environ, "GPUMATRIX_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.pop("GPUMATRIX_WORKERS_PER_GPU", None)
    if per_gpu:
        env["GPUMATRIX_WORKERS_PER_GPU"] = per_gpu
    tag = name.replace("@", "-")
    report = ROOT / "reports" / f"gpumatrix-{label}.json"  # where a plain `gpumatrix run` writes it
    # The `gpumatrix` command, as a user types it (`python -m gpumatrix` where it is not on PATH).
    gpumatrix = shutil.which("gpumatrix")
    command = [gpumatrix] if gpumatrix else [sys.executable, "-m", "gpumatrix"]
    command += ["run", "--runner", label]  # no other flag: the command a user and the workflow type
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # its output is bytes, whatever text= says
        code = "timeout"
        output = b"".join(part or b"" for part in (exc.stdout, exc.stderr)).decode(errors="replace")
    wall = time.monotonic() - start
    (out / f"gpu-job-{tag}.log").write_text(output, encoding="utf-8")
    if report.is_file():
        shutil.copyfile(report, out / f"gpu-job-{tag}.json")
    workers = _WORKERS_RE.search(output)
    compiled = _COMPILED_RE.search(output)
    row: dict[str, object] = {
        "run": name,
        "cache": kind,
        "exit": code,
        "wall_s": round(wall, 1),
        "workers": workers[1] if workers else None,
        "why": workers[2] if workers else None,
        "cached_kernels": int(compiled[2]) if compiled and compiled[2] else 0,
        "compiled": int(compiled[3]) if compiled else None,
    }
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
        totals = {k: 0 for k in ("passed", "failed", "errors", "skipped")}
        for result in data["files"].values():
            for key in totals:
                totals[key] += len(result.get(key, ()))
        row.update(totals)
        row["file_seconds"] = {
            path: round(result.get("duration", 0.0), 1) for path, result in data["files"].items()
        }
    except (OSError, ValueError, KeyError, AttributeError):
        row["report"] = "unreadable"
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runner", default="1-gpu-h100")
    parser.add_argument("--runs", default="cold,warm", help="comma-separated: cold, warm, cold@N, warm@N")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all runs together")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--caches", type=Path, default=None, help="where each cold run's cache goes (default: temp)"
    )
    args = parser.parse_args(argv)
    out = Path(os.environ.get("OUT") or ROOT / "reports").resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    caches = args.caches or Path(tempfile.mkdtemp(prefix="gpu-job-cache-"))
    cache = caches / "0"
    rows: list[dict[str, object]] = []
    for index, name in enumerate(args.runs.split(",")):
        kind = name.partition("@")[0]
        if kind not in _EXPECTED:
            parser.error(f"--runs: {name!r} is not cold, warm, cold@N or warm@N")
        left = args.budget - (time.monotonic() - start)
        if left < _EXPECTED[kind] * 0.6:
            print(f"=== {name}: not started ({left:.0f} s left of the budget)", flush=True)
            continue
        if kind == "cold":
            cache = caches / str(index)  # a new, empty compile cache
        print(f"=== {name}: gpumatrix run --runner {args.runner} (cache {cache})", flush=True)
        row = _run(args.runner, name, cache, out, timeout=left)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "file_seconds"}), flush=True)
    header = (
        "run",
        "wall_s",
        "exit",
        "workers",
        "cached_kernels",
        "compiled",
        "passed",
        "failed",
        "errors",
        "skipped",
    )
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row.get(key, "-")) for key in header))
    if args.json is not None:
        meta = {"date": datetime.date.today().isoformat(), "runner": args.runner, "cpus": os.cpu_count()}
        try:
            import torch
            import triton

            meta |= {"torch": torch.__version__, "triton": triton.__version__}
            meta["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        except ImportError:
            pass
        args.json.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1) + "\n", encoding="utf-8")
    return 0 if rows and all(row["exit"] == 0 for row in rows) else 1
