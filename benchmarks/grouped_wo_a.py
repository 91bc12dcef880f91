"""Time the grouped wo_a projection on one GPU: fused epilogue vs separate quantize vs bf16, CUDA graphs.

    python -m benchmarks grouped_wo_a [--sweep | --sweep-only] [--json PATH] [--ts 1,4,16,64,256,2048]
                                      [--gs 2,8] [--sweep-ts 1,4,16,64,256,2048]
                                      [--sweep-dots stream,dq16,fp8,fold] [--kernels triton,gluon]
                                      [--gluon-sweep [--gluon-ts 16,64,4] [--gluon-budget-s S]
                                       [--table PATH]]

For G in {2, 8} groups of r = 4096 -> R = 1024 (DeepSeek-V4.1-Flash wo_a under TP4 and DP4) and T tokens,
in one run, after checking every variant's result first:
  * fused: ``grouped_wo_a(a_pair, w, out_pair=)``, the kernel's epilogue writing wo_b's deepgemm pair;
  * unfused: ``grouped_wo_a(a_pair, w, out=z)`` then ``quantize_mxfp8(z, out=)`` (two launches);
  * kernel_bf16: the first launch of unfused alone;
  * einsum_bf16: ``torch.einsum('tgk,gdk->tgd')`` on bf16 activations and bf16 weights (the reference
    model's code); bmm_bf16: ``torch.bmm`` into a [G, T, R] buffer with no layout copies;
  * gluon_fused, gluon_bf16 (``--kernels`` naming gluon, sm_90): the Gluon grouped kernel
    (``grouped_wo_a(kernel="gluon")``) writing the pair, and bf16 z; checked first (its pair is
    ``quantize_mxfp8`` of its own z, its z against the reference); one that raises or differs is recorded
    in the row and not timed, the other variants still measured;
  * floor: the bytes the fused call must move (fp8 weight and scales, the activation pair, the output
    pair) at the device-to-device copy bandwidth measured in the same run.
Each variant is one CUDA graph of many calls rotating through enough weight copies that every call reads
its weights from DRAM (``benchmarks.timing``: > 4x the 60 MB L2), timed over 15 replays; each is timed three
times, interleaved, and the median of the three is reported. ``--sweep`` also times kernel configurations
(tile, split-K, dot mode, warps, stages) per (G, T) on the fused path and reports the best; dot mode
``fold`` is the GEMM's folded-scale mainloop (``mxfuse.kernels.gemm.fold_steps``). ``--gluon-sweep``
screens the Gluon grouped kernel's configurations per (G, T) and times the fastest against the Triton
kernel (``gluon_sweep``); ``--table`` writes the T it won in the launcher's table format
(``gluon_wins_table``); ``--ts ""`` skips the main table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

from benchmarks.timing import bench_us, copy_bandwidth, rotation_count
from gpumatrix.compare import calc_diff
from mxfuse.einsum import grouped_wo_a, grouped_wo_a_reference, prepare_wo_a_weight
from mxfuse.formats import MxTensor, dequantize_mxfp8, quantize_mxfp8_reference, scale_spec
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, effective_split_k, parse_gluon_table, token_tile

_kernel = importlib.import_module("mxfuse.kernels.grouped_wo_a")
_gluon = importlib.import_module("mxfuse.kernels.grouped_wo_a.gluon_launch")

K, N = 4096, 1024
TS = (1, 4, 16, 64, 256, 2048)
GS = (2, 8)
SWEEP_MAX_DIFF = 1e-4


def fused_bytes(t: int, groups: int) -> int:
    """Bytes one fused call must move: fp8 weight + its scales, the activation pair, the output pair."""
    a_scale = 4 * scale_spec(t, groups * K, scale_layout="deepgemm").storage_numel
    out_scale = 4 * scale_spec(t, groups * N, scale_layout="deepgemm").storage_numel
    return groups * N * K * (1 + 1 / 32) + t * groups * K + a_scale + t * groups * N + out_scale


class Sets:
    """The grouped wo_a problem at (G, T): rotating operand sets, each its own weights (fp8 and bf16),
    inputs (bf16 and both pairs) and outputs, enough that a round of calls streams past the L2."""

    def __init__(self, t: int, groups: int):
        per_set = 2 * groups * N * K + 3 * t * groups * K  # the bf16 weight dominates; enough for fp8 too
        self.count = max(2, rotation_count(per_set, cap=32))
        self.t, self.groups = t, groups
        self.w, self.w_bf16, self.x, self.a, self.z, self.pair, self.pair2, self.zt = ([] for _ in range(8))
        self.a_e8m0: list = []
        for i in range(self.count):
            g = torch.Generator(device="cuda").manual_seed(i)
            w = torch.randn(groups, N, K, generator=g, device="cuda").mul_(0.05).bfloat16()
            self.w_bf16.append(w)
            self.w.append(prepare_wo_a_weight(w))
            x = torch.randn(t, groups * K, generator=g, device="cuda").bfloat16()
            self.x.append(x)
            self.a.append(quantize_mxfp8(x, scale_layout="deepgemm"))
            self.a_e8m0.append(quantize_mxfp8(x, scale_layout="e8m0"))
            self.z.append(torch.empty(t, groups, N, dtype=torch.bfloat16, device="cuda"))
            self.zt.append(torch.empty(groups, t, N, dtype=torch.bfloat16, device="cuda"))
            self.pair.append(MxTensor.empty(t, groups * N, scale_layout="deepgemm", device="cuda"))
            self.pair2.append(MxTensor.empty(t, groups * N, scale_layout="deepgemm", device="cuda"))

    def fused(self, i: int):
        return grouped_wo_a(self.a[i], self.w[i], out_pair=self.pair[i])

    def unfused(self, i: int):
        z = grouped_wo_a(self.a[i], self.w[i], out=self.z[i])
        return quantize_mxfp8(z.view(self.t, self.groups * N), scale_layout="deepgemm", out=self.pair2[i])

    def from_bf16_pair(self, i: int):
        """As the decode step calls it: bf16 o in (quantized first, E8M0 scales), wo_b's pair out."""
        return grouped_wo_a(self.x[i], self.w[i], out_pair=self.pair[i])

    def from_bf16_z(self, i: int):
        """As the decode step's unfused path calls it: bf16 o in, bf16 z out."""
        return grouped_wo_a(self.x[i], self.w[i], out=self.z[i])

    def deepgemm_quantize_pair(self, i: int):
        """bf16 o quantized to deepgemm scales, then the pair out: the step's call with that layout."""
        a = quantize_mxfp8(self.x[i], scale_layout="deepgemm")
        return grouped_wo_a(a, self.w[i], out_pair=self.pair[i])

    def e8m0_in_pair(self, i: int):
        """A pre-quantized activation with E8M0 scales, the pair out: which half of the step's call costs."""
        return grouped_wo_a(self.a_e8m0[i], self.w[i], out_pair=self.pair[i])

    def kernel_bf16(self, i: int):
        return grouped_wo_a(self.a[i], self.w[i], out=self.z[i])

    def gluon_fused(self, i: int):
        return grouped_wo_a(self.a[i], self.w[i], out_pair=self.pair[i], kernel="gluon")

    def gluon_bf16(self, i: int):
        return grouped_wo_a(self.a[i], self.w[i], out=self.z[i], kernel="gluon")

    def einsum_bf16(self, i: int):
        return torch.einsum("tgk,gdk->tgd", self.x[i].view(self.t, self.groups, K), self.w_bf16[i])

    def bmm_bf16(self, i: int):
        a = self.x[i].view(self.t, self.groups, K).transpose(0, 1)  # [G, T, r], row stride G*r: no copy
        return torch.bmm(a, self.w_bf16[i].transpose(1, 2), out=self.zt[i])

    def calls(self, name: str) -> list:
        return [functools.partial(getattr(self, name), i) for i in range(self.count)]


