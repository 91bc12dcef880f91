"""The grouped wo_a's prepared weight: G groups of E4M3 ``[R, r]`` with per-row E8M0 scales and the
split-K tickets the kernel takes (made by ``mxfuse.einsum.prepare_wo_a_weight``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxfuse.formats import BLOCK_SIZE

__all__ = ["TICKETS", "WORD_COLUMNS", "WoAWeight"]

# Split-K arrival counters a prepared weight carries: one per output tile of a split launch.
TICKETS = 4096
# Output columns of one packed scale word: R must be a multiple so groups own whole words.
WORD_COLUMNS = 128


@dataclass(frozen=True)
class WoAWeight:
    """A wo_a weight prepared for ``grouped_wo_a``: G groups of E4M3 ``[R, r]`` with per-row E8M0 scales.

    ``qweight``: float8_e4m3fn ``[G, R, r]``, contiguous. ``scale``: uint8 ``[G, r/32, R]``, contiguous:
    the E8M0 byte of row d and K block j of group g at ``[g, j, d]`` (K-block-major, so the kernel's
    tile of scales is contiguous bytes); ``scale_e8m0`` is the same storage viewed ``[G, R, r/32]``.
    ``tickets``: int32 ``[TICKETS]``, zero between calls: the split-K arrival counters the kernel takes
    and resets, so calls that share one weight must be ordered on one stream. The tensors are plain
    storage: reloading copies into them in place, and CUDA graphs captured against them see the values.

    ``in_window``: every 32-block with nonzero codes has its scale byte in ``[W_LO, W_HI]`` or 0xFF, so
    that its bf16 conversion is exact: what the Gluon kernel (``gluon_device``) needs of a weight.
    ``window_reason`` says why or why not. ``prepare_wo_a_weight`` reads the weight once to set both; a
    reload in place must keep that true (or prepare the weight again).
    """

    qweight: torch.Tensor
    scale: torch.Tensor
    tickets: torch.Tensor
    in_window: bool = False
    window_reason: str = "not checked (prepare_wo_a_weight checks it)"

    def __post_init__(self) -> None:
        q, s, t = self.qweight, self.scale, self.tickets
        for name, value in (("qweight", q), ("scale", s), ("tickets", t)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
        if q.dtype != torch.float8_e4m3fn or q.dim() != 3 or not q.is_contiguous():
            raise ValueError(
                f"qweight must be a contiguous float8_e4m3fn tensor [G, R, r]; got {q.dtype} {tuple(q.shape)}"
            )
        g, n, k = q.shape
        if n == 0 or n % WORD_COLUMNS:
            raise ValueError(
                f"qweight: R (rows per group) must be a positive multiple of {WORD_COLUMNS} so that no "
                f"output scale word straddles two groups; got R = {n}"
            )
        if k == 0 or k % BLOCK_SIZE or g == 0:
            raise ValueError(
                f"qweight: r (columns per group) must be a positive multiple of {BLOCK_SIZE} and G >= 1; "
                f"got G = {g}, r = {k}"
            )
        if s.dtype != torch.uint8 or tuple(s.shape) != (g, k // BLOCK_SIZE, n) or not s.is_contiguous():
            raise ValueError(
                f"scale must be a contiguous uint8 tensor {(g, k // BLOCK_SIZE, n)} ([G, r/32, R]); "
                f"got {s.dtype} {tuple(s.shape)}"
            )
        if t.dtype != torch.int32 or t.dim() != 1 or t.numel() < TICKETS:
            raise ValueError(
                f"tickets must be an int32 tensor of {TICKETS} zeros; got {t.dtype} {tuple(t.shape)}"
            )
        if not isinstance(self.in_window, bool) or not isinstance(self.window_reason, str):
            raise TypeError(
                f"in_window must be a bool and window_reason a str; got {self.in_window!r}, {self.window_reason!r}"
            )
        if s.device != q.device or t.device != q.device:
            raise ValueError(
                f"scale and tickets must be on {q.device} like qweight; got {s.device}, {t.device}"
            )

    @property
    def groups(self) -> int:
        return self.qweight.shape[0]

    @property
    def n(self) -> int:
        """R: outputs per group (o_lora_rank)."""
        return self.qweight.shape[1]

    @property
    def k(self) -> int:
        """r: inputs per group."""
        return self.qweight.shape[2]

    @property
    def device(self) -> torch.device:
        return self.qweight.device

    @property
    def scale_e8m0(self) -> torch.Tensor:
        """uint8 ``[G, R, r/32]`` view of ``scale``: one E8M0 byte per row and 32 K."""
        return self.scale.transpose(1, 2)
