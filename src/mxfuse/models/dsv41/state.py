"""What one decode step reads and writes: the hyper-connection state, the KV cache, the step's outputs.

A serving engine carries between sublayers the previous sublayer's output ``x``, the residual streams
and that sublayer's coefficients (post, comb) plus, in V4.1's shifted ordering, the pre-mix the next
collapse uses. ``random_state`` and ``random_kv_cache`` make inputs of realistic magnitude (for tests,
benchmarks and CUDA-graph warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxfuse.formats import MxTensor
from mxfuse.hc import N_STREAMS, HcInputs, hc_sinkhorn
from mxfuse.models.dsv41.config import Dsv41Config

__all__ = ["HcState", "KvCache", "StepOutputs", "random_kv_cache", "random_state"]


# The hyper-connection state entering the attention sublayer's boundary, T tokens: ``x`` [T, H] bf16 (the
# previous sublayer's output, the FFN of the layer before), ``residual`` [T, 4, H] bf16, ``post`` [T, 4] and
# ``comb`` [T, 4, 4] fp32 (that sublayer's coefficients) and ``prev_pre`` [T, 4] fp32, the pre-mix its
# boundary produced, which this boundary's collapse uses: what ``mxfuse.hc.mhc_boundary`` takes.
HcState = HcInputs


@dataclass(frozen=True)
class KvCache:
    """The shared (multi-query) KV cache of B sequences: ``kv`` [B, capacity, head_dim] bf16 and ``lens``
    [B] int32/int64, the tokens each sequence holds before this step.

    A step of T = B * S tokens (S new tokens per sequence: 1 for decode, a few for target-verify) writes
    the new tokens' KV at positions ``lens[b] .. lens[b] + S - 1`` and attends to positions
    ``<= lens[b] + s`` (causal within the new tokens). It does not advance ``lens``: the engine does.
    """

    kv: torch.Tensor
    lens: torch.Tensor

    @property
    def sequences(self) -> int:
        return self.kv.shape[0]

    @property
    def capacity(self) -> int:
        return self.kv.shape[1]

    def clone(self) -> KvCache:
        return KvCache(self.kv.clone(), self.lens.clone())


@dataclass(frozen=True)
class StepOutputs:
    """What the sublayer returns, T tokens.

    ``attn_out`` [T, H] bf16: wo_b's output (the attention sublayer's contribution); ``residual``
    [T, 4, H], ``pre`` / ``post`` [T, 4], ``comb`` [T, 4, 4]: the final boundary's outputs (``pre`` is
    what the next boundary's collapse uses); ``y`` [T, H] bf16: the FFN's normed input; ``pair``: its
    MXFP8 pair when the sublayer was asked for one (``next_pair_layout``), else None.
    """

    attn_out: torch.Tensor
    residual: torch.Tensor
    pre: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    y: torch.Tensor
    pair: MxTensor | None


def random_state(
    config: Dsv41Config, tokens: int, *, seed: int, device: torch.device | str = "cpu"
) -> HcState:
    """A state of realistic magnitude: x and the streams ~ N(0, 1), post = 2 sigmoid(N), comb a Sinkhorn
    projection of N(0, 1) logits (the boundary's own), prev_pre = sigmoid(N) + 1e-6."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    n, h = N_STREAMS, config.hidden

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g)

    _, _, comb = hc_sinkhorn(randn(tokens, n * (n + 2)), params=config.hc_params)
    state = HcState(
        x=randn(tokens, h).to(torch.bfloat16),
        residual=randn(tokens, n, h).to(torch.bfloat16),
        post=2.0 * torch.sigmoid(randn(tokens, n)),
        comb=comb.contiguous(),
        prev_pre=torch.sigmoid(randn(tokens, n)) + config.hc_eps,
    )
    return HcState(*(t.to(device) for t in (state.x, state.residual, state.post, state.comb, state.prev_pre)))


def random_kv_cache(
    config: Dsv41Config,
    *,
    sequences: int,
    capacity: int,
    lens: list[int] | torch.Tensor,
    seed: int,
    device: torch.device | str = "cpu",
) -> KvCache:
    """A cache of ``sequences`` x ``capacity`` tokens holding N(0, 1) KV (what kv_norm gives), lens as
    given. The values are drawn on ``device``, so one seed gives other values on another device."""
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(seed)  # drawn where it lives: 0.5 GB at T = 128, 4096
    kv = torch.randn((sequences, capacity, config.head_dim), generator=g, device=device).to(torch.bfloat16)
    return KvCache(kv, torch.as_tensor(lens, dtype=torch.int64).to(device))
