"""Time the MXFP8 quantize kernel against its baselines on one GPU: CUDA graphs, medians.

    python -m benchmarks quantize [--sweep] [--json PATH]

For M in {1, 16, 128, 2048, 16384}, K = 7168, bf16 input, in one run:
  * ``quantize_mxfp8`` (deepgemm scales, the default; e8m0 scales too), writing into preallocated buffers;
  * ``torch.compile(quantize_mxfp8_reference)`` with e8m0 scales (its cheapest layout);
  * torchao's ``to_mx(..., scaling_mode=RCEIL)`` under ``torch.compile``, when torchao imports;
  * the copy ceiling: ``dst.copy_(src)`` of a uint8 buffer holding half the bytes the kernel moves, so the
    copy reads and writes exactly as many bytes as the kernel (bf16 read + fp8 write + deepgemm scales).
Each variant is captured in one CUDA graph of many calls, cycling through enough buffer sets that
repeated calls do not run out of the 60 MB L2 (at M >= 2048), and timed over 15 replays; the table
gives the median microseconds per call; every variant is timed three times, interleaved, and the median
of the three is reported. ``--sweep`` also times the kernel's block configurations.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib
import json
import math
import statistics
from collections.abc import Callable

import torch
import triton

from benchmarks.timing import bench_us
from mxfuse.formats import MxTensor, quantize_mxfp8_reference, scale_spec
from mxfuse.kernels import quantize_mxfp8

K = 7168
MS = (1, 16, 128, 2048, 16384)
ROTATE_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2
# (BLOCK_M, BLOCK_W, num_warps); the first row of each list is timed again last, to show the spread.
SWEEP_SMALL = [
    (16, 2, 4),
    (8, 2, 4),
    (4, 2, 4),
    (8, 1, 4),
    (8, 1, 2),
    (16, 1, 4),
    (16, 1, 2),
    (4, 1, 2),
    (4, 1, 1),
    (2, 2, 2),
    (1, 4, 2),
    (1, 2, 1),
    (4, 4, 4),
    (32, 1, 4),
    (16, 2, 4),
]
SWEEP_LARGE = [(16, 2, 4), (8, 2, 4), (32, 1, 4), (16, 1, 2), (8, 4, 4), (32, 2, 8), (16, 4, 8), (16, 2, 4)]


def moved_bytes(m: int, k: int) -> int:
    """Bytes the kernel must move: bf16 read, fp8 written, deepgemm scales (padding included) written."""
    spec = scale_spec(m, k, scale_layout="deepgemm")
    return 2 * m * k + m * k + 4 * spec.storage_numel


def make_inputs(m: int, k: int) -> list[torch.Tensor]:
    """The quantize problem [M, K]: enough bf16 inputs that one round of calls streams past the L2."""
    sets = max(1, min(32, math.ceil(ROTATE_BYTES / moved_bytes(m, k))))
    xs = []
    for i in range(sets):
        g = torch.Generator(device="cuda").manual_seed(i)
        xs.append(torch.randn(m, k, generator=g, device="cuda", dtype=torch.bfloat16))
    return xs


def load_torchao() -> Callable[[torch.Tensor], object] | None:
    try:
        mx_tensor = importlib.import_module("torchao.prototype.mx_formats.mx_tensor")
        config = importlib.import_module("torchao.prototype.mx_formats.config")
    except Exception as exc:  # missing, or built for another torch: either way not available here
        print(f"torchao unavailable: {type(exc).__name__}: {exc}")
        return None
    return functools.partial(
        mx_tensor.to_mx,
        elem_dtype=torch.float8_e4m3fn,
        block_size=32,
        scaling_mode=config.ScaleCalculationMode.RCEIL,
    )


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a.view(torch.uint8), b.view(torch.uint8)))


def measure(m: int, k: int, compiled_ref, compiled_tao, *, rounds: int = 3) -> dict[str, object]:
    """Each variant timed ``rounds`` times, interleaved, so drift hits all alike; the median is kept."""
    xs = make_inputs(m, k)
    row: dict[str, object] = {"M": m, "K": k, "bytes": moved_bytes(m, k), "sets": len(xs)}
    half = moved_bytes(m, k) // 2
    srcs = [torch.randint(0, 256, (half,), dtype=torch.uint8, device="cuda") for _ in xs]
    dsts = [torch.empty_like(s) for s in srcs]
    variants = {"copy": [functools.partial(d.copy_, s) for d, s in zip(dsts, srcs, strict=True)]}
    for layout in ("deepgemm", "e8m0"):
        outs = [MxTensor.empty(m, k, scale_layout=layout, device="cuda") for _ in xs]
        variants[f"kernel_{layout}"] = [
            functools.partial(quantize_mxfp8, x, scale_layout=layout, out=o)
            for x, o in zip(xs, outs, strict=True)
        ]
    variants["compile_ref"] = [functools.partial(compiled_ref, x) for x in xs]
    kernel = quantize_mxfp8(xs[0], scale_layout="e8m0")
    kernel_q, kernel_s = kernel.data, kernel.scale
    ref_q, ref_s = compiled_ref(xs[0])
    row["compile_ref_bits_equal"] = same_bits(ref_q, kernel_q) and same_bits(ref_s, kernel_s)
    if compiled_tao is not None:
        variants["torchao"] = [functools.partial(compiled_tao, x) for x in xs]
        tao_s, tao_q = compiled_tao(xs[0])
        row["torchao_bits_equal"] = same_bits(tao_q, kernel_q) and same_bits(tao_s.reshape(m, -1), kernel_s)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fns in variants.items():
            times[name].append(bench_us(fns, target_ms=25.0))
    for name, values in times.items():
        row[f"{name}_us"] = statistics.median(values)
        row[f"{name}_rounds_us"] = values
    return row


def sweep(m: int, k: int, configs: list[tuple[int, int, int]]) -> list[dict[str, object]]:
    module = importlib.import_module("mxfuse.kernels.quantize.launch")
    xs = make_inputs(m, k)
    rows = []
    for config in configs:
        outs = [MxTensor.empty(m, k, scale_layout="deepgemm", rounding="rceil", device="cuda") for _ in xs]
        fns = [
            functools.partial(module.launch_quantize, x, o, hw_cvt=True, config=config)
            for x, o in zip(xs, outs, strict=True)
        ]
        rows.append({"M": m, "config": config, "us": bench_us(fns, target_ms=25.0)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweep", action="store_true", help="also time the kernel's block configurations")
    parser.add_argument("--json", help="write every number to this file")
    args = parser.parse_args(argv)

    torchao_version = "not importable"
    compiled_tao = None
    to_mx = load_torchao()
    if to_mx is not None:
        torchao_version = importlib.import_module("torchao").__version__
        compiled_tao = torch.compile(to_mx, dynamic=False)
    compiled_ref = torch.compile(
        functools.partial(quantize_mxfp8_reference, scale_layout="e8m0"), dynamic=False
    )
    torch._dynamo.config.recompile_limit = 64

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "torchao": torchao_version,
    }
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    sweep_rows = []
    if args.sweep:
        for m in (1, 16, 128):
            sweep_rows += sweep(m, K, SWEEP_SMALL)
        for m in (2048, 16384):
            sweep_rows += sweep(m, K, SWEEP_LARGE)
        print("\nsweep (deepgemm, rceil): M, (BLOCK_M, BLOCK_W, warps), us")
        for r in sweep_rows:
            print(f"  {r['M']:>6} {r['config']!s:>12} {r['us']:9.2f}")

    rows = [measure(m, K, compiled_ref, compiled_tao) for m in MS]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "rows": rows, "sweep": sweep_rows}, f, indent=1)

    print(
        f"\n{env['date']}, {env['gpu']}, torch {env['torch']}, Triton {env['triton']}, torchao {env['torchao']}; "
        f"K = {K}, bf16 in; us per call, median of 3 interleaved rounds of 15 CUDA-graph replays"
    )
    print(
        "| M | MB moved | copy ceiling | kernel (deepgemm) | % of ceiling | kernel (e8m0) "
        "| torch.compile ref (e8m0) | torchao to_mx compiled | kernel speed-up vs compile / torchao |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        kernel = r["kernel_deepgemm_us"]
        tao = f"{r['torchao_us']:.2f}" if "torchao_us" in r else "n/a"
        tao_x = f"{r['torchao_us'] / kernel:.2f}x" if "torchao_us" in r else "n/a"
        print(
            f"| {r['M']} | {r['bytes'] / 1e6:.2f} | {r['copy_us']:.2f} | {kernel:.2f} "
            f"| {100 * r['copy_us'] / kernel:.1f}% | {r['kernel_e8m0_us']:.2f} | {r['compile_ref_us']:.2f} | {tao} "
            f"| {r['compile_ref_us'] / kernel:.2f}x / {tao_x} |"
        )
    same = {r["M"]: (r["compile_ref_bits_equal"], r.get("torchao_bits_equal")) for r in rows}
    print(f"baselines' bits equal to the kernel's (compile ref, torchao) by M: {same}")
    return 0
