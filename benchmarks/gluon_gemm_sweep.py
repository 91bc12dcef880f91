"""The Gluon decode GEMM's sweep: ``python -m benchmarks mxfp8_gemm_sweep --kernel gluon [options]``.

The same problems, checks and timer as the Triton sweep (``benchmarks/mxfp8_gemm_sweep.py``, whose options
this takes), on the Gluon kernel (``mxfuse.kernels.gemm.gluon_launch``). For every (shape, M), in one run:

  * ``bf16``: cuBLAS on bf16 copies of the weights;
  * ``triton``: the Triton kernel at the configuration its launcher chooses on this device
    (``choose_config``: the checked-in table, else the default rule) and, with ``--triton-table``, at the
    configuration of a Triton sweep's table from the same pass (what Triton runs once that is merged);
  * Gluon candidates (``candidates``): token tile from M, 64 or 128 weight rows, 64 or 128 K per step,
    split-K for about 1, 2 and 4 waves, 2 to 6 ring slots, screened in tiers (the
    probe's design first). Each is checked before it is timed: against the torch backend (the GPU tests'
    closeness rule, calc_diff <= 1e-5), the same bits twice, and once per configuration on a small
    problem with activation scale bytes outside the kernel's window (the exact rows), a NaN block, a zero
    row and copied rows. A candidate that fails is reported by name in the JSON and the log, never timed
    and never written.
Weights rotate past the L2; each variant is one CUDA graph of many calls (``benchmarks.timing``); then
bf16, the Triton configurations and the two fastest Gluon candidates are timed again in up to three
interleaved rounds, medians kept.

The table (``--table``, default ``$OUT/gluon_configs_sweep.json``) is the launcher's Gluon table: a
(device, shape, M bucket) is written only where the fastest checked Gluon configuration's median beat
the fastest Triton configuration's median of the same interleaved rounds (by ``--min-speedup``), with the
numbers in the bucket's ``measured``; ``swept`` names every (shape, M) measured, so that a merge removes
buckets where Gluon no longer wins (``wins_table``). ``--cpu-smoke`` runs the flow on tiny shapes with the
Triton kernel under the interpreter and the torch backend standing in for the Gluon kernel (Gluon has no
interpreter): it checks the script, not the kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
import subprocess
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import triton

from benchmarks import mxfp8_gemm_sweep as sweep
from benchmarks.support import REPO_ROOT, routine_command
from mxfuse.formats import MxTensor, scale_to_layout
from mxfuse.gemm import mxfp8_gemm
from mxfuse.gemm.weights import MxWeight
from mxfuse.kernels.gemm.configs import GemmConfig, choose_config, parse_table
from mxfuse.kernels.gemm.gluon_launch import (
    W_HI,
    W_LO,
    GluonConfig,
    GluonOperands,
    default_gluon_config,
    effective_split_k,
    gluon_weight_scale,
    launch_gluon_decode,
    parse_gluon_table,
    token_tile,
)

__all__ = ["Outcome", "candidates", "run_gluon_sweep", "split_choices", "wins_table"]

DESIGN = GluonConfig()  # the design (64 rows, 128 K, 4 slots): tier 0, the rest by distance
TIERED_FIELDS = ("block_n", "num_stages", "producer")

Launcher = Callable[[sweep.Problem, int, GluonConfig], object]  # runs a configuration into p.outs[i]


# ---------------------------------------------------------------------------------------------------
# Candidates


def split_choices(config: GluonConfig, m: int, n: int, k: int, *, num_sms: int) -> list[int]:
    """Split-K counts (as the launcher runs them: ``effective_split_k``) giving about 1, 2 and 4 waves of
    programs, each split keeping at least 2 steps of ``block_k``."""
    tiles = triton.cdiv(n, config.block_n) * triton.cdiv(m, config.block_t)
    steps = triton.cdiv(k, config.block_k)
    ok = sorted(
        {
            effective_split_k(dataclasses.replace(config, split_k=s), k)
            for s in (1, 2, 4, 8, 16, 32)
            if steps // s >= 2
        }
        | {1}
    )
    picks: list[int] = []
    for waves in (1, 2, 4):
        best = min(ok, key=lambda s: (abs(math.log2(tiles * s / (waves * num_sms))), s))
        if best not in picks:
            picks.append(best)
    return picks


def candidates(m: int, n: int, k: int, *, num_sms: int) -> list[tuple[int, GluonConfig]]:
    """(tier, configuration) in screening order, each once: the launcher's default (``default_gluon_config``)
    and every combination of a TMA producer partition or none, 64/128 weight rows and 4/3/6/2 ring slots
    at the split counts of
    ``split_choices``, with the token tile holding ``m`` (``token_tile``). A configuration's tier is how
    many of ``TIERED_FIELDS`` differ from ``DESIGN``, so a short budget screens the design at every split
    first."""
    block_t = token_tile(m)
    default = default_gluon_config(m, n, k, num_sms=num_sms)
    found = [dataclasses.replace(default, split_k=effective_split_k(default, k))]
    for producer in (False, True):
        for block_n in (64, 128):
            for stages in (4, 3, 6, 2):
                base = GluonConfig(block_n, block_t, 128, 1, stages, False, producer)
                for split in split_choices(base, m, n, k, num_sms=num_sms):
                    found.append(dataclasses.replace(base, split_k=split))
    out = {}
    for config in found:
        tier = min(3, sum(getattr(config, f) != getattr(DESIGN, f) for f in TIERED_FIELDS))
        out.setdefault(config, tier)
    return sorted(((tier, config) for config, tier in out.items()), key=lambda item: item[0])


def plan(
    shapes: dict, ms: tuple[int, ...], num_sms: int, max_tier: int
) -> list[tuple[str, int, GluonConfig, int]]:
    """(shape, M, configuration, tier) in screening order: tier 0 over every problem, then tier 1, ..."""
    items = [
        (name, m, config, tier)
        for name, (n, k) in shapes.items()
        for m in ms
        for tier, config in candidates(m, n, k, num_sms=num_sms)
        if tier <= max_tier
    ]
    return sorted(items, key=lambda item: item[3])


def short(config: GluonConfig) -> str:
    c = config
    producer = " producer" if c.producer else ""
    return f"gluon {c.block_n}x{c.block_t}x{c.block_k} split {c.split_k} s{c.num_stages}{producer}"


# ---------------------------------------------------------------------------------------------------
# Launching and checking


def gluon_launch(p: sweep.Problem, i: int, config: GluonConfig) -> None:
    """The Gluon kernel (both launches) at ``config`` into ``p.outs[i]``."""
    w = p.weights[i]
    launch_gluon_decode(GluonOperands(p.pair, w.qweight, w.scale, p.outs[i]), config=config)


def torch_stand_in(p: sweep.Problem, i: int, config: GluonConfig) -> None:
    """The CPU smoke run's Gluon kernel: the torch backend's product (Gluon has no interpreter)."""
    p.outs[i].copy_(mxfp8_gemm(p.pair, p.weights[i], backend="torch"))


@functools.cache
def edge_problem(m: int, n: int, k: int, device: str) -> sweep.Problem:
    """A small problem whose weight the Gluon backend takes (scale bytes 100..150, K groups 0 and 1 at
    the window's edges 246 and 10, a NaN code in row 5) and whose activation is not ordinary: values at most 1.75 with bytes
    100..150 (at most 108 in group 0, where the weight's byte 246 would otherwise take the products
    past fp32 and the result would depend on the order of the sums), row 1 with a block at byte 0 and one at 254 (outside the window: the exact rows), row 2 a
    NaN block, row 3 zero, rows 4.. copies of row 0."""
    g = torch.Generator(device=device).manual_seed(11)
    a = (torch.rand(m, k, generator=g, device=device) * 3.5 - 1.75).to(torch.float8_e4m3fn)
    w = (torch.rand(n, k, generator=g, device=device) * 3.5 - 1.75).to(torch.float8_e4m3fn)
    sa = torch.randint(100, 151, (m, k // 32), generator=g, device=device).to(torch.uint8)
    sw = torch.randint(100, 151, (n, k // 32), generator=g, device=device).to(torch.uint8)
    a[4:], sa[4:] = a[0], sa[0]
    sa[:, 0] = sa[:, 0].clamp(max=108)  # the window's top byte (group 0) keeps every product finite
    sa[1, 0], sa[1, 1] = 0, 254
    sw[:, 0], sw[:, 1] = W_HI, W_LO  # the window's edges: row 1's two blocks come to 2**-8 and 2**10
    w.view(torch.uint8)[5, 40] = 0x7F  # an E4M3 NaN code: output column 5 NaN for every token
    sa[2, 3] = 0xFF
    a.view(torch.uint8)[3] = 0
    pair = MxTensor(a, scale_to_layout(sa, scale_layout=sweep.LAYOUT), sweep.LAYOUT)
    weight = MxWeight(MxTensor(w, sw, "e8m0"), gluon_weight_scale(w, sw), "gluon")
    ref = mxfp8_gemm(pair, weight, backend="torch")
    out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return sweep.Problem("edge", m, n, k, [weight], [], torch.empty(0), pair, ref, [out])


def edge_check(config: GluonConfig, launcher: Launcher, device: str, *, small: bool = False) -> dict:
    """``config`` on ``edge_problem``: the torch backend's NaN rows and values within the closeness rule,
    copied rows bitwise equal to row 0."""
    n, k = (128, 512) if small else (256, 2048)
    p = edge_problem(16, n, k, device)
    p.outs[0].fill_(float("nan"))
    launcher(p, 0, config)
    sweep.sync(device)
    out = p.outs[0]
    _, ok = sweep.close_to(out, p.ref)
    copies = torch.equal(out[4:].view(torch.int16), out[:1].expand(12, n).view(torch.int16))
    return {"edge_close": ok, "edge_copied_rows_equal": bool(copies), "edge_ok": ok and bool(copies)}


def screen(p: sweep.Problem, config: GluonConfig, launcher: Launcher, device: str, edge_seen: dict) -> dict:
    """One candidate's row: its checks (``sweep.check``, ``edge_check`` once per configuration), and its
    time only if every check passed; an exception is the row's ``error``."""
    row: dict = {"config": config.to_json(), "name": short(config)}
    try:
        row.update(sweep.check(p, config, device, launcher=launcher))
        if config not in edge_seen:
            edge_seen[config] = edge_check(config, launcher, device, small=device != "cuda")
        row.update(edge_seen[config])
        if row["ok"] and row["edge_ok"]:
            row["us"] = sweep.time_us(
                sweep.calls(p, config, launcher=launcher), device, target_ms=6.0, replays=5
            )
    except Exception as exc:  # a refused or broken configuration: reported, and the sweep goes on
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["traceback"] = traceback.format_exc()[-1500:]
    return row


# ---------------------------------------------------------------------------------------------------
# The rule: a bucket only where Gluon won


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One (shape, M)'s medians from the same interleaved rounds (``rounds`` of them; 0: screening times
    only). ``gluon`` is the fastest checked Gluon configuration (None: none checked), ``triton`` the
    fastest Triton configuration timed (the launcher's choice, or a Triton sweep's)."""

    shape: str
    m: int
    n: int
    k: int
    gluon: GluonConfig | None
    gluon_us: float | None
    triton: GemmConfig | None
    triton_us: float | None
    bf16_us: float | None
    rounds: int

    def verdict(self, min_speedup: float) -> tuple[bool, str]:
        """(written, why): Gluon is written only where its median beat Triton's in the same rounds."""
        if self.rounds < 1:
            return False, "not confirmed in interleaved rounds (budget): screening times are not compared"
        if self.gluon is None or not _finite(self.gluon_us):
            return False, "no Gluon configuration passed its checks"
        if self.triton is None or not _finite(self.triton_us):
            return False, "the Triton kernel was not timed: nothing to beat"
        speedup = self.triton_us / self.gluon_us
        if speedup > min_speedup:
            return (
                True,
                f"Gluon {self.gluon_us:.2f} us against Triton {self.triton_us:.2f} us ({speedup:.3f}x)",
            )
        return (
            False,
            f"Triton is faster or even: {self.triton_us:.2f} us against Gluon {self.gluon_us:.2f} us",
        )


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def wins_table(outcomes: list[Outcome], env: dict, *, min_speedup: float = 1.0) -> dict:
    """The Gluon table (``gluon_launch``'s format) for device ``env["gpu"]``: per shape, a bucket for each
    M where ``Outcome.verdict`` says Gluon won, covering M down to past the previous M measured for the
    shape (``m_min``; the first measured M covers only itself, since nothing below it was measured), with
    the numbers in ``measured``; ``swept`` lists every M measured per shape, won or not. Checked with the
    launcher's reader before it is returned: ValueError if the launcher could not read it."""
    shapes: dict[str, list] = {}
    swept: dict[str, list[int]] = {}
    for o in sorted(outcomes, key=lambda o: (o.n, o.k, o.m)):
        key = f"{o.n}x{o.k}"
        previous = swept.setdefault(key, [])
        m_min = previous[-1] + 1 if previous else o.m
        previous.append(o.m)
        won, _why = o.verdict(min_speedup)
        if not won or o.gluon is None or o.triton is None or o.gluon_us is None or o.triton_us is None:
            continue  # (the last four: the verdict already said so)
        measured = {
            "shape": o.shape,
            "M": o.m,
            "gluon_us": round(o.gluon_us, 3),
            "triton_us": round(o.triton_us, 3),
            "triton_config": o.triton.to_json(),
            "bf16_us": round(o.bf16_us, 3) if _finite(o.bf16_us) else None,
            "x_triton": round(o.triton_us / o.gluon_us, 3),
            "x_bf16": round(o.bf16_us / o.gluon_us, 3) if _finite(o.bf16_us) else None,
            "rounds": o.rounds,
        }
        shapes.setdefault(key, []).append(
            {"m_min": m_min, "m_max": o.m, "config": o.gluon.to_json(), "measured": measured}
        )
    source = (
        f"benchmarks/mxfp8_gemm_sweep.py --kernel gluon, {env['date']}, {env['gpu']}, torch {env['torch']}, "
        f"Triton {env['triton']}: buckets where Gluon's median beat Triton's by more than {min_speedup}x"
    )
    table = {"format": 1, "devices": {env["gpu"]: {"source": source, "shapes": shapes, "swept": swept}}}
    parse_gluon_table(json.loads(json.dumps(table)), source="the Gluon sweep's table")
    return table


