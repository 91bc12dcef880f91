"""Time the DeepSeek-V4.1-Flash attention decode step on one GPU (TP=1) and on two (TP=2, NCCL).

    python -m benchmarks dsv41_tp2 [--tokens 1,16,64] [--kv 4096] [--replays 100] [--json PATH]
    python -m benchmarks dsv41_tp2 --dry-run      # the same orchestration on the CPU: gloo, tiny, eager

Needs two GPUs (the first two it sees). The script writes a random checkpoint in the native format
once and starts one process per rank (NVLink multicast off: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1). Each rank loads its shard (V4.1-Flash
under TP2: 32 heads, 4 wo_a groups, wo_b K = 4096; wqkv_a, the boundaries and the KV cache replicated)
and all-reduces wo_b's output before the second boundary; rank 0 also loads the unsharded model.

T decode tokens = T sequences, each holding ``kv - 1`` cached tokens. Per T and variant one decode
step is captured as one CUDA graph (TP=2: the NCCL all-reduce inside it):

  * ``TP=1 fused`` / ``TP=1 unfused`` on GPU 0 alone, interleaved, while rank 1 waits on the host;
  * ``TP=2 fused`` / ``TP=2 unfused`` and the all-reduce of a [T, hidden] bf16 buffer alone, interleaved
    in the same order on both ranks. A TP=2 replay's time is the slower rank's.

``--replays`` replays each; medians. Interleaving makes every step read its weights from HBM (each
variant's are 90-250 MB per GPU, the L2 60 MB). ``floor``: the bytes one GPU must read per step (its
weights and the whole KV cache, which multi-query attention replicates) at the copy bandwidth measured
in the same run. Before timing, each T checks on each rank that fused == unfused bit for bit, that the
witness saw both producer pairs consumed and one all-reduce, and that TP=2 is within the tests'
TP_BUDGET of TP=1 (calc_diff; tests/support/dsv41_cases.py); a failed check exits 1.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.support import REPO_ROOT, import_test_support, routine_command
from benchmarks.timing import capture_graph, interleaved_us

__all__ = ["main"]

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
WORLD = 2
FIELDS = ("attn_out", "residual", "pre", "post", "comb", "y")
PATHS = ("fused", "unfused")


class Replays:
    """CUDA graphs timed with events; on the CPU (dry run) the step itself, timed by the host clock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def capture(self, step: Callable[[], object]) -> Callable[[], object]:
        if not self.cuda:
            step()
            return step
        return capture_graph(step).replay

    def time(self, replays: dict[str, Callable[[], object]], count: int) -> dict[str, list[float]]:
        """Microseconds of each replay, variants interleaved in an order every rank repeats exactly."""
        return interleaved_us(replays, count, cuda=self.cuda)


def _check(models: dict, state, cache, replays: Replays) -> dict[str, object]:
    """fused == unfused bit for bit; the paths the witness saw (both pairs consumed, the reduce)."""
    from gpumatrix.compare import assert_same_bits
    from mxfuse import witness

    outs, seen = {}, {}
    for name, model in models.items():
        with witness.capture() as records:
            outs[name] = model(state, cache.clone(), context="decode")
        replays.sync()
        seen[name] = [r["path"] for r in records if r["path"].startswith(("linear.", "tp."))]
    for field in FIELDS:
        assert_same_bits(getattr(outs["fused"], field), getattr(outs["unfused"], field), name=field)
    want = ["linear.pair_consumed"] * 3 + (["tp.all_reduce"] if models["fused"].process_group else [])
    if seen["fused"] != want:
        raise SystemExit(f"the fused step took other paths than {want}: {seen['fused']}")
    return {"outs": outs, "paths": seen}


def _decode(model, state, cache) -> Callable[[], object]:
    return functools.partial(model, state, cache, context="decode")


