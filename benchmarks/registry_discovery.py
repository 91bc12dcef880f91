"""Static registry discovery against `pytest --collect-only` on a 5,000-file tree.

Builds a synthetic tree of registered test files that import torch at the top, like real kernel
tests, then times (a) `gpumatrix.registry.discover` in-process (median of several runs, cold file
cache not forced) and (b) `pytest --collect-only -q` in a subprocess on the same tree.
Targets: discovery <= 1 s and >= 20x faster than collection.

    python benchmarks/registry_discovery.py [--files 5000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpumatrix.config import load_matrix
from gpumatrix.registry import discover

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
        on = CLASSES[i % len(CLASSES)]
        gpus = 2 if on == '("h100",)' else 1
        (folder / f"test_kernel_{i:05d}.py").write_text(
            TEMPLATE.format(on=on, gpus=gpus, est=10 + i % 50, i=i)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpumatrix-bench-") as tmp:
        root = Path(tmp)
        build_tree(root, args.files)
        matrix = load_matrix(root / "ci" / "matrix.yaml")
        timings = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            registry = discover(root, matrix)
            timings.append(time.perf_counter() - start)
        if registry.problems or len(registry.files) != args.files:
            raise SystemExit(
                f"discovery found {len(registry.files)} files and problems {registry.problems[:3]}"
            )
        discovery = statistics.median(timings)

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
        collect = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"pytest --collect-only failed ({result.returncode}):\n{result.stdout[-2000:]}")
        collected = result.stdout.strip().splitlines()[-1]

    import torch

    print(f"python {platform.python_version()}, torch {torch.__version__}, {args.files} files")
    print("| measurement | seconds |\n| --- | ---: |")
    print(f"| static discovery (median of {args.repeats}) | {discovery:.3f} |")
    print(f"| pytest --collect-only -q ({collected}) | {collect:.2f} |")
    print(f"| speed-up | {collect / discovery:.0f}x |")


if __name__ == "__main__":
    main()
