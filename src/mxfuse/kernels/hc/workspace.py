"""The boundary kernels' workspace on the host: counters, partial records, the collapse buffer and its
partial sums of squares, per device, grown on demand and never freed."""

from __future__ import annotations

import torch

from mxfuse import MxfuseError
from mxfuse.kernels.hc.config import HcConfig, default_config
from mxfuse.kernels.hc.plan import Plan

__all__ = ["HcWorkspace", "sm_count", "workspace_for"]


class HcWorkspace:
    """Counters, partial records, the collapse buffer and its partial sums of squares of the boundary
    kernels on one device.

    Counters start at zero and the kernels leave them at zero. Buffers grow when a call needs more;
    a grown-out buffer is kept alive, because a captured CUDA graph may still point at it. Growing
    during CUDA-graph capture is refused: run the same shape once before capturing, or ``reserve``.
    Two launches running at the same time on different streams need two workspaces.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._counters = torch.zeros(0, dtype=torch.int32, device=self.device)
        self._scratch = torch.empty(0, dtype=torch.float32, device=self.device)
        self._v = torch.empty(0, dtype=torch.bfloat16, device=self.device)
        self._vp = torch.empty(0, dtype=torch.float32, device=self.device)
        self._retired: list[torch.Tensor] = []

    def _grow(self, have: torch.Tensor, need: int, what: str) -> torch.Tensor:
        if have.numel() >= need:
            return have
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise MxfuseError(
                f"the hyper-connection workspace needs {need} elements of {what} and holds {have.numel()}: "
                "it cannot grow during CUDA-graph capture; run the boundary once at this shape before "
                "capturing, or call HcWorkspace.reserve"
            )
        self._retired.append(have)
        size = max(need, 2 * have.numel())
        if have.dtype == torch.int32:
            return torch.zeros(size, dtype=have.dtype, device=self.device)
        return torch.empty(size, dtype=have.dtype, device=self.device)

    def buffers(self, counters: int, scratch: int, v: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views of at least the given numbers of int32 counters, fp32 scratch and bf16 collapse values."""
        self._counters = self._grow(self._counters, max(counters, 1), "counters")
        self._scratch = self._grow(self._scratch, max(scratch, 1), "scratch")
        self._v = self._grow(self._v, max(v, 1), "collapse values")
        return self._counters, self._scratch, self._v

    def partials(self, n: int) -> torch.Tensor:
        """At least ``n`` fp32 partial sums of squares of the collapse (16 columns each)."""
        self._vp = self._grow(self._vp, max(n, 1), "partial sums of squares")
        return self._vp

    def reserve(self, tokens: int, hidden: int, config: HcConfig | None = None) -> None:
        """Grow now to what a boundary of ``tokens`` x ``hidden`` (pair only, either ordering) needs."""
        plan = Plan.make(tokens, hidden, config or default_config(tokens, hidden), phases=(1, 1, 1))
        self.buffers(plan.n_counters, plan.n_scratch, tokens * hidden)
        self.partials(tokens * (hidden // 16))


_WORKSPACES: dict[torch.device, HcWorkspace] = {}


def workspace_for(device: torch.device | str) -> HcWorkspace:
    """The workspace the boundary uses on ``device`` when the caller passes none."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device not in _WORKSPACES:
        _WORKSPACES[device] = HcWorkspace(device)
    return _WORKSPACES[device]


_SM_COUNTS: dict[torch.device, int] = {}


def sm_count(device: torch.device) -> int:
    """Multiprocessors of ``device`` (132 on an H200; what a MIG slice or another GPU has otherwise)."""
    if device.type != "cuda":
        return 132
    if device not in _SM_COUNTS:
        _SM_COUNTS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNTS[device]
