"""Time multi-query decode attention (K = V) on one GPU: the split-KV kernel, SDPA, and the byte floor.

    python -m benchmarks attention [--tokens 1,4,16,64,128] [--lengths 4096,32768] [--heads 64]
                                   [--sweep] [--budget-s S] [--json PATH] [--table PATH]

Decode shapes of DeepSeek-V4.1-Flash: T sequences of one new token each, 64 heads (16 for the TP4 shard
with ``--heads 16``), head_dim 512, every sequence holding ``length`` keys (``lens = length - 1`` before its
new token). In one run, interleaved:
  * ``kernel``: ``mqa_decode_attention`` with the checked-in launch table, into a preallocated output;
    ``kernel, PDL flipped``: the same configuration with the combine's programmatic dependent launch
    switched (on where the table has it off, and off where on);
  * ``sdpa``: what the decode step called before the kernel: ``F.scaled_dot_product_attention`` with the
    heads folded into the query length and a boolean mask over the cache's whole capacity (the
    memory-efficient backend: head_dim 512 and a mask rule out flash and cuDNN);
  * the floor: the bytes attention must move (each sequence's KV once, q read, the output written) at the
    device-to-device copy bandwidth measured in the same run.
Every variant is one CUDA graph of many calls cycling through enough caches to stream from HBM (cold L2),
timed over 15 replays; three rounds interleaved, the median reported. Every kernel configuration is
checked against the float32 reference (per row, tests/support/attention_checks.py's bound) before it is
timed. ``--sweep`` also times the candidate configurations of each shape (one round each) and writes the
fastest per shape to ``--table`` in the format of ``src/mxfuse/kernels/attention/configs.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from benchmarks.support import REPO_ROOT, import_test_support
from benchmarks.timing import ROTATE_BYTES, bench_us, copy_bandwidth
from mxfuse.attention import MqaConfig, mqa_decode_attention, mqa_decode_attention_reference
from mxfuse.kernels.attention import choose_mqa_config

_attention_checks = import_test_support("attention_checks")
ROW_ATOL, row_normalised = _attention_checks.ROW_ATOL, _attention_checks.row_normalised

HEAD_DIM = 512
ROUNDS = 3


def floor_bytes(sequences: int, length: int, heads: int, dim: int) -> int:
    """Each sequence's KV once, q read and the output written, bf16."""
    return sequences * length * dim * 2 + 2 * (sequences * heads * dim * 2)


def make_sets(sequences: int, length: int, heads: int, dim: int, *, seed: int) -> list[dict]:
    """The decode-attention problem: enough (q, cache, lens) sets for ``sequences`` sequences of
    ``length`` keys, ``heads`` query heads of ``dim`` that one round of calls streams past the L2."""
    per_set = floor_bytes(sequences, length, heads, dim)
    count = max(1, min(64, math.ceil(ROTATE_BYTES / per_set)))
    sets = []
    for i in range(count):
        g = torch.Generator(device="cuda").manual_seed(seed + i)
        kv = torch.randn(sequences, length, dim, generator=g, device="cuda").to(torch.bfloat16)
        q = torch.randn(sequences, heads, dim, generator=g, device="cuda").to(torch.bfloat16)
        lens = torch.full((sequences,), length - 1, dtype=torch.int64, device="cuda")
        out = torch.empty(sequences, heads * dim, dtype=torch.bfloat16, device="cuda")
        sets.append({"q": q, "kv": kv, "lens": lens, "out": out})
    return sets


def sdpa_call(s: dict, scale: float):
    """The decode step's attention before the kernel (mxfuse.models.dsv41 at the previous release), less
    the cache write: a boolean mask over the whole capacity, heads folded into the query length."""
    q, kv, lens = s["q"], s["kv"], s["lens"]
    b, capacity, dim = kv.shape
    heads = q.shape[1]

    def call():
        visible = torch.arange(capacity, device=q.device) <= lens[:, None]  # [B, capacity]
        mask = visible[:, None, None, :].expand(b, 1, heads, capacity)
        keys = kv.unsqueeze(1)
        o = F.scaled_dot_product_attention(
            q.reshape(b, 1, heads, dim), keys, keys, attn_mask=mask, scale=scale
        )
        return o.reshape(b, heads * dim)

    return call


def kernel_call(s: dict, scale: float, config: MqaConfig):
    def call():
        mqa_decode_attention(
            s["q"], s["kv"], s["lens"], scale=scale, out=s["out"], check_lens=False, config=config
        )

    return call


