"""``AttentionSublayer``: one DeepSeek-V4.1 attention sublayer between two hyper-connection boundaries.

One decode step of T tokens::

    boundary 1  post of the previous sublayer (the FFN before), mixes + Sinkhorn with hc_attn, collapse
                with the carried pre (V4.1 shifted ordering), attn_norm          -> y, or wqkv_a's pair
    wqkv_a      MxLinear [q_lora_rank + head_dim, hidden]: q_lora | the shared KV head
    q           q_norm -> wq_b's pair or bf16 (``mxfuse.norm``), wq_b MxLinear [heads * head_dim,
                q_lora_rank], per-head RMS; kv: kv_norm                        (``attention.py``)
    attention   multi-query over the KV cache                                 -> o [T, heads * head_dim]
    wo_a        grouped projection o [T, G, r] x [G, R, r] -> z [T, G * R]     -> bf16 z, or wo_b's pair
    wo_b        MxLinear [hidden, G * R]                                       -> attn_out
    (TP)        all-reduce of wo_b's partial sums over the ranks               (``parallel.py``)
    boundary 2  post of attention, mixes with hc_ffn, collapse with boundary 1's pre, ffn_norm -> y

Three paths, one model (``path``), all loaded from the same checkpoint:

* ``fused``: the producers write the consumers' MXFP8 pairs (boundary 1 for wqkv_a, q_norm for wq_b,
  the attention's combine for wo_a, wo_a's epilogue for wo_b) and the linears consume them (witness
  ``linear.pair_consumed``). Whether a producer writes a linear's pair is the consuming layer's gate
  (``MxLinear.gate(T)``): at T > 2048 or in prefill the producers write bf16 and the layers take their
  bf16 path, the gate's reason in their witness records. The grouped wo_a has no gate (it reads MXFP8 at
  every T), so the attention writes its pair on every fused step.
* ``unfused``: the producers write bf16; each linear quantizes its own input (``linear.self_quantized``).
  The producers' contracts (their pair is bit for bit ``quantize_mxfp8`` of their bf16 output) make
  every GEMM input, hence every output, bit-identical to ``fused``.
* ``bf16``: no MXFP8 anywhere. The weights are the checkpoint's, dequantized to bf16 (exact: an E4M3
  code times a power of two fits bf16), wo_a a bf16 batched matmul of the unquantized o.

Tensor parallelism (``process_group``, see ``parallel.py``): a rank loads its shard of the checkpoint
(``config.tp_size`` / ``tp_rank``: its heads of wq_b, its groups of wo_a, its K slice of wo_b; the rest
replicated), runs the same path as one GPU on it, and all-reduces wo_b's output before boundary 2.
``process_group=None`` is no collective: a config with ``tp_size > 1`` then computes one rank's partial
attn_out (and the boundary after it), as a single-rank test or benchmark wants.

Lifecycle, as ``MxLinear``'s: construction is the request, ``load_weights(named tensors)`` stages the
checkpoint (checked name by name), ``process_weights_after_loading()`` stacks wq_a and wkv into wqkv_a,
prepares every weight for its path and settles the layers' facts. A reload copies into the prepared
tensors in place wherever shapes allow, so captured CUDA graphs read the new weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch
from torch import nn

from mxfuse.einsum import WoAWeight, grouped_wo_a, prepare_wo_a_weight
from mxfuse.formats import MxTensor, ScaleLayout, dequantize_mxfp8, parse_scale_layout
from mxfuse.gemm import Availability, expand_block_scales
from mxfuse.hc import N_STREAMS, HcInputs, HcProjection, HcSideStream, HcWeights, mhc_boundary
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.l2_prefetch import L2Prefetcher
from mxfuse.layers import (
    ForwardContext,
    LayerNotReadyError,
    MxLinear,
    ProcessResult,
    can_copy_into,
    copy_or_rebind_param,
)
from mxfuse.models.dsv41.attention import mqa_attention, norm_q_and_cache_kv
from mxfuse.models.dsv41.checkpoint import local_shapes, read_checkpoint
from mxfuse.models.dsv41.config import Dsv41Config
from mxfuse.models.dsv41.parallel import all_reduce_partial_sums, check_process_group
from mxfuse.models.dsv41.state import HcState, KvCache, StepOutputs
from mxfuse.norm import rms_norm as norm_producer

__all__ = ["AttentionSublayer", "LoadResult", "SublayerPath", "load_sublayer", "stage_events"]

StatusFn = Callable[[torch.device], Mapping[str, Availability]]

# checkpoint name -> parameter name, for the tensors used as they are (bf16 norms, fp32 hc)
_PLAIN = {
    "attn.q_norm.weight": "q_norm",
    "attn.kv_norm.weight": "kv_norm",
    "attn_norm.weight": "attn_norm",
    "ffn_norm.weight": "ffn_norm",
    **{f"hc_{sub}_{part}": f"hc_{sub}_{part}" for sub in ("attn", "ffn") for part in ("fn", "base", "scale")},
}


# hc projection -> the slot of its three bf16 pieces (HcProjection), made when the weights are processed
_PIECES = {"hc_attn_fn": "hc_attn_fn_pieces", "hc_ffn_fn": "hc_ffn_fn_pieces"}


class SublayerPath(str, Enum):
    FUSED = "fused"
    UNFUSED = "unfused"
    BF16 = "bf16"


@dataclass(frozen=True)
class LoadResult:
    """What ``process_weights_after_loading`` did: the three linears' results and the tensors rebound."""

    wqkv_a: ProcessResult
    wo_b: ProcessResult
    rebound: tuple[str, ...]
    wq_b: ProcessResult

    @property
    def graph_safe(self) -> bool:
        """True when CUDA graphs captured before this (re)load read the new weights."""
        return not self.rebound and all(r.graph_safe for r in (self.wqkv_a, self.wq_b, self.wo_b))


