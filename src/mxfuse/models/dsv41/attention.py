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

from mxfuse.attention import mqa_decode_attention
from mxfuse.formats import MxTensor, ScaleLayout, ScaleRounding
from mxfuse.kernels.norm import rms_norm_into_cache, rms_norm_rows, rms_norm_rows_and_cache
from mxfuse.models.dsv41.state import KvCache
from mxfuse.norm import rms_norm_reference

__all__ = ["mqa_attention", "norm_q_and_cache_kv", "rms_norm"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> torch.Tensor:
    """``bf16(x * rsqrt(mean(x^2) + eps) * weight)`` over the last dim, fp32 math (V4 ``RMSNorm``). On
    CUDA one launch (``mxfuse.kernels.norm``, whose sum of squares may round differently in the last
    bit); elsewhere the torch formula (``mxfuse.norm.rms_norm_reference``)."""
    if x.device.type == "cuda":
        return rms_norm_rows(x, weight, eps=eps)
    return rms_norm_reference(x, weight, eps=eps)


def norm_q_and_cache_kv(
    q: torch.Tensor, kv: torch.Tensor, cache: KvCache, *, kv_weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """Each head of ``q`` [T, heads, D] RMS-normalised without a weight (returned), and ``kv_norm(kv)``
    ([T, D], weight ``kv_weight``) written into ``cache`` at the new positions: on CUDA one launch
    (``rms_norm_rows_and_cache``, the bits of the two launches ``rms_norm`` and the cache write), elsewhere
    ``rms_norm`` and ``index_put_``. ``mqa_attention(q, None, cache, ...)`` then attends."""
    if kv.device.type == "cuda":
        return rms_norm_rows_and_cache(
            q, None, eps=eps, kv_x=kv, kv_weight=kv_weight, kv=cache.kv, lens=cache.lens
        )
    _write_cache(kv, cache, kv_weight=kv_weight, eps=eps)
    return rms_norm(q, None, eps=eps)


def _write_cache(kv: torch.Tensor, cache: KvCache, *, kv_weight: torch.Tensor, eps: float) -> None:
    if kv.device.type == "cuda":
        rms_norm_into_cache(kv, kv_weight, eps=eps, kv=cache.kv, lens=cache.lens)
        return
    b = cache.sequences
    s = kv.shape[0] // b
    pos = cache.lens.to(torch.int64)[:, None] + torch.arange(s, device=kv.device)  # [B, S]
    rows = torch.arange(b, device=kv.device)[:, None].expand(b, s)
    cache.kv.index_put_((rows, pos), rms_norm(kv, kv_weight, eps=eps).view(b, s, kv.shape[1]))


def mqa_attention(
    q: torch.Tensor,
    kv: torch.Tensor | None,
    cache: KvCache,
    *,
    scale: float,
    kv_weight: torch.Tensor,
    eps: float,
    out_pair: MxTensor | None = None,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
) -> torch.Tensor | MxTensor:
    """Write ``kv_norm(kv)`` ([T, D], weight ``kv_weight``) into ``cache`` and attend: ``q`` [T, heads, D]
    bf16 -> [T, heads * D] bf16, or with ``out_pair`` (an MxTensor with deepgemm scales) its MXFP8 form
    (``rounding``), which the attention's combine writes: wo_a's input on the fused path. ``kv`` None:
    the new rows are already in the cache (``norm_q_and_cache_kv``).

    Tokens are sequence-major: token ``b * S + s`` is new token ``s`` of sequence ``b`` (S = T / B). On
    CUDA the norm writes the cache rows itself (``rms_norm_into_cache``: one launch, the same bits as
    ``rms_norm`` then a copy); elsewhere ``rms_norm`` then ``index_put_``. The attention is
    ``mxfuse.attention.mqa_decode_attention``: the split-KV kernel on CUDA, the float32 reference
    elsewhere. No host synchronisation (lengths are not read back) and static shapes, so one decode step
    can be captured in a CUDA graph and replayed with new lengths.
    """
    if kv is not None:
        _write_cache(kv, cache, kv_weight=kv_weight, eps=eps)
    if out_pair is None:
        return mqa_decode_attention(q, cache.kv, cache.lens, scale=scale, check_lens=False)
    return mqa_decode_attention(
        q,
        cache.kv,
        cache.lens,
        scale=scale,
        check_lens=False,
        out_pair=out_pair,
        out_scale_layout=ScaleLayout.DEEPGEMM,
        rounding=rounding,
    )
