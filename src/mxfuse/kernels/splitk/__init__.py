"""Deterministic split-K without float atomics: the host side (how many splits, the cached workspace).

The device side (arrival tickets, the sum in split order, the counter reset) is
``mxfuse.kernels.splitk.device``, whose docstring gives the protocol.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["SplitWorkspace", "split_for", "split_workspace"]


class SplitWorkspace(NamedTuple):
    """fp32 ``partials`` of the splits and int32 arrival ``counters``, zero between launches."""

    partials: torch.Tensor
    counters: torch.Tensor


def split_for(tiles: int, steps: int, *, target: int, most: int = 16) -> int:
    """The smallest power-of-two split (<= ``most``) giving ``target`` programs, keeping >= 2 steps each."""
    split = 1
    while tiles * split < target and split < most and steps // (split * 2) >= 2:
        split *= 2
    return split


# Split-K partials and arrival counters, per (device, size). Never freed: a CUDA graph captured against
# one keeps reading it, and every launch leaves its counters at zero.
_WORKSPACES: dict[tuple[torch.device, int, int], SplitWorkspace] = {}


def split_workspace(device: torch.device, partial_numel: int, tiles: int) -> SplitWorkspace:
    """fp32 scratch of ``partial_numel`` and ``tiles`` zeroed int32 counters on ``device``, cached by size.

    Launches that share one must be ordered on one stream (the counters are taken and reset in place).
    """
    key = (device, partial_numel, tiles)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = SplitWorkspace(
            torch.empty(max(partial_numel, 1), dtype=torch.float32, device=device),
            torch.zeros(max(tiles, 1), dtype=torch.int32, device=device),
        )
    return _WORKSPACES[key]
