"""Compiled-code facts of the fold GEMM candidates, on a machine without a GPU: registers, spills, whether
the main loop's wgmmas stay in flight, and the SASS instructions its loop issues per weight byte.

    python -m benchmarks fold_sass_stats

Each variant of ``mxfuse.kernels.gemm.fold.mxfp8_fold_kernel`` is compiled for sm_90 (Triton's own
ptxas), specialized as a launch on the V4-Pro wo_b weight (7168 x 16384, 16-byte-aligned pointers, N and
K divisible by 16) would be, and disassembled with the nvdisasm that ships with Triton. The main loop is
the first backward branch whose body holds HGMMA instructions; "warp-instr / byte" is its instructions
per warp times the warps, over the weight bytes one iteration streams (BLOCK_N * 32 * BLOCK_G). The
budget to compare against: four warp-instructions per clock per SM against the bytes per clock per SM
at the measured copy bandwidth (4.24 TB/s, benchmarks/RESULTS.md, over 132 SMs at 1.98 GHz: 16 B per
clock, so 0.25 warp-instructions per byte at most, before any stall).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mxfuse.kernels.gemm import fold as mf
from mxfuse.kernels.gemm.fold_steps import ACT_CODE, CVT_CODE, OPERAND_CODE, WSCALE_CODE

N, K = 7168, 16384
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
# (label, block_m, block_n, block_g, warps, stages, operand, cvt, act, wscale)
VARIANTS = [
    ("prefold f16 cast", 16, 64, 4, 4, 3, "f16", "cast", "prefold", "operand"),
    ("prefold f16 cast, BK 256", 16, 64, 8, 4, 3, "f16", "cast", "prefold", "operand"),
    ("prefold f16 cast, BN 128", 16, 128, 4, 8, 3, "f16", "cast", "prefold", "operand"),
    ("prefold f16 asm", 16, 64, 4, 4, 3, "f16", "asm", "prefold", "operand"),
    ("prefold f16 bits", 16, 64, 4, 4, 3, "f16", "bits", "prefold", "operand"),
    ("prefold bf16 cast", 16, 64, 4, 4, 3, "bf16", "cast", "prefold", "operand"),
    ("in-loop f16 cast", 16, 64, 4, 4, 3, "f16", "cast", "inloop", "operand"),
    ("in-loop f16 cast, scales per group sum", 16, 64, 4, 4, 3, "f16", "cast", "inloop", "acc"),
    ("prefold f16 cast, BM 64", 64, 64, 4, 4, 3, "f16", "cast", "prefold", "operand"),
    ("prefold f16 cast, BM 128 BN 128", 128, 128, 2, 8, 3, "f16", "cast", "prefold", "operand"),
]


def compile_variant(bm, bn, bg, warps, stages, operand, cvt, act, wscale):
    fn = mf.mxfp8_fold_kernel
    fp8 = "u8" if cvt == "bits" else "fp8e4nv"
    types = [
        f"*{fp8}",
        "*u8",
        f"*{fp8}",
        "*u8",
        "*fp16" if operand == "f16" else "*bf16",
        "*i32",
        "*bf16",
        "*fp32",
    ]
    types += ["*i32", "*i32", "i32", "i32", "i32", "i32", "i32", "i32"]
    values = {"N": N, "K": K}
    signature, constexprs, attrs = {}, {}, {}
    consts = {"A_LAYOUT": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_G": bg, "SWAP_AB": True,
              "OP": OPERAND_CODE[operand], "CVT": CVT_CODE[cvt], "ACT": ACT_CODE[act], "WSCALE": WSCALE_CODE[wscale],
              "W_BIAS": 120 if operand == "f16" else 127, "EVEN": True, "PDL": False, "PATH_LOG": False,
              "NUM_STAGES": stages}  # fmt: skip
    runtime = iter(types)
    for i, p in enumerate(fn.params):
        if p.is_constexpr:
            signature[p.name] = "constexpr"
            constexprs[(i,)] = consts[p.name]
            continue
        signature[p.name] = next(runtime)
        if signature[p.name].startswith("*") or p.name in values:
            attrs[(i,)] = [["tt.divisibility", 16]]
    options = {"num_warps": warps, "num_stages": stages}
    return triton.compile(
        ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32), options=options
    )


def loop_stats(cubin: bytes) -> tuple[int, collections.Counter, str]:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        sass = subprocess.run(
            [str(BIN / "nvdisasm"), "-c", path], capture_output=True, text=True, check=True
        ).stdout
        usage = subprocess.run(
            [str(BIN / "cuobjdump"), "--dump-resource-usage", path], capture_output=True, text=True
        )
    finally:
        os.unlink(path)
    labels, ins, pending = {}, [], None
    for line in sass.splitlines():
        text = line.strip()
        if m := re.match(r"^(\.L_x_\d+):", text):
            pending = m.group(1)
        elif m := re.match(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", text):
            addr = int(m.group(1), 16)
            ins.append((addr, m.group(2)))
            if pending:
                labels[pending], pending = addr, None
    for addr, text in ins:
        if (m := re.search(r"BRA.*?`\((\.L_x_\d+)\)", text)) and labels.get(m.group(1), addr) < addr:
            body = [t for a, t in ins if labels[m.group(1)] <= a <= addr]
            ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in body)
            if ops["HGMMA"]:
                return len(body), ops, usage.stdout
    return 0, collections.Counter(), usage.stdout


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args(argv)
    print(f"triton {triton.__version__}, torch {torch.__version__}; sm_90 cubins for [N, K] = [{N}, {K}]")
    print(
        "| variant | registers | local bytes | wgmma in flight | loop SASS / warp | warp-instr / byte | top ops |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, bm, bn, bg, warps, stages, *rest in VARIANTS:
        kernel = compile_variant(bm, bn, bg, warps, stages, *rest)
        count, ops, usage = loop_stats(kernel.asm["cubin"])
        regs = re.search(r"REG:(\d+)", usage)
        local = re.search(r"LOCAL:(\d+)", usage)
        pend = [int(p) for p in re.findall(r"warp_group_dot_wait .*?pendings = (\d+)", kernel.asm["ttgir"])]
        top = ", ".join(f"{k} {v}" for k, v in ops.most_common(5))
        per_byte = count * warps / (bn * 32 * bg)
        print(f"| {label} | {regs.group(1) if regs else '?'} | {local.group(1) if local else '?'} "
              f"| {'yes' if max(pend, default=0) > 0 else 'no'} | {count} | {per_byte:.3f} | {top} |")  # fmt: skip
    return 0
