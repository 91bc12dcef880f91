"""Check GPU lease logs (GPUMATRIX_LEASE_LOG) from real runs: no GPU was ever held by two tests at once.

    python -m benchmarks lease_log LOG [LOG ...] [--need SUBSTRING=GPUS ...]

Each log is the JSON-lines file the gpumatrix plugin appends one line to per lease (node id, xdist
worker, devices, monotonic acquire/release times). The logs are checked one at a time (each is one
machine's clock). ``--need test_dsv41_tp2.py=2``: some lease whose node id contains the substring held
exactly that many GPUs (a 2-GPU test really ran, alone on both). Prints every lease; exits 1 on an
overlap, a missing or empty log, or an unmet ``--need``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.support import import_test_support

_trees = import_test_support("gpumatrix_trees")
overlapping_leases, read_jsonl = _trees.overlapping_leases, _trees.read_jsonl

__all__ = ["main"]


def _need(text: str) -> tuple[str, int]:
    substring, sep, gpus = text.rpartition("=")
    if not sep or not substring or not gpus.isdigit() or int(gpus) < 1:
        raise argparse.ArgumentTypeError(f"expected SUBSTRING=GPUS (GPUS >= 1); got {text!r}")
    return substring, int(gpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--need", type=_need, action="append", default=[], metavar="SUBSTRING=GPUS")
    args = parser.parse_args(argv)
    problems, seen = [], []
    for log in args.logs:
        if not log.is_file():
            problems.append(f"{log}: no such lease log")
            continue
        leases = read_jsonl(log)
        if not leases:
            problems.append(f"{log}: no lease was logged")
        print(f"{log}: {len(leases)} leases")
        for lease in sorted(leases, key=lambda lease: lease["acquired"]):
            held = lease["released"] - lease["acquired"]
            print(
                f"  {held:8.2f} s  {lease['worker'] or '-':>5}  {','.join(lease['devices'])}  {lease['nodeid']}"
            )
        problems += [
            f"{log}: {device} held by {a} and {b} at once" for device, a, b in overlapping_leases(leases)
        ]
        seen += leases
    for substring, gpus in args.need:
        counts = sorted({len(lease["devices"]) for lease in seen if substring in lease["nodeid"]})
        if not counts:
            problems.append(f"--need {substring}={gpus}: no lease of a test matching it was logged")
        elif counts != [gpus]:
            problems.append(f"--need {substring}={gpus}: its leases held {counts} GPUs")
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print("ok: no GPU was held by two tests at once")
    return 1 if problems else 0
