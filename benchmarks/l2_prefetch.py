"""Does an L2 prefetch make the next GEMM faster, and how fast does the prefetch fill L2? One GPU.

    python benchmarks/l2_prefetch.py [--shapes "v41 wq_b,v41 wo_b DP4,v41 wqkv_a"] [--m 1] [--json PATH]

For each weight shape (the decode step's MXFP8 GEMMs at M tokens) and each prefetch variant, one eager
sequence per sample: a write of 256 MB (L2 cold), then the variant's prefetch of the weight
(``mxfuse.kernels.l2_prefetch.launch_prefetch_l2``: bulk requests of 4, 16 or 64 KB, or one per
128-byte line, with or without ``evict_last``), a sleep of S us on the GPU (the latency-bound kernels
a step runs meanwhile; also long enough for the host to queue the GEMM), then the GEMM between two
CUDA events. ``none`` sleeps without prefetching: the cold GEMM. ``read`` reads the weight with a real
load (a sum) instead: L2 as warm as the data can make it. Medians of ``--samples`` interleaved samples;
S in ``--sleeps``. The GEMM's result is checked against the cold one bit for bit (a prefetch writes
nothing). The step (``benchmarks/dsv41_decode.py --prefetch both``) is the measure that counts; this
one says whether and how fast the hint works.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_timing import copy_bandwidth

from mxfuse.formats import quantize_mxfp8_reference
from mxfuse.gemm import mxfp8_gemm, prepare_mxfp8_weight
from mxfuse.kernels.l2_prefetch import launch_prefetch_l2

SHAPES = {  # (N, K)
    "v41 wq_b": (32768, 1280),
    "v41 wo_b DP4": (5120, 8192),
    "v41 wqkv_a": (1792, 5120),
    "v41 wo_b TP4": (5120, 2048),
}
VARIANTS = {
    "none": None,
    "bulk 4K": ("bulk", 4096),
    "bulk 16K": ("bulk", 16384),
    "bulk 64K": ("bulk", 65536),
    "line": ("line", 128),
    "line evict_last": ("line_last", 128),
    "read": "read",
}


@dataclass
class Case:
    weight: object
    pair: tuple[torch.Tensor, torch.Tensor]
    out: torch.Tensor
    sink: torch.Tensor
    flush: torch.Tensor
    wbytes: int
    clock_hz: float


def sample(c: Case, variant: str, sleep_us: float) -> tuple[torch.cuda.Event, torch.cuda.Event]:
    """One eager sequence: L2 made cold, the variant, the sleep, the GEMM between two events."""
    c.flush.fill_(1)
    v = VARIANTS[variant]
    if v == "read":
        torch.sum(c.weight.qweight.view(torch.uint8), dim=0, dtype=torch.int64, out=c.sink)
    elif v is not None:
        launch_prefetch_l2(c.weight.qweight, c.wbytes, mode=v[0], chunk=max(v[1], 16))
    torch.cuda._sleep(int(sleep_us * 1e-6 * c.clock_hz))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    mxfp8_gemm(c.pair, c.weight, backend="triton", out=c.out)
    end.record()
    return start, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", default="v41 wq_b,v41 wo_b DP4,v41 wqkv_a")
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--sleeps", default="5,15,40", help="us between the prefetch and the GEMM")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    clock_hz = 1.98e9  # the H200's boost clock: torch.cuda._sleep counts cycles
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    bandwidth = copy_bandwidth()
    sleeps = [int(s) for s in args.sleeps.split(",")]
    rows = []
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        w = torch.randn(n, k, device=dev)
        weight = prepare_mxfp8_weight(w, backend="triton")
        pair = quantize_mxfp8_reference(torch.randn(args.m, k, device=dev), scale_layout="deepgemm")
        ref = mxfp8_gemm(pair, weight, backend="triton")
        out = torch.empty_like(ref)
        wbytes = weight.qweight.numel()
        sink = torch.zeros(k, dtype=torch.int64, device=dev)

        case = Case(weight, pair, out, sink, flush, wbytes, clock_hz)

        for variant in VARIANTS:  # compile everything once
            sample(case, variant, 1)
        torch.cuda.synchronize()
        if not torch.equal(out, ref):
            raise SystemExit(f"{name}: the GEMM after a prefetch differs from the cold one")
        samples = {(v, s): [] for v in VARIANTS for s in sleeps}
        for i in range(args.samples):
            keys = list(samples)
            for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
                samples[key].append(sample(case, *key))
            torch.cuda.synchronize()
        floor = (wbytes + weight.scale.numel()) / bandwidth * 1e6
        for (variant, s), evs in samples.items():
            us = statistics.median(a.elapsed_time(b) * 1e3 for a, b in evs)
            rows.append({"shape": name, "n": n, "k": k, "m": args.m, "variant": variant, "sleep_us": s,
                         "gemm_us": us, "floor_us": floor, "weight_mb": wbytes / 1e6})  # fmt: skip
    meta = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(dev),
        "l2_bytes": props.L2_cache_size,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bandwidth": bandwidth,
    }
    path = Path(args.json or Path(os.environ.get("OUT", "reports")) / "l2_prefetch.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"{meta['gpu']} (L2 {props.L2_cache_size / 2**20:.0f} MiB), torch {meta['torch']}, triton {meta['triton']}; "
          f"M = {args.m}; GEMM us after the variant and a sleep of S us (median of {args.samples})")  # fmt: skip
    print("| shape | weight MB | floor | variant | " + " | ".join(f"S = {s}" for s in sleeps) + " |")
    print("|---|---:|---:|---|" + "---:|" * len(sleeps))
    for name in args.shapes.split(","):
        for variant in VARIANTS:
            rs = {r["sleep_us"]: r for r in rows if r["shape"] == name and r["variant"] == variant}
            first = next(iter(rs.values()))
            cells = " | ".join(f"{rs[s]['gemm_us']:.2f}" for s in sleeps)
            print(f"| {name} | {first['weight_mb']:.1f} | {first['floor_us']:.2f} | {variant} | {cells} |")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
