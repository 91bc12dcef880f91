"""Inputs, comparisons and budgets shared by the DeepSeek-V4.1 sublayer tests (CPU and GPU).

Expected values are computed here by plain arithmetic, never by the code under test.
"""

from __future__ import annotations

import torch

from gpumatrix.compare import assert_diff, assert_same_bits
from mxfuse.models.dsv41 import Dsv41Config, HcState, KvCache, StepOutputs, random_kv_cache, random_state

# calc_diff of the MXFP8 paths against the all-bf16 baseline (same weight values: only the activations
# are quantized, at wqkv_a's input, wo_a's input o and wo_b's input z). Measured at the tiny config on
# CPU, 8 checkpoints x (T in {1, 4, 16, 64} decode, 4 x 1 and 2 x 4 target-verify): attn_out
# 8.5e-4 .. 1.73e-3 (median 1.02e-3); y and the residual 5.4e-5 .. 4.1e-4 (median 1.2e-4; the widest at
# T = 1, where y has only 256 elements). One E4M3 rounding costs ~3.4e-4 (0.5 * (2**-3 / sqrt(12) /
# 1.4)**2), three in a row ~1e-3, independent of the dims: at the Flash dims (CPU, torch backend, T in
# {1, 4, 16}, full and TP4 shard) attn_out measured 1.00e-3 .. 1.04e-3 and y / the residual 1.3e-5 ..
# 1.0e-4. Budgets: ~2.5x the worst tiny-config measurement. To be re-checked on a GPU, whose kernels
# sum in other orders (the e2e test asserts the same budgets there).
BUDGET = {"attn_out": 4e-3, "y": 1e-3, "residual": 1e-3}
# The bf16 path against the float64 oracle (oracle_step): bf16 roundings only, measured 2.1e-6 .. 1.2e-5
# at the tiny config (any wiring error, e.g. a swapped norm or group, is > 1e-2).
ORACLE_BF16_BUDGET = 5e-5

# TP=2 against TP=1, same path and checkpoint. Each rank's wo_b rounds its partial sum over half of K to
# bf16 and the all-reduce rounds their sum again, where TP=1 rounds once; everything before wo_b is the
# same per head and group. Measured on CPU with gloo at the tiny config, 8 checkpoints x 6 cases (T in
# {1, 4, 16, 64} decode, 2 x 4 and 4 x 2 target-verify) x 3 paths: attn_out 2.9e-6 .. 6.3e-6 (median
# 4.2e-6), y 4.7e-7 .. 5.8e-6, residual 4.0e-7 .. 4.1e-6; at the Flash dims (T in {1, 4, 16}, fused
# and bf16) attn_out 3.7e-6 .. 4.1e-6, y and the residual 8.8e-7 .. 1.7e-6. Budgets ~3x the worst. On a
# GPU the wo_a and wo_b kernels also split K differently at half the groups; that moves fp32 sums by a
# few ulps, which flips a bf16 (and then an E4M3) rounding in a tiny share of elements only.
TP_BUDGET = {"attn_out": 2e-5, "y": 1.5e-5, "residual": 1.5e-5}

FIELDS = ("attn_out", "residual", "pre", "post", "comb", "y")
# The witness path each sublayer path's linears take at decode sizes.
LINEAR_PATHS = {"fused": "linear.pair_consumed", "unfused": "linear.self_quantized", "bf16": "linear.bf16"}


def decode_inputs(
    config: Dsv41Config,
    tokens: int,
    *,
    seed: int,
    capacity: int = 40,
    new: int = 1,
    device: torch.device | str = "cpu",
) -> tuple[HcState, KvCache]:
    """T tokens as T / new sequences of ``new`` tokens each (1: decode, more: target-verify), each
    sequence with its own cache of ``capacity`` and a random length leaving room for the new tokens."""
    state = random_state(config, tokens, seed=seed, device=device)
    sequences = tokens // new
    g = torch.Generator().manual_seed(seed + 1)
    lens = torch.randint(0, capacity - new + 1, (sequences,), generator=g)
    return state, random_kv_cache(
        config, sequences=sequences, capacity=capacity, lens=lens, seed=seed + 2, device=device
    )


