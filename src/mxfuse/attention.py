"""Multi-query decode attention over a KV cache whose one vector per token is both key and value (K = V).

DeepSeek-V4-family attention keeps one shared KV head of ``head_dim`` (512) per token. A decode step (or a
target-verify step of a few tokens) attends from every head of the S new tokens of each sequence to that
sequence's cached tokens:

* ``q`` [T, H, D] bf16, T = B * S, sequence-major: token ``b * S + s`` is new token s of sequence b;
* ``kv`` [B, capacity, D] bf16, the cache, already holding the new tokens at ``lens[b] .. lens[b] + S - 1``;
* ``lens`` [B] int32/int64 on the cache's device: the tokens sequence b held *before* its S new ones.

New token s of sequence b attends to cache positions ``0 .. lens[b] + s`` (causal among the new tokens):
``out[b*S + s, h] = softmax(scale * q[b*S + s, h] @ kv[b, :n]^T) @ kv[b, :n]`` with ``n = lens[b] + s + 1``,
returned as [T, H * D] bf16. ``lens[b] = 0`` is a sequence with no earlier tokens: its first new token
attends to itself alone. Positions at or past ``lens[b] + S`` are never read, whatever they hold.

``mqa_decode_attention`` runs the split-KV Triton kernel (``mxfuse.kernels.attention``) on CUDA devices
with bf16 tensor-core dots (sm_80+) and ``mqa_decode_attention_reference`` (float32 torch) elsewhere; each
call emits a witness record, ``attention.kernel`` or ``attention.reference``, with the reason. The kernel
reads ``lens`` on the device: no host synchronisation, static shapes, so a CUDA graph captured once
replays with new lengths. Numerics: fp32 scores and softmax state, P rounded to bf16 for the second dot
(as FlashAttention does), partials merged in fp32 in split order: the same bits on every run.

As a producer, ``mqa_decode_attention(out_pair=...)`` also (or instead) writes the next GEMM's input, an
``MxTensor``:
the combine kernel quantizes the bf16 output it computes, bit for bit ``quantize_mxfp8`` of it (the V4.1
decode step's fused path feeds wo_a this way).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from mxfuse import MxfuseError, witness
from mxfuse.formats import (
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    mxtensor_out,
    parse_scale_layout,
    parse_scale_rounding,
)
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.attention import MqaConfig, choose_mqa_config, launch_mqa_decode, mqa_partials_numel
from mxfuse.memory import tensors_overlap

__all__ = [
    "MAX_HEAD_DIM",
    "MqaConfig",
    "mqa_decode_attention",
    "mqa_decode_attention_reference",
]

MAX_HEAD_DIM = 512  # the accumulator of 64 heads x 512 dims is what one program holds in registers
_MIN_HEAD_DIM = 16  # one MMA tile along the dot's K
_KERNEL_CAPABILITY = (8, 0)  # bf16 tensor-core dots


def _check_inputs(q: object, kv: object, lens: object, scale: object) -> tuple[int, int, int, int, int]:
    """(T, H, D, B, S) after checking every argument; raises ValueError/TypeError naming the argument."""
    for name, value in (("q", q), ("kv", kv), ("lens", lens)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    if q.dtype != torch.bfloat16 or q.dim() != 3:
        raise ValueError(
            f"q must be a bf16 tensor [T, heads, head_dim]; got {q.dtype} of shape {tuple(q.shape)}"
        )
    if kv.dtype != torch.bfloat16 or kv.dim() != 3:
        raise ValueError(
            f"kv must be a bf16 cache [sequences, capacity, head_dim]; got {kv.dtype} of shape {tuple(kv.shape)}"
        )
    tokens, heads, dim = q.shape
    sequences, capacity, kv_dim = kv.shape
    if kv_dim != dim:
        raise ValueError(f"kv's head_dim must equal q's ({dim}); got kv of shape {tuple(kv.shape)}")
    if not _MIN_HEAD_DIM <= dim <= MAX_HEAD_DIM:
        raise ValueError(f"q's head_dim must be in [{_MIN_HEAD_DIM}, {MAX_HEAD_DIM}]; got {dim}")
    if heads < 1:
        raise ValueError(f"q must have at least one head; got shape {tuple(q.shape)}")
    if sequences < 1:
        raise ValueError(f"kv must hold at least one sequence; got shape {tuple(kv.shape)}")
    if tokens % sequences:
        raise ValueError(
            f"q's token count ({tokens}) must be a multiple of kv's sequence count ({sequences}): "
            "S new tokens per sequence, sequence-major"
        )
    new = tokens // sequences
    if new > capacity:
        raise ValueError(f"kv's capacity ({capacity}) must hold the {new} new tokens of each sequence")
    if q.stride(2) != 1 or kv.stride(2) != 1:
        raise ValueError("q and kv must have unit stride along head_dim")
    if lens.dtype not in (torch.int32, torch.int64) or tuple(lens.shape) != (sequences,):
        raise ValueError(
            f"lens must be an int32 or int64 tensor of shape ({sequences},); got {lens.dtype} of shape "
            f"{tuple(lens.shape)}"
        )
    if q.device != kv.device:
        raise ValueError(f"q and kv must be on one device; got q on {q.device}, kv on {kv.device}")
    if lens.device != kv.device:
        raise ValueError(f"lens must be on kv's device ({kv.device}); got {lens.device}")
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(f"scale must be a finite positive number; got {scale!r}")
    return tokens, heads, dim, sequences, new


def _check_lens_values(lens: torch.Tensor, new: int, capacity: int) -> None:
    values = lens.detach().to("cpu", torch.int64)
    bad = ((values < 0) | (values + new > capacity)).nonzero().flatten().tolist()
    if bad:
        b = bad[0]
        raise ValueError(
            f"lens must satisfy 0 <= lens[b] and lens[b] + S <= capacity (S = {new}, capacity = {capacity}); "
            f"lens[{b}] = {int(values[b])}"
        )


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _check_out(
    out: object, tokens: int, width: int, device: torch.device, inputs: tuple[torch.Tensor, ...]
) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None; got {type(out).__name__}")
    if out.dtype != torch.bfloat16 or tuple(out.shape) != (tokens, width):
        raise ValueError(
            f"out must be bf16 of shape ({tokens}, {width}); got {out.dtype} of shape {tuple(out.shape)}"
        )
    if out.device != device:
        raise ValueError(f"out must be on the inputs' device ({device}); got {out.device}")
    if width and out.stride(1) != 1:
        raise ValueError("out must have unit stride along its last dim")
    if any(tensors_overlap(out, t) for t in inputs):
        raise ValueError("out must not overlap q, kv or lens")


@contextmanager
def _exact_fp32_matmul() -> Iterator[None]:
    """fp32 matmuls without TF32 inside the block, the caller's settings restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def mqa_decode_attention_reference(
    q: torch.Tensor, kv: torch.Tensor, lens: torch.Tensor, *, scale: float
) -> torch.Tensor:
    """The module docstring's formula in float32 torch, on any device; [T, H * D] bf16.

    Cache positions a sequence does not hold are zeroed before use, so what they contain reaches no
    output. ``lens`` is read on the host (a synchronisation on CUDA).
    """
    tokens, heads, dim, sequences, new = _check_inputs(q, kv, lens, scale)
    _check_lens_values(lens, new, kv.shape[1])
    if tokens == 0:
        return torch.empty(0, heads * dim, dtype=torch.bfloat16, device=q.device)
    held = lens.to(torch.int64)
    pos = torch.arange(kv.shape[1], device=kv.device)
    held_keys = pos[None, :] < (held + new)[:, None]  # [B, capacity]
    keys = torch.where(held_keys[:, :, None], kv.float(), 0.0)
    visible = (
        pos[None, None, :] <= (held[:, None] + torch.arange(new, device=kv.device))[:, :, None]
    )  # [B, S, cap]
    with _exact_fp32_matmul():
        scores = torch.einsum("bshd,bnd->bshn", q.float().view(sequences, new, heads, dim), keys) * float(
            scale
        )
        scores = scores.masked_fill(~visible[:, :, None, :], float("-inf"))
        out = torch.einsum("bshn,bnd->bshd", torch.softmax(scores, dim=-1), keys)
    return out.reshape(tokens, heads * dim).to(torch.bfloat16)


