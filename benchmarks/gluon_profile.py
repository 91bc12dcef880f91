"""One shape of the Gluon decode GEMM under a profiler or a quick timer (a GPU with the ``gluon`` backend).

    python -m benchmarks.gluon_profile --shape "pro wo_b" --m 16 [--config 64,16,4,4,0] [--calls 3]
    python -m benchmarks.gluon_profile --shape "pro wo_b" --m 16 --time "64,16,4,4,0;64,16,4,4,1"

A configuration is ``block_n,block_t,split_k,num_stages,producer`` (``GluonConfig``, 128-wide K). The first
form prepares the shape's weight for ``gluon`` and launches the two kernels ``--calls`` times (the first
compiles), so that ``ncu --kernel-name regex:gluon --launch-skip 2 ...`` profiles warm launches. The second
checks each configuration against the torch backend (calc_diff <= 1e-5, else it is reported WRONG and not
timed), times it, the first launch alone (the activation's dequantization) and bf16 cuBLAS with
``benchmarks.timing.bench_us`` (CUDA graphs, weights rotating past the L2), and prints microseconds: a
quick comparison inside a device pass, not the benchmark of record (``benchmarks/mxfp8_gemm.py``).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.mxfp8_gemm import SHAPES
from benchmarks.timing import bench_us, rotation_count
from mxfuse.gemm import prepare_mxfp8_weight
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.gemm.gluon_launch import (
    GluonConfig,
    GluonOperands,
    launch_gluon_decode,
    launch_gluon_prep,
    padded_k,
)


def parse_config(text: str) -> GluonConfig:
    block_n, block_t, split, stages, producer = (int(v) for v in text.split(","))
    return GluonConfig(block_n, block_t, 128, split, stages, False, bool(producer))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gluon_profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--shape", default="pro wo_b", choices=sorted(SHAPES))
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--config", type=parse_config, help="block_n,block_t,split_k,num_stages,producer")
    parser.add_argument("--time", help="configurations to time, separated by ';'")
    args = parser.parse_args(argv)
    n, k = SHAPES[args.shape]
    torch.manual_seed(0)
    sets = rotation_count(n * k) if args.time else 1
    weights = [
        prepare_mxfp8_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), backend="gluon")
        for _ in range(sets)
    ]
    a = quantize_mxfp8(torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16), scale_layout="deepgemm")
    out = torch.empty(args.m, n, device="cuda", dtype=torch.bfloat16)
    if not args.time:
        for _ in range(args.calls):
            ran = launch_gluon_decode(
                GluonOperands(a, weights[0].qweight, weights[0].scale, out), config=args.config
            )
        torch.cuda.synchronize()
        print(f"{args.shape} M={args.m}: {ran}")
        return
    from gpumatrix.compare import calc_diff
    from mxfuse.gemm import mxfp8_gemm

    want = mxfp8_gemm(a, weights[0], backend="torch").float()
    rows = []
    for text in args.time.split(";"):
        config = parse_config(text)
        out.fill_(float("nan"))
        launch_gluon_decode(GluonOperands(a, weights[0].qweight, weights[0].scale, out), config=config)
        diff = calc_diff(out.float().nan_to_num(1e30), want)
        if not diff <= 1e-5:
            rows.append((f"{text} WRONG (calc_diff {diff:.1e})", float("nan")))
            continue
        fns = [
            (lambda w=w, c=config: launch_gluon_decode(GluonOperands(a, w.qweight, w.scale, out), config=c))
            for w in weights
        ]
        rows.append((text, bench_us(fns)))
    a16 = torch.empty(args.m, padded_k(k), device="cuda", dtype=torch.bfloat16)
    skip = torch.zeros(args.m, device="cuda", dtype=torch.int32)
    flags = torch.zeros(args.m, -(-padded_k(k) // 1024), device="cuda", dtype=torch.int32)
    tickets = torch.zeros(args.m, device="cuda", dtype=torch.int32)
    prep = [
        (lambda w=w: launch_gluon_prep(GluonOperands(a, w.qweight, w.scale, out), a16, skip, flags, tickets))
        for w in weights
    ]
    rows.append(("first launch alone", bench_us(prep)))
    dense = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    x = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16)
    rows.append(("bf16 cuBLAS", bench_us([(lambda d=d: torch.mm(x, d.t())) for d in dense])))
    print(f"{args.shape} M={args.m} ({sets} weight sets)")
    for name, us in rows:
        print(f"  {name:24s} {us:8.2f} us")


if __name__ == "__main__":
    main()
