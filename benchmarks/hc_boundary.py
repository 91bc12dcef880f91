"""Time the fused mHC boundary against its baselines on one GPU: CUDA graphs, cold L2, medians.

    python -m benchmarks hc_boundary [--compile dynamic-tokens|static|off] [--json PATH]

For T in {1, 16, 64, 128, 512, 2048}, H in {5120, 7168}, n = 4, both orderings (normal: V4; shifted:
V4.1, ``prev_pre`` given), each boundary writing the next GEMM's input as an MXFP8 pair (deepgemm
scales, RCEIL) and no bf16 y, our kernels given ``fn`` prepared once as a model loads it
(``HcProjection``; ``HC_FN=fp32`` in the environment passes the fp32 tensor instead), in one run:
  * fused: ``mhc_boundary`` (one kernel launch);
  * unfused: ``mhc_boundary(fused=False)``: our post, mixes + Sinkhorn and collapse + RMSNorm kernels,
    then ``quantize_mxfp8`` (the chain writes y in bf16 between the last two);
  * compiled: ``torch.compile`` of an fp32 torch formulation of the boundary (the reference's steps
    with an fp32 matmul and fp32 sums, as upstream writes them), then ``quantize_mxfp8``. By default
    the token dimension is marked dynamic (one compile per hidden size and ordering, plus T = 1, which
    torch specializes); ``--compile static`` compiles every shape (slower to start);
  * floor: the bytes the boundary must move (residual read and write, x, fn, the coefficients, the
    pair) at the copy bandwidth measured in the same run (a 512 MB device copy).
Every variant of a shape is first checked against the reference: ours (fused, unfused) with R' within
one bf16 step, pre/post'/comb' within 1e-5 and y within 1.6e-2 relative, the pair bit for bit
quantize_mxfp8 of the variant's own y, and fused == unfused bit for bit in R' and the pair; the compiled
baseline with the same checks but R' within 1.6e-2 relative (torch's einsum sums in another order). The
table's two checks columns say which check of which variant failed and by how much: a baseline that
misses the reference's tolerance is reported there and does not fail the run; a failed check of ours
makes the script exit 1. Each variant is captured in one CUDA graph of many calls cycling through
enough input sets that repeated calls do not hit the 60 MB L2, and timed over replays; every variant
is timed three times, interleaved, and the median kept. The kernel configuration is the table's (``benchmarks/hc_boundary_sweep.py`` chooses it).
Prints a table at the end; writes every number as JSON to --json, else $OUT/hc_boundary.json, else
reports/hc_boundary.json.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import time
from pathlib import Path

import torch
import triton

from benchmarks.timing import bench_us, copy_bandwidth, rotation_count
from gpumatrix.compare import ulp_distance
from mxfuse import hc
from mxfuse.formats import MxTensor, scale_spec
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.hc import choose_config, sm_count

TOKENS = (1, 16, 64, 128, 512, 2048)
HIDDENS = (5120, 7168)
PARAMS = hc.HcParams()  # V4's scalars
OURS = ("fused", "unfused", "fused vs unfused")  # the kernels' own checks; "compiled" is the baseline's


def floor_bytes(tokens: int, hidden: int) -> int:
    """Bytes a boundary must move: R read + R' written, x, fn, per-token coefficients in and out, pair."""
    n = 4
    pair = tokens * hidden + 4 * scale_spec(tokens, hidden, scale_layout="deepgemm").storage_numel
    # post, comb, prev_pre in; pre, post', comb' out
    coefficients = 4 * tokens * (n + n * n + n + n + n + n * n)
    return (
        2 * (2 * tokens * n * hidden)
        + 2 * tokens * hidden
        + 4 * n * (n + 2) * n * hidden
        + coefficients
        + pair
    )


