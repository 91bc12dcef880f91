"""Where tensors live in memory: the one check every entry point uses before writing into caller buffers."""

from __future__ import annotations

import torch

__all__ = ["tensors_overlap"]


def tensors_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory ranges two tensors address (first to last element) intersect."""
    if a.numel() == 0 or b.numel() == 0:
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1
