"""A side stream for the boundary's Sinkhorn items (host code).

In the shifted ordering (V4.1) the boundary's y and pair need only the collapse with the previous
boundary's ``pre`` and the norm; the new coefficients (``pre``, ``post'`` and ``comb'``: the records
summed into the logits, then Sinkhorn) are read only by the next boundary. A boundary given an
``HcSideStream`` therefore launches its Sinkhorn items as a launch of their own on the side stream,
forked after the A items (after the first of two launches, or after the one launch of the A and finish
items), while the finish, which the next GEMM waits for, holds only the finish items:
the Sinkhorn items' dependent chain (about 20 iterations on 4 x 4, after the records' exact sum) leaves
the path to y. The coefficients are ready on the current stream once ``join`` has run, which the next
boundary given the same side stream does before it touches anything; a CUDA graph capture must join
before it ends (the caller's step does, as it does for its L2 prefetches).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["HcSideStream"]


class HcSideStream:
    """A side stream of ``device`` for the boundary's Sinkhorn items (see the module docstring).

    ``enabled`` False: a boundary given it launches as if given none. On a CPU device (the Triton
    interpreter) there is no stream: the Sinkhorn launch runs in place after the A items, which gives
    the three launches' bits in order. ``join`` makes the current stream wait for the last fork (nothing
    when none is outstanding). The side launch reads the A items' records in the boundary's workspace
    and writes ``pre``, ``post'`` and ``comb'``: every later use of them, and every later boundary
    sharing the workspace, must come after ``join``.
    """

    def __init__(self, device: torch.device | str, *, enabled: bool = True) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool; got {type(enabled).__name__}")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.enabled = enabled
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._forked = False

    @property
    def pending(self) -> bool:
        """True while a fork has not been joined."""
        return self._forked

    @contextmanager
    def fork(self) -> Iterator[None]:
        """Launches inside run on the side stream, after the work queued so far on the current stream
        (on a CPU device, in place)."""
        if self._stream is None:
            yield
            return
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            yield
        self._forked = True

    def join(self) -> None:
        """Make the current stream wait for the side stream's launches since the last join."""
        if self._forked and self._stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
            self._forked = False