class AttentionSublayer(nn.Module):
    """The attention sublayer of ``config`` on ``device``, computed by ``path`` (see the module docstring).

    ``next_pair_layout``: also return the FFN's input as an MXFP8 pair in this layout (the fused path's
    boundary writes it, the unfused path quantizes y); only when wqkv_a's gate says yes, the rule the
    next sublayer's linear would apply at the same T and mode. ``layer``: the checkpoint layer and the
    witness sites' prefix. ``backend_status``: passed to the linears (tests model other devices).
    ``process_group``: the tensor-parallel group (its size and this rank must be ``config``'s
    ``tp_size`` and ``tp_rank``), over which wo_b's output is all-reduced; None: no tensor parallelism.
    ``l2_prefetch``: prefetch the GEMMs' weights into L2 on a side stream while the latency-bound kernels
    before them run (``mxfuse.kernels.l2_prefetch``): wqkv_a's and wq_b's under boundary 1, wo_a's and
    wo_b's under the norms and the attention; a hint that changes no result (on every path, sm_90 and
    later; ``self.prefetcher.enabled`` switches it between steps or captures). Off by default: on the
    H200 the step measured slower with it (benchmarks/RESULTS.md). ``hc_side``: both boundaries launch
    their Sinkhorn items on a side stream (``mxfuse.hc.HcSideStream``), off the path to the next GEMM's
    input; the second boundary and the step's end join it. The same bits either way
    (``self.hc_side.enabled`` switches it between steps or captures). On by default: the step measured
    3 to 10 us faster with it at T = 1 to 64 on an H100 (benchmarks/RESULTS.md).
    """

    def __init__(
        self,
        config: Dsv41Config,
        *,
        path: SublayerPath | str = SublayerPath.FUSED,
        device: torch.device | str = "cpu",
        next_pair_layout: ScaleLayout | str | None = None,
        layer: int = 0,
        backend_status: StatusFn | None = None,
        process_group: object | None = None,
        l2_prefetch: bool = False,
        hc_side: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(config, Dsv41Config):
            raise TypeError(f"config must be a Dsv41Config; got {type(config).__name__}")
        try:
            self.path = SublayerPath(path)
        except ValueError:
            raise ValueError(f"path must be one of 'fused', 'unfused', 'bf16'; got {path!r}") from None
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise ValueError(f"layer must be an int >= 0; got {layer!r}")
        self.config = config
        self.hc_params = config.hc_params  # both boundaries' scalars, made once
        self.layer = layer
        self.device = _canonical(torch.device(device))
        self.next_pair_layout = None if next_pair_layout is None else parse_scale_layout(next_pair_layout)
        self.process_group = check_process_group(process_group, config, self.device)
        self.prefetcher = L2Prefetcher(self.device, enabled=l2_prefetch)
        self.hc_side = HcSideStream(self.device, enabled=hc_side)
        mx = self.path is not SublayerPath.BF16
        c, site = config, f"layers.{layer}.attn"
        common = {"mxfp8_input": mx, "device": self.device, "backend_status": backend_status}
        self.wqkv_a = MxLinear(c.hidden, c.wqkv_a_out, name=f"{site}.wqkv_a", **common)
        # The checkpoint's bf16 wq_b, quantized at load on the MXFP8 paths (the release stores it in FP8).
        self.wq_b = MxLinear(c.q_lora_rank, c.local_heads * c.head_dim, name=f"{site}.wq_b", **common)
        self.wo_b = MxLinear(c.wo_b_in, c.hidden, name=f"{site}.wo_b", **common)
        self.wo_a: WoAWeight | None = None  # the MXFP8 paths' grouped weight
        for slot in (*_PLAIN.values(), "wo_a_bf16", *_PIECES.values()):
            self.register_parameter(slot, None)
        self._shapes = local_shapes(config)
        self._staged: dict[str, torch.Tensor] = {}
        self._state = "requested"

    @property
    def state(self) -> str:
        return self._state

    # ---- load ----------------------------------------------------------------------------------------

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Stage checkpoint tensors (names without the ``layers.<i>.`` prefix, a rank's shard: what
        ``read_checkpoint`` yields) for ``process_weights_after_loading``; returns the names staged.

        Each tensor is checked against the checkpoint format (name, dtype, shape) as it arrives; a bad one
        raises and stages nothing of this call.
        """
        staged: dict[str, torch.Tensor] = {}
        for item in weights:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
                raise TypeError(f"weights must yield (name, tensor) pairs; got {item!r:.80}")
            name, tensor = item
            if name not in self._shapes:
                raise ValueError(
                    f"weights: unexpected tensor {name!r}; this sublayer loads {sorted(self._shapes)}"
                )
            dtype, shape = self._shapes[name]
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"weights: {name} must be a torch.Tensor; got {type(tensor).__name__}")
            dtypes = (torch.float8_e8m0fnu, torch.uint8) if dtype == "e8m0" else (dtype,)
            if tensor.dtype not in dtypes or tuple(tensor.shape) != shape:
                want = " or ".join(str(d) for d in dtypes)
                raise ValueError(
                    f"weights: {name} must be {want} of shape {list(shape)} on this rank; "
                    f"got {tensor.dtype} {list(tensor.shape)}"
                )
            if dtype == "e8m0":
                tensor = tensor.view(torch.uint8)
            staged[name] = tensor.to(self.device)
        if staged:
            self._staged.update(staged)
            self._state = "loaded"
        return set(staged)

    def process_weights_after_loading(self) -> LoadResult:
        """Prepare what was loaded for this path and settle both linears' facts."""
        if self._state != "loaded":
            raise LayerNotReadyError(
                f"layers.{self.layer}.attn: nothing to process; call load_weights(...) first"
            )
        missing = sorted(set(self._shapes) - set(self._staged))
        if missing:
            raise ValueError(f"weights: the checkpoint is missing {missing}")
        s = self._staged
        bf16 = self.path is SublayerPath.BF16
        rebound: list[str] = []
        wq_a = (s["attn.wq_a.weight"], s["attn.wq_a.scale"])
        wkv = (s["attn.wkv.weight"], s["attn.wkv.scale"])
        if bf16:
            self.wqkv_a.load_weights(torch.cat([_dequantized(*wq_a), _dequantized(*wkv)]))
            self.wo_b.load_weights(_dequantized(s["attn.wo_b.weight"], s["attn.wo_b.scale"]))
        else:
            # q_lora_rank is a multiple of 32, so wq_a's 32x32 scale blocks end where wkv's begin.
            self.wqkv_a.load_weights(torch.cat([wq_a[0], wkv[0]]), torch.cat([wq_a[1], wkv[1]]))
            self.wo_b.load_weights(s["attn.wo_b.weight"], s["attn.wo_b.scale"])
        self.wq_b.load_weights(s["attn.wq_b.weight"])
        wqkv_a, wo_b = self.wqkv_a.process_weights_after_loading(), self.wo_b.process_weights_after_loading()
        wq_b = self.wq_b.process_weights_after_loading()

        c = self.config
        w, scale = s["attn.wo_a.weight"], s["attn.wo_a.scale"]
        if bf16:
            value = _dequantized(w, scale).view(c.local_groups, c.o_lora_rank, c.group_width)
            rebound += self._commit("wo_a_bf16", value)
        else:
            prepared = prepare_wo_a_weight(w, scale, groups=c.local_groups)
            old = self.wo_a
            if (
                old is not None
                and old.qweight.shape == prepared.qweight.shape
                and old.device == prepared.device
            ):
                old.qweight.copy_(prepared.qweight)
                old.scale.copy_(prepared.scale)
            else:
                if old is not None:
                    rebound.append("wo_a")
                self.wo_a = prepared
        for name, slot in _PLAIN.items():
            rebound += self._commit(slot, s[name])
        for fn, slot in _PIECES.items():
            rebound += self._commit(slot, HcProjection.prepare(getattr(self, fn)).pieces)
        self._staged = {}
        self._state = "ready"
        return LoadResult(wqkv_a, wo_b, tuple(rebound), wq_b)

    def _commit(self, slot: str, value: torch.Tensor) -> list[str]:
        old = getattr(self, slot)
        if old is None or not can_copy_into(old, value):
            value = value.clone()  # never own the caller's tensor: a later in-place reload would write it
        update = copy_or_rebind_param(self, slot, value, site=f"layers.{self.layer}.attn")
        return [] if update.graph_safe else [slot]

    # ---- forward -------------------------------------------------------------------------------------

    def forward(
        self, state: HcState, cache: KvCache, *, context: ForwardContext | str | None = None
    ) -> StepOutputs:
        """One step of ``state.tokens`` tokens against ``cache`` (written at the new positions).

        ``context``: the forward mode (else the ambient ``forward_context``, else decode), passed to the
        linears and their gates. Inputs are checked before anything is written.
        """
        if self._state != "ready":
            raise LayerNotReadyError(
                f"layers.{self.layer}.attn is {self._state}; call load_weights(...) and then "
                "process_weights_after_loading() before forward"
            )
        tokens = self._check_inputs(state, cache)
        c = self.config
        fused = self.path is SublayerPath.FUSED

        # The first two GEMMs' weights stream into L2 under boundary 1 (latency-bound, HBM idle).
        self.prefetcher.fork(self._prefetch_group(0))
        # Boundary 1: the previous sublayer's post, then this sublayer's pre; its y feeds wqkv_a.
        pair_in = fused and self.wqkv_a.gate(tokens, context=context).fused
        with _stage("boundary_in"):
            b1 = mhc_boundary(
                state,
                HcWeights(
                    HcProjection(self.hc_attn_fn, self.hc_attn_fn_pieces),
                    self.hc_attn_scale,
                    self.hc_attn_base,
                    self.attn_norm,
                ),
                want_y=not pair_in,
                want_pair=pair_in,
                params=self.hc_params,
                side=self.hc_side,
                **self._pair_format(self.wqkv_a, pair_in),
            )
        with _stage("wqkv_a"):
            qkv = self.wqkv_a(b1.pair if pair_in else b1.y, context=context)

        q_lora, kv = qkv.split([c.q_lora_rank, c.head_dim], dim=1)
        with _stage("wq_b"):
            # q_norm is wq_b's producer: on the fused path it writes wq_b's pair (the gate's rule).
            pair_q = fused and self.wq_b.gate(tokens, context=context).fused
            normed = norm_producer(
                q_lora,
                self.q_norm,
                eps=c.rms_norm_eps,
                want_y=not pair_q,
                want_pair=pair_q,
                **self._pair_format(self.wq_b, pair_q),
            )
            q = self.wq_b(normed.pair if pair_q else normed.y, context=context)
            # After wq_b: wo_a's and wo_b's weights stream into L2 under the norms and the attention.
            self.prefetcher.fork(self._prefetch_group(1))
            # Each head of q normed and kv_norm(kv) written into the cache: one launch on CUDA.
            q = norm_q_and_cache_kv(
                q.view(tokens, c.local_heads, c.head_dim),
                kv,
                cache,
                kv_weight=self.kv_norm,
                eps=c.rms_norm_eps,
            )
        with _stage("attention"):
            # The attention is wo_a's producer: on the fused path its combine writes wo_a's pair.
            o_pair = None
            if fused:
                width = c.local_heads * c.head_dim
                o_pair = MxTensor.empty(
                    tokens,
                    width,
                    scale_layout=ScaleLayout.DEEPGEMM,
                    rounding=self.wo_b.rounding,
                    device=q.device,
                )
            o = mqa_attention(
                q,
                None,
                cache,
                scale=c.softmax_scale,
                kv_weight=self.kv_norm,
                eps=c.rms_norm_eps,
                out_pair=o_pair,
                rounding=self.wo_b.rounding,
            )

        with _stage("wo_a"):
            z = self._wo_a(o, tokens, context)
        with _stage("wo_b"):
            attn_out = self.wo_b(z, context=context)
        if self.process_group is not None:
            attn_out = all_reduce_partial_sums(
                attn_out, self.process_group, site=self.wo_b.site, rank=c.tp_rank
            )

        # Boundary 2: attention's post, then the FFN's pre; y (and the pair if asked) feed the FFN.
        pair_next = (
            self.next_pair_layout is not None
            and self.path is not SublayerPath.BF16
            and self.wqkv_a.gate(tokens, context=context).fused
        )
        with _stage("boundary_out"):
            b2 = mhc_boundary(
                HcInputs(attn_out, b1.residual, b1.post, b1.comb, prev_pre=b1.pre),
                HcWeights(
                    HcProjection(self.hc_ffn_fn, self.hc_ffn_fn_pieces),
                    self.hc_ffn_scale,
                    self.hc_ffn_base,
                    self.ffn_norm,
                ),
                want_y=True,
                want_pair=fused and pair_next,
                params=self.hc_params,
                scale_layout=self.next_pair_layout or ScaleLayout.DEEPGEMM,
                rounding=self.wqkv_a.rounding,
                side=self.hc_side,
            )
            pair = b2.pair
            if pair_next and not fused:
                pair = quantize_mxfp8(b2.y, rounding=self.wqkv_a.rounding, scale_layout=self.next_pair_layout)
        self.prefetcher.join()
        self.hc_side.join()
        return StepOutputs(attn_out, b2.residual, b2.pre, b2.post, b2.comb, b2.y, pair)

    def _prefetch_group(self, group: int) -> list[torch.Tensor]:
        """The weights one prefetch fork requests, in the order the step reads them: group 0 wqkv_a and
        wq_b, group 1 wo_a and wo_b (only while the prefetcher is active: nothing to build otherwise)."""
        if not self.prefetcher.active:
            return []
        if group == 0:
            return [self.wqkv_a.weight, self.wq_b.weight]
        wo_a = self.wo_a_bf16 if self.path is SublayerPath.BF16 else self.wo_a.qweight
        return [wo_a, self.wo_b.weight]

    @staticmethod
    def _pair_format(layer: MxLinear, pair: bool) -> dict[str, object]:
        if not pair:
            return {}
        return {"scale_layout": layer.input_scale_layout, "rounding": layer.rounding}

    def _wo_a(
        self, o: torch.Tensor | MxTensor, tokens: int, context: ForwardContext | str | None
    ) -> torch.Tensor | MxTensor:
        """wo_b's input: the MxTensor of z (fused, gate yes), else bf16 z [T, G * R]. ``o``: attention's
        output, bf16 or (fused) its MxTensor with deepgemm scales, which wo_a reads as it is."""
        c = self.config
        width = c.local_groups * c.o_lora_rank
        if self.path is SublayerPath.BF16:
            a = o.view(tokens, c.local_groups, c.group_width).transpose(0, 1)  # [G, T, r]
            z = torch.bmm(a, self.wo_a_bf16.transpose(1, 2))  # [G, T, R]
            return z.transpose(0, 1).reshape(tokens, width)
        if self.wo_a is None:  # processing sets it on the MXFP8 paths; forward checked the state
            raise LayerNotReadyError(f"layers.{self.layer}.attn: wo_a was not prepared")
        rounding = self.wo_b.rounding
        if self.path is SublayerPath.FUSED and self.wo_b.gate(tokens, context=context).fused:
            layout = self.wo_b.input_scale_layout
            pair = MxTensor.empty(tokens, width, scale_layout=layout, rounding=rounding, device=self.device)
            return grouped_wo_a(o, self.wo_a, out_pair=pair, rounding=rounding)
        return grouped_wo_a(o, self.wo_a, rounding=rounding).view(tokens, width)

    def _check_inputs(self, state: HcState, cache: KvCache) -> int:
        if not isinstance(state, HcState):
            raise TypeError(f"state must be an HcState; got {type(state).__name__}")
        if not isinstance(cache, KvCache):
            raise TypeError(f"cache must be a KvCache; got {type(cache).__name__}")
        c, n = self.config, N_STREAMS
        x = state.x
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] < 1:
            raise ValueError(f"state.x must be a tensor [T >= 1, hidden = {c.hidden}]; got {_describe(x)}")
        t, h = x.shape[0], c.hidden
        f32, bf16 = torch.float32, torch.bfloat16
        for name, value, dtype, shape in (
            ("state.x", x, bf16, (t, h)),
            ("state.residual", state.residual, bf16, (t, n, h)),
            ("state.post", state.post, f32, (t, n)),
            ("state.comb", state.comb, f32, (t, n, n)),
            ("state.prev_pre", state.prev_pre, f32, (t, n)),
        ):
            _check_tensor(name, value, dtype, shape, self.device)
        kv, lens = cache.kv, cache.lens
        if not isinstance(kv, torch.Tensor) or kv.dim() != 3 or kv.shape[0] < 1:
            raise ValueError(f"cache.kv must be a tensor [B >= 1, capacity, head_dim]; got {_describe(kv)}")
        b, capacity = kv.shape[0], kv.shape[1]
        _check_tensor("cache.kv", kv, bf16, (b, capacity, c.head_dim), self.device)
        if not isinstance(lens, torch.Tensor) or lens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"cache.lens must be an int32 or int64 tensor [B = {b}]; got {_describe(lens)}")
        _check_tensor("cache.lens", lens, lens.dtype, (b,), self.device)
        if t % b:
            raise ValueError(
                f"state.x.shape[0] (T = {t}) must be a multiple of the cache's sequences B = {b}"
            )
        new = t // b
        if new > capacity:
            raise ValueError(f"T / B = {new} new tokens per sequence exceed the cache capacity {capacity}")
        capturing = self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if not capturing:  # values need a host read: checked in eager steps, trusted in a captured graph
            low, high = (int(v) for v in torch.aminmax(lens))
            if low < 0 or high + new > capacity:
                raise ValueError(
                    f"cache.lens must be in [0, capacity - {new}] = [0, {capacity - new}] (room for {new} new "
                    f"tokens per sequence); got values in [{low}, {high}]"
                )
        return t

    def extra_repr(self) -> str:
        tp = f", tp={self.config.tp_rank}/{self.config.tp_size}" if self.config.tp_size > 1 else ""
        reduce = ", all-reduce" if self.process_group is not None else ""
        return (
            f"config={self.config.name}, path={self.path.value}, layer={self.layer}{tp}{reduce}, "
            f"state={self._state}"
        )