def assert_same_outputs(actual: StepOutputs, expected: StepOutputs, *, name: str) -> None:
    """Every output bit for bit, the MXFP8 pair over its whole storage (padding included)."""
    for field in FIELDS:
        assert_same_bits(getattr(actual, field), getattr(expected, field), name=f"{name}: {field}")
    assert (actual.pair is None) == (expected.pair is None), f"{name}: one side has no pair"
    if actual.pair is not None and expected.pair is not None:
        a, e = actual.pair, expected.pair
        assert a.scale_layout is e.scale_layout, f"{name}: {a.scale_layout} against {e.scale_layout}"
        assert_same_bits(a.data, e.data, name=f"{name}: pair data")
        assert_same_bits(a.scale_storage(), e.scale_storage(), name=f"{name}: pair scales")


def assert_within_budget(
    actual: StepOutputs, baseline: StepOutputs | dict, *, name: str, budget: dict[str, float] | float = BUDGET
) -> None:
    """calc_diff of attn_out, y and the residual against ``baseline`` (outputs or ``oracle_step``'s dict)."""
    for field in BUDGET:
        expected = baseline[field] if isinstance(baseline, dict) else getattr(baseline, field)
        bound = budget[field] if isinstance(budget, dict) else budget
        assert_diff(getattr(actual, field), expected, max_diff=bound, name=f"{name}: {field}")


def paths(records: list[dict], prefix: str) -> list[tuple[str, str | None]]:
    """(path, site) of the records whose path starts with ``prefix``, in order."""
    return [(r["path"], r.get("site")) for r in records if r["path"].startswith(prefix)]


