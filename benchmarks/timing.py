"""The one timer of the benchmarks: CUDA-graph replay medians, interleaved variants and the copy ceiling.

Every benchmark here times a variant as one CUDA graph holding many calls (launch gaps shrink to what a
serving engine's decode graph sees), cycling through enough input sets that repeated calls read from
HBM rather than the 60 MB L2, and reports the median of several replays (``bench_us``). A whole step too
big to repeat inside one graph (the decode step: 170-250 MB of weights per path, so every replay is cold
anyway) is captured once (``capture_graph``) and its variants' replays are interleaved
(``interleaved_us``), so drift in clocks and temperature falls on all of them alike.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

import torch

__all__ = [
    "ROTATE_BYTES",
    "bench_us",
    "capture_graph",
    "copy_bandwidth",
    "host_copy_bandwidth",
    "interleaved_us",
    "rotation_count",
]

K = TypeVar("K", bound=Hashable)

ROTATE_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2


def rotation_count(bytes_per_set: int, *, cap: int = 64) -> int:
    """How many input sets of ``bytes_per_set`` make one round of calls stream past the L2."""
    return max(1, min(cap, math.ceil(ROTATE_BYTES / max(bytes_per_set, 1))))


def bench_us(
    fns: list[Callable[[], object]],
    *,
    target_ms: float = 20.0,
    replays: int = 15,
    after: Callable[[], object] | None = None,
) -> float:
    """Median microseconds per call of ``fns`` (called round-robin) replayed from one CUDA graph.
    ``after``: called once after each run of the calls (inside the graph too), e.g. to join side
    streams the calls forked."""
    finish = after or (lambda: None)
    for fn in fns:
        fn()
    finish()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for fn in fns:
        fn()
    finish()
    end.record()
    torch.cuda.synchronize()
    per_call_ms = max(start.elapsed_time(end) / len(fns), 1e-3)
    calls = len(fns) * max(1, math.ceil(target_ms / per_call_ms / len(fns)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
        finish()
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


def capture_graph(step: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """``step`` captured as one CUDA graph, after two calls on a side stream (kernels compile, workspaces
    grow and NCCL sets up outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def interleaved_us(
    calls: Mapping[K, Callable[[], object]], count: int, *, cuda: bool = True
) -> dict[K, list[float]]:
    """Microseconds of ``count`` calls of each of ``calls``, after one warm-up call each.

    The calls are interleaved, round ``i`` starting at the ``i``-th entry (an order every rank of a
    distributed run repeats exactly). On the GPU each call is timed with CUDA events, read after the last;
    with ``cuda=False`` (a dry run on the CPU) by the host clock.
    """
    for call in calls.values():
        call()
    if cuda:
        torch.cuda.synchronize()
    order = list(calls)
    marks: dict[K, list] = {name: [] for name in order}
    for i in range(count):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                calls[name]()
                end.record()
                marks[name].append((start, end))
            else:
                start_s = time.perf_counter()
                calls[name]()
                marks[name].append((time.perf_counter() - start_s) * 1e6)
    if not cuda:
        return marks
    torch.cuda.synchronize()
    return {name: [s.elapsed_time(e) * 1e3 for s, e in ev] for name, ev in marks.items()}


def host_copy_bandwidth(*, nbytes: int = 64 * 2**20) -> float:
    """Host copy bandwidth in bytes/s (read + written), median of five copies: the dry runs' floors."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8).random_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times)
