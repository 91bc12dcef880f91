"""Launch the decode kernels whose speed is open, a few times each, for Nsight Compute to profile.

    ncu --kernel-name regex:'stream|mma_kernel|mqa_split|mqa_combine' --launch-count 40 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section MemoryWorkloadAnalysis python -m benchmarks ncu_probe [--gemm CONFIGS] [--attention]

Each kernel runs four times (ncu flushes the caches before each profiled launch): the MXFP8 GEMM at
M = 1 on V4.1-Flash wo_b DP4 (5120 x 8192) with the stream configurations named by ``--gemm``
(``block_n,block_g,warps,stages,split`` separated by ``;``) and the launcher's default at M = 4, and
decode attention at T = 1 over 4096 keys with its table's configuration, and the fused hc boundary at
T = 1, H = 5120 writing bf16 y, then the MXFP8 pair (``--boundary``). No timing here: the profiler's
sections are the output (benchmarks/speed_gpu_run.sh keeps them in $OUT).
"""

from __future__ import annotations

import argparse

import torch

from mxfuse.attention import mqa_decode_attention
from mxfuse.formats import as_mxtensor, quantize_mxfp8_reference
from mxfuse.gemm.weights import quantize_weight
from mxfuse.kernels.gemm import launch_mxfp8_gemm, weight_scale_kgroup_major
from mxfuse.kernels.gemm.configs import GemmConfig


def gemm(configs: list[GemmConfig | None], m: int, n: int = 5120, k: int = 8192) -> None:
    weights = [quantize_weight(torch.randn(n, k, device="cuda")) for _ in range(4)]  # 4 x 42 MB: cold L2
    pair = quantize_mxfp8_reference(torch.randn(m, k, device="cuda"), scale_layout="deepgemm")
    a = as_mxtensor(pair, scale_layout="deepgemm")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for config in configs:
        for wq, ws in weights:
            launch_mxfp8_gemm(a, wq, weight_scale_kgroup_major(ws), out, config=config, w_scale_rows=ws)
    torch.cuda.synchronize()


def attention(tokens: int = 1, length: int = 4096, heads: int = 64, dim: int = 512) -> None:
    sets = []
    for _ in range(8):  # 8 x 4 MB of keys
        kv = torch.randn(tokens, length, dim, device="cuda").to(torch.bfloat16)
        q = torch.randn(tokens, heads, dim, device="cuda").to(torch.bfloat16)
        lens = torch.full((tokens,), length - 1, dtype=torch.int64, device="cuda")
        sets.append((q, kv, lens))
    for q, kv, lens in sets:
        mqa_decode_attention(q, kv, lens, scale=dim**-0.5, check_lens=False)
    torch.cuda.synchronize()


def boundary(tokens: int = 1, hidden: int = 5120) -> None:
    """The fused hyper-connection boundary (shifted ordering, V4.1) writing bf16 y, then the MXFP8 pair."""
    from benchmarks.hc_boundary import PARAMS, kernel_args, make_set
    from mxfuse import hc

    sets = [make_set(tokens, hidden, True, seed) for seed in range(4)]
    for want_pair in (False, True):
        for s in sets:
            hc.mhc_boundary(*kernel_args(s), params=PARAMS, want_y=not want_pair, want_pair=want_pair)
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gemm", default="", help="stream configs: block_n,block_g,warps,stages,split;...")
    parser.add_argument("--attention", action="store_true", help="also decode attention at T = 1")
    parser.add_argument("--boundary", action="store_true", help="also the hc boundary at T = 1 (y, pair)")
    args = parser.parse_args(argv)
    configs: list[GemmConfig | None] = []
    for item in filter(None, args.gemm.split(";")):
        bn, bg, warps, stages, split = (int(v) for v in item.split(","))
        configs.append(GemmConfig("stream", 1, bn, bg, split, warps, stages))
    if configs:
        gemm(configs, 1)
        gemm([None], 4)
    if args.attention:
        attention()
    if args.boundary:
        boundary()
    return 0
