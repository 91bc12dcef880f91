"""Check, sweep and time MXFP8 GEMM launch configurations on one GPU in one run; write the winners as the
launcher's table.

    PYTHONUNBUFFERED=1 python -m benchmarks mxfp8_gemm_sweep [--budget-s 400] [--shapes ...] [--ms ...]
        [--json PATH] [--table PATH] [--compile-workers 8]

Shapes (N, K) and M are benchmarks/mxfp8_gemm.py's. For every (shape, M), in one process:
  * ``bf16``: ``torch.mm`` on bf16 copies of the weights (cuBLAS), and the byte floor (weight, activation
    and output bytes at the device-to-device copy bandwidth measured in the same run);
  * ``default``: what the launcher runs today (``mxfuse.kernels.gemm.configs.choose_config``);
  * candidates (``candidates``): the folded-scale kernel (``mxfuse.kernels.gemm.launch``) over tile,
    operand order, 16-bit type, conversion, where the scales are folded, split-K, pipeline depth, warps
    and PDL, and the existing kernels around the default. Each candidate is first checked against the
    torch backend (calc_diff <= 1e-5 and |out - torch| <= 2**-7 |torch| + 2**-10 rms, the GPU tests'
    rule), run twice for identical bits, and, once per compiled variant, on a small problem with
    extreme scale bytes (0, 1, 253, 254), a NaN block, a zero row and duplicated rows (the exact path
    and the NaN rows must come out as the torch backend says). A candidate that fails to compile or to
    check is reported and skipped.
Weights are rotated through enough copies that every call reads them from HBM (cold); each variant is
one CUDA graph of many calls (``benchmarks.timing.bench_us``). Candidates are screened in tiers over every
(shape, M) (the most promising tier first, so a short budget still covers every problem); then bf16,
the default and the two fastest candidates are timed again in three interleaved rounds, medians kept.
``--budget-s`` bounds the whole run: screening stops when it would eat into the time reserved for the
final rounds. Kernels are compiled first by ``--compile-workers`` child processes into Triton's disk
cache (compile time counts against the budget).

``--kernel gluon`` sweeps the Gluon decode kernel instead (``benchmarks/gluon_gemm_sweep.py``: its own
candidates and table, the same problems, checks and timer; M 1, 4, 16, 64 by default).

Writes ``$OUT/mxfp8_gemm_sweep.json`` (every check and time; ``reports/`` without ``$OUT``) and
``$OUT/mxfp8_gemm_configs.json``: the fastest checked configuration per (device, shape, M bucket) in the
format of ``src/mxfuse/kernels/gemm/configs.json``, to be merged there by hand. Prints a short
table. ``--cpu-smoke`` runs the whole flow on tiny shapes under the Triton interpreter (no GPU, times
are wall clock and meaningless): it checks the script, not the kernels' speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
import triton

from benchmarks.mxfp8_gemm import MS, SHAPES  # the benchmark's shapes and M values
from benchmarks.support import REPO_ROOT, routine_command
from benchmarks.timing import bench_us, copy_bandwidth, rotation_count
from gpumatrix.compare import calc_diff
from mxfuse.formats import MxTensor, as_mxtensor, quantize_mxfp8_reference, scale_to_layout
from mxfuse.gemm import mxfp8_gemm
from mxfuse.gemm.weights import MxWeight, quantize_weight
from mxfuse.kernels.gemm import launch_mxfp8_gemm, weight_scale_kgroup_major
from mxfuse.kernels.gemm.configs import GemmConfig, choose_config, parse_table

SMOKE_SHAPES = {"smoke a": (128, 512), "smoke b": (192, 256)}
SMOKE_MS = (1, 16, 64)
GLUON_MS = (1, 4, 16, 64)  # the Gluon decode kernel's M buckets (issue 38: decode M <= 64)
LAYOUT = "deepgemm"  # the activation scale layout the producers write by default
MAX_DIFF = 1e-5
CONFIRM_SHARE = 0.2  # of the budget, kept for the final interleaved rounds


# ---------------------------------------------------------------------------------------------------
# Candidates


def _splits(tiles: int, groups: int, block_g: int, *, num_sms: int, even: bool) -> list[int]:
    """Split-K counts giving about 2 and about 4 waves of programs (at least 1 each), keeping at least
    2 steps per split and, with ``even``, whole steps in every split (the fold kernel's unmasked path)."""
    steps = groups // block_g
    ok = [
        s for s in (1, 2, 4, 8, 16, 32) if steps // s >= 2 and (not even or groups % (block_g * s) == 0)
    ] or [1]
    picks = []
    for waves in (2, 4):
        best = min(ok, key=lambda s: (abs(math.log2(max(tiles * s, 1) / (waves * num_sms))), s))
        if best not in picks:
            picks.append(best)
    return picks


def _fold(m: int, n: int, k: int, num_sms: int, *, bm: int, bn: int, bg: int, warps: int, stages: int, **kw):
    """Fold configurations of one tile for every split choice."""
    tiles = triton.cdiv(n, bn) * triton.cdiv(m, bm)
    return [
        GemmConfig("fold", bm, bn, bg, s, warps, stages, swap_ab=True, **kw)
        for s in _splits(tiles, k // 32, bg, num_sms=num_sms, even=n % bn == 0)
    ]


def _stream(m: int, n: int, k: int, num_sms: int, *, bn: int, bg: int, warps: int, stages: int):
    """Stream configurations (CUDA cores, M <= 4) of one tile for split choices giving about 2, 4 and 8
    waves of programs; ``bg`` chunks of 16 per row per step, so a step covers ``bg / 2`` groups."""
    bm = 1 if m == 1 else 2 if m == 2 else 4
    tiles = triton.cdiv(n, bn)
    splits = _splits(tiles, k // 32, bg // 2, num_sms=num_sms, even=n % bn == 0)
    more = splits[-1] * 2
    if (k // 32) // (bg // 2) // more >= 1 and tiles * more <= 16 * num_sms:
        splits.append(more)
    return [GemmConfig("stream", bm, bn, bg, s, warps, stages) for s in splits]


def candidates(m: int, n: int, k: int, *, num_sms: int) -> list[tuple[int, GemmConfig]]:
    """(tier, configuration) in the order they are screened: tier 0 first for every problem, then
    tier 1, and so on. Tier 0 holds the design expected to win (the activation folded by a first launch,
    so both MMA operands come straight from pipelined loads and Triton keeps the wgmmas asynchronous;
    the weight's scales folded into its fp16 register operand; Triton's own fp8 cast, which compiles
    to fewer instructions per byte than the inline cvt or moving bits: see mxfp8_fold_steps)."""
    out: list[tuple[int, GemmConfig]] = []

    def add(tier: int, configs: list[GemmConfig]) -> None:
        out.extend((tier, c) for c in configs)

    fold = functools.partial(_fold, m, n, k, num_sms, act="prefold")
    if m <= 4:
        # (block_n, block_g, warps, stages): block_g 32 * warps puts every thread of a program on one row
        # (the activation needs no layout conversion); stages 2 is Triton's software pipeline.
        stream = functools.partial(_stream, m, n, k, num_sms)
        for bn, bg, warps, stages in ((64, 8, 4, 1), (8, 128, 4, 1), (4, 128, 4, 1), (16, 128, 4, 1)):
            add(0, stream(bn=bn, bg=bg, warps=warps, stages=stages))
        for bn, bg, warps, stages in (
            (64, 8, 4, 2),
            (8, 128, 4, 2),
            (4, 128, 4, 2),
            (32, 8, 4, 1),
            (8, 64, 2, 1),
        ):
            add(1, stream(bn=bn, bg=bg, warps=warps, stages=stages))
        for bn, bg, warps, stages in ((128, 8, 4, 1), (16, 256, 8, 1), (32, 64, 2, 1), (8, 256, 8, 2)):
            add(2, stream(bn=bn, bg=bg, warps=warps, stages=stages))
    if m <= 16:
        add(0, fold(bm=16, bn=64, bg=4, warps=4, stages=3))
        add(1, fold(bm=16, bn=64, bg=4, warps=4, stages=3, pdl=True))
        add(1, fold(bm=16, bn=128, bg=4, warps=8, stages=3))
        add(1, fold(bm=16, bn=64, bg=8, warps=4, stages=3))
        add(2, fold(bm=16, bn=64, bg=4, warps=4, stages=5))
        add(2, fold(bm=16, bn=64, bg=4, warps=4, stages=3, operand="bf16"))
        add(2, fold(bm=16, bn=64, bg=4, warps=4, stages=3, cvt="asm"))
        add(
            3, _fold(m, n, k, num_sms, bm=16, bn=64, bg=4, warps=4, stages=3)
        )  # activation folded in the loop
        add(3, _fold(m, n, k, num_sms, bm=16, bn=64, bg=4, warps=4, stages=3, wscale="acc"))
        add(3, fold(bm=16, bn=128, bg=8, warps=8, stages=3))
        groups = k // 32
        for split in (4, 8, 16):  # the per-group FP8 kernel around today's default
            add(
                3,
                [GemmConfig("mma8", 16, 64, 4, split, 4, 3, swap_ab=True)]
                if groups // 4 // split >= 2
                else [],
            )
    elif m <= 64:
        add(0, fold(bm=64, bn=64, bg=4, warps=4, stages=3))
        add(1, fold(bm=64, bn=128, bg=4, warps=8, stages=3))
        add(1, fold(bm=64, bn=64, bg=4, warps=4, stages=4, pdl=True))
        add(2, fold(bm=64, bn=64, bg=8, warps=4, stages=3))
        add(2, fold(bm=64, bn=64, bg=4, warps=4, stages=3, operand="bf16"))
        add(3, _fold(m, n, k, num_sms, bm=64, bn=64, bg=4, warps=4, stages=3))
    elif m <= 256:
        add(0, fold(bm=128, bn=64, bg=4, warps=4, stages=3))
        add(1, fold(bm=128, bn=128, bg=2, warps=8, stages=3))
        add(1, fold(bm=256, bn=64, bg=2, warps=4, stages=3))
        add(2, fold(bm=64, bn=128, bg=4, warps=8, stages=3))
        add(3, [GemmConfig("dq16", 64, 128, 2, 1, 4, 3), GemmConfig("mma8", 64, 128, 4, 1, 4, 4)])
    else:
        add(0, fold(bm=128, bn=128, bg=2, warps=8, stages=3))
        add(1, fold(bm=256, bn=128, bg=2, warps=8, stages=3))
        add(1, fold(bm=128, bn=64, bg=4, warps=4, stages=4))
        add(2, fold(bm=256, bn=64, bg=2, warps=4, stages=3))
        add(3, [GemmConfig("dq16", 128, 128, 2, 1, 8, 3), GemmConfig("mma8", 128, 128, 4, 1, 8, 3)])
    seen: set[GemmConfig] = set()
    unique = []
    for tier, config in out:
        if config not in seen:
            seen.add(config)
            unique.append((tier, config))
    return sorted(unique, key=lambda item: item[0])  # stable: within a tier, the order added


def compile_key(config: GemmConfig, n: int, k: int) -> str:
    """What makes Triton compile another kernel: every field but a fold's split count (a run-time
    argument), and whether the fold's tiles are whole."""
    if config.kind != "fold":
        return repr(config)
    even = n % config.block_n == 0 and (k // 32) % (config.block_g * config.split_k) == 0
    return repr(dataclasses.replace(config, split_k=1)) + f" split at run time, even={even}"


# ---------------------------------------------------------------------------------------------------
# Problems


@dataclasses.dataclass
class Problem:
    name: str
    m: int
    n: int
    k: int
    weights: list[MxWeight]
    bf16_weights: list[torch.Tensor]
    x: torch.Tensor
    pair: MxTensor
    ref: torch.Tensor
    outs: list[torch.Tensor]


def prepared_weight(w: torch.Tensor) -> MxWeight:
    """A triton-backend MxWeight without asking whether the backend runs here (the CPU smoke run)."""
    q, s = quantize_weight(w)
    return MxWeight(MxTensor(q, s, "e8m0"), weight_scale_kgroup_major(s), "triton")


def make_weights(n: int, k: int, device: str) -> tuple[list[MxWeight], list[torch.Tensor]]:
    """The GEMM problem's weights for [N, K]: enough rotated sets (prepared MXFP8, and the bf16 copy) that a
    round of calls streams past the L2 on the GPU; one set on the CPU."""
    sets = rotation_count(n * k * 2) if device == "cuda" else 1
    mx, bf = [], []
    for i in range(sets):
        gen = torch.Generator(device=device).manual_seed(100 + i)
        w = torch.randn(n, k, generator=gen, device=device, dtype=torch.bfloat16)
        mx.append(prepared_weight(w))
        bf.append(w)
    return mx, bf


def make_problem(name: str, m: int, n: int, k: int, weights, device: str) -> Problem:
    """One GEMM problem at M = ``m`` on ``make_weights``' sets: the activation (bf16 and its reference-
    quantized pair), the torch backend's output as the reference, and one output buffer per weight set."""
    mx, bf = weights
    gen = torch.Generator(device=device).manual_seed(7 + m)
    x = torch.randn(m, k, generator=gen, device=device, dtype=torch.bfloat16)
    pair = as_mxtensor(quantize_mxfp8_reference(x, scale_layout=LAYOUT), scale_layout=LAYOUT)
    ref = mxfp8_gemm(pair, mx[0], backend="torch")
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device=device) for _ in mx]
    return Problem(name, m, n, k, mx, bf, x, pair, ref, outs)


def launch(p: Problem, i: int, config: GemmConfig | None) -> None:
    w = p.weights[i]
    launch_mxfp8_gemm(p.pair, w.qweight, w.scale, p.outs[i], config=config, w_scale_rows=w.scale_e8m0)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------------
# Checks


def close_to(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, bool]:
    """(calc_diff, within the GPU tests' closeness rule): |out - ref| <= 2**-7 |ref| + 2**-10 rms(ref),
    NaN exactly where ref has NaN."""
    o, r = out.double(), ref.double()
    nan = r.isnan()
    if not torch.equal(o.isnan(), nan):
        return float("nan"), False
    o, r = o[~nan], r[~nan]
    if not bool(torch.isfinite(o).all()):
        return float("nan"), False
    rms = float(r.square().mean().sqrt()) if r.numel() else 0.0
    ok = bool((o - r).abs().le(2.0**-7 * r.abs() + 2.0**-10 * rms).all())
    return calc_diff(o, r), ok


def check(p: Problem, config, device: str, *, launcher=None) -> dict:
    """Against the torch backend, and the same bits twice. (The interpreter truncates to bf16 where the
    GPU rounds: its calc_diff is a little larger.) ``launcher(p, i, config)`` runs the kernel into
    ``p.outs[i]`` (default ``launch``: the Triton kernels)."""
    launcher = launcher or launch
    max_diff = MAX_DIFF if device == "cuda" else 10 * MAX_DIFF
    p.outs[0].fill_(float("nan"))
    launcher(p, 0, config)
    sync(device)
    first = p.outs[0].clone()
    diff, ok = close_to(first, p.ref)
    launcher(p, 0, config)
    sync(device)
    same = torch.equal(first.view(torch.int16), p.outs[0].view(torch.int16))
    return {"calc_diff": diff, "close": ok, "repeatable": same, "ok": ok and same and diff <= max_diff}


@functools.cache
def edge_operands(m: int, n: int, k: int, device: str):
    """Extreme scale bytes (a: 0, 1, 253, 254 cycling along K; w: 254, 253, 1, 0, so every block
    product is 2**0), values at most 1.75; row 1 a NaN block, row 2 zero, rows 3.. copies of row 0."""
    g = torch.Generator(device=device).manual_seed(5)
    a = (torch.rand(m, k, generator=g, device=device) * 3.5 - 1.75).to(torch.float8_e4m3fn)
    w = (torch.rand(n, k, generator=g, device=device) * 3.5 - 1.75).to(torch.float8_e4m3fn)
    cyc = torch.tensor([0, 1, 253, 254], dtype=torch.int32, device=device).repeat(k // 128)
    sa = cyc.to(torch.uint8).repeat(m, 1)
    sw = (254 - cyc).to(torch.uint8).repeat(n, 1)
    if m > 3:
        a[3:] = a[0]
        sa[3:] = sa[0]
        sa[1, 5] = 0xFF
        a.view(torch.uint8)[1, 160:192] = 0x7F
        a.view(torch.uint8)[2] = 0
        sa[2] = 0
    pair = MxTensor(a, scale_to_layout(sa, scale_layout=LAYOUT), LAYOUT)
    weight = MxWeight(MxTensor(w, sw, "e8m0"), weight_scale_kgroup_major(sw), "triton")
    return pair, weight, mxfp8_gemm(pair, weight, backend="torch")


def edge_check(config: GemmConfig, device: str, *, small: bool = False) -> dict:
    """The configuration on a small problem where only the exact path is exact (see ``edge_operands``):
    the torch backend's NaN rows and values within the closeness rule, copied rows bitwise equal."""
    m = min(config.block_m, 4) if config.kind in ("gemv", "stream") else 16
    n, k = (128, 512) if small else (256, 2048)
    pair, weight, ref = edge_operands(m, n, k, device)
    split = config.split_k if config.kind != "fold" else min(config.split_k, 2)
    cfg = dataclasses.replace(config, split_k=split)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    launch_mxfp8_gemm(pair, weight.qweight, weight.scale, out, config=cfg, w_scale_rows=weight.scale_e8m0)
    sync(device)
    _, ok = close_to(out, ref)
    copies = m <= 3 or torch.equal(out[3:].view(torch.int16), out[:1].expand(m - 3, n).view(torch.int16))
    return {"edge_close": ok, "edge_copied_rows_equal": bool(copies), "edge_ok": ok and bool(copies)}


# ---------------------------------------------------------------------------------------------------
# Timing


def time_us(fns, device: str, *, target_ms: float, replays: int) -> float:
    if device == "cuda":
        return bench_us(fns, target_ms=target_ms, replays=replays)
    start = time.perf_counter()
    for fn in fns:
        fn()
    return (time.perf_counter() - start) * 1e6 / len(fns)


def calls(p: Problem, variant, *, launcher=None) -> list:
    """One call per rotated weight set: ``"bf16"`` (cuBLAS), else ``launcher(p, i, variant)`` (default
    ``launch``: the Triton kernels at configuration ``variant``)."""
    if variant == "bf16":
        return [
            functools.partial(torch.mm, p.x, wb.t(), out=o)
            for wb, o in zip(p.bf16_weights, p.outs, strict=True)
        ]
    return [functools.partial(launcher or launch, p, i, variant) for i in range(len(p.weights))]


def context_alive(device: str) -> bool:
    """False once a kernel fault (an illegal address, say) has left the CUDA context unusable."""
    if device != "cuda":
        return True
    try:
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def floor_us(p: Problem, bandwidth: float) -> float:
    nbytes = p.n * p.k * (1 + 1 / 32) + p.m * p.k * (1 + 1 / 32) + 2 * p.m * p.n
    return nbytes / bandwidth * 1e6


# ---------------------------------------------------------------------------------------------------
# Precompilation in child processes


def plan(
    shapes: dict, ms: tuple[int, ...], num_sms: int, max_tier: int, device_name: str | None = None
) -> list[tuple[str, int, GemmConfig, int]]:
    """(shape, M, configuration, tier) of every default (tier -1: what the launcher runs on
    ``device_name`` today, its table included) and candidate, in screening order: the defaults, then
    tier 0 over every problem, then tier 1, and so on."""
    items = []
    for name, (n, k) in shapes.items():
        for m in ms:
            items.append((name, m, choose_config(m, n, k, device_name=device_name, num_sms=num_sms), -1))
    tiers: dict[int, list] = {}
    for name, (n, k) in shapes.items():
        for m in ms:
            default = choose_config(m, n, k, device_name=device_name, num_sms=num_sms)
            for tier, config in candidates(m, n, k, num_sms=num_sms):
                if tier <= max_tier and config != default:
                    tiers.setdefault(tier, []).append((name, m, config, tier))
    for tier in sorted(tiers):
        items.extend(tiers[tier])
    return items


def compile_worker(
    index: int,
    workers: int,
    shapes: dict,
    ms: tuple[int, ...],
    num_sms: int,
    max_tier: int,
    device: str,
    device_name: str | None,
) -> None:
    """Launch this worker's share of distinct compiled variants once (zero inputs, small M) so that
    Triton writes them to its disk cache for the main process."""
    keys: dict[str, tuple[int, int, int, GemmConfig]] = {}
    for name, m, config, _tier in plan(shapes, ms, num_sms, max_tier, device_name):
        n, k = shapes[name]
        keys.setdefault(compile_key(config, n, k), (m, n, k, config))
    for i, (key, (m, n, k, config)) in enumerate(sorted(keys.items())):
        if i % workers != index:
            continue
        m_small = min(m, config.block_m) if config.kind in ("gemv", "stream") else min(m, 16)
        try:
            a = torch.zeros(m_small, k, device=device).to(torch.float8_e4m3fn)
            s = torch.full((m_small, k // 32), 127, dtype=torch.uint8, device=device)
            pair = MxTensor(a, scale_to_layout(s, scale_layout=LAYOUT), LAYOUT)
            wq = torch.zeros(n, k, device=device).to(torch.float8_e4m3fn)
            ws = torch.full((k // 32, n), 127, dtype=torch.uint8, device=device)
            out = torch.empty(m_small, n, dtype=torch.bfloat16, device=device)
            rows = torch.full((n, k // 32), 127, dtype=torch.uint8, device=device)
            launch_mxfp8_gemm(pair, wq, ws, out, config=config, w_scale_rows=rows)
            sync(device)
        except Exception as exc:  # reported again, with its traceback, when the main process runs it
            print(f"[compile worker {index}] {key}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)


def precompile(args, shapes: dict, ms: tuple[int, ...], deadline: float) -> float:
    start = time.time()
    procs = []
    for i in range(args.compile_workers):
        cmd = routine_command(
            "mxfp8_gemm_sweep",
            "--compile-worker",
            str(i),
            "--compile-workers",
            str(args.compile_workers),
        )
        cmd += [
            "--shapes",
            ",".join(shapes),
            "--ms",
            ",".join(map(str, ms)),
            "--max-tier",
            str(args.max_tier),
        ]
        cmd += ["--kernel", args.kernel] + (["--cpu-smoke"] if args.cpu_smoke else [])
        procs.append(subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO_ROOT))
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            print("a compile worker ran past its share of the budget and was stopped", flush=True)
    return time.time() - start


# ---------------------------------------------------------------------------------------------------
# The run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-s", type=float, default=400.0, help="wall-clock budget of the whole run")
    parser.add_argument("--shapes", default=None, help="comma-separated shape names (default: all)")
    parser.add_argument("--ms", default=None, help="comma-separated M values")
    parser.add_argument("--max-tier", type=int, default=3, help="screen candidate tiers up to this one")
    parser.add_argument(
        "--json", default=None, help="results (default: $OUT or reports/mxfp8_gemm_sweep.json)"
    )
    parser.add_argument(
        "--table", default=None, help="winners (default: $OUT or reports/mxfp8_gemm_configs.json)"
    )
    parser.add_argument(
        "--compile-workers",
        type=int,
        default=None,
        help="child processes compiling kernels first (8; 0 on CPU)",
    )
    parser.add_argument(
        "--merge-into",
        default=None,
        help="also merge the winners into this table (the checked-in one: the buckets swept replace theirs)",
    )
    parser.add_argument(
        "--kernel",
        choices=("triton", "gluon"),
        default="triton",
        help="sweep the Triton kernels (their table) or the Gluon decode kernel (the Gluon table: "
        "benchmarks/gluon_gemm_sweep.py)",
    )
    parser.add_argument(
        "--triton-table",
        default=None,
        help="--kernel gluon: a Triton sweep's table of this pass, not yet merged: its configurations "
        "are timed too, and Gluon must beat the faster Triton configuration",
    )
    parser.add_argument(
        "--min-speedup",
        type=float,
        default=1.0,
        help="--kernel gluon: write a bucket only where Triton's median / Gluon's exceeds this",
    )
    parser.add_argument("--compile-worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes under the Triton interpreter")
    args = parser.parse_args(argv)
    t0 = time.time()
    device = "cpu" if args.cpu_smoke else "cuda"
    all_shapes = SMOKE_SHAPES if args.cpu_smoke else SHAPES
    shapes = {s: all_shapes[s] for s in (args.shapes.split(",") if args.shapes else all_shapes)}
    default_ms = GLUON_MS if args.kernel == "gluon" else MS
    ms = (
        tuple(int(v) for v in args.ms.split(",")) if args.ms else (SMOKE_MS if args.cpu_smoke else default_ms)
    )
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 132
    device_name = torch.cuda.get_device_properties(0).name if device == "cuda" else None
    if args.kernel == "gluon":
        from benchmarks.gluon_gemm_sweep import run_gluon_sweep

        return run_gluon_sweep(args, shapes, ms, device=device, num_sms=num_sms, device_name=device_name)
    if args.compile_worker is not None:
        compile_worker(
            args.compile_worker, args.compile_workers, shapes, ms, num_sms, args.max_tier, device, device_name
        )
        return 0

    deadline = t0 + args.budget_s
    env = run_env(device, num_sms, args.budget_s)
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    if args.compile_workers is None:
        args.compile_workers = 8 if device == "cuda" else 0
    if args.compile_workers > 0:
        env["precompile_s"] = round(precompile(args, shapes, ms, t0 + 0.35 * args.budget_s), 1)
        print(f"precompiled in {env['precompile_s']} s", flush=True)
    bandwidth = copy_bandwidth() if device == "cuda" else 1e12
    env["copy_GBps"] = round(bandwidth / 1e9, 1)
    print(f"device-to-device copy: {bandwidth / 1e9:.0f} GB/s", flush=True)

    problems: dict[tuple[str, int], Problem] = {}
    for name, (n, k) in shapes.items():
        weights = make_weights(n, k, device)
        for m in ms:
            problems[(name, m)] = make_problem(name, m, n, k, weights, device)
    print(f"problems ready at {time.time() - t0:.0f} s", flush=True)

    results: dict[tuple[str, int], dict] = {key: {"screen": []} for key in problems}
    for key, p in problems.items():  # once each, so a run stopped before the final rounds still has it
        results[key]["bf16_screen_us"] = time_us(calls(p, "bf16"), device, target_ms=6.0, replays=5)
    edge_seen: dict[str, dict] = {}
    confirm_reserve = CONFIRM_SHARE * args.budget_s
    defaults = {
        (name, m): choose_config(m, *shapes[name], device_name=device_name, num_sms=num_sms)
        for name, m in problems
    }
    stopped = None
    for name, m, config, tier in plan(shapes, ms, num_sms, args.max_tier, device_name):
        if time.time() > deadline - confirm_reserve:
            stopped = f"screening stopped at {time.time() - t0:.0f} s (budget)"
            break
        p = problems[(name, m)]
        if (config.pdl or config.cvt == "asm") and device != "cuda":
            continue  # griddepcontrol and inline asm have no interpreter
        row: dict = {"config": config.to_json(), "tier": tier, "default": tier == -1}
        try:
            row.update(check(p, config, device))
            key = compile_key(config, p.n, p.k)
            if key not in edge_seen:
                edge_seen[key] = edge_check(config, device, small=args.cpu_smoke)
            row.update(edge_seen[key])
            if row["ok"] and row["edge_ok"]:
                row["us"] = time_us(calls(p, config), device, target_ms=6.0, replays=5)
        except Exception as exc:  # a refused or broken configuration: report it and go on
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            row["traceback"] = traceback.format_exc()[-1500:]
        results[(name, m)]["screen"].append(row)
        state = f"{row['us']:.2f} us" if "us" in row else row.get("error", "REFUSED by its checks")
        print(f"  {name} M={m} tier {tier}: {short(config.to_json())} -> {state}", flush=True)
        if "error" in row and not context_alive(device):
            stopped = f"the CUDA context was lost at {short(config.to_json())} ({row['error'][:120]})"
            break

    table_rows = []
    alive = context_alive(device)
    for (name, m), p in problems.items():
        res = results[(name, m)]
        res["floor_us"] = floor_us(p, bandwidth)
        res["default_config"] = defaults[(name, m)].to_json()
        if not alive:  # no more launches: the screening times stand
            timed = sorted((r for r in res["screen"] if "us" in r), key=lambda r: r["us"])
            res["confirm_us"] = {"bf16": res["bf16_screen_us"]}
            res["confirm_rounds"] = 0
            if timed:
                res["best"] = {"config": timed[0]["config"], "us": timed[0]["us"]}
                table_rows.append((name, m, p.n, p.k, GemmConfig(**timed[0]["config"])))
    for (name, m), p in problems.items() if alive else ():
        res = results[(name, m)]
        timed = sorted((r for r in res["screen"] if "us" in r), key=lambda r: r["us"])
        finalists: dict[str, str | GemmConfig | None] = {"bf16": "bf16"}
        if any(r["default"] and "us" in r for r in res["screen"]):  # only a checked default
            finalists["default"] = None
        for r in timed[:2]:
            cfg = GemmConfig(**r["config"])
            if cfg != defaults[(name, m)]:
                finalists[repr(cfg)] = cfg
        # Three interleaved rounds while the budget lasts, one after it; past it by a tenth, none (the
        # screening times stand, marked so in the JSON).
        left = deadline - time.time()
        rounds = 3 if left > 0 else (1 if left > -0.1 * args.budget_s else 0)
        res["confirm_rounds"] = rounds
        times: dict[str, list[float]] = {label: [] for label in finalists}
        if rounds == 0:
            for label, variant in finalists.items():
                screened = [
                    r["us"] for r in res["screen"] if "us" in r and _same(r, variant, defaults[(name, m)])
                ]
                times[label] = [res["bf16_screen_us"]] if variant == "bf16" else screened[:1]
        for _ in range(rounds):
            for label, variant in finalists.items():
                try:
                    times[label].append(time_us(calls(p, variant), device, target_ms=10.0, replays=9))
                except Exception as exc:
                    res.setdefault("confirm_errors", []).append(f"{label}: {type(exc).__name__}: {exc}"[:300])
        res["confirm_us"] = {label: statistics.median(v) for label, v in times.items() if v}
        res["floor_us"] = floor_us(p, bandwidth)
        res["default_config"] = defaults[(name, m)].to_json()
        best_label = min(
            (lb for lb in res["confirm_us"] if lb != "bf16"),
            key=lambda lb: res["confirm_us"][lb],
            default=None,
        )
        if best_label is not None:
            best_cfg = defaults[(name, m)] if best_label == "default" else finalists[best_label]
            res["best"] = {"config": best_cfg.to_json(), "us": res["confirm_us"][best_label]}
            table_rows.append((name, m, p.n, p.k, best_cfg))
    env["stopped"] = stopped
    env["elapsed_s"] = round(time.time() - t0, 1)

    out_dir = Path(os.environ.get("OUT") or "reports")
    json_path = Path(args.json) if args.json else out_dir / "mxfp8_gemm_sweep.json"
    table_path = Path(args.table) if args.table else out_dir / "mxfp8_gemm_configs.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.parent.mkdir(parents=True, exist_ok=True)
    serial = {f"{name} M={m}": {"shape": name, "M": m, **res} for (name, m), res in results.items()}
    json_path.write_text(json.dumps({"env": env, "problems": serial}, indent=1, default=str))
    winners = winners_table(table_rows, env)
    table_path.write_text(json.dumps(winners, indent=1))
    if args.merge_into:
        merge_into(Path(args.merge_into), winners)
        print(f"merged the winners into {args.merge_into}")

    print(
        f"\n{env['date']}, {env['gpu']}, torch {env['torch']}, Triton {env['triton']}, copy {env['copy_GBps']} GB/s, "
        f"{env['elapsed_s']} s" + (f"; {stopped}" if stopped else "")
    )
    print(
        f"{'shape':<14}{'M':>5}{'bf16':>10}{'default':>10}{'best':>10}{'x bf16':>8}{'floor':>9}  best configuration"
    )
    for (name, m), res in results.items():
        c = res.get("confirm_us", {})
        best = res.get("best")
        bf = c.get("bf16", float("nan"))
        line = f"{name:<14}{m:>5}{bf:>10.2f}{c.get('default', float('nan')):>10.2f}"
        if best:
            line += (
                f"{best['us']:>10.2f}{bf / best['us']:>8.2f}{res['floor_us']:>9.2f}  {short(best['config'])}"
            )
        else:
            line += f"{'-':>10}{'-':>8}{res.get('floor_us', float('nan')):>9.2f}  (nothing checked)"
        print(line)
    failed = sum(1 for res in results.values() for r in res["screen"] if "us" not in r)
    print(f"\n{failed} screened configurations failed to compile or check (see the JSON)")
    print(f"JSON: {json_path}\ntable: {table_path}")
    return 0


def run_env(device: str, num_sms: int, budget_s: float) -> dict:
    """What a sweep's results were measured on: date, device, versions, SM count, budget."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter smoke run)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
        "sms": num_sms,
        "budget_s": budget_s,
    }


def _same(row: dict, variant, default: GemmConfig) -> bool:
    """Whether a screening row timed ``variant`` (a configuration, None for the default; not bf16)."""
    if variant == "bf16":
        return False
    return GemmConfig(**row["config"]) == (default if variant is None else variant)


def short(config: dict) -> str:
    c = config
    if c["kind"] == "fold":
        return (
            f"fold {c['act']}/{c['wscale']} {c['operand']}/{c['cvt']} {c['block_m']}x{c['block_n']}x{32 * c['block_g']} "
            f"split {c['split_k']} w{c['num_warps']} s{c['num_stages']}{' pdl' if c['pdl'] else ''}"
        )
    return f"{c['kind']} {c['block_m']}x{c['block_n']} g{c['block_g']} split {c['split_k']} w{c['num_warps']} s{c['num_stages']}"


def winners_table(rows: list[tuple[str, int, int, int, GemmConfig]], env: dict) -> dict:
    """The launcher's table format (mxfuse.kernels.gemm.configs): per shape, buckets m_max = the measured M."""
    shapes: dict[str, list] = {}
    for _name, m, n, k, config in sorted(rows, key=lambda r: (r[2], r[3], r[1])):
        shapes.setdefault(f"{n}x{k}", []).append({"m_max": m, "config": config.to_json()})
    source = f"benchmarks/mxfp8_gemm_sweep.py, {env['date']}, {env['gpu']}, torch {env['torch']}, Triton {env['triton']}"
    return {"format": 1, "devices": {env["gpu"]: {"source": source, "shapes": shapes}}}


def merge_into(path: Path, winners: dict) -> None:
    """Per device and shape, the winners' buckets replace the buckets of ``path`` with the same m_max;
    the others stay. The device's source line records both sweeps."""
    table = json.loads(path.read_text())
    for device, entry in winners["devices"].items():
        current = table["devices"].setdefault(device, {"source": entry["source"], "shapes": {}})
        for shape, buckets in entry["shapes"].items():
            by_m = {b["m_max"]: b for b in current["shapes"].get(shape, [])}
            by_m.update({b["m_max"]: b for b in buckets})
            current["shapes"][shape] = [by_m[m] for m in sorted(by_m)]
        ms = sorted({b["m_max"] for buckets in entry["shapes"].values() for b in buckets})
        current["source"] = f"{current['source']}; M in {ms}: {entry['source']}"
    parse_table(table, source=str(path))  # refuse to write what the launcher could not read
    path.write_text(json.dumps(table, indent=1) + "\n")
