"""The attention core between wq_b and wo_a: norms, multi-query attention over the KV cache.

DeepSeek-V4 attention (``inference/model.py`` ``Attention.forward``) in the parts this sublayer keeps:
``q = wq_b(q_norm(q_lora))``, each head RMS-normalised without a weight; the single KV head is
``kv_norm(kv)`` and serves as both key and value (multi-query, K = V); softmax scale head_dim^-0.5.
Left out, as not what the sublayer is about: RoPE on the last 64 dims (and its inverse on the output),
the attention sink, the sliding window and the compressed/indexed KV. Every path of the sublayer runs
this same code on its inputs, so it never separates fused from unfused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mxfuse.models.dsv41.state import KvCache

__all__ = ["mqa_attention", "rms_norm"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> torch.Tensor:
    """``bf16(x * rsqrt(mean(x^2) + eps) * weight)`` over the last dim, fp32 math (V4 ``RMSNorm``)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(torch.bfloat16)


def mqa_attention(q: torch.Tensor, kv: torch.Tensor, cache: KvCache, *, scale: float) -> torch.Tensor:
    """Write ``kv`` [T, D] into ``cache`` and attend: ``q`` [T, heads, D] bf16 -> [T, heads * D] bf16.

    Tokens are sequence-major: token ``b * S + s`` is new token ``s`` of sequence ``b`` (S = T / B). No
    host synchronisation and static shapes throughout (a boolean mask over the whole capacity), so one
    decode step can be captured in a CUDA graph. The heads are folded into the query length of one
    attention head: with a single KV head that is exactly multi-query attention.
    """
    tokens, heads, dim = q.shape
    b, capacity, _ = cache.kv.shape
    s = tokens // b
    device = q.device
    pos = cache.lens.to(torch.int64)[:, None] + torch.arange(s, device=device)  # [B, S]
    rows = torch.arange(b, device=device)[:, None].expand(b, s)
    cache.kv.index_put_((rows, pos), kv.view(b, s, dim))
    visible = torch.arange(capacity, device=device) <= pos[:, :, None]  # [B, S, capacity]
    mask = visible[:, :, None, :].expand(b, s, heads, capacity).reshape(b, 1, s * heads, capacity)
    keys = cache.kv.unsqueeze(1)  # [B, 1, capacity, D], also the values
    o = F.scaled_dot_product_attention(
        q.reshape(b, 1, s * heads, dim), keys, keys, attn_mask=mask, scale=scale
    )
    return o.reshape(tokens, heads * dim)
