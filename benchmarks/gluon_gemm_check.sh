#!/usr/bin/env bash
# The Gluon decode GEMM's device pass in one call (an H100/H200): a smoke check of the kernel against
# the torch backend (each launch variant, so a wrong one shows by name before any long run), the sweep's
# edge problem per token tile and split (the first pass's sweep failed it at 64-token tiles), the GEMM
# correctness tests on the gluon backend through the GPU job (`gpumatrix run --runner 1-gpu-h100 ... -- -k
# gluon`), then the benchmark at M = 1, 4, 16, 64 on the issue's five shapes with gluon, triton, bf16 and
# FP8 cuBLAS in the same run, then, with what is left of the pass, the Gluon sweep (`mxfp8_gemm_sweep --kernel
# gluon`): its table $OUT/gluon_configs_sweep.json lists only the (shape, M) where Gluon's median beat the
# Triton kernel's chosen configuration in the same rounds (merge it with `python -m benchmarks
# merge_gemm_table $OUT/gluon_configs_sweep.json --kernel gluon`). One log ($OUT/gluon.log), the JSON of each
# step in $OUT (or ./reports). Exits 1 if a step failed.
# Usage: bash benchmarks/gluon_gemm_check.sh [seconds for the whole pass, default 570]
set -u
. "$(dirname "$0")/device_pass.sh" gluon.log "${1:-570}" 40
# Each variant of the kernel (split-K or not, ring depth, one or two warpgroups, token tiles 8..64, two
# token tiles) on one shape against the torch backend: relative error and NaN count per launch.
run smoke 120 python3 - <<'EOF'
import torch
from gpumatrix.compare import calc_diff
from mxfuse.gemm import mxfp8_gemm, prepare_mxfp8_weight
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, GluonOperands, launch_gluon_decode
torch.manual_seed(0)
n, k = 5120, 2048
w = prepare_mxfp8_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), backend="gluon")
bad = 0
for m in (1, 4, 16, 64, 100):
    a = quantize_mxfp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), scale_layout="deepgemm")
    want = mxfp8_gemm(a, w, backend="torch").float()
    bt = next(t for t in (8, 16, 32, 64) if t >= min(m, 64))
    for cfg in (None, GluonConfig(64, bt, 128, 1, 4), GluonConfig(64, bt, 128, 4, 4),
                GluonConfig(64, bt, 128, 3, 2), GluonConfig(128, bt, 128, 2, 3), GluonConfig(64, bt, 128, 2, 6),
                GluonConfig(64, bt, 128, 4, 4, False, True), GluonConfig(128, bt, 128, 2, 3, False, True)):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ran = launch_gluon_decode(GluonOperands(a, w.qweight, w.scale, out), config=cfg)
        torch.cuda.synchronize()
        diff = calc_diff(out.float().nan_to_num(1e30), want)
        nans = int(torch.isnan(out).sum())
        ok = diff <= 1e-5 and nans == 0
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} m={m:<4} calc_diff={diff:.2e} nan={nans:<6} {ran}", flush=True)
raise SystemExit(1 if bad else 0)
EOF
# The sweep's edge check (a 16-row problem: weight scale bytes at the window's edges, a NaN block, a zero
# row, rows outside the window, copies of row 0) for each token tile, split and weight-row tile, by row
# kind, so that a failing launch names its case.
run edge 90 python3 - <<'EOF'
import torch
from benchmarks.gluon_gemm_sweep import edge_problem, gluon_launch
from gpumatrix.compare import calc_diff
from mxfuse.kernels.gemm.gluon_launch import GluonConfig
bad = 0
for block_t in (8, 16, 32, 64):
    for split in (1, 4):
        for block_n in (64, 128):
            cfg = GluonConfig(block_n, block_t, 128, split, 4)
            p = edge_problem(16, 256, 2048, "cuda")
            p.outs[0].fill_(float("nan"))
            gluon_launch(p, 0, cfg)
            torch.cuda.synchronize()
            out, ref = p.outs[0].float(), p.ref.float()
            kinds = {"row0": [0], "outside": [1], "nan": [2], "zero": [3], "copies": list(range(4, 16))}
            # (column 5 holds the weight's NaN code: NaN in every row, as in the reference)
            parts = []
            for kind, rows in kinds.items():
                o, r = out[rows], ref[rows]
                same_nan = torch.equal(torch.isnan(o), torch.isnan(r))
                d = calc_diff(o.nan_to_num(0.0), r.nan_to_num(0.0))
                ok = same_nan and d <= 1e-5
                parts.append(f"{kind}:" + ("ok" if ok else f"BAD(diff={d:.1e},nan_match={same_nan})"))
                bad += not ok
            print(f"block_n={block_n} block_t={block_t} split={split}: " + " ".join(parts), flush=True)
raise SystemExit(1 if bad else 0)
EOF
# Which part of the edge problem a failing launch gets wrong: its weight's extreme groups one at a time,
# the NaN code, the activation's scale spread, each against the torch backend.
run edge-probe 60 python3 -m benchmarks.gluon_edge_probe
# The GEMM correctness tests (float64, row-local NaN, subnormals, extreme scales, graphs, repeatability)
# on the gluon backend, as the GPU job runs them.
printf '%s\n' tests/kernels/mxfuse/gemm/test_gluon_conversion.py tests/kernels/mxfuse/gemm/test_mxfp8_gemm.py \
  >"$scratch/gluon-tests.txt"
run tests 240 gpumatrix run --runner 1-gpu-h100 --tests-file "$scratch/gluon-tests.txt" \
  --report "$out/gluon-tests.json" --junit-xml "$scratch/gluon-tests.xml" --html "$scratch/gluon-tests.html" \
  -- -k gluon
# gluon beside triton, bf16 cuBLAS and FP8 cuBLAS; the table printed last.
run bench 200 python3 -m benchmarks mxfp8_gemm --ms 1,4,16,64 \
  --shapes "v41 wqkv_a,v41 wo_b tp4,pro wqkv_a,v41 wo_b dp4,pro wo_b" --backends triton,gluon,bf16,fp8 \
  --json "$out/mxfp8_gemm_gluon.json"
# The sweep: its own budget ends 45 s before the step's limit (the first interleaved round of every problem
# always runs, then the JSON and the table are written); under a minute left, it is skipped.
sweep_s=$(($(left) - 45))
if [ "$sweep_s" -ge 60 ]; then
  run sweep $((sweep_s + 45)) python3 -m benchmarks mxfp8_gemm_sweep --kernel gluon --budget-s "$sweep_s" \
    --shapes "v41 wqkv_a,v41 wo_b tp4,pro wqkv_a,v41 wo_b dp4,pro wo_b" --ms 1,4,16,64 \
    --json "$out/gluon_gemm_sweep.json" --table "$out/gluon_configs_sweep.json"
else
  echo "=== sweep: skipped (${sweep_s}s left for it)" | tee -a "$log"
fi
finish
exit $status