# While ``stage_events()`` is open: its list of (stage, start, end) CUDA events and its hold in cycles.
_STAGE_LOG: ContextVar[tuple[list[tuple[str, torch.cuda.Event, torch.cuda.Event]], int] | None] = ContextVar(
    "dsv41_stage_log", default=None
)


@contextmanager
def stage_events(*, hold_cycles: int = 0) -> Iterator[list[tuple[str, torch.cuda.Event, torch.cuda.Event]]]:
    """Record a timing CUDA event on the current stream at the start and end of every stage run inside
    (eager steps on CUDA only: an event recorded this way cannot be part of a CUDA graph). Yields the
    list of ``(stage, start, end)`` it fills; ``start.elapsed_time(end)`` after a synchronize is the
    stage's span on the GPU. ``hold_cycles`` > 0 launches a sleep kernel of that many cycles before
    each stage's start event, so that the host queues the whole stage while the GPU sleeps and the span
    is the stage's kernels back to back, not the host's launch pace (a host read inside a step, such as
    the eager check of the cache lengths, would otherwise keep the GPU waiting on the host)."""
    if not isinstance(hold_cycles, int) or hold_cycles < 0:
        raise ValueError(f"hold_cycles must be a non-negative int; got {hold_cycles!r}")
    log: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
    token = _STAGE_LOG.set((log, hold_cycles))
    try:
        yield log
    finally:
        _STAGE_LOG.reset(token)