def _measure(t: int, ctx: dict, args: argparse.Namespace) -> dict[str, object]:
    """One T: check, capture, time TP=1 on rank 0 alone, then TP=2 on both; rank 0 gets the row."""
    import torch.distributed as dist

    from gpumatrix.compare import calc_diff
    from mxfuse.models.dsv41 import random_kv_cache, random_state

    rank, device, config, replays = ctx["rank"], ctx["device"], ctx["config"], ctx["replays"]
    world, host, tp1, tp2 = ctx["world"], ctx["host"], ctx["tp1"], ctx["tp2"]
    state = random_state(config, t, seed=t, device=device)  # drawn on the CPU: the same on both ranks
    cache = random_kv_cache(
        config, sequences=t, capacity=args.kv, lens=[args.kv - 1] * t, seed=t, device=device
    )
    dist.broadcast(cache.kv, src=0, group=world)  # replicated: rank 0's values everywhere
    checked = _check(tp2, state, cache, replays)
    diffs = {}
    if tp1:
        one = _check(tp1, state, cache, replays)
        for field in ("attn_out", "y", "residual"):
            diffs[field] = calc_diff(
                getattr(checked["outs"]["fused"], field), getattr(one["outs"]["fused"], field)
            )
    caches = {p: cache.clone() for p in PATHS}
    steps2 = {f"TP=2 {p}": replays.capture(_decode(m, state, caches[p])) for p, m in tp2.items()}
    buffer = torch.randn(t, config.hidden).to(torch.bfloat16).to(device)
    steps2["all-reduce"] = replays.capture(functools.partial(dist.all_reduce, buffer, group=world))
    times: dict[str, list[float]] = {}
    if tp1:
        caches1 = {p: cache.clone() for p in PATHS}
        steps1 = {f"TP=1 {p}": replays.capture(_decode(m, state, caches1[p])) for p, m in tp1.items()}
        times |= replays.time(steps1, args.replays)
    dist.barrier(group=host)  # rank 1 idles on the host while GPU 0 times TP=1 alone
    times |= replays.time(steps2, args.replays)
    gathered: list = [None] * WORLD
    dist.all_gather_object(gathered, times, group=host)
    if rank:
        return {}
    us = {name: statistics.median(v) for name, v in times.items() if name.startswith("TP=1")}
    per_rank = {}
    for name in steps2:  # a TP=2 replay ends when its slower rank does
        us[name] = statistics.median(torch.tensor([g[name] for g in gathered]).amax(dim=0).tolist())
        per_rank[name] = [statistics.median(g[name]) for g in gathered]
    kv_bytes = t * args.kv * config.head_dim * 2
    bandwidth = ctx["bandwidth"]
    floor = {n: (b + kv_bytes) / bandwidth * 1e6 for n, b in ctx["sizes"].items()} if bandwidth else {}
    return {
        "tokens": t,
        "us": us,
        "us_per_rank": per_rank,
        "floor_us": floor,
        "calc_diff_tp2_vs_tp1": diffs,
        "paths": checked["paths"],
    }