def check(s: dict, scale: float, config: MqaConfig) -> float:
    """Worst per-row error of one run against the reference (relative to each row's max); raises past the
    bound."""
    s["out"].fill_(float("nan"))
    kernel_call(s, scale, config)()
    ref = mqa_decode_attention_reference(s["q"], s["kv"], s["lens"], scale=scale)
    a, e = row_normalised(s["out"], ref, s["q"].shape[1])
    err = float((a - e).abs().max())
    if not err <= ROW_ATOL:  # NaN fails too
        raise AssertionError(f"max per-row error {err} > {ROW_ATOL}")
    return err


# (block_n, d_parts, num_warps, num_stages) that fit the 227 KB of shared memory with head_dim 512 and 64
# heads (q 64 KB + stages x (a K tile, and a V half with two parts)) without spilling registers.
SHAPES_512 = ((32, 1, 8, 2), (32, 1, 8, 3), (64, 1, 8, 2), (32, 2, 8, 2), (32, 2, 8, 3))


def candidate_configs(sequences: int, heads: int) -> list[MqaConfig]:
    """The sweep's candidates for one shape: tile shapes, and splits that fill the GPU (132 SMs) once and
    twice (and 16 to 128 splits for one sequence); for up to 4 sequences also programs of 16 or 32 heads
    (more, smaller programs: less q to load and less partial to write each), pipelined or not.

    The table cannot see lengths, but a split takes at least ``min_tiles`` key tiles: with the two-wave
    split count and ``min_tiles`` 4 or 8, a short sequence (4096 keys: 64 tiles of 64) uses 8 to 16
    splits and a long one all of them, so the fp32 partials (written and read back: at T = 16 and 4096
    keys, 17 splits wrote 36 MB beside 64 MB of keys) shrink where they cost most."""
    block_m = min(64, max(16, triton.next_power_of_2(heads)))
    out = []
    for block_n, d_parts, warps, stages in SHAPES_512:
        programs = sequences * triton.cdiv(heads, block_m) * d_parts
        splits = {max(1, min(256, math.ceil(waves * 132 / programs))) for waves in (1, 2)}
        if sequences == 1:
            splits |= {16, 32, 64, 128}
        for n in sorted(splits):
            out.append(MqaConfig(block_n, block_m, d_parts, n, warps, stages))
        most = max(splits)
        if most > 1:
            for min_tiles in (4, 8):
                out.append(MqaConfig(block_n, block_m, d_parts, most, warps, stages, min_tiles=min_tiles))
    if sequences <= 4:
        # One stage as well: with one or two key tiles a split, a second pipeline buffer only keeps the
        # program's shared memory above half the SM's, so two programs cannot share one.
        for small_m, block_n, warps, stages in itertools.product((16, 32), (32, 64), (4,), (1, 2)):
            if small_m < block_m:
                for n in (32, 64) if sequences == 1 else (8, 16):
                    out.append(MqaConfig(block_n, small_m, 1, n, warps, stages))
    return out


def pick_winners(sweep: list[dict]) -> dict[str, dict]:
    """Per table key, the configuration measured at every swept length whose times are closest to each
    length's best (least geometric mean of time / best time): the table cannot see lengths, so one
    configuration must serve them all."""
    by_key: dict[str, dict[int, dict[MqaConfig, float]]] = {}
    for row in sweep:
        per_length = by_key.setdefault(row["key"], {})
        per_length.setdefault(row["length"], {})[MqaConfig(**row["config"])] = row["us"]
    winners = {}
    for key, per_length in by_key.items():
        common = set.intersection(*(set(times) for times in per_length.values()))
        if not common:
            continue
        best = {n: min(times.values()) for n, times in per_length.items()}

        def score(config: MqaConfig, per_length=per_length, best=best) -> float:
            return math.prod(per_length[n][config] / best[n] for n in per_length) ** (1 / len(per_length))

        choice = min(common, key=score)
        winners[key] = {"score": score(choice), **choice.__dict__}
    return winners


