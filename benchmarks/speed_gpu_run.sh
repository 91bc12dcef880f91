#!/usr/bin/env bash
# The speed work's device pass in one call: the GPU tests of the kernels it changes, then the boundary's
# sweep and benchmark, attention's sweep at decode shapes, and the decode step; each step under its own
# time limit; one log ($OUT/pass.log) and each step's JSON in $OUT (or ./reports): seven files, under the
# eight a device call brings back. Exits 1 if a step failed.
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
  cat "$out/step.log" >>"$log" && tail -n 25 "$out/step.log" && rm -f "$out/step.log"
  [ $rc = 0 ] || { echo "=== $name: exit $rc"; status=1; }
}
run tests 260 env GPUMATRIX_LEASE_DIR=/tmp/lease_speed python3 -m pytest -q -p no:cacheprovider \
  tests/kernels/test_hc_boundary.py tests/kernels/test_mqa_decode.py tests/e2e/test_dsv41_decode.py
run hc_sweep 150 python3 benchmarks/hc_boundary_sweep.py --quick --tokens 1,4,16,64,2048 --hiddens 5120 \
  --orderings normal --jobs 12 --json "$out/hc_boundary_sweep.json" --write "$out/hc_configs.json"
run hc_bench 90 python3 benchmarks/hc_boundary.py --compile off --hiddens 5120,7168 --json "$out/hc_boundary.json"
run attention 90 python3 benchmarks/attention.py --sweep --sweep-shapes 1:4096,1:32768 --budget-s 60 \
  --tokens 1,16 --lengths 4096,32768 --json "$out/attention.json" --table "$out/mqa_decode_configs.json"
run step 60 python3 benchmarks/dsv41_decode.py --tokens 1,16,64 --replays 30
exit $status