def run_rank(rank: int, args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from benchmarks.dsv41_decode import weight_bytes
    from mxfuse.models.dsv41 import CONFIGS, load_sublayer, rank_config

    if args.dry_run:
        torch.set_num_threads(1)
        device, backend, extra = torch.device("cpu"), "gloo", {}
    else:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        backend, extra = "nccl", {"device_id": device}
    dist.init_process_group(
        backend,
        init_method=f"file://{args.dir}/store",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=300),
        **extra,
    )
    world = dist.group.WORLD
    config = CONFIGS[args.config]
    checkpoint = f"{args.dir}/checkpoint"

    def load(path: str, shard: bool):
        cfg, group = (rank_config(config, world), world) if shard else (config, None)
        return load_sublayer(checkpoint, cfg, path=path, device=device, process_group=group)

    ctx = {
        "rank": rank,
        "device": device,
        "config": config,
        "world": world,
        "host": dist.new_group(backend="gloo"),  # waits and gathers without occupying the GPUs
        "replays": Replays(device),
        "tp2": {p: load(p, True) for p in PATHS},
        "tp1": {} if rank else {p: load(p, False) for p in PATHS},
    }
    if device.type == "cuda":
        from benchmarks.timing import copy_bandwidth

        ctx["bandwidth"] = copy_bandwidth()
    else:
        ctx["bandwidth"] = None
    ctx["sizes"] = {f"TP={n} {p}": weight_bytes(m) for n in (2, 1) for p, m in ctx[f"tp{n}"].items()}
    rows = []
    for t in args.tokens:
        rows.append(_measure(t, ctx, args))
        if rank == 0:
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "paths"}), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if rank == 0:
        import triton

        cuda = device.type == "cuda"
        meta = {
            "date": datetime.date.today().isoformat(),
            "device": [torch.cuda.get_device_name(i) for i in range(WORLD)] if cuda else ["cpu"] * WORLD,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "config": args.config,
            "kv": args.kv,
            "replays": args.replays,
            "backend": ctx["tp2"]["fused"].wqkv_a.processed.backend,
            "weight_bytes": ctx["sizes"],
            "copy_bandwidth": ctx["bandwidth"],
            "env": {k: os.environ.get(k) for k in NO_MULTICAST},
        }
        Path(args.dir, "result.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    dist.barrier(group=ctx["host"])
    dist.destroy_process_group()


# ---- the launcher -------------------------------------------------------------------------------------


def _launch(args: argparse.Namespace, directory: str) -> list[int]:
    """Run the ranks; their exit codes. A failed rank stops the other (it would wait in a collective)."""
    env = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1"}
    argv = routine_command("dsv41_tp2", "--dir", directory, "--tokens", ",".join(map(str, args.tokens)))
    argv += ["--kv", str(args.kv), "--replays", str(args.replays), "--config", args.config]
    argv += ["--dry-run"] if args.dry_run else []
    procs = [subprocess.Popen([*argv, "--rank", str(r)], env=env, cwd=REPO_ROOT) for r in range(WORLD)]
    deadline = time.monotonic() + args.timeout
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    return [p.returncode for p in procs]


def _report(result: dict, out: Path) -> None:
    meta, rows = result["meta"], result["rows"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(
        f"\n2 x {meta['device'][0]}, torch {meta['torch']}, triton {meta['triton']}, NCCL {meta['nccl']}, "
        f"{meta['config']}, "
        f"KV {meta['kv']}, backend {meta['backend']}; median of {meta['replays']} replays per step (us)"
    )
    print(
        "|  T | TP=1 fused | TP=2 fused | TP=1 / TP=2 | TP=1 unfused | TP=2 unfused | all-reduce alone "
        "| floor TP=1 | floor TP=2 | calc_diff attn_out TP=2 vs TP=1 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        u, f = row["us"], row["floor_us"]
        floors = [f"{f[n]:.1f}" if n in f else "-" for n in ("TP=1 fused", "TP=2 fused")]
        print(
            f"| {row['tokens']} | {u['TP=1 fused']:.1f} | {u['TP=2 fused']:.1f} | "
            f"{u['TP=1 fused'] / u['TP=2 fused']:.2f}x | {u['TP=1 unfused']:.1f} | {u['TP=2 unfused']:.1f} | "
            f"{u['all-reduce']:.1f} | {floors[0]} | {floors[1]} | {row['calc_diff_tp2_vs_tp1']['attn_out']:.2e} |"
        )
    if meta["device"][0] == "cpu":
        print("dry run on the CPU (gloo, eager steps, host clock): these times say nothing about GPUs")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", default="1,16,64", type=lambda s: [int(t) for t in s.split(",")])
    parser.add_argument("--kv", type=int, default=4096, help="KV length each sequence attends to")
    parser.add_argument("--replays", type=int, default=100)
    parser.add_argument("--config", default="flash", help="dims (a dry run defaults to tiny)")
    parser.add_argument(
        "--dry-run", action="store_true", help="CPU, gloo, eager steps: check the orchestration"
    )
    parser.add_argument("--timeout", type=float, default=480, help="seconds before the ranks are stopped")
    parser.add_argument("--json", default=None, help="write every number here (default: $OUT or reports/)")
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dry_run and args.config == "flash" and "--config" not in sys.argv:
        args.config = "tiny"
    if args.rank is not None:
        run_rank(args.rank, args)
        return
    TP_BUDGET = import_test_support("dsv41_cases").TP_BUDGET

    from mxfuse.models.dsv41 import CONFIGS, make_checkpoint

    if args.config not in CONFIGS or CONFIGS[args.config].tp_size != 1:
        raise SystemExit(f"--config must name an unsharded config; got {args.config!r}")
    if not args.dry_run and torch.cuda.device_count() < WORLD:
        raise SystemExit(
            f"needs {WORLD} GPUs; this machine shows {torch.cuda.device_count()} (--dry-run: CPU)"
        )
    with tempfile.TemporaryDirectory(prefix="dsv41-tp2-") as directory:
        make_checkpoint(Path(directory, "checkpoint"), CONFIGS[args.config], seed=0)  # ranks read shards
        codes = _launch(args, directory)
        if any(codes):
            raise SystemExit(f"the ranks exited {codes}")
        result = json.loads(Path(directory, "result.json").read_text())
    _report(result, Path(args.json or Path(os.environ.get("OUT", "reports")) / "dsv41_tp2.json"))
    bad = [
        (row["tokens"], field, value)
        for row in result["rows"]
        for field, value in row["calc_diff_tp2_vs_tp1"].items()
        if not value <= TP_BUDGET[field]  # also true for NaN
    ]
    if bad:
        raise SystemExit(f"TP=2 is outside TP_BUDGET of TP=1: {bad}")