def kernel_breakdown(sets: list[dict], scale: float, config: MqaConfig, calls: int = 50) -> dict[str, float]:
    """Device microseconds per call of each kernel (torch profiler, eager launches, warm caches)."""
    from torch.profiler import ProfilerActivity, profile

    for s in sets[:2]:
        kernel_call(s, scale, config)()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            kernel_call(sets[i % len(sets)], scale, config)()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA and "mqa" in event.key:
            totals[event.key] = round(event.self_device_time_total / calls, 2)
    return totals


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,4,16,64,128")
    parser.add_argument("--lengths", default="4096,32768")
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sweep-shapes", default="1:4096,4:4096,16:4096,64:4096,128:4096,1:32768,16:32768")
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop sweeping after this many seconds")
    parser.add_argument("--no-sdpa-above", type=int, default=64 * 32768, help="skip SDPA above T x length")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--table", type=Path, default=None, help="write the sweep's winners as a config table"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    tokens = [int(t) for t in args.tokens.split(",")]
    lengths = [int(n) for n in args.lengths.split(",")]
    heads, dim = args.heads, HEAD_DIM
    scale = dim**-0.5
    bandwidth = copy_bandwidth()
    props = torch.cuda.get_device_properties(0)
    print(
        f"{datetime.date.today()} {props.name}, torch {torch.__version__}, triton {triton.__version__}, "
        f"copy bandwidth {bandwidth / 1e12:.2f} TB/s, heads {heads}, head_dim {dim}",
        flush=True,
    )
    results: dict = {"device": props.name, "bandwidth": bandwidth, "rows": [], "sweep": []}

    if args.sweep:
        for shape in args.sweep_shapes.split(","):
            t, n = (int(v) for v in shape.split(":"))
            sets = make_sets(t, n, heads, dim, seed=100)
            timed = []
            for config in candidate_configs(t, heads):
                if time.monotonic() - started > args.budget_s:
                    print(f"sweep budget spent at T={t} L={n}", flush=True)
                    break
                try:
                    err = check(sets[0], scale, config)
                    us = bench_us([kernel_call(s, scale, config) for s in sets], target_ms=10.0, replays=7)
                except Exception as exc:  # a configuration that does not compile or fit: reported, not fatal
                    print(f"  T={t} L={n} {config}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                    continue
                timed.append((us, config))
                results["sweep"].append(
                    {
                        "key": f"rows{heads}_b{t}_d{dim}",
                        "tokens": t,
                        "length": n,
                        "config": config.__dict__,
                        "us": us,
                        "err": err,
                    }
                )
            if timed:
                us, best = min(timed, key=lambda x: x[0])
                print(f"sweep T={t} L={n}: best {us:.1f} us {best} of {len(timed)}", flush=True)
            del sets
            torch.cuda.empty_cache()
        if args.table is not None:
            table = json.loads((REPO_ROOT / "src/mxfuse/kernels/attention/configs.json").read_text())
            table["device"] = f"{props.name}, swept {datetime.date.today()} (benchmarks/attention.py --sweep)"
            for key, w in pick_winners(results["sweep"]).items():
                print(f"table {key}: {w}", flush=True)
                table["configs"][key] = {
                    k: w[k]
                    for k in (
                        "block_n",
                        "block_m",
                        "d_parts",
                        "splits",
                        "num_warps",
                        "num_stages",
                        "pdl",
                        "min_tiles",
                    )
                }
            args.table.parent.mkdir(parents=True, exist_ok=True)
            args.table.write_text(json.dumps(table, indent=2) + "\n")

    header = "| T | length | kernel us | kernel, PDL flipped us | sdpa us | floor us | kernel / floor | sdpa / kernel |"
    lines = [header, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for t, n in itertools.product(tokens, lengths):
        sets = make_sets(t, n, heads, dim, seed=7)
        config = choose_mqa_config(t, 1, heads, dim, multiprocessors=props.multi_processor_count)
        flipped = dataclasses.replace(config, pdl=not config.pdl)
        err = check(sets[0], scale, config)
        check(sets[0], scale, flipped)
        variants = {
            "kernel": [kernel_call(s, scale, config) for s in sets],
            "kernel_flipped": [kernel_call(s, scale, flipped) for s in sets],
        }
        if t * n <= args.no_sdpa_above:
            variants["sdpa"] = [sdpa_call(s, scale) for s in sets]
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(ROUNDS):
            for name, fns in variants.items():
                times[name].append(bench_us(fns, target_ms=20.0))
        med = {k: statistics.median(v) for k, v in times.items()}
        floor = floor_bytes(t, n, heads, dim) / bandwidth * 1e6
        sdpa = med.get("sdpa")
        row = {"tokens": t, "length": n, "config": config.__dict__, "err": err, "floor_us": floor, **med}
        results["rows"].append(row)
        sdpa_s = f"{sdpa:.1f}" if sdpa is not None else "-"
        ratio_s = f"{sdpa / med['kernel']:.1f}x" if sdpa is not None else "-"
        lines.append(
            f"| {t} | {n} | {med['kernel']:.1f} | {med['kernel_flipped']:.1f} | {sdpa_s} | {floor:.1f} | "
            f"{med['kernel'] / floor:.2f}x | {ratio_s} |"
        )
        row["breakdown_us"] = kernel_breakdown(sets, scale, config)
        print(lines[-1], f"(config {config}, err {err:.2e}, kernels {row['breakdown_us']})", flush=True)
        del sets
        torch.cuda.empty_cache()
    out_dir = os.environ.get("OUT")
    path = args.json or (Path(out_dir) / "attention.json" if out_dir else None)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))
