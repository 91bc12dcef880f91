#!/usr/bin/env bash
# The speed work's device pass in one call: the GPU tests (the GPU job, `gpumatrix run --runner 1-gpu-h100`,
# as the workflow runs it: its report and log in $OUT), then
# the decode step (Flash and its TP4 shard) with the per-stage tables and the kernels of one step in
# launch order; each step under its own time limit; one log ($OUT/pass.log)
# and each step's JSON in $OUT (or ./reports). Exits 1 if a step failed.
# Usage: bash benchmarks/speed_gpu_run.sh [seconds for the whole pass, default 570]
set -u
. "$(dirname "$0")/device_pass.sh" pass.log "${1:-570}" 30
# The GPU tests as users run them: the runner's whole slice, its workers and compile cache chosen by gpumatrix.
run tests 300 gpumatrix run --runner 1-gpu-h100 --report "$out/gpu-job.json" --junit-xml "$scratch/gpu-job.xml" \
  --html "$scratch/gpu-job.html"
# The step checks fused == unfused bit for bit and the witnesses before it times anything.
run step 110 python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --stage-tokens 1 --replays 30 \
  --variants pdl,base --json "$out/dsv41_decode.json"
run step_tp4 50 python3 -m benchmarks dsv41_decode --config flash-tp4 --tokens 1,4,16 --stage-tokens 1 \
  --replays 30 --variants pdl,base --json "$out/dsv41_decode_tp4.json"
# Each kernel's start and end inside a graph replay at T = 1, per launch variant (if time is left).
run timeline 30 python3 -m benchmarks dsv41_timeline --tokens 1 --variants pdl,base --replays 11 \
  --json "$out/dsv41_timeline.json"
finish
exit $status
