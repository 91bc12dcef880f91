"""Timing helpers shared by the GPU benchmarks: CUDA-graph replay medians and the copy ceiling.

Every benchmark here times a variant as one CUDA graph holding many calls (launch gaps shrink to what a
serving engine's decode graph sees), cycling through enough input sets that repeated calls read from
HBM rather than the 60 MB L2, and reports the median of several replays.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch

__all__ = ["ROTATE_BYTES", "bench_us", "copy_bandwidth", "rotation_count"]

ROTATE_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2


def rotation_count(bytes_per_set: int, *, cap: int = 64) -> int:
    """How many input sets of ``bytes_per_set`` make one round of calls stream past the L2."""
    return max(1, min(cap, math.ceil(ROTATE_BYTES / max(bytes_per_set, 1))))


def bench_us(fns: list[Callable[[], object]], *, target_ms: float = 20.0, replays: int = 15) -> float:
    """Median microseconds per call of ``fns`` (called round-robin) replayed from one CUDA graph."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for fn in fns:
        fn()
    end.record()
    torch.cuda.synchronize()
    per_call_ms = max(start.elapsed_time(end) / len(fns), 1e-3)
    calls = len(fns) * max(1, math.ceil(target_ms / per_call_ms / len(fns)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    graph.replay()  # warm
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def copy_bandwidth(*, nbytes: int = 512 * 2**20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = bench_us([lambda: dst.copy_(src)], target_ms=50.0, replays=7)
    return nbytes / (us * 1e-6)
