#!/usr/bin/env bash
# The Hopper kernels' device pass in one call, its steps named on the command line (in that order):
#   job        the GPU job as users run it (`gpumatrix run --runner 1-gpu-h100`: every GPU test of the
#              runner, its workers and compile cache chosen by gpumatrix; report in $OUT)
#   gemm       the MXFP8 GEMM table at M = 1, 4, 16, 64 on the seven shapes: triton, gluon, bf16 and FP8
#              cuBLAS in the same run
#   gemm-big   the same at M = 256 and 2048 (triton, bf16, fp8; the Gluon kernel is a decode kernel)
#   wo_a       the grouped wo_a, triton and gluon, G = 2 and 8, T = 1, 4, 16, 64
#   attention  decode attention (the table's kernels, SDPA, the byte floor), T = 1 .. 128 at 4096 and
#              32768 keys
#   sweep-wqb  the Gluon sweep on wq_b (full and TP4), the shapes the first sweeps left out; its table
#              in $OUT/gluon_configs_wqb.json
# One log ($OUT/kernels.log), each step's JSON in $OUT. Exits 1 if a step failed.
# Usage: BUDGET=570 bash benchmarks/kernels_check.sh job gemm ...
set -u
. "$(dirname "$0")/device_pass.sh" kernels.log "${BUDGET:-570}" 40
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$log"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$log"
ALL="v41 wqkv_a,v41 wq_b,v41 wq_b tp4,v41 wo_b tp4,v41 wo_b dp4,pro wqkv_a,pro wo_b"
for step in "$@"; do
  case $step in
    job) run job 330 gpumatrix run --runner 1-gpu-h100 --report "$out/gpu-job.json" \
      --junit-xml "$scratch/gpu-job.xml" --html "$scratch/gpu-job.html" ;;
    gemm) run gemm 200 python3 -m benchmarks mxfp8_gemm --ms 1,4,16,64 --shapes "$ALL" \
      --backends triton,gluon,bf16,fp8 --json "$out/mxfp8_gemm.json" ;;
    gemm-big) run gemm-big 150 python3 -m benchmarks mxfp8_gemm --ms 256,2048 --shapes "$ALL" \
      --backends triton,bf16,fp8 --json "$out/mxfp8_gemm_big.json" ;;
    wo_a) run wo_a 150 python3 -m benchmarks grouped_wo_a --kernels triton,gluon --ts 1,4,16,64 --gs 2,8 \
      --json "$out/grouped_wo_a.json" ;;
    attention) run attention 200 python3 -m benchmarks attention \
      --tokens 1,4,16,64,128 --lengths 4096,32768 --json "$out/attention.json" ;;
    sweep-wqb) s=$(($(left) - 45)); [ "$s" -lt 60 ] && { echo "=== sweep-wqb: skipped"; continue; }
      run sweep-wqb $((s + 45)) python3 -m benchmarks mxfp8_gemm_sweep --kernel gluon --budget-s "$s" \
        --shapes "v41 wq_b,v41 wq_b tp4" --ms 1,4,16,64 --json "$out/gluon_sweep_wqb.json" \
        --table "$out/gluon_configs_wqb.json" ;;
    *) echo "unknown step $step (job, gemm, gemm-big, wo_a, attention, sweep-wqb)"; exit 2 ;;
  esac
done
finish
exit $status