def make_set(tokens: int, hidden: int, shifted: bool, seed: int) -> dict[str, torch.Tensor | None]:
    """One boundary's inputs at T = ``tokens``, H = ``hidden`` (the upstream Mega-mHC test's recipe; see
    tests/support/hc_inputs.py): x, the residual stream, the previous boundary's post/comb (``shifted``:
    V4.1's ordering, with ``prev_pre``), the projection fn (fp32 and ``projection``, prepared), scale, base
    and the RMSNorm weight; on the current CUDA device, seeded by ``seed``."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    n = 4

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device="cuda")

    comb = torch.rand(tokens, n, n, generator=g, device="cuda")
    for _ in range(3):
        comb = comb / comb.sum(-1, keepdim=True)
        comb = comb / comb.sum(-2, keepdim=True)
    s = {
        "x": normal(tokens, hidden).bfloat16(),
        "residual": normal(tokens, n, hidden).bfloat16(),
        "post": torch.sigmoid(normal(tokens, n)),
        "comb": comb,
        "fn": normal(n * (n + 2), n * hidden) * 1e-2,
        "scale": normal(3) * 0.1,
        "base": normal(n * (n + 2)) * 0.1,
        "norm_weight": (1 + 0.1 * normal(hidden)).bfloat16(),
        "prev_pre": torch.sigmoid(normal(tokens, n)) if shifted else None,
    }
    s["projection"] = hc.HcProjection.prepare(s["fn"])
    return s


def baseline_args(s: dict) -> tuple:
    """The compiled baseline's positional arguments from a ``make_set`` set, ``fn`` the fp32 tensor."""
    return (s["x"], s["residual"], s["post"], s["comb"], s["fn"], s["scale"], s["base"], s["norm_weight"])


def boundary_args(
    s: dict, fn: torch.Tensor | hc.HcProjection | None = None
) -> tuple[hc.HcInputs, hc.HcWeights]:
    """The boundary's inputs and weights from a ``make_set`` set, ``fn`` the fp32 tensor unless given
    (the reference)."""
    inputs = hc.HcInputs(s["x"], s["residual"], s["post"], s["comb"], s["prev_pre"])
    weights = hc.HcWeights(s["fn"] if fn is None else fn, s["scale"], s["base"], s["norm_weight"])
    return inputs, weights


def kernel_args(s: dict) -> tuple[hc.HcInputs, hc.HcWeights]:
    """The inputs and weights of our kernels: ``fn`` prepared once (``HcProjection``, as a model loads
    it) unless the environment says ``HC_FN=fp32``."""
    return boundary_args(s, s["fn"] if os.environ.get("HC_FN", "prepared") == "fp32" else s["projection"])


