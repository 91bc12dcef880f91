"""Times gpumatrix.compare.assert_close on two 16M-element float32 tensors.

Claim (issue 3): on a CI machine (2 CPU cores) the passing case takes well under 2 s. Also timed:
the failing case (one NaN in the last element, so every chunk is read and the report is built),
the same pair as numpy arrays, CPU tensors computed by torch's own kernels (the path GPU tensors
take; by default CPU tensors are read through numpy), and, with ``--sweep-chunks``, the chunk
sizes that chose ``gpumatrix.compare._arrays.CHUNK_ELEMENTS``.

    .venv/bin/python -m benchmarks compare                      # CPU, 9 repeats, median
    .venv/bin/python -m benchmarks compare --sweep-chunks
    .venv/bin/python -m benchmarks compare --busy 2            # with 2 busy processes beside it
    python -m benchmarks compare --device cuda                  # on a GPU machine
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import platform
import statistics
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

import gpumatrix.compare._arrays as compare_arrays
from gpumatrix.compare import assert_close

__all__ = ["main"]


def _seconds(call: Callable[[], None], *, repeats: int, device: str) -> list[float]:
    times = []
    for _ in range(repeats):
        if device != "cpu":
            torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def _failing(actual: object, expected: object) -> Callable[[], None]:
    def call() -> None:
        try:
            assert_close(actual, expected)
        except AssertionError:
            return
        raise RuntimeError("the pair with a NaN passed assert_close")

    return call


def _cases(numel: int, device: str) -> dict[str, Callable[[], None]]:
    generator = torch.Generator().manual_seed(0)
    # Made on the CPU and moved once, so what is timed is the comparison, not a host-to-device copy.
    expected = torch.randn(numel, generator=generator)
    # A realistic passing pair: every element off by about 1e-7 relative, inside float32's tolerance.
    actual = expected + expected.abs() * 1e-7
    broken = actual.clone()
    broken[-1] = math.nan
    a, e, b = (t.to(device) for t in (actual, expected, broken))
    cases = {
        "torch pass": lambda: assert_close(a, e),
        "torch fail (NaN at the end)": _failing(b, e),
    }
    if device == "cpu":
        a_np, e_np, b_np = actual.numpy(), expected.numpy(), broken.numpy()
        cases["numpy pass"] = lambda: assert_close(a_np, e_np)
        cases["numpy fail (NaN at the end)"] = _failing(b_np, e_np)
        cases["torch pass, torch kernels"] = _torch_kernels(lambda: assert_close(a, e))
        cases["torch fail, torch kernels"] = _torch_kernels(_failing(b, e))
    return cases


def _torch_kernels(call: Callable[[], None]) -> Callable[[], None]:
    """The call with CPU tensors computed by torch, as GPU tensors are, instead of through numpy."""

    def wrapped() -> None:
        compare_arrays.CPU_TENSORS_VIA_NUMPY = False
        try:
            call()
        finally:
            compare_arrays.CPU_TENSORS_VIA_NUMPY = True

    return wrapped


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def _busy_neighbours(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU meanwhile, as pytest -n auto's other workers would."""
    workers = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        for worker in workers:
            worker.terminate()
            worker.join()


def _report(label: str, times: list[float]) -> None:
    print(
        f"| {label} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} | {len(times)} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--numel", type=int, default=1 << 24)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sweep-chunks", action="store_true")
    parser.add_argument("--busy", type=int, default=0, help="busy processes to run beside the timing")
    args = parser.parse_args(argv)
    with _busy_neighbours(args.busy):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    print(
        f"# {platform.node()} | {platform.processor() or platform.machine()} | "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads) | numpy {np.__version__} | "
        f"numel {args.numel} | device {args.device} | {args.busy} busy neighbours"
    )
    if args.device != "cpu":
        print(f"# {torch.cuda.get_device_name(args.device)}")
    print("| case | median s | min s | max s | runs |")
    print("|---|---|---|---|---|")
    cases = _cases(args.numel, args.device)
    for label, call in cases.items():
        call()  # warm-up: first-touch page faults and allocator growth are not the steady state
        _report(label, _seconds(call, repeats=args.repeats, device=args.device))
    if args.sweep_chunks:
        default = compare_arrays.CHUNK_ELEMENTS
        for shift in range(18, 25):
            compare_arrays.CHUNK_ELEMENTS = 1 << shift
            for label in ("torch pass", "numpy pass", "torch pass, torch kernels"):
                if label in cases:
                    cases[label]()
                    times = _seconds(cases[label], repeats=args.repeats, device=args.device)
                    _report(f"{label}, chunk 2**{shift}", times)
        compare_arrays.CHUNK_ELEMENTS = default