# ---------------------------------------------------------------------------------------------------
# Precompilation in child processes


def compile_worker(args, shapes: dict, ms: tuple[int, ...], num_sms: int) -> None:
    """Launch this worker's share of the distinct compiled kernels once, on zeros, so that Triton's disk
    cache holds them for the main process (Triton specializes M on == 1 and % 16)."""
    device = "cuda"
    keys: dict[tuple, tuple[int, int, int, GluonConfig]] = {}
    for name, m, config, _tier in plan(shapes, ms, num_sms, args.max_tier):
        n, k = shapes[name]
        keys.setdefault((config, m == 1, m % 16 == 0, n % 16 == 0, k % 16 == 0), (m, n, k, config))
    for i, (m, n, k, config) in enumerate(keys.values()):
        if i % args.compile_workers != args.compile_worker:
            continue
        try:
            a = torch.zeros(m, k, device=device).to(torch.float8_e4m3fn)
            s = torch.full((m, k // 32), 127, dtype=torch.uint8, device=device)
            pair = MxTensor(a, scale_to_layout(s, scale_layout=sweep.LAYOUT), sweep.LAYOUT)
            wq = torch.zeros(n, k, device=device).to(torch.float8_e4m3fn)
            ws = torch.full((k // 32, n), 127, dtype=torch.uint8, device=device)
            out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
            launch_gluon_decode(GluonOperands(pair, wq, ws, out), config=config)
            torch.cuda.synchronize()
        except Exception as exc:  # reported again, with its traceback, when the main process runs it
            print(
                f"[compile worker {args.compile_worker}] {short(config)}: {type(exc).__name__}: {str(exc)[:200]}"
            )


def precompile(args, shapes: dict, ms: tuple[int, ...], deadline: float) -> float:
    start = time.time()
    procs = []
    for i in range(args.compile_workers):
        cmd = routine_command("mxfp8_gemm_sweep", "--kernel", "gluon", "--compile-worker", str(i))
        cmd += ["--compile-workers", str(args.compile_workers), "--shapes", ",".join(shapes)]
        cmd += ["--ms", ",".join(map(str, ms)), "--max-tier", str(args.max_tier)]
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


def triton_choices(
    m: int, n: int, k: int, *, device_name, num_sms: int, swept_table
) -> dict[str, GemmConfig]:
    """The Triton configurations Gluon must beat: the launcher's choice, and a Triton sweep's if given."""
    out = {"triton": choose_config(m, n, k, device_name=device_name, num_sms=num_sms)}
    if swept_table is not None:
        swept = choose_config(m, n, k, device_name=device_name, num_sms=num_sms, table=swept_table)
        if swept != out["triton"]:
            out["triton swept"] = swept
    return out


def confirm(
    finalists: dict[tuple[str, int], dict], problems: dict, launcher: Launcher, device: str, deadline: float
) -> tuple[dict, int]:
    """Up to three rounds; in each, every problem's finalists (``{label: "bf16" | GemmConfig |
    GluonConfig}``) timed in turn. The first round always runs (every problem gets one), the others only
    while the budget lasts. (``{problem: {label: median}}``, rounds run.)"""
    times: dict = {key: {label: [] for label in labels} for key, labels in finalists.items()}
    rounds = 0
    for _ in range(3):
        if rounds and time.time() > deadline:
            break
        for key, labels in finalists.items():
            for label, variant in labels.items():
                run = launcher if isinstance(variant, GluonConfig) else None
                calls = sweep.calls(problems[key], variant, launcher=run)
                times[key][label].append(sweep.time_us(calls, device, target_ms=10.0, replays=9))
        rounds += 1
    medians = {key: {lb: statistics.median(v) for lb, v in per.items() if v} for key, per in times.items()}
    return medians, rounds


def run_gluon_sweep(
    args, shapes: dict, ms: tuple[int, ...], *, device: str, num_sms: int, device_name
) -> int:
    """The sweep (module docstring) with the Triton sweep's parsed options; 0, or 1 if nothing was checked."""
    if args.compile_worker is not None:
        compile_worker(args, shapes, ms, num_sms)
        return 0
    t0 = time.time()
    deadline = t0 + args.budget_s
    env = sweep.run_env(device, num_sms, args.budget_s)
    if device != "cuda":
        env["gpu"] = "cpu (smoke run: Triton interpreted, the torch backend standing in for Gluon)"
    env["kernel"] = "gluon"
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    launcher: Launcher = gluon_launch if device == "cuda" else torch_stand_in
    swept_table = (
        parse_table(json.loads(Path(args.triton_table).read_text()), source=args.triton_table)
        if args.triton_table
        else None
    )
    workers = args.compile_workers if args.compile_workers is not None else (8 if device == "cuda" else 0)
    if workers > 0:
        args.compile_workers = workers
        env["precompile_s"] = round(precompile(args, shapes, ms, t0 + 0.3 * args.budget_s), 1)
        print(f"precompiled in {env['precompile_s']} s", flush=True)

    problems: dict[tuple[str, int], sweep.Problem] = {}
    for name, (n, k) in shapes.items():
        weights = sweep.make_weights(n, k, device)
        for m in ms:
            problems[(name, m)] = sweep.make_problem(name, m, n, k, weights, device)
    results: dict[tuple[str, int], dict] = {}
    for (name, m), p in problems.items():  # the baselines first: a run stopped early still has them
        res = results[(name, m)] = {"screen": [], "triton": {}}
        res["bf16_screen_us"] = sweep.time_us(sweep.calls(p, "bf16"), device, target_ms=6.0, replays=5)
        for label, cfg in triton_choices(
            m, p.n, p.k, device_name=device_name, num_sms=num_sms, swept_table=swept_table
        ).items():
            row: dict = {"config": cfg.to_json()}
            try:
                row.update(sweep.check(p, cfg, device))
                if row["ok"]:
                    row["us"] = sweep.time_us(sweep.calls(p, cfg), device, target_ms=6.0, replays=5)
            except Exception as exc:  # no Triton time: nothing for Gluon to beat, so no bucket here
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            res["triton"][label] = row
    print(f"problems and baselines ready at {time.time() - t0:.0f} s", flush=True)

    edge_seen: dict[GluonConfig, dict] = {}
    # Kept for the interleaved rounds: the Triton sweep's share, or about 3 s per problem (5 variants,
    # three rounds of one ~0.2 s graph each), at most half the budget.
    reserve = min(0.5 * args.budget_s, max(sweep.CONFIRM_SHARE * args.budget_s, 3.0 * len(problems)))
    stopped = None
    for name, m, config, tier in plan(shapes, ms, num_sms, args.max_tier):
        if time.time() > deadline - reserve:
            stopped = f"screening stopped at {time.time() - t0:.0f} s (budget)"
            break
        row = {"tier": tier, **screen(problems[(name, m)], config, launcher, device, edge_seen)}
        results[(name, m)]["screen"].append(row)
        state = f"{row['us']:.2f} us" if "us" in row else row.get("error", "WRONG: refused by its checks")
        print(f"  {name} M={m} tier {tier}: {row['name']} -> {state}", flush=True)
        if "error" in row and not sweep.context_alive(device):
            stopped = f"the CUDA context was lost at {row['name']} ({row['error'][:120]})"
            break

    finalists: dict[tuple[str, int], dict] = {}
    for key, res in results.items():
        timed = sorted((r for r in res["screen"] if "us" in r), key=lambda r: r["us"])
        labels: dict = {"bf16": "bf16"}
        labels.update({label: GemmConfig(**r["config"]) for label, r in res["triton"].items() if "us" in r})
        labels.update({r["name"]: GluonConfig(**r["config"]) for r in timed[:2]})
        finalists[key] = labels
    medians, rounds = ({}, 0)
    if sweep.context_alive(device):
        medians, rounds = confirm(finalists, problems, launcher, device, deadline)
    outcomes = []
    for (name, m), p in problems.items():
        res, med, labels = results[(name, m)], medians.get((name, m), {}), finalists[(name, m)]
        res["confirm_us"], res["confirm_rounds"] = med, rounds
        gluon = min((lb for lb in med if lb.startswith("gluon")), key=med.__getitem__, default=None)
        triton_ = min((lb for lb in med if lb.startswith("triton")), key=med.__getitem__, default=None)
        outcome = Outcome(
            name, m, p.n, p.k,
            labels[gluon] if gluon else None, med[gluon] if gluon else None,
            labels[triton_] if triton_ else None, med[triton_] if triton_ else None,
            med.get("bf16"), rounds,
        )  # fmt: skip
        res["written"], res["why"] = outcome.verdict(args.min_speedup)
        outcomes.append(outcome)
    env["stopped"] = stopped
    env["elapsed_s"] = round(time.time() - t0, 1)

    out_dir = Path(os.environ.get("OUT") or "reports")
    json_path = Path(args.json) if args.json else out_dir / "gluon_gemm_sweep.json"
    table_path = Path(args.table) if args.table else out_dir / "gluon_configs_sweep.json"
    for path in (json_path, table_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    serial = {f"{name} M={m}": {"shape": name, "M": m, **res} for (name, m), res in results.items()}
    json_path.write_text(json.dumps({"env": env, "problems": serial}, indent=1, default=str))
    table = wins_table(outcomes, env, min_speedup=args.min_speedup)  # refuses what the launcher cannot read
    table_path.write_text(json.dumps(table, indent=1) + "\n")
    if args.merge_into:
        from benchmarks.merge_gemm_table import merge_gluon

        into = Path(args.merge_into)
        into.write_text(json.dumps(merge_gluon(json.loads(into.read_text()), table), indent=1) + "\n")
        print(f"merged the Gluon wins into {into}")
    report(env, outcomes, results, args.min_speedup)
    print(f"JSON: {json_path}\ntable: {table_path}")
    return 0 if any(o.gluon is not None for o in outcomes) else 1


def report(env: dict, outcomes: list[Outcome], results: dict, min_speedup: float) -> None:
    print(f"\n{env['date']}, {env['gpu']}, torch {env['torch']}, Triton {env['triton']}, {env['elapsed_s']} s"
          + (f"; {env['stopped']}" if env["stopped"] else ""))  # fmt: skip
    print(
        f"{'shape':<14}{'M':>5}{'bf16':>10}{'triton':>10}{'gluon':>10}{'x triton':>10}{'x bf16':>8}  written"
    )
    nan = float("nan")
    for o in outcomes:
        g, t, b = o.gluon_us or nan, o.triton_us or nan, o.bf16_us or nan
        won, why = o.verdict(min_speedup)
        print(f"{o.shape:<14}{o.m:>5}{b:>10.2f}{t:>10.2f}{g:>10.2f}{t / g:>10.2f}{b / g:>8.2f}  "
              f"{'yes: ' + short(o.gluon) if won and o.gluon else 'no: ' + why}")  # fmt: skip
    wrong = [(key, r) for key, res in results.items() for r in res["screen"] if "us" not in r]
    print(f"\n{len(wrong)} Gluon configurations failed to compile or check (never timed, never written):")
    for (name, m), r in wrong:
        print(f"  {name} M={m}: {r['name']}: {r.get('error') or _failed_checks(r)}")


def _failed_checks(row: dict) -> str:
    names = ("close", "repeatable", "edge_close", "edge_copied_rows_equal")
    failed = [n for n in names if row.get(n) is False]
    if row.get("calc_diff") is not None and not row.get("ok", True):
        failed.append(f"calc_diff {row['calc_diff']:.2e}")
    return "failed " + ", ".join(failed)
