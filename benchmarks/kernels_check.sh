#!/usr/bin/env bash
# The Hopper kernels' device pass in one call, its steps named on the command line (in that order):
#   job        the GPU job as users run it (`gpumatrix run --runner 1-gpu-h100`: every GPU test of the
#              runner, its workers and compile cache chosen by gpumatrix; report in $OUT)
#   gemm       the MXFP8 GEMM table at M = 1, 4, 16, 64 on the seven shapes: triton, gluon, bf16 and FP8
#              cuBLAS in the same run
#   gemm-big   the same at M = 256 and 2048 (triton, bf16, fp8; the Gluon kernel is a decode kernel)
#   wo_a       the grouped wo_a, triton and gluon, G = 2 and 8, T = 1, 4, 16, 64
#   sweep-wo-a the Gluon grouped wo_a's configurations at G = $WO_A_GS (default 8,2), T = 16, 64, 4, the fastest against
#              the Triton grouped kernel; its table ($OUT/wo_a_gluon_configs.json: the T Gluon won) put in
#              place in this checkout, so that later steps run it
#   attention  decode attention (the table's kernels, SDPA, the byte floor), T = 1 .. 128 at 4096 and
#              32768 keys
#   sweep-wqb  the Gluon sweep on wq_b (full and TP4), the shapes the first sweeps left out; its table
#              in $OUT/gluon_configs_wqb.json
#   boundary   the boundary's launch structure in the shifted ordering at T = $BOUNDARY_TOKENS (default
#              1,4,16; H = 5120, V4.1's; each boundary timed to its y, its Sinkhorn items on a side
#              stream as the step runs them;
#              the default timed beside every candidate), its table in $OUT/hc_configs.json and put in
#              place in this checkout, then the boundary alone (fused, y and pair outputs, the unfused
#              chain) at T = 1, 4, 16, 64 with that table
#   step       the V4.1 decode step, T = 1, 4, 16, 64, with and without programmatic launches, the stage
#              tables at T = 1 and 4, each kernel at T = 4 (whatever tables the checkout holds: after
#              `boundary` or `sweep-wo-a`, their new ones)
#   step-pdl   the step with programmatic launches only (the default variant), T = 1, 4, 16, 64, the stage
#              table at T = 16, each kernel at T = 4: the short form of `step`
#   step-side  the step, T = 1, 4, 16, 64, the default variant (the boundaries' Sinkhorn items on a side
#              stream, the attention's combine not signalling early) beside the same with the Sinkhorn
#              items inside the boundaries' second launch (pdl-inline) and with the combine signalling
#              early (pdl-signal-combine), then the kernel timeline at T = 4 of the default and the
#              signalling combine
#   step-tables the step twice, T = 1, 4, 16, 64, the stage tables at T = 1 and 4, each kernel at T = 4:
#              the GEMM tables' stand-ins off (MXFUSE_TABLE_STANDINS=0: a device without entries takes
#              the default rule), then on (an H100 reads the H200's); on a device with its own entries
#              the two agree
#   step-tp4   the same on the TP4 shard at T = 1, 4, 16
#   timeline   each kernel's start and end inside one graph replay at T = 1
#   sweep-attn the attention's configurations at T = 4, 16, 64 and 4096 / 32768 keys (min_tiles among
#              them), the winners in $OUT/attention_configs.json
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
    sweep-wo-a) run sweep-wo-a 330 python3 -m benchmarks grouped_wo_a --ts "" --gs "${WO_A_GS:-8,2}" --gluon-sweep \
        --gluon-ts 16,64,4 --gluon-budget-s 110 --json "$out/grouped_wo_a_gluon_sweep.json" \
        --table "$out/wo_a_gluon_configs.json"
      [ -f "$out/wo_a_gluon_configs.json" ] && \
        cp "$out/wo_a_gluon_configs.json" src/mxfuse/kernels/grouped_wo_a/gluon_configs.json ;;
    attention) run attention 200 python3 -m benchmarks attention \
      --tokens 1,4,16,64,128 --lengths 4096,32768 --json "$out/attention.json" ;;
    sweep-wqb) s=$(($(left) - 45)); [ "$s" -lt 60 ] && { echo "=== sweep-wqb: skipped"; continue; }
      run sweep-wqb $((s + 45)) python3 -m benchmarks mxfp8_gemm_sweep --kernel gluon --budget-s "$s" \
        --shapes "v41 wq_b,v41 wq_b tp4" --ms 1,4,16,64 --json "$out/gluon_sweep_wqb.json" \
        --table "$out/gluon_configs_wqb.json" ;;
    boundary) run boundary-sweep 240 python3 -m benchmarks hc_boundary_sweep --hiddens 5120 \
        --tokens "${BOUNDARY_TOKENS:-1,4,16}" --orderings shifted --latency --side --json "$out/hc_boundary_sweep.json" \
        --write "$out/hc_configs.json"
      [ -f "$out/hc_configs.json" ] && cp "$out/hc_configs.json" src/mxfuse/kernels/hc/configs.json
      run boundary 120 python3 -m benchmarks hc_boundary --hiddens 5120 --tokens 1,4,16,64 \
        --orderings shifted --compile off --outputs --json "$out/hc_boundary.json" ;;
    step) run step 160 python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --stage-tokens 1,4 --replays 30 \
      --profile-tokens 4 --variants pdl,base --json "$out/dsv41_decode.json" ;;
    step-pdl) run step-pdl 130 python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --stage-tokens 16 --replays 20 \
      --profile-tokens 4 --variants pdl --json "$out/dsv41_decode_pdl.json" ;;
    step-side) run step-side 110 python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --replays 20 --stage-tokens "" --profile-tokens 0 \
      --variants pdl,pdl-inline,pdl-signal-combine --json "$out/dsv41_decode_side.json"
      run timeline-t4 60 python3 -m benchmarks dsv41_timeline --tokens 4 --variants pdl,pdl-signal-combine \
        --replays 11 --json "$out/dsv41_timeline_t4.json" ;;
    step-tables) run step-defaults 110 env MXFUSE_TABLE_STANDINS=0 python3 -m benchmarks dsv41_decode \
        --tokens 1,4,16,64 --stage-tokens 1,4 --profile-tokens 4 --replays 20 --variants pdl \
        --json "$out/dsv41_defaults.json"
      run step-standins 110 python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --stage-tokens 1,4 \
        --profile-tokens 4 --replays 20 --variants pdl --json "$out/dsv41_standins.json" ;;
    step-tp4) run step-tp4 60 python3 -m benchmarks dsv41_decode --config flash-tp4 --tokens 1,4,16 \
      --stage-tokens 1 --replays 30 --variants pdl,base --json "$out/dsv41_decode_tp4.json" ;;
    timeline) run timeline 40 python3 -m benchmarks dsv41_timeline --tokens 1 --variants pdl,base --replays 11 \
      --json "$out/dsv41_timeline.json" ;;
    sweep-attn) run sweep-attn 330 python3 -m benchmarks attention --sweep --budget-s 270 \
      --sweep-shapes 4:4096,4:32768,16:4096,16:32768,64:4096,64:32768 --tokens 16 --lengths 4096 \
      --table "$out/attention_configs.json" --json "$out/attention_sweep.json" ;;
    *) echo "unknown step $step (job, gemm, gemm-big, wo_a, sweep-wo-a, attention, sweep-wqb, boundary, step, step-pdl, step-side, step-tables, step-tp4," \
      "timeline, sweep-attn)"; exit 2 ;;
  esac
done
finish
exit $status
