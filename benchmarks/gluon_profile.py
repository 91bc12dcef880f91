"""One shape of the Gluon decode GEMM under a profiler: ``python -m benchmarks.gluon_profile --shape "pro wo_b"
--m 16 [--calls 3] [--block-n 64 --block-t 16 --split 4 --stages 4]`` (a GPU with the ``gluon`` backend).

Prepares the shape's weight for ``gluon``, quantizes an activation, and launches the two kernels ``--calls``
times (the first compiles), so that ``ncu --kernel-name regex:mxfp8_gluon --launch-skip 1 --launch-count 1
python -m benchmarks.gluon_profile ...`` profiles a warm launch. Without ``--block-n`` the launcher chooses
the configuration. Prints the configuration it ran.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.mxfp8_gemm import SHAPES
from mxfuse.gemm import prepare_mxfp8_weight
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, GluonOperands, launch_gluon_decode


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gluon_profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--shape", default="pro wo_b", choices=sorted(SHAPES))
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--block-n", type=int)
    parser.add_argument("--block-t", type=int, default=16)
    parser.add_argument("--split", type=int, default=1)
    parser.add_argument("--stages", type=int, default=4)
    args = parser.parse_args(argv)
    n, k = SHAPES[args.shape]
    torch.manual_seed(0)
    w = prepare_mxfp8_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), backend="gluon")
    a = quantize_mxfp8(torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16), scale_layout="deepgemm")
    out = torch.empty(args.m, n, device="cuda", dtype=torch.bfloat16)
    config = None
    if args.block_n:
        config = GluonConfig(args.block_n, args.block_t, 128, args.split, args.stages)
    for _ in range(args.calls):
        ran = launch_gluon_decode(GluonOperands(a, w.qweight, w.scale, out), config=config)
    torch.cuda.synchronize()
    print(f"{args.shape} M={args.m}: {ran}")


if __name__ == "__main__":
    main()