# Partials of the split kernel, per device. They grow when a call needs more and are never freed: a CUDA
# graph captured against a buffer keeps reading it.
_PARTIALS: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
_RETIRED: list[torch.Tensor] = []


def _partials(device: torch.device, acc_numel: int, ml_numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    acc, ml = _PARTIALS.get(device, (None, None))
    if acc is not None and ml is not None and acc.numel() >= acc_numel and ml.numel() >= ml_numel:
        return acc, ml
    if _capturing(device):
        raise MxfuseError(
            f"mqa_decode_attention needs {acc_numel + ml_numel} fp32 partials on {device} and cannot allocate "
            "them during CUDA-graph capture: run the same shape once before capturing"
        )
    if acc is not None and ml is not None:
        _RETIRED.extend((acc, ml))
        acc_numel, ml_numel = max(acc_numel, acc.numel()), max(ml_numel, ml.numel())
    new = (
        torch.empty(acc_numel, dtype=torch.float32, device=device),
        torch.empty(ml_numel, dtype=torch.float32, device=device),
    )
    _PARTIALS[device] = new
    return new


def _kernel_refusal(device: torch.device) -> str | None:
    """Why the kernel cannot run on ``device`` (None: it can)."""
    if device.type != "cuda":
        return f"{device.type} tensors: the Triton kernel needs a CUDA device"
    capability = torch.cuda.get_device_capability(device)
    if capability < _KERNEL_CAPABILITY:
        return f"sm_{capability[0]}{capability[1]} has no bf16 tensor-core dot (the kernel needs sm_80+)"
    return None


def mqa_decode_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    lens: torch.Tensor,
    *,
    scale: float,
    out: torch.Tensor | None = None,
    check_lens: bool = True,
    config: MqaConfig | None = None,
    out_pair: MxTensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    out_scale_layout: ScaleLayout | str | None = None,
    rounding: ScaleRounding | str | None = None,
) -> torch.Tensor | MxTensor:
    """Attention of ``q`` over the cache ``kv`` (module docstring); returns ``out`` [T, H * D] bf16.

    ``check_lens``: read ``lens`` on the host and refuse values outside ``[0, capacity - S]`` (a device
    synchronisation; skipped inside CUDA-graph capture, where the kernel clamps lengths to that range so a
    bad one can never read outside the cache). ``config`` overrides the checked-in launch table
    (``mxfuse.kernels.attention.choose_mqa_config``).

    ``out_pair``: the next GEMM's input, an ``MxTensor`` ``[T, H * D]`` (``MxTensor.empty``) or a
    ``(float8_e4m3fn, scale)`` tuple (converted once; its layout ``out_scale_layout``, or told from the
    scale): bit for bit ``quantize_mxfp8(out, rounding=rounding)`` (``rounding`` None: ``out_pair``'s own,
    else RCEIL), every byte written, padding included; then it is returned as an MxTensor (and bf16 ``out``
    written only when given). The combine kernel writes it when head_dim is a multiple of 128 and the
    launch has more than one split (the witness record's ``pair`` says ``combine``), else the bf16 output
    is quantized (``quantize``).
    """
    tokens, heads, dim, sequences, new = _check_inputs(q, kv, lens, scale)
    if out is not None:
        _check_out(out, tokens, heads * dim, q.device, (q, kv, lens))
    if out_scale_layout is not None:
        out_scale_layout = parse_scale_layout(out_scale_layout, argument="out_scale_layout")
    pair = None
    if out_pair is not None:
        pair = mxtensor_out(
            out_pair,
            m=tokens,
            k=heads * dim,
            device=q.device,
            scale_layout=out_scale_layout,
            rounding=rounding,
            argument="out_pair",
        )
        if any(
            tensors_overlap(t, u)
            for t in (pair.data, pair.scale_storage())
            for u in (q, kv, lens) + ((out,) if out is not None else ())
        ):
            raise ValueError("out_pair must not overlap q, kv, lens or out")
    elif out_scale_layout is not None:
        raise ValueError("out_scale_layout describes out_pair; without out_pair it must be None")
    elif rounding is not None:
        parse_scale_rounding(rounding)
    if config is not None and not isinstance(config, MqaConfig):
        raise TypeError(f"config must be an MqaConfig or None; got {type(config).__name__}")
    if check_lens and not _capturing(q.device):
        _check_lens_values(lens, new, kv.shape[1])
    refusal = _kernel_refusal(q.device)
    fields = {"sequences": sequences, "new_tokens": new, "heads": heads, "head_dim": dim}
    if pair is not None:
        fields["out_scale_layout"] = pair.scale_layout.value
    if refusal is not None:
        witness.emit("attention.reference", f"float32 torch reference: {refusal}", **fields)
        result = mqa_decode_attention_reference(q, kv, lens, scale=scale)
        if out is not None:
            out.copy_(result)
        if pair is None:
            return result if out is None else out
        return quantize_mxfp8(result, out=pair)
    if tokens == 0:
        if pair is not None:
            return pair
        return out if out is not None else torch.empty(0, heads * dim, dtype=torch.bfloat16, device=q.device)
    props = torch.cuda.get_device_properties(q.device)
    cfg = config or choose_mqa_config(sequences, new, heads, dim, multiprocessors=props.multi_processor_count)
    if cfg.pdl and torch.cuda.get_device_capability(q.device) < (9, 0):
        cfg = dataclasses.replace(cfg, pdl=False)  # programmatic dependent launch needs sm_90+
    partials = _partials(q.device, *mqa_partials_numel(sequences, new * heads, dim, cfg.splits))
    by_combine = pair is not None and cfg.splits > 1 and dim % 128 == 0
    if out is None and not by_combine:
        out = torch.empty(tokens, heads * dim, dtype=torch.bfloat16, device=q.device)
    launch_mqa_decode(
        q, kv, lens, partials=partials, scale=scale, config=cfg, out=out, pair=pair if by_combine else None
    )
    if pair is not None and not by_combine:
        quantize_mxfp8(out, out=pair)
    if pair is not None:
        fields["pair"] = "combine" if by_combine else "quantize"
    witness.emit(
        "attention.kernel",
        f"split-KV Triton kernel: {cfg.splits} splits x {cfg.d_parts} output parts, {cfg.block_n}-key tiles",
        **fields,
    )
    return out if pair is None else pair
