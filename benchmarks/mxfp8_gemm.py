"""Time the MXFP8 GEMM backends against bf16 and FP8 cuBLAS on one GPU, with the byte floor, in one run.

    python -m benchmarks mxfp8_gemm [--sweep] [--ms 1,4,...] [--backends triton,gluon,bf16,fp8] [--json PATH]

Shapes (N, K): DeepSeek-V4.1-Flash wqkv_a (1792, 5120), wo_b under TP4 (5120, 2048) and DP4 (5120, 8192);
V4-Pro wqkv_a (2048, 7168), wo_b (7168, 16384). M in {1, 4, 16, 64, 256, 2048}.
  * ``triton``: ``mxfp8_gemm`` on the triton backend (deepgemm activation scales, the producers' default),
    writing into a preallocated output;
  * ``gluon``: ``mxfp8_gemm`` on the gluon backend (sm_90 only; the Gluon decode kernel), same operands;
  * ``bf16``: ``torch.mm(x, w.t(), out=...)`` on bf16 copies of the same weights (cuBLAS);
  * ``fp8``: ``torch._scaled_mm`` on E4M3 copies with one fp32 scale per tensor (FP8 cuBLAS: what a Hopper
    user runs instead; the activation padded to a multiple of 16 rows, as cuBLAS's FP8 GEMM wants);
  * ``floor``: weight + activation + output bytes at the copy bandwidth measured in the same run.
Weights are rotated through enough copies that every call reads them from HBM (cold, as in a decode step
where the layers before evicted them). Each variant is one CUDA graph of many calls; medians of 15
replays; variants interleaved over three rounds, median of the three. Results are checked against the
torch backend (``calc_diff`` <= 1e-5) before anything is timed. ``--sweep`` times a list of launch
configurations per (shape, M) and reports the best next to the default.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
from pathlib import Path

import torch
import triton

from benchmarks.timing import bench_us, copy_bandwidth, rotation_count
from gpumatrix.compare import calc_diff
from mxfuse.gemm import mxfp8_gemm, prepare_mxfp8_weight
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.gemm import GemmConfig, choose_config, launch_mxfp8_gemm

SHAPES = {
    "v41 wqkv_a": (1792, 5120),
    "v41 wq_b": (32768, 1280),
    "v41 wq_b tp4": (8192, 1280),
    "v41 wo_b tp4": (5120, 2048),
    "v41 wo_b dp4": (5120, 8192),
    "pro wqkv_a": (2048, 7168),
    "pro wo_b": (7168, 16384),
}
MS = (1, 4, 16, 64, 256, 2048)
BACKENDS = ("triton", "gluon", "bf16", "fp8")  # bf16 is the baseline every ratio is taken against


def sweep_configs(m: int, n: int, k: int) -> list[GemmConfig]:
    """Candidate launch configurations around the default for one problem."""
    g = GemmConfig
    out = []
    if m <= 4:
        bm = triton.next_power_of_2(m)
        for bits in (False, True):
            for bn, chunks in ((4, 32), (8, 16), (8, 32), (16, 16)):
                for split in (1, 2, 4):
                    out.append(g("gemv", bm, bn, chunks, split, 4, 3, bits=bits))
            out += [g("gemv", bm, 4, 32, 2, 8, 3, bits=bits), g("gemv", bm, 4, 32, 2, 4, 5, bits=bits)]
            out += [g("gemv", bm, 4, 32, 2, 2, 4, bits=bits), g("gemv", bm, 2, 32, 2, 4, 3, bits=bits)]
    if m <= 64:
        bm = max(16, triton.next_power_of_2(m))
        for bn in (32, 64, 128):
            for bg, warps in ((4, 4), (8, 4), (8, 8)):
                for split in (2, 4, 8, 16):
                    out.append(g("dq16", bm, bn, bg, split, warps, 3, True))
        out += [g("dq16", bm, 64, 4, 8, 4, 4, True), g("dq16", bm, 128, 8, 8, 8, 2, True)]
        for bn, split, warps in ((64, 8, 4), (64, 16, 4), (128, 8, 8), (32, 16, 4)):
            out.append(g("mma8", bm, bn, 4, split, warps, 3, True))
        return out
    for bm, bn, warps in ((64, 128, 4), (128, 128, 8), (128, 256, 8), (64, 256, 8)):
        for bg in (2, 4):
            for stages in (3, 4):
                out.append(g("dq16", bm, bn, bg, 1, warps, stages))
    out += [g("dq16", 64, 128, 2, 2, 4, 3), g("mma8", 64, 128, 4, 2, 4, 3)]
    return out


def make_problem(m: int, n: int, k: int, backends: tuple[str, ...]):
    """The GEMM problem [M, K] x [N, K]^T: rotated weight sets (``{variant: weight}``: MXFP8 prepared per
    backend, bf16, per-tensor E4M3) that stream past the L2, and one activation (``{"pair", "bf16", "fp8"}``:
    the MXFP8 pair in DeepGEMM's scale layout, bf16, per-tensor E4M3)."""
    sets = rotation_count(n * k * 2)  # bf16 bytes: the larger of the two streams
    weights = []
    for i in range(sets):
        gen = torch.Generator(device="cuda").manual_seed(100 + i)
        w = torch.randn(n, k, generator=gen, device="cuda", dtype=torch.bfloat16)
        entry = {"triton": prepare_mxfp8_weight(w, backend="triton"), "bf16": w}
        if "gluon" in backends:
            entry["gluon"] = prepare_mxfp8_weight(w, backend="gluon")
        if "fp8" in backends:
            entry["fp8"] = _per_tensor_fp8(w)
        weights.append(entry)
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(m, k, generator=gen, device="cuda", dtype=torch.bfloat16)
    act = {"pair": quantize_mxfp8(x, scale_layout="deepgemm"), "bf16": x}
    if "fp8" in backends:
        act["fp8"] = _per_tensor_fp8(torch.cat([x, x.new_zeros((-m) % 16, k)]))  # rows padded to 16
    return weights, act


def _per_tensor_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 copy of ``x`` and its one fp32 scale (amax / 448), as FP8 cuBLAS users quantize."""
    scale = (x.float().abs().amax() / 448.0).clamp(min=1e-12)
    return (x.float() / scale).to(torch.float8_e4m3fn), scale.reshape(())


def _fp8_mm(x8, w8, out) -> None:
    (xq, xs), (wq, ws) = x8, w8
    torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16, out=out)


def floor_us(m: int, n: int, k: int, bandwidth: float) -> float:
    nbytes = n * k + n * k // 32 + m * k + m * k // 32 + 2 * m * n
    return nbytes / bandwidth * 1e6


def check(weights, pair, m: int, n: int, config: GemmConfig | None) -> float:
    w = weights[0]["triton"]
    want = mxfp8_gemm(pair, w, backend="torch")
    got = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    _launch(pair, w, got, config)
    torch.cuda.synchronize()
    return calc_diff(got.float(), want.float())


def _launch(pair, w, out, config):
    launch_mxfp8_gemm(pair, w.qweight, w.scale, out, config=config, w_scale_rows=w.scale_e8m0)


def check_backend(weights, pair, m: int, n: int, backend: str) -> float:
    w = weights[0][backend]
    want = mxfp8_gemm(pair, w, backend="torch")
    got = mxfp8_gemm(pair, w, backend=backend)
    torch.cuda.synchronize()
    return calc_diff(got.float(), want.float())


def measure(
    name: str,
    m: int,
    n: int,
    k: int,
    bandwidth: float,
    *,
    sweep: bool,
    backends: tuple[str, ...],
    rounds: int = 3,
) -> dict:
    weights, act = make_problem(m, n, k, backends)
    pair, x = act["pair"], act["bf16"]
    row: dict[str, object] = {"shape": name, "M": m, "N": n, "K": k, "sets": len(weights)}
    row["default_config"] = str(choose_config(m, n, k))
    row["calc_diff"] = check(weights, pair, m, n, None)
    if not row["calc_diff"] <= 1e-5:
        raise SystemExit(f"{name} M={m}: triton differs from the torch backend: calc_diff {row['calc_diff']}")
    if "gluon" in backends:
        # A wrong or refused gluon result is recorded and not timed; the other variants are still measured.
        try:
            row["gluon_calc_diff"] = check_backend(weights, pair, m, n, "gluon")
        except Exception as exc:
            row["gluon_error"] = f"{type(exc).__name__}: {exc}"[:300]
        else:
            if not row["gluon_calc_diff"] <= 1e-5:
                row["gluon_error"] = f"differs from the torch backend: calc_diff {row['gluon_calc_diff']}"
        if "gluon_error" in row:
            print(f"{name} M={m}: gluon not timed: {row['gluon_error']}", flush=True)
            backends = tuple(b for b in backends if b != "gluon")
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in weights]
    out16 = [torch.empty(m + (-m) % 16, n, dtype=torch.bfloat16, device="cuda") for _ in weights]
    make = {
        "triton": lambda w, o, o16: functools.partial(mxfp8_gemm, pair, w["triton"], out=o, backend="triton"),
        "gluon": lambda w, o, o16: functools.partial(mxfp8_gemm, pair, w["gluon"], out=o, backend="gluon"),
        "bf16": lambda w, o, o16: functools.partial(torch.mm, x, w["bf16"].t(), out=o),
        "fp8": lambda w, o, o16: functools.partial(_fp8_mm, act.get("fp8"), w.get("fp8"), o16),
    }
    variants = {
        v: [make[v](w, o, o16) for w, o, o16 in zip(weights, outs, out16, strict=True)]
        for v in ("triton", "bf16", *backends)
    }
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for v, fns in variants.items():
            times[v].append(bench_us(fns))
    for v, values in times.items():
        row[f"{v}_us"] = statistics.median(values)
    row["floor_us"] = floor_us(m, n, k, bandwidth)
    if sweep:
        results = []
        for cfg in sweep_configs(m, n, k):
            try:
                diff = check(weights, pair, m, n, cfg)
                fns = [
                    functools.partial(_launch, pair, w["triton"], o, cfg)
                    for w, o in zip(weights, outs, strict=True)
                ]
                us = bench_us(fns, target_ms=8.0, replays=7)
            except Exception as exc:  # a configuration the compiler refuses is skipped, not fatal
                results.append({"config": str(cfg), "error": f"{type(exc).__name__}: {exc}"[:200]})
                continue
            results.append({"config": str(cfg), "us": us, "calc_diff": diff})
        ok = [r for r in results if "us" in r and r["calc_diff"] <= 1e-5]
        row["sweep"] = results
        if ok:
            best = min(ok, key=lambda r: r["us"])
            row["best_us"], row["best_config"] = best["us"], best["config"]
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweep", action="store_true", help="also time candidate launch configurations")
    parser.add_argument("--ms", default=",".join(map(str, MS)), help="comma-separated M values")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    parser.add_argument(
        "--backends",
        default="triton,bf16,fp8",
        help=f"comma-separated variants to time beside triton and bf16, from {','.join(BACKENDS)}",
    )
    parser.add_argument("--json", default=None, help="write every number here (default: $OUT or reports/)")
    args = parser.parse_args(argv)
    backends = tuple(dict.fromkeys(b for b in args.backends.split(",") if b))
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"--backends: unknown {sorted(unknown)}; choose from {','.join(BACKENDS)}")
    torch.manual_seed(0)
    bandwidth = copy_bandwidth()
    rows = []
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        for m in map(int, args.ms.split(",")):
            row = measure(name, m, n, k, bandwidth, sweep=args.sweep, backends=backends)
            rows.append(row)
            print(json.dumps({key: v for key, v in row.items() if key != "sweep"}), flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bandwidth_GBps": bandwidth / 1e9,
    }
    out = Path(args.json or Path(os.environ.get("OUT", "reports")) / "mxfp8_gemm.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n{meta}")
    shown = [v for v in ("triton", *backends) if v != "bf16"]
    shown = list(dict.fromkeys(shown))
    head = f"{'shape':<14}{'M':>5}{'bf16 us':>9}" + "".join(f"{v:>9}{'x bf16':>8}" for v in shown)
    print(head + f"{'floor':>8}{'% floor':>8}" + ("  best (sweep)" if args.sweep else ""))
    for r in rows:
        line = f"{r['shape']:<14}{r['M']:>5}{r['bf16_us']:>9.2f}"
        line += "".join(
            f"{r[v + '_us']:>9.2f}{r['bf16_us'] / r[v + '_us']:>8.2f}"
            if v + "_us" in r
            else f"{'failed':>17}"
            for v in shown
        )
        best = min(r[v + "_us"] for v in shown if v != "fp8" and v + "_us" in r)  # ours: the faster MXFP8 one
        line += f"{r['floor_us']:>8.2f}{100 * r['floor_us'] / best:>7.0f}%"
        if args.sweep and "best_us" in r:
            line += f"  {r['best_us']:.2f} ({r['bf16_us'] / r['best_us']:.2f}x) {r['best_config']}"
        print(line)
