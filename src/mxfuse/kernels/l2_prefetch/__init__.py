"""Prefetch weights into the L2 cache on a side stream while latency-bound kernels run.

At decode sizes a step alternates between kernels that stream weights from HBM (the GEMMs: bandwidth-bound)
and kernels that barely touch memory (the hyper-connection boundary, the attention at a few tokens, the
norms: latency-bound, HBM idle). ``L2Prefetcher.fork(tensors)`` starts a prefetch of the next GEMMs'
weights on a side stream that waits for everything queued so far on the current stream; the kernels after
the fork run unchanged, and the GEMMs later find (part of) their weights in L2. The bytes a step reads
from HBM do not change; the weight stream overlaps the latency-bound kernels instead of following them.
Measured in the V4.1 decode step on an H200 it made the step 6-10 us slower at T = 1-16 (likely because
the latency-bound kernels' own loads queue behind the requests; not traced: benchmarks/RESULTS.md), so the
sublayer leaves it off by default.

The prefetch is a hint: ``cp.async.bulk.prefetch.L2`` (sm_90, one instruction per ``chunk`` bytes,
``mode="bulk"``) or ``prefetch.global.L2`` per 128-byte line (``mode="line"``, ``"line_last"`` with the
``evict_last`` priority). It writes nothing, so results are the same bits with or without it. Each fork
requests at most ``fraction`` of the device's L2 in the order the tensors are given (a tensor's first
bytes first), so one group does not evict itself. On the CPU, or on a GPU before sm_90, nothing is launched.
Under CUDA graph capture the fork and ``join()`` are captured as graph edges; ``join()`` must run before
the capture ends (the sublayer joins at the end of its step).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton

from mxfuse.kernels.l2_prefetch.device import prefetch_l2_kernel

__all__ = ["MODES", "L2Prefetcher", "launch_prefetch_l2"]

MODES = ("bulk", "line", "line_last")

_MODE_CODE = {"bulk": 0, "line": 1, "line_last": 2}

_LINE = 128


def _check_mode(mode: object) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    return mode  # type: ignore[return-value]


def _check_chunk(chunk: object) -> int:
    if (
        isinstance(chunk, bool)
        or not isinstance(chunk, int)
        or chunk < 16
        or chunk % 16
        or chunk & (chunk - 1)
    ):
        raise ValueError(f"chunk must be a power of two >= 16 (bytes per bulk request); got {chunk!r}")
    return chunk


def launch_prefetch_l2(tensor: torch.Tensor, nbytes: int, *, mode: str = "bulk", chunk: int = 16384) -> None:
    """Request the first ``nbytes`` of ``tensor``'s storage (a contiguous tensor) into L2 on the current
    stream. No checks of the device's capability: ``L2Prefetcher`` decides where it runs."""
    code = _MODE_CODE[_check_mode(mode)]
    step = _check_chunk(chunk) if code == 0 else _LINE
    per_program = 32 if code == 0 else 1024
    if nbytes <= 0:
        return
    flat = tensor.reshape(-1).view(torch.uint8)
    grid = (triton.cdiv(triton.cdiv(nbytes, step), per_program),)
    prefetch_l2_kernel[grid](flat, nbytes, CHUNK=step, PER_PROGRAM=per_program, MODE=code,
                              num_warps=1 if code == 0 else 4)  # fmt: skip


class L2Prefetcher:
    """Fork weight prefetches onto a side stream of ``device`` (see the module docstring).

    ``fraction``: the share of L2 one fork may request (0 < fraction <= 1) of ``l2_bytes`` (None: the
    device's L2 size; 0 on the CPU). ``mode`` and ``chunk``: how (``MODES``) and, in bulk mode, how many
    bytes per request. ``enabled`` False, a CPU device or a GPU before sm_90: ``fork`` and ``join`` launch
    nothing (``plan`` still says what a fork would request).
    """

    def __init__(
        self,
        device: torch.device | str,
        *,
        fraction: float = 0.75,
        mode: str = "bulk",
        chunk: int = 16384,
        enabled: bool = True,
        l2_bytes: int | None = None,
    ) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool; got {type(enabled).__name__}")
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise ValueError(f"fraction must be a number in (0, 1]; got {fraction!r}")
        if l2_bytes is not None and (
            isinstance(l2_bytes, bool) or not isinstance(l2_bytes, int) or l2_bytes < 0
        ):
            raise ValueError(f"l2_bytes must be an int >= 0 or None (the device's L2); got {l2_bytes!r}")
        self.mode = _check_mode(mode)
        self.chunk = _check_chunk(chunk)
        self.fraction = float(fraction)
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.enabled = enabled
        self._stream: torch.cuda.Stream | None = None
        self._forked = False
        l2 = 0
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            l2 = int(props.L2_cache_size)
            if props.major >= 9:
                self._stream = torch.cuda.Stream(device)
        self.l2_bytes = l2 if l2_bytes is None else l2_bytes

    @property
    def active(self) -> bool:
        """True when forks launch prefetches (enabled, on a CUDA device of sm_90 or later)."""
        return self.enabled and self._stream is not None

    @property
    def budget(self) -> int:
        """Bytes one fork may request: ``fraction`` of ``l2_bytes`` (0 when not enabled)."""
        return int(self.fraction * self.l2_bytes) if self.enabled else 0

    def plan(self, tensors: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
        """(tensor, bytes) a fork of ``tensors`` requests: each tensor's first bytes, in order, until the
        budget is spent. TypeError/ValueError for an entry that is not a contiguous tensor on this device."""
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"tensors[{i}] must be a torch.Tensor; got {type(t).__name__}")
            if not t.is_contiguous():
                raise ValueError(f"tensors[{i}] must be contiguous; got strides {tuple(t.stride())}")
            if t.device != self.device:
                raise ValueError(
                    f"tensors[{i}] must be on the prefetcher's device {self.device}; got {t.device}"
                )
        left = self.budget
        out: list[tuple[torch.Tensor, int]] = []
        for t in tensors:
            n = min(t.numel() * t.element_size(), left)
            if n <= 0:
                break
            out.append((t, n))
            left -= n
        return out

    def fork(self, tensors: Sequence[torch.Tensor]) -> int:
        """Prefetch ``tensors`` (see ``plan``) on the side stream after the work queued so far on the
        current stream; returns the bytes requested (0 when not active)."""
        planned = self.plan(tensors)
        side = self._stream
        if not self.enabled or side is None or not planned:
            return 0
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for t, n in planned:
                launch_prefetch_l2(t, n, mode=self.mode, chunk=self.chunk)
        self._forked = True
        return sum(n for _, n in planned)

    def join(self) -> None:
        """Make the current stream wait for the side stream's prefetch launches (required before a CUDA
        graph capture ends); nothing when no fork is outstanding."""
        if self._forked and self._stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
            self._forked = False
