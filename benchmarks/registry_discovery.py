"""Static registry discovery, cold and warm, against `pytest --collect-only` on a 5,000-file tree.

Builds a synthetic tree of registered test files that import torch at the top, like real kernel
tests, then times `gpumatrix.registry.discovery.discover` in-process, median of --repeats runs each:

  cold        no cache: every file is read and parsed (the cache is written, as a first run does)
  warm        the cache of the previous run, nothing changed: no file is read
  warm, 1 changed   one file rewritten (new size) before each run: that file alone is read
  no cache    `discover(..., cache=False)`, what the bot does over a PR's tree

and `pytest --collect-only -q` once in a subprocess with the gpumatrix plugin disabled (pytest's own
cost of importing every file). Each is measured twice: on the machine as it is ("quiet"), then with
--busy processes spinning beside it ("busy", as `pytest -n auto`'s other workers or other jobs on a
shared runner would). Targets (5,000 files): cold <= 0.5 s, warm <= 0.1 s, >= 20x faster than
collection.

    python -m benchmarks registry_discovery [--files 5000] [--repeats 5] [--busy 2] [--no-collect]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gpumatrix.config import Matrix, load_matrix
from gpumatrix.registry.cache import CACHE_PATH
from gpumatrix.registry.discovery import discover

REPO_ROOT = Path(__file__).resolve().parents[1]
CLASSES = ('("h100", "b200", "gb300", "5090")', '("cpu",)', '("b200", "gb300")', '("h100",)')

TEMPLATE = """\
import pytest
import torch

from gpumatrix import register

register(on={on}, gpus={gpus}, est_time={est})


@pytest.mark.parametrize("m", [1, 7, 128])
def test_shape_{i}(m):
    x = torch.ones(m, 32)
    assert x.sum().item() == m * 32


def test_dtype_{i}():
    assert torch.zeros(2, dtype=torch.bfloat16).dtype == torch.bfloat16
"""


def build_tree(root: Path, count: int) -> None:
    (root / "ci").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "ci" / "matrix.yaml", root / "ci" / "matrix.yaml")
    for i in range(count):
        folder = root / "tests" / f"group_{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"test_kernel_{i:05d}.py").write_text(_source(i))


def _source(i: int, est_extra: int = 0) -> str:
    on = CLASSES[i % len(CLASSES)]
    gpus = 2 if on == '("h100",)' else 1
    return TEMPLATE.format(on=on, gpus=gpus, est=10 + i % 50 + est_extra, i=i)


def _timed(call: Callable[[], object], repeats: int, *, before: Callable[[int], None]) -> float:
    times = []
    for attempt in range(repeats):
        before(attempt)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(root: Path, matrix: Matrix, count: int, repeats: int) -> dict[str, float]:
    cache = root / CACHE_PATH

    def run() -> None:
        registry = discover(root, matrix)
        if registry.problems or len(registry.files) != count:
            raise SystemExit(
                f"discovery found {len(registry.files)} files and problems {registry.problems[:3]}"
            )

    def change_one(attempt: int) -> None:
        # A different size each time: the cache must notice whatever the timestamp granularity.
        (root / "tests" / "group_000" / "test_kernel_00000.py").write_text(
            _source(0, est_extra=100 * (attempt + 1))
        )

    cold = _timed(run, repeats, before=lambda _: cache.unlink(missing_ok=True))
    run()  # a cache for the warm runs
    return {
        "cold": cold,
        "warm": _timed(run, repeats, before=lambda _: None),
        "warm, 1 changed": _timed(run, repeats, before=change_one),
        "no cache": _timed(lambda: discover(root, matrix, cache=False), repeats, before=lambda _: None),
    }


def collect_seconds(root: Path) -> tuple[float, str]:
    # Plain pytest collection: the gpumatrix plugin is disabled so this is pytest's own cost of
    # importing every file (torch included).
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:gpumatrix",
        "-p",
        "no:cacheprovider",
        "tests",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=root, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"pytest --collect-only failed ({result.returncode}):\n{result.stdout[-2000:]}")
    return seconds, result.stdout.strip().splitlines()[-1]


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy_neighbours(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU meanwhile."""
    workers = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.5)  # let them take their cores
        yield
    finally:
        for worker in workers:
            worker.terminate()
            worker.join()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--busy", type=int, default=2, help="spinning processes for the busy column (0: none)"
    )
    parser.add_argument("--no-collect", action="store_true", help="skip timing pytest --collect-only")
    args = parser.parse_args(argv)

    columns: dict[str, dict[str, float]] = {}
    loads: dict[str, str] = {}
    collected = ""
    with tempfile.TemporaryDirectory(prefix="gpumatrix-bench-") as tmp:
        root = Path(tmp)
        build_tree(root, args.files)
        matrix = load_matrix(root / "ci" / "matrix.yaml")
        modes = {"quiet": 0, f"busy ({args.busy} spinning)": args.busy} if args.busy else {"quiet": 0}
        for column, spinners in modes.items():
            with busy_neighbours(spinners):
                loads[column] = f"{os.getloadavg()[0]:.1f}"
                row = measure(root, matrix, args.files, args.repeats)
                if not args.no_collect:
                    row["pytest --collect-only"], collected = collect_seconds(root)
                loads[column] += f"-{os.getloadavg()[0]:.1f}"
            columns[column] = row

    import torch

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"{args.files} files, median of {args.repeats} (collection: one run; {collected})"
    )
    names = list(columns)
    print("| measurement | " + " | ".join(f"{name}, load {loads[name]}" for name in names) + " | target |")
    print("| --- |" + " ---: |" * (len(names) + 1))
    targets = {"cold": "<= 0.5 s", "warm": "<= 0.1 s"}
    for measurement in columns[names[0]]:
        cells = " | ".join(f"{columns[name][measurement]:.3f}" for name in names)
        print(f"| {measurement} | {cells} | {targets.get(measurement, '')} |")
    if not args.no_collect:
        speedups = " | ".join(
            f"{columns[n]['pytest --collect-only'] / columns[n]['cold']:.0f}x" for n in names
        )
        print(f"| collection / cold discovery | {speedups} | >= 20x |")
