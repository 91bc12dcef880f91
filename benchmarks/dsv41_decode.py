"""Time one DeepSeek-V4.1-Flash attention decode step: fused vs unfused vs all-bf16, on one GPU.

    python benchmarks/dsv41_decode.py [--tokens 1,4,16,64,128] [--kv 4096] [--config flash] [--json PATH]

The sublayer (``mxfuse.models.dsv41``: boundary -> wqkv_a -> q norm + wq_b -> MQA over the KV cache ->
wo_a -> wo_b -> boundary) is loaded from a random checkpoint in the native format written to a temporary
directory, once per path:

  * ``fused``: the boundary kernel writes wqkv_a's MXFP8 pair, wo_a's epilogue writes wo_b's pair;
  * ``unfused``: the producers write bf16 and each linear quantizes its own input (two more launches
    and two bf16 round trips per step);
  * ``bf16``: the dequantized checkpoint weights in bf16, no MXFP8 anywhere (cuBLAS).

T decode tokens = T sequences, each holding ``kv - 1`` cached tokens and attending to ``kv`` after the
step writes its own. Each path's step is captured as one CUDA graph (as a serving engine runs decode);
the three graphs are replayed interleaved (each path's 170-250 MB of weights evict the others' from the
60 MB L2, so every step reads its weights from HBM), ``--replays`` times each, one run; medians.
``floor``: the bytes a step must move (weights, KV read, activations ignored) at the copy bandwidth
measured in the same run. Before timing, each T checks fused == unfused bit for bit, the witness
(the fused path really consumed producer pairs) and calc_diff against bf16. For T = ``--profile-tokens``
the torch profiler lists each path's top kernels (eager steps; device time per step).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_timing import copy_bandwidth

from gpumatrix.compare import assert_same_bits, calc_diff
from mxfuse import witness
from mxfuse.models.dsv41 import CONFIGS, AttentionSublayer, load_sublayer, make_checkpoint
from mxfuse.models.dsv41.state import StepOutputs, random_kv_cache, random_state

PATHS = ("fused", "unfused", "bf16")
FIELDS = ("attn_out", "residual", "pre", "post", "comb", "y")
# Targets of the issue: fused >= 1.05x faster than unfused at T <= 64, >= 1.3x faster than bf16 at T <= 16.
TARGETS = (("unfused", 64, 1.05), ("bf16", 16, 1.3))


def weight_bytes(model: AttentionSublayer) -> int:
    """Bytes of weights one step reads: each linear's weight and the scales its GEMM reads, wo_a, wq_b,
    the norms and the hc parameters."""
    tensors = []
    for layer in (model.wqkv_a, model.wo_b):
        scale = layer.weight_scale_packed if layer.weight_scale_packed is not None else layer.weight_scale
        tensors += [layer.weight, scale]
    if model.wo_a is not None:
        tensors += [model.wo_a.qweight, model.wo_a.scale]
    own = [t for name, t in model.named_parameters(recurse=False)]
    return sum(t.numel() * t.element_size() for t in tensors + own if t is not None)


def step(model: AttentionSublayer, state, cache) -> StepOutputs:
    return model(state, cache, context="decode")


def capture(model: AttentionSublayer, state, cache) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(model, state, cache)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(model, state, cache)
    return graph


def check(models: dict[str, AttentionSublayer], state, cache) -> dict[str, object]:
    """fused == unfused bit for bit, the paths the witness saw, calc_diff against bf16."""
    outs, linear = {}, {}
    for path, model in models.items():
        with witness.capture() as records:
            outs[path] = step(model, state, cache.clone())
        torch.cuda.synchronize()
        linear[path] = [r["path"] for r in records if r["path"].startswith(("linear.", "hc.", "einsum."))]
    for field in FIELDS:
        assert_same_bits(getattr(outs["fused"], field), getattr(outs["unfused"], field), name=field)
    if linear["fused"].count("linear.pair_consumed") != 2:
        raise SystemExit(f"the fused path did not consume both pairs: {linear['fused']}")
    diffs = {f: calc_diff(getattr(outs["fused"], f), getattr(outs["bf16"], f)) for f in ("attn_out", "y")}
    return {"paths": linear, "calc_diff_vs_bf16": diffs}


def time_graphs(graphs: dict[str, torch.cuda.CUDAGraph], replays: int) -> dict[str, float]:
    for graph in graphs.values():
        graph.replay()
    torch.cuda.synchronize()
    events = {p: [] for p in graphs}
    order = list(graphs)
    for i in range(replays):
        for path in order[i % len(order) :] + order[: i % len(order)]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[path].replay()
            end.record()
            events[path].append((start, end))
    torch.cuda.synchronize()
    return {p: statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev) for p, ev in events.items()}


def profile(models: dict[str, AttentionSublayer], state, cache, *, steps: int = 10, top: int = 12) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    result = {}
    for path, model in models.items():
        c = cache.clone()
        for _ in range(2):
            step(model, state, c)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step(model, state, c)
            torch.cuda.synchronize()
        kernels = []
        for evt in prof.key_averages():
            if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
            us = getattr(evt, "self_device_time_total", None)
            if us is None:
                us = evt.self_cuda_time_total
            kernels.append({"name": evt.key, "us_per_step": us / steps, "calls_per_step": evt.count / steps})
        kernels.sort(key=lambda k: -k["us_per_step"])
        result[path] = {"total_us_per_step": sum(k["us_per_step"] for k in kernels), "top": kernels[:top]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", default="1,4,16,64,128", help="decode batch sizes T")
    parser.add_argument("--kv", type=int, default=4096, help="KV length each sequence attends to")
    parser.add_argument("--config", default="flash", choices=sorted(CONFIGS))
    parser.add_argument("--replays", type=int, default=100)
    parser.add_argument("--profile-tokens", type=int, default=1)
    parser.add_argument("--json", default=None, help="write every number here (default: $OUT or reports/)")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    config = CONFIGS[args.config]
    device = torch.device("cuda", torch.cuda.current_device())

    with tempfile.TemporaryDirectory() as directory:
        make_checkpoint(directory, config, seed=0, device=device)
        models = {p: load_sublayer(directory, config, path=p, device=device) for p in PATHS}
    bandwidth = copy_bandwidth()
    wbytes = {p: weight_bytes(m) for p, m in models.items()}
    print(
        f"weights per step: {', '.join(f'{p} {b / 1e6:.1f} MB' for p, b in wbytes.items())}; "
        f"copy bandwidth {bandwidth / 1e12:.2f} TB/s",
        flush=True,
    )

    rows, breakdown = [], None
    for t in tokens:
        state = random_state(config, t, seed=t, device=device)
        cache = random_kv_cache(
            config, sequences=t, capacity=args.kv, lens=[args.kv - 1] * t, seed=t, device=device
        )
        checked = check(models, state, cache)
        caches = {p: cache.clone() for p in PATHS}
        graphs = {p: capture(models[p], state, caches[p]) for p in PATHS}
        us = time_graphs(graphs, args.replays)
        kv_bytes = t * args.kv * config.head_dim * 2
        floor = {p: (wbytes[p] + kv_bytes) / bandwidth * 1e6 for p in PATHS}
        row = {"tokens": t, "us": us, "floor_us": floor, **checked}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "paths"}), flush=True)
        if t == args.profile_tokens:
            breakdown = profile(models, state, cache)
        del graphs, caches, cache
        torch.cuda.empty_cache()

    meta = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "config": args.config,
        "kv": args.kv,
        "replays": args.replays,
        "backend": models["fused"].wqkv_a.processed.backend,
        "weight_bytes": wbytes,
        "copy_bandwidth": bandwidth,
    }
    out = Path(args.json or Path(os.environ.get("OUT", "reports")) / "dsv41_decode.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows, "profile": breakdown}, indent=1))

    if breakdown is not None:
        print(f"\ntop kernels at T = {args.profile_tokens} (eager steps, device us per step):")
        for path, info in breakdown.items():
            print(f"  {path}: {info['total_us_per_step']:.1f} us of kernels per step")
            for k in info["top"]:
                print(f"    {k['us_per_step']:8.1f} us  x{k['calls_per_step']:.0f}  {k['name'][:90]}")
    print(
        f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, {args.config}, KV {args.kv}, "
        f"backend {meta['backend']}; median of {args.replays} graph replays per step (us)"
    )
    print(
        "|  T | fused | unfused | bf16 | unfused/fused | bf16/fused | floor mxfp8 | floor bf16 | calc_diff attn_out |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        u = row["us"]
        print(
            f"| {row['tokens']} | {u['fused']:.1f} | {u['unfused']:.1f} | {u['bf16']:.1f} | "
            f"{u['unfused'] / u['fused']:.3f} | {u['bf16'] / u['fused']:.3f} | {row['floor_us']['fused']:.1f} | "
            f"{row['floor_us']['bf16']:.1f} | {row['calc_diff_vs_bf16']['attn_out']:.2e} |"
        )
    for other, max_t, target in TARGETS:
        for row in rows:
            if row["tokens"] <= max_t:
                ratio = row["us"][other] / row["us"]["fused"]
                verdict = "met" if ratio >= target else "MISSED"
                print(
                    f"target fused >= {target}x faster than {other} at T = {row['tokens']}: {ratio:.3f} {verdict}"
                )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
