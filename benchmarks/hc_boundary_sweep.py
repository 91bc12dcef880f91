"""Choose the mHC boundary kernel's configuration per (H, token bucket, ordering) on one GPU, in one run.

    python -m benchmarks hc_boundary_sweep [--hiddens 5120,7168] [--tokens 1,4,16,64,128,512,2048]
        [--jobs 16] [--write src/mxfuse/kernels/hc/configs.json] [--json PATH]

For every shape, every candidate of ``candidates`` (tile sizes, phase-A split, warps, finish step,
lag, one launch or two) is first compiled in ``--jobs`` worker processes (the Triton cache is shared
on disk, so the timing process only loads), then checked and timed here:

  * checked: the fused boundary against the unfused chain run with the same configuration (R', pre
    and y bit for bit, the pair bit for bit ``quantize_mxfp8`` of y), post' and comb' against the
    reference (the test suite's tolerances); a candidate failing a check is never chosen;
  * timed: the fused boundary (MXFP8 pair out, deepgemm scales, no bf16 y) as one CUDA graph of many
    calls cycling through enough input sets to miss the L2 (``benchmarks.timing.bench_us``); the three
    fastest of a shape are timed again in three interleaved rounds and the median decides. ``--side``:
    the shifted ordering with the Sinkhorn items on two side streams that consecutive calls alternate
    between (``SideStreams``), so each call is timed to its y, as the step runs the boundary (and
    checked: every output the bits of the call without a side stream).

The shifted ordering is timed on the default and the normal ordering's six fastest of the same shape
(``--full-shifted``: the whole grid; ``--latency``: at T <= 16 the launch-structure grid of
``latency_candidates``, one launch or two, one-row Sinkhorn items, finish and A item widths). The
winners go to ``--write`` (the table ``mxfuse.kernels.hc.choose_config`` reads): one entry per measured
T, each power-of-two bucket between two measured T taking the larger one's winner, and the checked-in
table's entries for the shapes the run did not measure. Every timing goes to --json (default
$OUT/hc_boundary_sweep.json, else reports/).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import triton

from benchmarks.hc_boundary import PARAMS, boundary_args, environment, floor_bytes, kernel_args, make_set
from benchmarks.support import REPO_ROOT, routine_command
from benchmarks.timing import bench_us, rotation_count
from gpumatrix.compare import assert_close
from mxfuse import hc
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.hc import HcConfig, default_config

TOKENS = (1, 4, 16, 64, 128, 512, 2048)
HIDDENS = (5120, 7168)
TABLE = REPO_ROOT / "src" / "mxfuse" / "kernels" / "hc" / "configs.json"


def _divisor_at_least(n: int, quotient_at_most: int) -> int:
    return next(d for d in range(1, n + 1) if n % d == 0 and n // d <= max(quotient_at_most, 1))


def _steps(hidden: int, block_h: int, blocks: int, target: int) -> int:
    """Steps per A item so that blocks x items is about ``target``."""
    return _divisor_at_least(hidden // block_h, round(target / blocks))


def candidates(tokens: int, hidden: int, sms: int = 132, *, quick: bool = False) -> list[HcConfig]:
    """The configurations tried for one shape: the default first, then a grid around the design.

    Up to 16 tokens: phase A on the CUDA cores (blocks of the next power of two of T, at most 16;
    256, 128 or 32 values per step) and on the tensor cores (a block of 16; 16-column steps on 4 warps,
    32-column on 8, pipelined or not), with about 1x and 2x the SMs in A items, 4 or 8 warps, a one-step
    or 32-word finish, one launch or two. Above: tensor cores, blocks of 16 or 32 (T <= 128) or 16, 32
    or 64 tokens, 32-column steps, about 1x and 2x the SMs in A items, pipelined (3 stages) or not, one
    launch with lag 0 or 1, or two launches. Static facts behind the grid (registers and spills of the
    sm_90 build, benchmarks/RESULTS.md): a tensor-core step of 64 columns spills at 16 tokens.
    """
    words = hidden // 128
    one_step = min(64, triton.next_power_of_2(words))
    found = [default_config(tokens, hidden, sms=sms)]
    if tokens <= 16:
        bt = min(16, triton.next_power_of_2(tokens))
        blocks = -(-tokens // bt)
        widths = {min(128, 256 // bt), max(16, min(128, 128 // bt))} | ({32} if bt * 32 <= 256 else set())
        for bh in sorted(widths):
            for target in (sms, 2 * sms):
                steps = _steps(hidden, bh, blocks, target)
                for warps in (4, 8):
                    for cw in sorted({one_step, 32}):
                        for launches in (1, 2):
                            found.append(HcConfig(bt, bh, steps, bt, cw, 0, warps, launches, "fma", 1))
        for bh, warps in ((16, 4), (32, 8)):
            for target in (sms, 2 * sms):
                steps = _steps(hidden, bh, 1, target)
                for stages in (1, 2):
                    for launches in (1, 2):
                        found.append(HcConfig(16, bh, steps, 16, 32, 0, warps, launches, "dot", stages))
    else:
        for bt in (16, 32) if tokens <= 128 else (16, 32, 64):
            blocks = -(-tokens // bt)
            warps = 4 if bt == 16 else 8
            cw = 32 if warps == 4 else one_step
            for target in (sms, 2 * sms):
                steps = _steps(hidden, 32, blocks, target)
                for stages in (1, 3):
                    variants = [(1, 0), (2, 0)] + ([(1, 1)] if blocks > 2 else [])
                    for launches, lag in variants:
                        found.append(
                            HcConfig(bt, 32, steps, min(bt, 32), cw, lag, warps, launches, "dot", stages)
                        )
    # The finish launch on more warps (two launches, up to 64 tokens): one row's finish is serial work.
    if tokens <= 64:
        found += [dataclasses.replace(c, warps_f=w) for c in found[:1] for w in (8, 16) if c.launches == 2]
    unique = []
    for i, c in enumerate(found):
        c.check(hidden)
        if c not in unique and (
            i == 0 or not quick or (c.launches == 2 and (c.num_warps == 4 or c.block_t > 16))
        ):
            unique.append(c)
    return unique


def latency_candidates(tokens: int, hidden: int, sms: int = 132) -> list[HcConfig]:
    """The shifted ordering's launch structure at T <= 16, around the default (first): one launch or two,
    Sinkhorn items of one row (which sum their rows' records themselves) or of the block, finish items
    of one or two words, and A items of 32, 64 or 128 columns (CUDA cores) or of one or two 16-column
    steps (tensor cores, blocks of 16)."""
    base = default_config(tokens, hidden, sms=sms)
    bt = base.block_t
    if base.mix == "fma":
        a_items = [(bh, 1, "fma", 1) for bh in (32, 64, 128) if bt * bh <= 256]
    else:
        a_items = [(base.block_h, steps, base.mix, base.stages) for steps in (base.steps_a, 1)]
    found = [base]
    for bh, steps, mix, stages in a_items:
        for rows_s in sorted({bt, 1}):
            for launches in (1, 2):
                for words_n in (1, 2):
                    found.append(
                        HcConfig(bt, bh, steps, rows_s, base.words_f, 0, 4, launches, mix, stages, 0, words_n)
                    )
    unique = []
    for c in found:
        c.check(hidden)
        if c not in unique:
            unique.append(c)
    return unique


def _shape_candidates(
    tokens: int, hidden: int, shifted: bool, *, quick: bool, latency: bool
) -> list[HcConfig]:
    if latency and shifted and tokens <= 16:
        return latency_candidates(tokens, hidden)
    return candidates(tokens, hidden, quick=quick)


def _compile_worker(jobs: list[dict]) -> None:
    """Run each (shape, config) once on small inputs: Triton compiles and caches the kernels on disk."""
    for job in jobs:
        s = make_set(job["T"], job["H"], job["shifted"], 0)
        config = HcConfig(**job["config"])
        try:
            hc.mhc_boundary(*kernel_args(s), params=PARAMS, config=config, want_y=False)
            hc.mhc_boundary(*kernel_args(s), params=PARAMS, config=config, fused=False)
        except Exception as exc:  # reported by the timing process, which runs the same call
            print(f"compile failed: {job}: {exc!r}"[:400], flush=True)
    torch.cuda.synchronize()


def precompile(
    shapes: list[tuple[int, int, bool]], jobs: int, tmp: Path, *, quick: bool = False, latency: bool = False
) -> float:
    """Compile every candidate of every shape in ``jobs`` processes; seconds taken."""
    start = time.perf_counter()
    work = []
    seen = set()
    for tokens, hidden, shifted in shapes:
        for config in _shape_candidates(tokens, hidden, shifted, quick=quick, latency=latency):
            # T is not specialized: one small T per compile class (block size, ordering, hidden) will do.
            # Only constexprs make another kernel: steps_a, lag, T and the ordering are runtime values,
            # and H only through the number of finish steps.
            key = (-(-hidden // 128 // config.words_f), hidden, shifted, config.block_t, config.block_h,
                   config.rows_s, config.words_f, config.num_warps, config.launches, config.mix, config.stages,
                   config.warps_f, config.words_n, config.steps_a)  # fmt: skip
            if key not in seen:
                seen.add(key)
                work.append({"T": min(tokens, 3 * config.block_t), "H": hidden, "shifted": shifted,
                             "config": config.to_json()})  # fmt: skip
    shards = [work[i::jobs] for i in range(jobs)]
    procs = []
    for i, shard in enumerate(shards):
        path = tmp / f"hc_sweep_jobs_{i}.json"
        path.write_text(json.dumps(shard))
        command = routine_command("hc_boundary_sweep", "--compile-jobs", str(path.resolve()))
        procs.append(subprocess.Popen(command, cwd=REPO_ROOT))
    for p in procs:
        p.wait()
    print(
        f"precompiled {len(work)} kernels in {jobs} processes: {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return time.perf_counter() - start


def check(s: dict, ref, config: HcConfig, side: SideStreams | None = None) -> str:
    """'ok', or what failed: fused vs the unfused chain of the same config, and vs the reference; with
    ``side``, the Sinkhorn items on a side stream vs without, every output."""
    fused = hc.mhc_boundary(*kernel_args(s), params=PARAMS, config=config)
    unfused = hc.mhc_boundary(*kernel_args(s), params=PARAMS, config=config, fused=False)
    for name in ("residual", "pre", "y"):
        if not torch.equal(getattr(fused, name), getattr(unfused, name)):
            return f"fused {name} != unfused"
    if side is not None:
        forked = hc.mhc_boundary(*kernel_args(s), params=PARAMS, config=config, side=side.streams[0],
                                 workspace=side.workspaces[0])  # fmt: skip
        side.join()
        for name in ("residual", "pre", "post", "comb", "y"):
            if not torch.equal(getattr(forked, name), getattr(fused, name)):
                return f"{name} with the side stream != without"
    want = quantize_mxfp8(fused.y)
    q, sc = want.data, want.scale
    if not (
        torch.equal(q.view(torch.uint8), fused.pair.data.view(torch.uint8))
        and torch.equal(sc, fused.pair.scale)
    ):
        return "pair != quantize(y)"
    try:
        assert_close(fused.pre, ref.pre, name="pre")
        assert_close(fused.post, ref.post, name="post'")
        assert_close(fused.comb, ref.comb, name="comb'")
        assert_close(fused.y, ref.y, rtol=1.6e-2, atol_of_row_rms=1e-5, name="y")
    except AssertionError as exc:
        return str(exc).splitlines()[0][:120]
    return "ok"


@dataclasses.dataclass(frozen=True)
class SideStreams:
    """Two side streams, each with its own workspace, that consecutive boundaries alternate between (the
    sweep's ``--side``): a boundary's Sinkhorn launch then runs beside the next boundary, as it runs
    beside the next GEMM in the step, and each call is timed to its y."""

    streams: tuple[hc.HcSideStream, hc.HcSideStream]
    workspaces: tuple[hc.HcWorkspace, hc.HcWorkspace]

    @staticmethod
    def make() -> SideStreams:
        return SideStreams(
            (hc.HcSideStream("cuda"), hc.HcSideStream("cuda")),
            (hc.HcWorkspace("cuda"), hc.HcWorkspace("cuda")),
        )

    def join(self) -> None:
        for side in self.streams:
            side.join()


def time_config(
    sets: list[dict], outs: list, config: HcConfig, *, target_ms: float = 2.0, side: SideStreams | None = None
) -> float:
    """us per boundary of ``config``, as one CUDA graph cycling through ``sets``; with ``side`` (an even
    number of sets), call i on side stream and workspace i % 2."""
    extra = [{} if side is None else {"side": side.streams[i % 2], "workspace": side.workspaces[i % 2]}
             for i in range(len(sets))]  # fmt: skip
    fns = [functools.partial(hc.mhc_boundary, *kernel_args(s), params=PARAMS, out=o, config=config, **e)
           for s, o, e in zip(sets, outs, extra, strict=True)]  # fmt: skip
    return bench_us(fns, target_ms=target_ms, replays=7, after=None if side is None else side.join)


def sweep_shape(
    tokens: int,
    hidden: int,
    shifted: bool,
    only: list[HcConfig] | None = None,
    *,
    quick: bool = False,
    latency: bool = False,
    side: bool = False,
) -> list[dict]:
    """Check and time every candidate of one shape; ``side`` (the shifted ordering only): time each
    boundary to its y, the Sinkhorn items on alternating side streams (``SideStreams``)."""
    moved = floor_bytes(tokens, hidden)
    count = rotation_count(moved, cap=32)
    streams = SideStreams.make() if side and shifted else None
    if streams is not None:
        count += count % 2  # alternating streams: an even cycle
    sets = [make_set(tokens, hidden, shifted, seed) for seed in range(count)]
    outs = [hc.empty_hc_boundary_outputs(tokens, hidden, device="cuda", y=False) for _ in sets]
    ordering = "shifted" if shifted else "normal"
    ref = hc.mhc_boundary_reference(*boundary_args(sets[0]), params=PARAMS)
    rows = []
    for config in only or _shape_candidates(tokens, hidden, shifted, quick=quick, latency=latency):
        row = {"T": tokens, "H": hidden, "ordering": ordering, "config": config.to_json()}
        try:
            row["check"] = check(sets[0], ref, config, streams)
            row["us"] = time_config(sets, outs, config, side=streams)
        except Exception as exc:
            row["check"], row["us"] = f"error: {exc!r}"[:200], float("nan")
        rows.append(row)
    good = sorted((r for r in rows if r["check"] == "ok"), key=lambda r: r["us"])[:3]
    rounds: dict[int, list[float]] = {id(r): [] for r in good}
    for _ in range(3):
        for r in good:
            rounds[id(r)].append(
                time_config(sets, outs, HcConfig(**r["config"]), target_ms=5.0, side=streams)
            )
    for r in good:
        r["final_us"] = statistics.median(rounds[id(r)])
    return rows


def table_entries(rows: list[dict], measured: list[int], kept: list[dict] = ()) -> list[dict]:
    """One entry per (H, ordering, bucket): the winner of the smallest measured T >= the bucket, for its
    own bucket and the one below it at most (T = 2048's winner, 64 tokens a block, took 223 us at T = 256
    against 44 for the default), and not below the largest T measured below it, in this run or by an entry
    of ``kept`` (the checked-in table's, whose ``measured_at`` says where): a run at T = 16 alone leaves
    the buckets an earlier run measured at T = 1 and 4 to that run's winners. Buckets no winner reaches
    take the default configuration."""
    winners = {}
    for r in rows:
        if "final_us" in r:
            key = (r["H"], r["ordering"], r["T"])
            if key not in winners or r["final_us"] < winners[key]["final_us"]:
                winners[key] = r
    entries = []
    top = max(measured)
    buckets = [1 << i for i in range(top.bit_length()) if (1 << i) <= triton.next_power_of_2(top)]
    for hidden, ordering in sorted({(h, o) for h, o, _ in winners}):
        for bucket in buckets:
            source = min(
                (t for t in measured if t >= bucket and (hidden, ordering, t) in winners), default=None
            )
            if source is None or bucket * 2 < triton.next_power_of_2(source):
                continue  # unmeasured, or more than one bucket below where it was measured
            earlier = (
                e.get("measured_at", e["tokens"])
                for e in kept
                if (e["hidden"], e["ordering"]) == (hidden, ordering)
            )
            if any(bucket <= t < source for t in earlier):
                continue  # an earlier run measured closer to this bucket
            w = winners[(hidden, ordering, source)]
            entries.append({"hidden": hidden, "tokens": bucket, "ordering": ordering, "config": w["config"],
                            "measured_at": source, "us": round(w["final_us"], 2)})  # fmt: skip
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hiddens", default=",".join(map(str, HIDDENS)))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--orderings", default="normal,shifted")
    parser.add_argument("--jobs", type=int, default=16, help="compile processes (0: compile while timing)")
    parser.add_argument("--write", help=f"write the winners as the config table here (e.g. {TABLE})")
    parser.add_argument("--json", help="every timing (default $OUT/hc_boundary_sweep.json)")
    parser.add_argument(
        "--precompile-only", action="store_true", help="compile every candidate, time nothing"
    )
    parser.add_argument(
        "--quick", action="store_true", help="two launches only, on 4 warps for blocks of 16 or fewer"
    )
    parser.add_argument(
        "--full-shifted",
        action="store_true",
        help="the whole grid for the shifted ordering (default: the normal ordering's six fastest)",
    )
    parser.add_argument(
        "--latency",
        action="store_true",
        help="the shifted ordering at T <= 16: the launch-structure grid (latency_candidates)",
    )
    parser.add_argument(
        "--side",
        action="store_true",
        help="the shifted ordering timed with the Sinkhorn items on side streams, as the step runs it: "
        "each boundary to its y, the previous one's Sinkhorn launch beside it",
    )
    parser.add_argument("--compile-jobs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_jobs:
        _compile_worker(json.loads(Path(args.compile_jobs).read_text()))
        return 0
    hiddens = [int(h) for h in args.hiddens.split(",")]
    tokens = [int(t) for t in args.tokens.split(",")]
    orderings = [o == "shifted" for o in args.orderings.split(",")]
    shapes = [(t, h, s) for h in hiddens for s in orderings for t in tokens]
    out_dir = Path(os.environ.get("OUT", "reports"))
    out_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    if args.jobs:
        with tempfile.TemporaryDirectory() as tmp:
            env["precompile_s"] = precompile(
                shapes, args.jobs, Path(tmp), quick=args.quick, latency=args.latency
            )
    if args.precompile_only:
        return 0
    rows = []
    path = Path(args.json or out_dir / "hc_boundary_sweep.json")
    shapes.sort(key=lambda shape: shape[2])  # every normal shape before the shifted ones
    for t, h, s in shapes:
        start = time.perf_counter()
        only = None
        normal = [
            r for r in rows if (r["T"], r["H"], r["ordering"]) == (t, h, "normal") and r["check"] == "ok"
        ]
        if s and normal and not args.full_shifted and not (args.latency and t <= 16):
            # The shifted ordering differs from the normal one only in where the collapse weights come
            # from: its candidates are the default and the normal ordering's six fastest.
            best = sorted(normal, key=lambda r: r["us"])[:6]
            only = [default_config(t, h)] + [HcConfig(**r["config"]) for r in best]
            only = list(dict.fromkeys(only))
        shape_rows = sweep_shape(t, h, s, only, quick=args.quick, latency=args.latency, side=args.side)
        rows += shape_rows
        good = sorted((r for r in shape_rows if "final_us" in r), key=lambda r: r["final_us"])
        default = shape_rows[0]
        failed = sum(r["check"] != "ok" for r in shape_rows)
        best = good[0] if good else None
        print(f"H={h} T={t:>5} {'shifted' if s else 'normal':>7}: {len(shape_rows)} configs ({failed} failed), "
              f"default {default['us']:.2f} us [{default['check']}], "
              + (f"best {best['final_us']:.2f} us {best['config']}" if best else "no config passed")
              + f"  ({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
        for r in shape_rows:
            if r["check"] != "ok":
                print(f"    FAILED {r['config']}: {r['check']}", flush=True)
        write(args, env, rows, tokens, path)  # after every shape: a run cut short keeps what it measured
    print(f"JSON: {path}")
    return 0


def write(args: argparse.Namespace, env: dict, rows: list[dict], tokens: list[int], path: Path) -> None:
    path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    if args.write:
        checked_in = json.loads(TABLE.read_text(encoding="utf-8")) if TABLE.exists() else {}
        new = table_entries(rows, tokens, checked_in.get("entries", []))
        entries = merged_entries(new, checked_in.get("entries", []))
        run = (
            f"benchmarks/hc_boundary_sweep.py, {env['date']}, {env['gpu']} ({env['sms']} SMs), "
            f"torch {env['torch']}, Triton {env['triton']}"
        )
        data = {"source": merged_source(run, new, entries, checked_in.get("source")), "entries": entries}
        Path(args.write).write_text(json.dumps(data, indent=1) + "\n")


def merged_source(run: str, new: list[dict], entries: list[dict], old_source: str | None) -> str:
    """The merged table's source: the run's, naming the entries it wrote when the checked-in table's
    others stay, followed by the checked-in source for those."""
    if len(entries) == len(new) or not old_source:
        return run
    written = ", ".join(
        f"H = {e['hidden']} {e['ordering']} bucket T = {e['tokens']}" for e in sorted(new, key=_entry_key)
    )
    return f"{run}: {written}. The other entries: {old_source}"


def merged_entries(new: list[dict], old: list[dict]) -> list[dict]:
    """The table after a run: its entries, and the checked-in table's for every (H, bucket, ordering) the
    run did not measure (a sweep of a few shapes keeps the others' winners)."""
    measured = {_entry_key(e) for e in new}
    return sorted([*new, *(e for e in old if _entry_key(e) not in measured)], key=_entry_key)


def _entry_key(entry: dict) -> tuple[int, str, int]:
    return entry["hidden"], entry["ordering"], entry["tokens"]
