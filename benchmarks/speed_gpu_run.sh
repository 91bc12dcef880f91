#!/usr/bin/env bash
# The speed work's device pass in one call: the GPU tests (the GPU job, `gpumatrix run --runner 1-gpu-h100`,
# as the workflow runs it: its report and log in $OUT), then
# the decode step (Flash and its TP4 shard) with the per-stage tables and the kernels of one step in
# launch order; each step under its own time limit; one log ($OUT/pass.log)
# and each step's JSON in $OUT (or ./reports). Exits 1 if a step failed.
# Usage: bash benchmarks/speed_gpu_run.sh [seconds for the whole pass, default 570]
set -u
out=${OUT:-reports}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export OUT=$out PYTHONUNBUFFERED=1
budget=${1:-570}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
log=$out/pass.log
python3 -m pip install -q --no-deps --no-build-isolation -e ./packaging/gpumatrix -e . >>"$log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; export PYTHONPATH=$PWD/src PYTEST_PLUGINS=gpumatrix.plugin; }
status=0
run() {  # run NAME SECONDS COMMAND...: at most SECONDS, and never past the pass's budget
  local name=$1 limit=$2; shift 2
  [ "$(left)" -lt "$limit" ] && limit=$(left)
  [ "$limit" -le 10 ] && { echo "=== $name: skipped (no time left)"; return; }
  echo "=== $name (up to ${limit}s): $*" | tee -a "$log"
  timeout "$limit" "$@" >"$out/step.log" 2>&1; local rc=$?
  cat "$out/step.log" >>"$log" && tail -n 30 "$out/step.log" && rm -f "$out/step.log"
  [ $rc = 0 ] || { echo "=== $name: exit $rc"; status=1; }
}
# The GPU tests as users run them: the runner's whole slice, its workers and compile cache chosen by gpumatrix.
run tests 300 gpumatrix run --runner 1-gpu-h100 --report "$out/gpu-job.json" --junit-xml "$out/gpu-job.xml"
# The step checks fused == unfused bit for bit and the witnesses before it times anything.
run step 110 python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --stage-tokens 1 --replays 30 \
  --variants pdl,base --json "$out/dsv41_decode.json"
run step_tp4 50 python3 -m benchmarks dsv41_decode --config flash-tp4 --tokens 1,4,16 --stage-tokens 1 \
  --replays 30 --variants pdl,base --json "$out/dsv41_decode_tp4.json"
# Each kernel's start and end inside a graph replay at T = 1, per launch variant (if time is left).
run timeline 30 python3 -m benchmarks dsv41_timeline --tokens 1 --variants pdl,base --replays 11 \
  --json "$out/dsv41_timeline.json"
exit $status