def interleaved(variants: dict[str, list], rounds: int) -> dict[str, object]:
    """Each variant timed ``rounds`` times, the variants interleaved within a round: ``{name}_us`` (the
    median) and ``{name}_rounds_us`` (every round's time)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fns in variants.items():
            times[name].append(bench_us(fns))
    out: dict[str, object] = {}
    for name, values in times.items():
        out[f"{name}_us"] = statistics.median(values)
        out[f"{name}_rounds_us"] = values
    return out


def check(sets: Sets) -> dict[str, object]:
    """Correctness before timing: the fused pair is quantize of the kernel's z; z is the reference's."""
    fused, unfused = sets.fused(0), sets.unfused(0)
    (fused_q, fused_s), (unfused_q, unfused_s) = (fused.data, fused.scale), (unfused.data, unfused.scale)
    torch.cuda.synchronize()
    pair_equal = torch.equal(fused_q.view(torch.uint8), unfused_q.view(torch.uint8)) and torch.equal(
        fused_s, unfused_s
    )
    z = sets.z[0]
    z_ref = grouped_wo_a_reference(sets.a[0], sets.w[0])
    einsum = sets.einsum_bf16(0).float()
    bmm = sets.bmm_bf16(0).transpose(0, 1).float()
    return {
        "pair_equals_quantized_z": bool(pair_equal),
        "z_calc_diff_vs_reference": calc_diff(z, z_ref),
        "pair_bits_equal_reference_quantize": bool(
            torch.equal(
                fused_q.view(torch.uint8),
                quantize_mxfp8_reference(z_ref.view(sets.t, -1))[0].view(torch.uint8),
            )
        ),
        # The bf16 baselines use the unquantized weights: they agree with z to MXFP8's quantization error.
        "einsum_calc_diff_vs_z": calc_diff(einsum, z.float()),
        "bmm_calc_diff_vs_einsum": calc_diff(bmm, einsum),
    }


STEP_VARIANTS = ("from_bf16_pair", "from_bf16_z", "e8m0_in_pair", "deepgemm_quantize_pair")
KERNELS = ("triton", "gluon")


def check_gluon(sets: Sets) -> dict[str, object]:
    """The Gluon kernel before timing: its pair is quantize_mxfp8 of its own z, bit for bit, and its z
    is the reference's (calc_diff); an exception is recorded as the check's result."""
    try:
        z = grouped_wo_a(sets.a[0], sets.w[0], kernel="gluon")
        pair = grouped_wo_a(sets.a[0], sets.w[0], out_scale_layout="deepgemm", kernel="gluon")
        torch.cuda.synchronize()
    except Exception as error:  # recorded in the row: the other variants are still measured
        return {"gluon_error": f"{type(error).__name__}: {error}", "gluon_ok": False}
    want = quantize_mxfp8(z.view(sets.t, -1), scale_layout="deepgemm")
    pair_equal = torch.equal(pair.data.view(torch.uint8), want.data.view(torch.uint8)) and torch.equal(
        pair.scale, want.scale
    )
    diff = calc_diff(z, grouped_wo_a_reference(sets.a[0], sets.w[0]))
    return {
        "gluon_pair_equals_quantized_z": bool(pair_equal),
        "gluon_z_calc_diff_vs_reference": diff,
        "gluon_ok": bool(pair_equal) and diff <= 1e-6,
    }


def measure(
    t: int,
    groups: int,
    *,
    bandwidth: float,
    rounds: int = 3,
    step_inputs: bool = False,
    kernels: tuple[str, ...] = ("triton",),
) -> dict[str, object]:
    sets = Sets(t, groups)
    row: dict[str, object] = {"T": t, "G": groups, "sets": sets.count, "bytes": fused_bytes(t, groups)}
    row["floor_us"] = float(row["bytes"]) / bandwidth * 1e6
    row.update(check(sets))
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    row["config"] = _kernel.default_config(t, groups, N, K, sm_count=sm_count).__dict__
    gluon: tuple[str, ...] = ()
    if "gluon" in kernels:
        row.update(check_gluon(sets))
        gluon = ("gluon_fused", "gluon_bf16") if row["gluon_ok"] else ()
    variants = {
        name: sets.calls(name)
        for name in ("fused", "unfused", "kernel_bf16", "einsum_bf16", "bmm_bf16")
        + gluon
        + (STEP_VARIANTS if step_inputs else ())
    }
    row.update(interleaved(variants, rounds))
    return row


# The fold mainloop (dot "fold", shared with the GEMM's fold kernel): (block_m, block_n, block_k, warps,
# stages, act, wscale) by T. The weights here are N(0, 0.05): scale bytes near 116, inside the fp16
# operand fold's window around FOLD_W_BIAS.
FOLD_W_BIAS = 120


def _fold_bases(t: int) -> list[tuple]:
    if t <= 16:
        return [
            (16, 128, 128, 4, 3, "prefold", "operand"),
            (16, 128, 128, 4, 4, "prefold", "operand"),
            (16, 128, 256, 4, 3, "prefold", "operand"),
            (16, 128, 128, 4, 3, "inloop", "operand"),
            (16, 128, 128, 4, 3, "inloop", "acc"),
        ]
    if t <= 64:
        return [(64, 128, 128, 4, 3, "prefold", "operand"), (64, 128, 128, 8, 3, "prefold", "operand")]
    if t <= 256:
        return [(128, 128, 64, 8, 3, "prefold", "operand"), (128, 128, 128, 8, 3, "prefold", "operand")]
    return [(128, 128, 64, 8, 3, "prefold", "operand"), (256, 128, 64, 8, 3, "prefold", "operand")]


def sweep_configs(
    t: int, groups: int, sm_count: int, dots: tuple[str, ...] = ("stream", "dq16", "fp8", "fold")
) -> list:
    """Candidate configurations for (t, groups): tile shapes and dot modes by T, each with the default's
    split-K, half and double of it, for the dot modes in ``dots``. Invalid ones (see ``check_config``)
    are dropped."""
    # (block_m, block_n, block_k, warps, stages, dot, swap_ab)
    stream_m = 1 if t <= 1 else 2 if t == 2 else 4
    stream = [  # CUDA cores for T <= 4: 128 or 256 columns (whole scale words), K steps of 64 to 256
        (stream_m, 128, 128, 4, 1, "stream", False),
        (stream_m, 128, 64, 4, 1, "stream", False),
        (stream_m, 256, 128, 8, 1, "stream", False),
        (stream_m, 128, 256, 8, 1, "stream", False),
    ]
    if t <= 4:
        bases = [
            *stream,
            (16, 128, 128, 4, 3, "dq16", True),
            (16, 128, 64, 4, 4, "fp8", True),
            (16, 128, 128, 4, 3, "fp8", True),
        ]
    elif t <= 16:
        bases = [
            (16, 128, 128, 4, 3, "dq16", True),
            (16, 128, 128, 4, 5, "dq16", True),
            (16, 128, 64, 4, 4, "dq16", True),
            (16, 256, 128, 8, 3, "dq16", True),
            (16, 128, 128, 4, 3, "dq16", False),
            (16, 128, 64, 4, 4, "fp8", True),
            (16, 128, 128, 4, 3, "fp8", True),
            (16, 128, 32, 4, 6, "fp8", False),
        ]
    elif t <= 64:
        bases = [
            (64, 128, 128, 4, 3, "dq16", True),
            (64, 128, 64, 4, 4, "dq16", True),
            (64, 128, 128, 8, 3, "dq16", False),
            (32, 128, 128, 4, 3, "dq16", False),
            (64, 128, 64, 4, 4, "fp8", True),
            (64, 128, 64, 4, 4, "fp8", False),
        ]
    elif t <= 256:
        bases = [
            (64, 128, 64, 8, 3, "dq16", False),
            (64, 128, 128, 4, 3, "dq16", True),
            (128, 128, 64, 8, 3, "dq16", False),
            (64, 256, 64, 8, 3, "dq16", False),
            (128, 128, 64, 8, 4, "fp8", False),
        ]
    else:
        bases = [
            (128, 128, 64, 8, 3, "dq16", False),
            (128, 256, 64, 8, 3, "dq16", False),
            (128, 128, 128, 8, 3, "dq16", False),
            (64, 256, 64, 4, 3, "dq16", False),
            (128, 128, 64, 8, 4, "fp8", False),
            (128, 256, 64, 8, 3, "fp8", False),
        ]
    default = _kernel.default_config(t, groups, N, K, sm_count=sm_count)
    configs = [default]  # timed the same way as the candidates, for a like-for-like comparison
    fold = [
        (bm, bn, bk, warps, stages, "fold", True, "f16", "cast", act, wscale, FOLD_W_BIAS)
        for bm, bn, bk, warps, stages, act, wscale in _fold_bases(t)
    ]
    for bm, bn, bk, warps, stages, dot, swap, *rest in [*bases, *fold]:
        if dot not in dots:
            continue
        for split in sorted({max(1, default.split // 2), default.split, default.split * 2}):
            config = _kernel.WoAConfig(bm, bn, bk, split, warps, stages, dot, swap, *rest)
            try:
                _kernel.check_config(config, t=t, groups=groups, n=N, k=K)
            except ValueError:
                continue
            if config not in configs:
                configs.append(config)
    return configs


def sweep(
    t: int, groups: int, dots: tuple[str, ...] = ("stream", "dq16", "fp8", "fold")
) -> list[dict[str, object]]:
    """Time every candidate on the fused path. Each is checked first: its pair, dequantized, against the
    quantized reference z by calc_diff, which must stay <= SWEEP_MAX_DIFF. The two differ where fp32 sums
    in another order round z to another bf16 value and that moves an E4M3 code one step (estimated 1e-9
    for the fp16 dot, a few 1e-6 for the fp8 dot's ~14-bit accumulation); a wrong tile or scale gives
    1e-3 and more."""
    sets = Sets(t, groups)
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    want_q, want_s = quantize_mxfp8_reference(
        grouped_wo_a_reference(sets.a[0], sets.w[0]).view(t, groups * N)
    )
    want = dequantize_mxfp8(want_q, want_s, scale_layout="e8m0")
    rows = []
    for config in sweep_configs(t, groups, sm_count, dots):

        def call(i: int, config=config):
            _kernel.launch_grouped_wo_a(sets.a[i], sets.w[i], z=None, pair=sets.pair[i], config=config)

        call(0)
        diff = calc_diff(sets.pair[0].dequantize(), want)
        us = bench_us([functools.partial(call, i) for i in range(sets.count)], target_ms=10.0, replays=7)
        rows.append({"T": t, "G": groups, "config": config.__dict__, "us": us, "calc_diff": diff})
        print(f"  G={groups} T={t} {config} {us:8.2f} us  calc_diff {diff:.2e}", flush=True)
    return rows


def gluon_candidates(t: int, groups: int, num_sms: int) -> list[GluonConfig]:
    """The Gluon grouped kernel's configurations at (t, groups), the launcher's default first: the TMA
    producer partition (every bucket of the decode GEMM's sweep chose it), 64 or 128 weight rows, 4 or 3
    ring slots, at the split counts giving about 1, 2 and 4 waves (``gluon_gemm_sweep.split_choices``);
    those ``check_wo_a_gluon_config`` refuses are dropped."""
    from benchmarks.gluon_gemm_sweep import split_choices

    default = _gluon.default_wo_a_gluon_config(t, groups, N, K, num_sms=num_sms)
    found = [dataclasses.replace(default, split_k=effective_split_k(default, K))]
    for block_n in (64, 128):
        for stages in (4, 3):
            base = GluonConfig(block_n, token_tile(t), 128, 1, stages, False, True)
            for split in split_choices(base, t, groups * N, K, num_sms=num_sms):
                config = dataclasses.replace(base, split_k=split)
                try:
                    _gluon.check_wo_a_gluon_config(config, groups=groups, n=N, k=K)
                except ValueError:
                    continue
                if config not in found:
                    found.append(config)
    return found


def gluon_sweep(
    t: int, groups: int, *, bandwidth: float, deadline: float, rounds: int = 3
) -> dict[str, object]:
    """Screen ``gluon_candidates`` on the fused path until ``deadline`` (``time.monotonic()``; the
    launcher's default is always screened), each checked first as ``sweep`` checks the Triton kernel's
    (its pair, dequantized, within ``SWEEP_MAX_DIFF`` of the quantized reference z by calc_diff; one
    compiled kernel a candidate); one that raises or differs is recorded and not timed. Then the fastest,
    checked bit for bit (its pair ``quantize_mxfp8`` of its own z, its z within 1e-6 of the reference),
    against the Triton grouped kernel (named) and bf16 bmm in ``rounds`` interleaved rounds. The row says
    which won; nothing is written here."""
    sets = Sets(t, groups)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    z_ref = grouped_wo_a_reference(sets.a[0], sets.w[0])
    want_q, want_s = quantize_mxfp8_reference(z_ref.view(t, groups * N))
    want = dequantize_mxfp8(want_q, want_s, scale_layout="e8m0")
    row: dict[str, object] = {"T": t, "G": groups, "floor_us": fused_bytes(t, groups) / bandwidth * 1e6}
    screened = []
    for n, config in enumerate(gluon_candidates(t, groups, num_sms)):
        if n and time.monotonic() > deadline:
            print(f"  gluon G={groups} T={t}: budget spent; {config} and the rest not screened", flush=True)
            break

        def call(i: int, config=config):
            _gluon.launch_grouped_wo_a_gluon(sets.a[i], sets.w[i], pair=sets.pair[i], config=config)

        entry: dict[str, object] = {"config": config.to_json()}
        try:
            call(0)
            entry["calc_diff"] = calc_diff(sets.pair[0].dequantize(), want)
            entry["ok"] = entry["calc_diff"] <= SWEEP_MAX_DIFF
            if entry["ok"]:
                fns = [functools.partial(call, i) for i in range(sets.count)]
                entry["us"] = bench_us(fns, target_ms=10.0, replays=7)
        except Exception as error:  # recorded: the other candidates are still screened
            entry["ok"], entry["error"] = False, f"{type(error).__name__}: {error}"
        screened.append(entry)
        shown = f"{entry['us']:8.2f} us" if "us" in entry else f"not timed ({entry.get('error', 'WRONG')})"
        print(f"  gluon G={groups} T={t} {config} {shown}", flush=True)
    row["screened"] = screened
    timed = [e for e in screened if "us" in e]
    if not timed:
        return row
    best = GluonConfig(**min(timed, key=lambda e: e["us"])["config"])
    row["gluon_config"] = best.to_json()
    z = sets.z[0]
    _gluon.launch_grouped_wo_a_gluon(sets.a[0], sets.w[0], z=z, pair=sets.pair[0], config=best)
    torch.cuda.synchronize()
    quantized = quantize_mxfp8(z.view(t, -1), scale_layout="deepgemm")
    row["gluon_pair_equals_quantized_z"] = bool(
        torch.equal(sets.pair[0].data.view(torch.uint8), quantized.data.view(torch.uint8))
        and torch.equal(sets.pair[0].scale, quantized.scale)
    )
    row["gluon_z_calc_diff_vs_reference"] = calc_diff(z, z_ref)
    if not (row["gluon_pair_equals_quantized_z"] and row["gluon_z_calc_diff_vs_reference"] <= 1e-6):
        print(f"  gluon G={groups} T={t} {best}: WRONG in the exact check; not compared", flush=True)
        return row
    variants = {
        "triton": [
            functools.partial(
                lambda i: grouped_wo_a(sets.a[i], sets.w[i], out_pair=sets.pair[i], kernel="triton"), i
            )
            for i in range(sets.count)
        ],
        "gluon": [
            functools.partial(
                lambda i: _gluon.launch_grouped_wo_a_gluon(
                    sets.a[i], sets.w[i], pair=sets.pair[i], config=best
                ),
                i,
            )
            for i in range(sets.count)
        ],
        "bmm_bf16": sets.calls("bmm_bf16"),
    }
    row.update(interleaved(variants, rounds))
    row["rounds"] = rounds
    return row


def gluon_wins_table(rows: list[dict[str, object]], env: dict) -> dict:
    """The Gluon grouped table (``gluon_configs.json``'s format) for ``env["gpu"]``: per ``"{G*R}x{r}"``, a
    bucket for each T where the confirmed Gluon median beat the Triton kernel's, covering T down to past
    the previous T swept for that G (the first swept T covers only itself); ``swept`` lists every T."""
    shapes: dict[str, list] = {}
    swept: dict[str, list[int]] = {}
    for r in sorted(rows, key=lambda r: (r["G"], r["T"])):
        key = f"{r['G'] * N}x{K}"
        previous = swept.setdefault(key, [])
        t_min = previous[-1] + 1 if previous else r["T"]
        previous.append(r["T"])
        if "gluon_us" not in r or not r["gluon_us"] < r["triton_us"]:
            continue
        measured = {
            "G": r["G"],
            "T": r["T"],
            "gluon_us": round(r["gluon_us"], 3),
            "triton_us": round(r["triton_us"], 3),
            "bmm_bf16_us": round(r["bmm_bf16_us"], 3),
            "x_triton": round(r["triton_us"] / r["gluon_us"], 3),
            "rounds": r["rounds"],
        }
        shapes.setdefault(key, []).append(
            {"m_min": t_min, "m_max": r["T"], "config": r["gluon_config"], "measured": measured}
        )
    source = (
        f"benchmarks/grouped_wo_a.py --gluon-sweep, {env['date']}, {env['gpu']}, torch {env['torch']}, "
        f"Triton {env['triton']}: the T where the Gluon grouped kernel's median beat the Triton kernel's"
    )
    return {"source": source, "shapes": shapes, "swept": swept}


def write_gluon_table(path: Path, entry: dict, device_name: str) -> None:
    """``path`` (a copy of the checked-in table, or a new one) with ``entry`` merged into
    ``device_name``'s: each shape ``entry`` swept takes ``entry``'s buckets (none where Gluon won no T),
    the device's other shapes stay (a run of G = 2 keeps G = 8's), and so do the other devices. Checked
    with the launcher's reader before it is written (ValueError if it could not read it)."""
    if path.exists():
        table = json.loads(path.read_text())
    else:
        checked_in = Path(_gluon.__file__).with_name(_gluon.WO_A_GLUON_TABLE_FILE)
        table = json.loads(checked_in.read_text())
    old = table.setdefault("devices", {}).get(device_name, {})
    kept = {k: v for k, v in old.get("shapes", {}).items() if k not in entry["swept"]}
    kept_swept = {k: v for k, v in old.get("swept", {}).items() if k not in entry["swept"]}
    source = (
        entry["source"]
        if not kept
        else f"{entry['source']} ({', '.join(entry['swept'])}); the other shapes: {old['source']}"
    )
    table["devices"][device_name] = {
        "source": source,
        "shapes": {**kept, **entry["shapes"]},
        "swept": {**kept_swept, **entry["swept"]},
    }
    parse_gluon_table(json.loads(json.dumps(table)), source=str(path))
    path.write_text(json.dumps(table, indent=1) + "\n")


def _write_json(arg: str | None, env: dict, rows: list, sweep_rows: list, gluon_rows: list) -> Path:
    path = _out_path(arg)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"env": env, "rows": rows, "sweep": sweep_rows, "gluon_sweep": gluon_rows}
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def _out_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    return Path(os.environ.get("OUT") or "reports") / "grouped_wo_a.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweep", action="store_true", help="also time kernel configurations per (G, T)")
    parser.add_argument("--sweep-only", action="store_true", help="time the configurations, not the table")
    parser.add_argument("--json", help="write every number here (default $OUT/grouped_wo_a.json or reports/)")
    parser.add_argument("--ts", default=",".join(map(str, TS)), help="token counts T, comma-separated")
    parser.add_argument("--gs", default=",".join(map(str, GS)), help="group counts G, comma-separated")
    parser.add_argument(
        "--sweep-dots",
        default="stream,dq16,fp8,fold",
        help="dot modes the sweep times (stream: CUDA cores, T <= 4; fold: the GEMM's folded-scale mainloop)",
    )
    parser.add_argument(
        "--sweep-ts",
        default="1,4,16,64,256,2048",
        help="token counts the sweep times (one per tile class; T = 1 and 4 differ in the stream tiles' rows)",
    )
    parser.add_argument(
        "--step-inputs",
        action="store_true",
        help="also time the decode step's calls: bf16 o in (pair or z out), and an E8M0-scaled pair in",
    )
    parser.add_argument(
        "--kernels",
        default="triton",
        help="grouped kernels timed in the same run (triton, gluon: the Gluon kernel, sm_90, by name)",
    )
    parser.add_argument(
        "--gluon-sweep",
        action="store_true",
        help="also screen the Gluon grouped kernel's configurations per (G, T in --gluon-ts) and time the "
        "fastest against the Triton kernel in interleaved rounds",
    )
    parser.add_argument("--gluon-ts", default="4,16,64", help="token counts the Gluon sweep times")
    parser.add_argument(
        "--gluon-budget-s",
        type=float,
        default=240.0,
        help="seconds the Gluon sweep may spend screening (shared among its problems; the default "
        "configuration and the confirming rounds always run)",
    )
    parser.add_argument(
        "--table",
        help="--gluon-sweep: write the Gluon table (the checked-in gluon_configs.json with this device's "
        "entry replaced by the T the Gluon kernel won) here",
    )
    args = parser.parse_args(argv)
    if args.table and not args.gluon_sweep:
        parser.error("--table is written by --gluon-sweep; give both")
    kernels = tuple(args.kernels.split(","))
    if not kernels or set(kernels) - set(KERNELS) or "triton" not in kernels:
        parser.error(
            f"--kernels: a comma-separated subset of {KERNELS} including triton; got {args.kernels!r}"
        )
    ts = [int(v) for v in args.ts.split(",") if v]  # --ts "": only the sweeps
    gs = [int(v) for v in args.gs.split(",")]
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
    }
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)

    bandwidth = copy_bandwidth()
    env["copy_GBps"] = round(bandwidth / 1e9, 1)
    print(f"device-to-device copy: {bandwidth / 1e9:.0f} GB/s (read + write)", flush=True)
    rows = []
    for groups in gs:
        for t in [] if args.sweep_only else ts:
            rows.append(
                measure(t, groups, bandwidth=bandwidth, step_inputs=args.step_inputs, kernels=kernels)
            )
            r = rows[-1]
            print(
                f"G={groups} T={t}: fused {r['fused_us']:.2f} us, unfused {r['unfused_us']:.2f} us",
                flush=True,
            )
    sweep_rows: list[dict[str, object]] = []
    if args.sweep or args.sweep_only:
        print("\nsweep (fused, deepgemm pair):", flush=True)
        for groups in gs:
            for t in [int(v) for v in args.sweep_ts.split(",")]:
                sweep_rows += sweep(t, groups, tuple(args.sweep_dots.split(",")))

    gluon_rows: list[dict[str, object]] = []
    if args.gluon_sweep:
        print("\nthe Gluon grouped kernel's configurations (fused, deepgemm pair):", flush=True)
        problems = [(groups, int(t)) for groups in gs for t in args.gluon_ts.split(",")]
        start = time.monotonic()
        for n, (groups, t) in enumerate(problems):
            # each problem's share of what is left of the budget, for screening
            share = (args.gluon_budget_s - (time.monotonic() - start)) / (len(problems) - n)
            gluon_rows.append(
                gluon_sweep(t, groups, bandwidth=bandwidth, deadline=time.monotonic() + max(share, 0.0))
            )
            # after every problem: a run stopped at its time limit keeps what it measured
            _write_json(args.json, env, rows, sweep_rows, gluon_rows)
            if args.table:
                write_gluon_table(Path(args.table), gluon_wins_table(gluon_rows, env), env["gpu"])

    path = _write_json(args.json, env, rows, sweep_rows, gluon_rows)

    print(
        f"\n{env['date']}, {env['gpu']}, torch {env['torch']}, Triton {env['triton']}; r = {K}, R = {N}; "
        "us per call, median of 3 interleaved rounds of 15 CUDA-graph replays, weights cold"
    )
    print(
        "| G | T | MB moved | floor | fused | unfused | kernel bf16 z | einsum bf16 | bmm bf16 "
        "| unfused / fused | bf16 best / fused | floor / fused | checks |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fused = r["fused_us"]
        bf16 = min(r["einsum_bf16_us"], r["bmm_bf16_us"])
        ok = r["pair_equals_quantized_z"] and r["z_calc_diff_vs_reference"] <= 1e-6
        print(
            f"| {r['G']} | {r['T']} | {r['bytes'] / 1e6:.1f} | {r['floor_us']:.2f} | {fused:.2f} "
            f"| {r['unfused_us']:.2f} "
            f"| {r['kernel_bf16_us']:.2f} | {r['einsum_bf16_us']:.2f} | {r['bmm_bf16_us']:.2f} "
            f"| {r['unfused_us'] / fused:.2f}x | {bf16 / fused:.2f}x | {100 * r['floor_us'] / fused:.0f}% "
            f"| {'ok' if ok else 'WRONG'} (calc_diff {r['z_calc_diff_vs_reference']:.1e}) |"
        )
    if "gluon" in kernels:
        print("\nthe Gluon grouped kernel (us; x = Triton fused / Gluon fused, bf16 best / Gluon fused):")
        for r in rows:
            if not r.get("gluon_ok"):
                print(f"  G={r['G']} T={r['T']}: not timed: {r.get('gluon_error') or 'WRONG'} "
                      f"(pair == quantize(z): {r.get('gluon_pair_equals_quantized_z')}, "
                      f"calc_diff {r.get('gluon_z_calc_diff_vs_reference')})")  # fmt: skip
                continue
            bf16 = min(r["einsum_bf16_us"], r["bmm_bf16_us"])
            print(f"  G={r['G']} T={r['T']}: gluon fused {r['gluon_fused_us']:.2f}, gluon bf16 z "
                  f"{r['gluon_bf16_us']:.2f}; {r['fused_us'] / r['gluon_fused_us']:.2f}x Triton fused, "
                  f"{bf16 / r['gluon_fused_us']:.2f}x bf16")  # fmt: skip
    if args.step_inputs:
        print("\nthe decode step's calls (us): G | T | deepgemm pair in, pair out | bf16 in, pair out | bf16 in, z out"
              " | E8M0 pair in, pair out | bf16 quantized to deepgemm, pair out")  # fmt: skip
        for r in rows:
            print(f"  {r['G']} | {r['T']} | {r['fused_us']:.2f} | {r['from_bf16_pair_us']:.2f} | "
                  f"{r['from_bf16_z_us']:.2f} | {r['e8m0_in_pair_us']:.2f} | "
                  f"{r['deepgemm_quantize_pair_us']:.2f}")  # fmt: skip
    print("\ntargets (issue 12):")
    for r in rows:
        ratio_unfused = r["unfused_us"] / r["fused_us"]
        ratio_bf16 = min(r["einsum_bf16_us"], r["bmm_bf16_us"]) / r["fused_us"]
        need_unfused = 1.3 if r["T"] <= 64 else 1.0
        verdicts = [f"vs unfused {ratio_unfused:.2f}x (need >= {need_unfused})"]
        verdicts[-1] += " ok" if ratio_unfused >= need_unfused else " MISSED"
        if r["T"] <= 16:
            verdicts.append(
                f"vs bf16 {ratio_bf16:.2f}x (need >= 1.6) {'ok' if ratio_bf16 >= 1.6 else 'MISSED'}"
            )
        print(f"  G={r['G']} T={r['T']}: " + "; ".join(verdicts))
    if sweep_rows:
        print("\nbest swept configuration per (G, T) (fused path), against the default timed alike:")
        for key in sorted({(s["G"], s["T"]) for s in sweep_rows}):
            mine = [s for s in sweep_rows if (s["G"], s["T"]) == key]
            wrong = [s["config"] for s in mine if not s["calc_diff"] <= SWEEP_MAX_DIFF]
            good = [s for s in mine if s["calc_diff"] <= SWEEP_MAX_DIFF]
            default = mine[0]  # sweep_configs puts the default first
            if good:
                best = min(good, key=lambda s: s["us"])
                print(
                    f"  G={key[0]} T={key[1]}: best {best['us']:.2f} us {best['config']}; "
                    f"default {default['us']:.2f} us ({default['us'] / best['us']:.2f}x the best)"
                )
            if wrong:
                print(f"  G={key[0]} T={key[1]}: WRONG RESULTS from {wrong}")
    if gluon_rows:
        print("\nthe Gluon grouped kernel, its fastest configuration against the Triton kernel (us, median of "
              "3 interleaved rounds): G | T | floor | Triton | Gluon | bmm bf16 | Triton / Gluon | config")  # fmt: skip
        for r in gluon_rows:
            if "gluon_us" not in r:
                print(f"  {r['G']} | {r['T']} | no configuration passed its checks")
                continue
            print(f"  {r['G']} | {r['T']} | {r['floor_us']:.2f} | {r['triton_us']:.2f} | {r['gluon_us']:.2f} | "
                  f"{r['bmm_bf16_us']:.2f} | {r['triton_us'] / r['gluon_us']:.2f}x | {r['gluon_config']}")  # fmt: skip
        if args.table:
            print(f"Gluon table: {args.table}")
    print(f"\nJSON: {path}")
    return 0