def native_value(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 value of a native checkpoint weight: code * 2**(its 32x32 block's scale byte - 127)."""
    n, k = q.shape
    s = scale.view(torch.uint8).to(torch.float64)
    per_element = s.repeat_interleave(32, dim=0)[:n].repeat_interleave(32, dim=1)
    return q.to(torch.float64) * torch.exp2(per_element - 127)


def oracle_step(
    tensors: dict[str, torch.Tensor], config: Dsv41Config, state: HcState, cache: KvCache
) -> dict[str, torch.Tensor]:
    """The sublayer in float64, written independently of the model from the checkpoint's tensors
    (``layers.0.`` names, as ``safetensors.torch.load_file`` returns them; TP 1): per-sequence loops and
    an explicit softmax for the attention, per-group matmuls for wo_a. The boundaries are the hc
    reference (``mhc_boundary_reference``, tested on its own). Returns attn_out (float64) and the second
    boundary's residual and y (bf16, from the bf16-rounded attn_out)."""
    from mxfuse.hc import HcInputs, HcParams, HcWeights, mhc_boundary_reference

    c = config
    dev = state.x.device
    w = {k.removeprefix("layers.0."): v.to(dev) for k, v in tensors.items()}
    # Spelt out from the config's fields (not Dsv41Config.hc_params), so the oracle checks that mapping too.
    params = HcParams(
        hc_norm_eps=c.rms_norm_eps,
        hc_pre_eps=c.hc_eps,
        hc_post_scale=2.0,
        sinkhorn_eps=c.hc_eps,
        sinkhorn_iters=c.hc_sinkhorn_iters,
        rms_eps=c.rms_norm_eps,
        rms_scale=1.0,
    )

    def norm(v: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        out = v * torch.rsqrt(v.square().mean(-1, keepdim=True) + c.rms_norm_eps)
        return out if weight is None else out * weight.to(torch.float64)

    b1 = mhc_boundary_reference(
        state,
        HcWeights(w["hc_attn_fn"], w["hc_attn_scale"], w["hc_attn_base"], w["attn_norm.weight"]),
        params=params,
        want_pair=False,
    )
    wqkv = torch.cat(
        [
            native_value(w["attn.wq_a.weight"], w["attn.wq_a.scale"]),
            native_value(w["attn.wkv.weight"], w["attn.wkv.scale"]),
        ]
    )
    qkv = b1.y.to(torch.float64) @ wqkv.T
    q = norm(qkv[:, : c.q_lora_rank], w["attn.q_norm.weight"]) @ w["attn.wq_b.weight"].to(torch.float64).T
    q = norm(q.view(-1, c.heads, c.head_dim), None)
    kv = norm(qkv[:, c.q_lora_rank :], w["attn.kv_norm.weight"])

    tokens, b = q.shape[0], cache.kv.shape[0]
    new = tokens // b
    o = torch.empty(tokens, c.heads, c.head_dim, dtype=torch.float64, device=dev)
    for seq in range(b):
        start = int(cache.lens[seq])
        keys = torch.cat([cache.kv[seq, :start].to(torch.float64), kv[seq * new : (seq + 1) * new]])
        for s in range(new):
            t = seq * new + s
            logits = (q[t] @ keys[: start + s + 1].T) * c.softmax_scale  # [heads, keys]
            p = torch.exp(logits - logits.max(-1, keepdim=True).values)
            o[t] = (p / p.sum(-1, keepdim=True)) @ keys[: start + s + 1]

    woa = native_value(w["attn.wo_a.weight"], w["attn.wo_a.scale"]).view(c.o_groups, c.o_lora_rank, -1)
    groups = o.reshape(tokens, c.o_groups, c.group_width)
    z = torch.stack([groups[:, g] @ woa[g].T for g in range(c.o_groups)], dim=1).reshape(tokens, -1)
    attn_out = z @ native_value(w["attn.wo_b.weight"], w["attn.wo_b.scale"]).T

    b2 = mhc_boundary_reference(
        HcInputs(attn_out.to(torch.bfloat16), b1.residual, b1.post, b1.comb, b1.pre),
        HcWeights(w["hc_ffn_fn"], w["hc_ffn_scale"], w["hc_ffn_base"], w["ffn_norm.weight"]),
        params=params,
        want_pair=False,
    )
    return {"attn_out": attn_out, "residual": b2.residual, "y": b2.y}


def assert_tp_records(records: list[dict], *, path: str, rank: int, world: int, backend: str) -> None:
    """One rank's step: its linears took ``path``, and wo_b's output was all-reduced once, over ``world``
    ranks, after wo_b and before the second boundary."""
    linear = LINEAR_PATHS[path]
    sites = ("layers.0.attn.wqkv_a", "layers.0.attn.wq_b", "layers.0.attn.wo_b")
    assert paths(records, "linear.") == [(linear, site) for site in sites], f"rank {rank} {path}"
    order = [r["path"] for r in records]
    reduces = [r for r in records if r["path"] == "tp.all_reduce"]
    assert len(reduces) == 1, f"rank {rank} {path}: {len(reduces)} all-reduce records"
    (reduce,) = reduces
    fields = {k: reduce[k] for k in ("site", "tp_size", "tp_rank", "backend")}
    assert fields == {"site": sites[2], "tp_size": world, "tp_rank": rank, "backend": backend}, fields
    at = order.index("tp.all_reduce")
    boundaries = [i for i, p in enumerate(order) if p.startswith("hc.boundary")]
    wo_b = [i for i, r in enumerate(records) if r["path"] == linear and r.get("site") == sites[2]]
    assert len(boundaries) == 2 and boundaries[0] < wo_b[0] < at < boundaries[1], order


def assert_reduced(attn_out: torch.Tensor, partials: list[torch.Tensor], *, name: str) -> None:
    """``attn_out`` is bit for bit the bf16 sum of the ranks' partials: one fp32 addition per element
    (two ranks), rounded to nearest even, the same whichever rank adds."""
    first, second = partials  # two ranks: one addition, so the order the backend adds in cannot matter
    a, b = first.float(), second.float()
    assert_same_bits(attn_out, (a + b).to(torch.bfloat16), name=name)
