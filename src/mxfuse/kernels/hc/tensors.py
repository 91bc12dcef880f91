"""The tensors of a hyper-connection boundary, grouped as they travel: what enters it (``HcInputs``), the
next sublayer's weights (``HcWeights``) and what it writes (``HcBoundaryOutputs``). Public as
``mxfuse.hc.HcInputs``, ``mxfuse.hc.HcWeights`` and ``mxfuse.hc.HcBoundaryOutputs``; checked by
``mxfuse.hc.mhc_boundary``, which is where their shapes and dtypes are spelled out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxfuse.formats import MxTensor
from mxfuse.kernels.hc.params import HcProjection

__all__ = ["HcBoundaryOutputs", "HcInputs", "HcWeights"]


@dataclass(frozen=True, eq=False)  # tensors: identity, not elementwise ==
class HcInputs:
    """What enters a boundary, T tokens: ``x`` [T, H] bf16 (the finished sublayer's output),
    ``residual`` [T, n, H] bf16 (the streams), ``post`` [T, n] and ``comb`` [T, n, n] fp32 (that
    sublayer's coefficients) and ``prev_pre`` [T, n] fp32, the previous boundary's pre, which the
    collapse takes in V4.1's shifted ordering (None: the normal ordering, V4)."""

    x: torch.Tensor
    residual: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    prev_pre: torch.Tensor | None = None

    @property
    def tokens(self) -> int:
        return self.x.shape[0]

    def copy_(self, other: HcInputs) -> None:
        """Copy ``other``'s values into these tensors (static CUDA-graph inputs)."""
        for name in ("x", "residual", "post", "comb", "prev_pre"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if (mine is None) != (theirs is None):
                raise ValueError(f"{name}: one state has it and the other does not")
            if mine is not None:
                mine.copy_(theirs)

    def clone(self) -> HcInputs:
        return HcInputs(
            *(
                None if t is None else t.clone()
                for t in (self.x, self.residual, self.post, self.comb, self.prev_pre)
            )
        )


@dataclass(frozen=True, eq=False)
class HcWeights:
    """The next sublayer's hyper-connection weights: ``fn`` [n(n+2), n*H] fp32, or an ``HcProjection``
    (prepared once: its bf16 pieces feed the tensor-core mixes, the same bits out), ``scale`` [3] and
    ``base`` [n(n+2)] fp32 (the mixes), and ``norm_weight`` [H] bf16 or fp32 (its RMSNorm)."""

    fn: torch.Tensor | HcProjection
    scale: torch.Tensor
    base: torch.Tensor
    norm_weight: torch.Tensor

    @property
    def fn_weight(self) -> torch.Tensor:
        """``fn`` as the fp32 tensor."""
        return self.fn.weight if isinstance(self.fn, HcProjection) else self.fn

    @property
    def fn_pieces(self) -> torch.Tensor | None:
        """The bf16 pieces of ``fn`` when it is an ``HcProjection``, else None."""
        return self.fn.pieces if isinstance(self.fn, HcProjection) else None


@dataclass(frozen=True, eq=False)
class HcBoundaryOutputs:
    """What a boundary writes: R' [T, n, H] bf16, pre / post' [T, n] fp32, comb' [T, n, n] fp32, and
    y [T, H] bf16 and/or the next GEMM's input ``pair``, an ``[T, H]`` MxTensor (None when not wanted)."""

    residual: torch.Tensor
    pre: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    y: torch.Tensor | None = None
    pair: MxTensor | None = None