@contextmanager
def _stage(name: str) -> Iterator[None]:
    """A profiler range around one stage of the step (``dsv41.<name>``), plus its CUDA events while
    ``stage_events()`` is open. Host-side only; nothing of it is captured in a CUDA graph."""
    active = _STAGE_LOG.get()
    with torch.profiler.record_function(f"dsv41.{name}"):
        if active is None or not torch.cuda.is_available():
            yield
            return
        log, hold = active
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if hold:
            torch.cuda._sleep(hold)
        start.record()
        yield
        end.record()
        log.append((name, start, end))


def _canonical(device: torch.device) -> torch.device:
    """``cuda`` as ``cuda:<current>``, so that input devices compare equal to the sublayer's."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _dequantized(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A native weight (E4M3, uint8 E8M0 per 32x32 block) as bf16, exactly."""
    n, k = weight.shape
    per_row = expand_block_scales(scale, n=n, k=k)
    return dequantize_mxfp8(weight, per_row, scale_layout=ScaleLayout.E8M0).to(torch.bfloat16)


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


def _check_tensor(
    name: str, value: object, dtype: torch.dtype, shape: tuple[int, ...], device: torch.device
) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    if value.dtype != dtype or tuple(value.shape) != shape:
        raise ValueError(f"{name} must be {dtype} of shape {list(shape)}; got {_describe(value)}")
    if value.device != device:
        raise ValueError(f"{name} must be on the sublayer's device {device}; got {value.device}")
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous; got strides {tuple(value.stride())}")


def load_sublayer(
    directory: str | Path,
    config: Dsv41Config,
    *,
    path: SublayerPath | str = SublayerPath.FUSED,
    device: torch.device | str = "cpu",
    **kwargs: object,
) -> AttentionSublayer:
    """Request, load (``read_checkpoint``) and process a sublayer, as a serving engine starts one."""
    sublayer = AttentionSublayer(config, path=path, device=device, **kwargs)  # type: ignore[arg-type]
    sublayer.load_weights(read_checkpoint(directory, config, layer=sublayer.layer, device=device))
    sublayer.process_weights_after_loading()
    return sublayer