def boundary_fp32(x, residual, post, comb, fn, scale, base, w, prev_pre):
    """The boundary as upstream's torch code writes it (fp32 matmul and sums), y in bf16."""
    n, hidden = residual.shape[1], residual.shape[2]
    new = post[:, :, None] * x.float()[:, None, :] + torch.einsum("tjk,tjh->tkh", comb, residual.float())
    new = new.bfloat16()
    flat = new.flatten(1).float()
    m = (flat @ fn.T) * torch.rsqrt(flat.square().sum(-1, keepdim=True) / (n * hidden) + PARAMS.hc_norm_eps)
    m = m * torch.cat([scale[0].expand(n), scale[1].expand(n), scale[2].expand(n * n)]) + base
    pre = torch.sigmoid(m[:, :n]) + PARAMS.hc_pre_eps
    new_post = torch.sigmoid(m[:, n : 2 * n]) * PARAMS.hc_post_scale
    eps = PARAMS.sinkhorn_eps
    c = torch.softmax(m[:, 2 * n :].reshape(-1, n, n), dim=-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(PARAMS.sinkhorn_iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    p = pre if prev_pre is None else prev_pre
    v = (new.float() * p[:, :, None]).sum(1).bfloat16().float()
    y = (
        v * torch.rsqrt(v.square().mean(-1, keepdim=True) + PARAMS.rms_eps) * (w.float() * PARAMS.rms_scale)
    ).bfloat16()
    return new, pre, new_post, c, y


class Compiled:
    """torch.compile of ``boundary_fp32`` then quantize_mxfp8, compiled once per shape class and reused."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        if mode == "dynamic-tokens":
            # Only the dimensions marked below are dynamic: hidden sizes stay specialized.
            torch._dynamo.config.automatic_dynamic_shapes = False
        self.fn = torch.compile(boundary_fp32, dynamic=False if mode == "static" else None)
        self.compile_s: dict[str, float] = {}

    def prepare(self, s: dict, key: str) -> None:
        """Mark the token dimension dynamic (T > 1; torch specializes size 1), compile on first use of key."""
        if self.mode == "dynamic-tokens" and s["x"].shape[0] > 1:
            for name in ("x", "residual", "post", "comb", "prev_pre"):
                if s[name] is not None:
                    torch._dynamo.mark_dynamic(s[name], 0)
        if key not in self.compile_s:
            start = time.perf_counter()
            self(s, None)
            torch.cuda.synchronize()
            self.compile_s[key] = time.perf_counter() - start

    def __call__(self, s: dict, pair: MxTensor | None):
        new, pre, post, comb, y = self.fn(*baseline_args(s), s["prev_pre"])
        return new, pre, post, comb, y, quantize_mxfp8(y, out=pair)


def _off(name: str, got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float = 1e-5) -> list[str]:
    """[] when |got - want| <= rtol |want| + atol everywhere (NaN fails), else how far off and where."""
    err = (got.float() - want.float()).abs()
    bad = ~(err <= rtol * want.float().abs() + atol)
    if not bad.any():
        return []
    worst = err[bad].max().item()
    return [f"{name} off by up to {worst:.3g} at {int(bad.sum())}/{bad.numel()} (rtol {rtol:g})"]


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _differ(name: str, got: torch.Tensor, want: torch.Tensor, what: str) -> list[str]:
    """[] when the two tensors hold the same bits element for element, else how many elements differ."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return [f"{name} not {what}: shape or dtype differ"]
    if got.is_floating_point():  # compare bits: NaN == NaN, -0 != 0
        got, want = got.view(_BITS[got.element_size()]), want.view(_BITS[want.element_size()])
    if torch.equal(got, want):
        return []
    return [f"{name} not {what} at {int((got != want).sum())}/{got.numel()}"]


def _pair_differs(pair: MxTensor, other: MxTensor, what: str, *, whose: str = "") -> list[str]:
    codes = _differ(f"{whose}pair codes", pair.data, other.data, what)
    return codes + _differ(f"{whose}pair scales", pair.scale_bytes(), other.scale_bytes(), what)


def variant_problems(out: hc.HcBoundaryOutputs, ref: hc.HcBoundaryOutputs, *, ours: bool) -> list[str]:
    """A variant's failed checks against the reference, each with its measure (empty: all passed).

    Ours follow the reference's fp32 order (R' within one bf16 step); torch's einsum sums in another
    order, which near cancellations moves R' by more steps: bf16 tolerance for the baseline.
    """
    problems = []
    if ours:
        steps = int(ulp_distance(out.residual, ref.residual).max())
        if steps > 1:
            problems.append(f"R' {steps} bf16 steps from the reference (max 1)")
    else:
        problems += _off("R'", out.residual, ref.residual, 1.6e-2)
    for name, got, want in (
        ("pre", out.pre, ref.pre),
        ("post'", out.post, ref.post),
        ("comb'", out.comb, ref.comb),
    ):
        problems += _off(name, got, want, 1e-5)
    problems += _off("y", out.y, ref.y, 1.6e-2)
    problems += _pair_differs(out.pair, quantize_mxfp8(out.y), "quantize_mxfp8(y)")
    return problems


def check(s: dict, compiled: Compiled | None) -> dict[str, list[str]]:
    """Correctness before timing: each variant's failed checks (contracts of the test suite), by variant.

    Keys: ``OURS`` (fused and unfused against the reference; fused vs unfused bit for bit in R' and
    the pair), then ``compiled`` (the baseline against the reference) when it runs.
    """
    ref = hc.mhc_boundary_reference(*boundary_args(s), params=PARAMS)
    fused = hc.mhc_boundary(*kernel_args(s), params=PARAMS)
    unfused = hc.mhc_boundary(*kernel_args(s), params=PARAMS, fused=False)
    problems = {
        "fused": variant_problems(fused, ref, ours=True),
        "unfused": variant_problems(unfused, ref, ours=True),
        "fused vs unfused": _differ("unfused R'", unfused.residual, fused.residual, "fused's")
        + _pair_differs(unfused.pair, fused.pair, "fused's", whose="unfused "),
    }
    if compiled is not None:
        new, pre, post, comb, y, pair = compiled(s, None)
        problems["compiled"] = variant_problems(
            hc.HcBoundaryOutputs(new, pre, post, comb, y, pair), ref, ours=False
        )
    return problems


def render_checks(problems: dict[str, list[str]], variants: tuple[str, ...]) -> str:
    """One table cell: ``ok``, ``n/a`` (none of ``variants`` checked) or ``variant: what failed; ...``."""
    checked = [v for v in variants if v in problems]
    if not checked:
        return "n/a"
    failed = [f"{v}: {', '.join(problems[v])}" for v in checked if problems[v]]
    return "; ".join(failed) if failed else "ok"


def ours_failed(row: dict) -> bool:
    return any(row["checks"][v] for v in OURS)


def measure(
    tokens: int,
    hidden: int,
    shifted: bool,
    compiled: Compiled | None,
    copy_gbps: float,
    *,
    outputs: bool = False,
) -> dict:
    moved = floor_bytes(tokens, hidden)
    count = rotation_count(moved, cap=32)
    sets = [make_set(tokens, hidden, shifted, seed) for seed in range(count)]
    row: dict[str, object] = {"T": tokens, "H": hidden, "ordering": "shifted" if shifted else "normal"}
    row.update({"floor_bytes": moved, "sets": count, "floor_us": moved / copy_gbps / 1e3})
    row["config"] = choose_config(
        tokens, hidden, shifted=shifted, sms=sm_count(torch.device("cuda"))
    ).to_json()
    if compiled is not None:
        shape_class = f"T={tokens}" if tokens == 1 or compiled.mode == "static" else "T dynamic"
        for s in sets:
            compiled.prepare(s, f"H={hidden} {row['ordering']} {shape_class}")
    row["checks"] = check(sets[0], compiled)
    kw = {"params": PARAMS}
    fused_outs = [hc.empty_hc_boundary_outputs(tokens, hidden, device="cuda", y=False) for _ in sets]
    chain_outs = [hc.empty_hc_boundary_outputs(tokens, hidden, device="cuda") for _ in sets]
    variants = {
        "fused": [functools.partial(hc.mhc_boundary, *kernel_args(s), **kw, out=o)
                  for s, o in zip(sets, fused_outs, strict=True)],
        "unfused": [functools.partial(hc.mhc_boundary, *kernel_args(s), **kw, out=o, fused=False)
                    for s, o in zip(sets, chain_outs, strict=True)],
    }  # fmt: skip
    if outputs:  # the fused kernel writing bf16 y only, and both y and the pair
        y_outs = [hc.empty_hc_boundary_outputs(tokens, hidden, device="cuda", pair=False) for _ in sets]
        variants["fused_y"] = [functools.partial(hc.mhc_boundary, *kernel_args(s), **kw, out=o)
                               for s, o in zip(sets, y_outs, strict=True)]  # fmt: skip
        variants["fused_both"] = [functools.partial(hc.mhc_boundary, *kernel_args(s), **kw, out=o)
                                  for s, o in zip(sets, chain_outs, strict=True)]  # fmt: skip
    if compiled is not None:
        pairs = [o.pair for o in fused_outs]
        variants["compiled"] = [functools.partial(compiled, s, p) for s, p in zip(sets, pairs, strict=True)]
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(3):
        for name, fns in variants.items():
            times[name].append(bench_us(fns, target_ms=5.0, replays=10))
    for name, values in times.items():
        row[f"{name}_us"] = statistics.median(values)
        row[f"{name}_rounds_us"] = values
    return row


def environment() -> dict[str, object]:
    """Date, GPU, versions and SM count of this run."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "sms": sm_count(torch.device("cuda")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compile", choices=("dynamic-tokens", "static", "off"), default="dynamic-tokens")
    parser.add_argument("--hiddens", default=",".join(map(str, HIDDENS)), help="comma-separated hidden sizes")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="comma-separated T values")
    parser.add_argument("--orderings", default="normal,shifted", help="normal, shifted or both")
    parser.add_argument(
        "--outputs", action="store_true", help="also the fused kernel writing y, and y + pair"
    )
    parser.add_argument("--json", help="write every number here (default $OUT/hc_boundary.json)")
    args = parser.parse_args(argv)
    orderings = args.orderings.split(",")
    if not orderings or set(orderings) - {"normal", "shifted"}:
        parser.error(f"--orderings must name normal and/or shifted; got {args.orderings!r}")
    start = time.perf_counter()
    torch._dynamo.config.recompile_limit = 64
    env = environment()
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    copy_gbps = copy_bandwidth() / 1e9  # bytes read + written per second, of a 512 MB copy
    env["copy_GBps"] = copy_gbps
    print(f"copy bandwidth (read + write): {copy_gbps:.0f} GB/s", flush=True)
    compiled = None if args.compile == "off" else Compiled(args.compile)
    rows = []
    for hidden in map(int, args.hiddens.split(",")):
        for shifted in [o == "shifted" for o in orderings]:
            for tokens in map(int, args.tokens.split(",")):
                rows.append(measure(tokens, hidden, shifted, compiled, copy_gbps, outputs=args.outputs))
                r = rows[-1]
                if args.outputs:
                    print(f"  T={tokens:>5} H={hidden}: fused writing the pair {r['fused_us']:.2f} us, y "
                          f"{r['fused_y_us']:.2f}, y and the pair {r['fused_both_us']:.2f}", flush=True)  # fmt: skip
                print(f"  T={tokens:>5} H={hidden} {r['ordering']:>7}: fused {r['fused_us']:.2f} us, "
                      f"unfused {r['unfused_us']:.2f}, compiled {r.get('compiled_us', float('nan')):.2f}", flush=True)  # fmt: skip
                for variant, problems in r["checks"].items():
                    if problems:
                        print(f"    {variant} failed: {', '.join(problems)}", flush=True)
    env["compile_s"] = compiled.compile_s if compiled else {}
    env["wall_s"] = time.perf_counter() - start
    path = Path(args.json or Path(os.environ.get("OUT", "reports")) / "hc_boundary.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    _print_tables(env, rows, args.compile)
    print(f"JSON: {path}; wall {env['wall_s']:.0f} s")
    return 1 if any(ours_failed(r) for r in rows) else 0


def _print_tables(env: dict, rows: list[dict], compile_mode: str) -> None:
    print(
        f"\n{env['date']}, {env['gpu']} ({env['sms']} SMs), torch {env['torch']}, Triton {env['triton']}; "
        f"copy {env['copy_GBps']:.0f} GB/s; MXFP8 pair out (deepgemm, RCEIL); us per boundary, median of 3 "
        f"interleaved rounds of CUDA-graph replays, cold L2; compiled = torch.compile ({compile_mode}) + quantize_mxfp8"
    )
    print("| H | ordering | T | floor | fused | fused / floor | unfused | compiled | vs unfused | vs compiled "
          "| checks: ours | checks: compiled |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fused = r["fused_us"]
        comp = r.get("compiled_us")
        print(
            f"| {r['H']} | {r['ordering']} | {r['T']} | {r['floor_us']:.2f} | {fused:.2f} | {fused / r['floor_us']:.2f}x "
            f"| {r['unfused_us']:.2f} | {'n/a' if comp is None else f'{comp:.2f}'} | {r['unfused_us'] / fused:.2f}x "
            f"| {'n/a' if comp is None else f'{comp / fused:.2f}x'} | {render_checks(r['checks'], OURS)} "
            f"| {render_checks(r['checks'], ('compiled',))} |"
        )
