"""Inputs and the output contract of multi-query decode attention, shared by the CPU and GPU tests.

The contract (``mxfuse.attention``): against the float32 reference, every output element is within
``ROW_ATOL`` of the reference *relative to the largest magnitude of its row* (one row = one head of one new
token): ``|out - ref| <= ROW_ATOL * max|ref_row|``, checked per element through ``gpumatrix.compare``, so a
single wrong row, head, split or key block fails, and NaN never passes. The kernel rounds P to bf16 before
the second dot and rounds the output to bf16 (each 2^-9 relative); 1e-2 leaves a margin of about 5x over
what those roundings reach on the random data below, and a dropped or doubled key tile moves a row by far
more (the tests that break the kernel on purpose show by how much).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpumatrix.compare import assert_close

__all__ = ["ROW_ATOL", "MqaInputs", "assert_attention_matches", "make_mqa_inputs", "row_normalised"]

ROW_ATOL = 1e-2


@dataclass
class MqaInputs:
    q: torch.Tensor  # [T, H, D] bf16
    kv: torch.Tensor  # [B, capacity, D] bf16
    lens: torch.Tensor  # [B] int64
    scale: float

    @property
    def new_tokens(self) -> int:
        return self.q.shape[0] // self.kv.shape[0]


def make_mqa_inputs(
    lens: list[int],
    *,
    new_tokens: int,
    heads: int,
    head_dim: int,
    capacity: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    poison_unused: float | None = float("nan"),
    q_scale: float = 1.0,
) -> MqaInputs:
    """Random q and cache (N(0, 1), q times ``q_scale``) for sequences holding ``lens`` tokens before
    ``new_tokens`` new ones each; every cache position past ``lens[b] + new_tokens`` holds
    ``poison_unused`` (NaN by default), which no output may see."""
    sequences = len(lens)
    capacity = capacity if capacity is not None else max(lens) + new_tokens + 3
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = (torch.randn(sequences * new_tokens, heads, head_dim, generator=g) * q_scale).to(torch.bfloat16)
    kv = torch.randn(sequences, capacity, head_dim, generator=g).to(torch.bfloat16)
    if poison_unused is not None:
        for b, held in enumerate(lens):
            kv[b, held + new_tokens :] = poison_unused
    return MqaInputs(
        q=q.to(device),
        kv=kv.to(device),
        lens=torch.tensor(lens, dtype=torch.int64, device=device),
        scale=head_dim**-0.5,
    )


def row_normalised(out: torch.Tensor, ref: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Both outputs as float64 [T * H, D] divided by each reference row's largest magnitude."""
    a = out.double().reshape(-1, out.shape[1] // heads)
    e = ref.double().reshape(-1, ref.shape[1] // heads)
    norm = e.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    return a / norm, e / norm


def assert_attention_matches(
    out: torch.Tensor, ref: torch.Tensor, *, heads: int, name: str = "attention"
) -> None:
    """Per element within ROW_ATOL of its reference row's largest magnitude (module docstring)."""
    if out.shape != ref.shape or out.dtype != torch.bfloat16:
        raise AssertionError(f"{name}: got {out.dtype} {tuple(out.shape)}, want bf16 {tuple(ref.shape)}")
    a, e = row_normalised(out, ref, heads)
    assert_close(a, e, rtol=0.0, atol=ROW_ATOL, name=f"{name} (per row, relative to the row's max)")
