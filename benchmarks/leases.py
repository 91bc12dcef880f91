"""Do GPU leases let pytest-xdist run 1-GPU tests side by side? Times `pytest -n 0` against `-n N`.

Builds a throwaway tree of `--tests` registered 1-GPU test files. Each test does a fixed amount of
GPU work: `--iters` bf16 matmuls of `--size`^2 on torch.cuda (8192^2 x 2000 is about 2.2 PFLOP,
a few seconds on an H200). With GPUMATRIX_HARDWARE set (a dry run on CPU) each test sleeps `--sleep`
seconds instead. The tree is run with the plugin leasing, serially and with N workers (default: the
machine's GPU count); from the lease log it checks that no GPU was ever held by two tests at once
and reports how many leases overlapped.

    python -m benchmarks leases                                    # on a GPU machine
    GPUMATRIX_HARDWARE=2xh100 python -m benchmarks leases          # dry run on CPU

Expected with N GPUs: the test-time span shrinks close to N x; the wall ratio is lower, because
each xdist worker pays its own start-up and CUDA initialisation.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.support import REPO_ROOT, import_test_support
from gpumatrix.config import load_matrix
from gpumatrix.hardware.detection import detect

_trees = import_test_support("gpumatrix_trees")
overlapping_leases, read_jsonl = _trees.overlapping_leases, _trees.read_jsonl
registered, write_tree = _trees.registered, _trees.write_tree

__all__ = ["main"]

_WORK = """
import os, time

def test_fixed_gpu_work():
    if os.environ.get("GPUMATRIX_HARDWARE"):
        time.sleep({sleep})
        return
    import torch
    a = torch.randn({size}, {size}, device="cuda", dtype=torch.bfloat16)
    for _ in range({iters}):
        b = a @ a
    torch.cuda.synchronize()
    assert torch.isfinite(b).all()
"""


def _tree(root: Path, *, tests: int, size: int, iters: int, sleep: float) -> Path:
    body = _WORK.format(size=size, iters=iters, sleep=sleep)
    files = {
        f"tests/kernels/test_work_{i:02d}.py": registered(
            ("5090", "h100", "b200", "gb300"), est_time=10, body=body
        )
        for i in range(tests)
    }
    return write_tree(root, files, matrix=(REPO_ROOT / "ci" / "matrix.yaml").read_text(encoding="utf-8"))


def _max_concurrent(leases: list[dict[str, Any]]) -> int:
    events = sorted(
        [(lease["acquired"], 1) for lease in leases] + [(lease["released"], -1) for lease in leases],
        key=lambda event: (event[0], event[1]),
    )
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def _run(tree: Path, workers: int, lease_dir: Path, log: Path) -> dict[str, Any]:
    log.unlink(missing_ok=True)
    env = {**os.environ, "GPUMATRIX_LEASE_DIR": str(lease_dir), "GPUMATRIX_LEASE_LOG": str(log)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"pytest -n {workers} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    leases = read_jsonl(log)
    overlaps = overlapping_leases(leases)
    if overlaps:
        raise SystemExit(f"pytest -n {workers}: a GPU was held by two tests at once: {overlaps[:3]}")
    span = max(lease["released"] for lease in leases) - min(lease["acquired"] for lease in leases)
    return {
        "wall": wall,
        "span": span,
        "leases": len(leases),
        "peak": _max_concurrent(leases),
        "devices": sorted({d for lease in leases for d in lease["devices"]}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=8, help="1-GPU test files (default 8)")
    parser.add_argument("--workers", type=int, default=None, help="xdist workers (default: the GPU count)")
    parser.add_argument("--size", type=int, default=8192, help="matmul side (default 8192)")
    parser.add_argument("--iters", type=int, default=2000, help="matmuls per test (default 2000)")
    parser.add_argument("--sleep", type=float, default=2.0, help="seconds per test in a dry run (default 2)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each mode; medians are shown")
    args = parser.parse_args(argv)
    for name in ("tests", "size", "iters", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")

    hardware = detect(load_matrix(REPO_ROOT / "ci" / "matrix.yaml"))
    if hardware.count < 1:
        parser.error(
            f"this machine has no GPU ({hardware.describe()}); for a dry run set GPUMATRIX_HARDWARE=2xh100"
        )
    workers = args.workers or hardware.count
    dry = hardware.source == "override"
    scratch = Path(tempfile.mkdtemp(prefix="gpumatrix-lease-bench-"))
    try:
        tree = _tree(scratch / "tree", tests=args.tests, size=args.size, iters=args.iters, sleep=args.sleep)
        runs: dict[int, list[dict[str, Any]]] = {0: [], workers: []}
        for _ in range(args.repeats):
            for n in runs:
                runs[n].append(_run(tree, n, scratch / "leases", scratch / f"leases-{n}.jsonl"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    work = f"sleep {args.sleep:g} s" if dry else f"{args.iters} x bf16 matmul {args.size}^2"
    print(
        f"machine: {hardware.describe()} (from {hardware.source}); python {platform.python_version()}; "
        f"{args.tests} tests of {work}; medians of {args.repeats}"
    )
    print(f"{'mode':>8} {'wall s':>8} {'span s':>8} {'peak leases':>12}  devices")
    medians = {}
    for n, results in runs.items():
        wall = statistics.median(r["wall"] for r in results)
        span = statistics.median(r["span"] for r in results)
        medians[n] = (wall, span)
        print(
            f"{'-n ' + str(n):>8} {wall:8.2f} {span:8.2f} {max(r['peak'] for r in results):12d}  "
            f"{', '.join(results[-1]['devices'])}"
        )
    print(
        f"speed-up with -n {workers}: wall {medians[0][0] / medians[workers][0]:.2f}x, "
        f"test span {medians[0][1] / medians[workers][1]:.2f}x; no GPU was held by two tests at once"
    )
    return 0
