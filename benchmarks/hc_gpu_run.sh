#!/usr/bin/env bash
# The hyper-connection boundary's GPU work, in as few device minutes as it takes. Logs, JSON and the
# chosen table go to $OUT (or ./reports).
#   tests  the boundary's GPU tests and the V4.1 decode step's end-to-end tests, while the sweep's
#          candidates compile in the background (Triton's cache on disk is shared)
#   sweep  benchmarks/hc_boundary_sweep.py: check and time every candidate, write the table to
#          src/mxfuse/kernels/hc/configs.json and a copy to $OUT; HC_SWEEP_ARGS adds arguments
#          (e.g. "--quick --tokens 1,4,16,64,2048")
#   phases benchmarks/hc_phases.py: each kernel's device time, fused and unfused, T = 1 ... 2048
#   bench  benchmarks/hc_boundary.py on that table (fused, unfused chain, torch.compile, floor);
#          HC_COMPILE=off leaves torch.compile out (its compiles take minutes)
#   step   benchmarks/dsv41_decode.py at T = 1, 4, 16, 64
# Usage: bash benchmarks/hc_gpu_run.sh [tests] [sweep] [phases] [bench] [step]   (default: tests sweep)
set -u
out=${OUT:-reports}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e ./packaging/gpumatrix -e . >"$out/install.log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; export PYTHONPATH=$PWD/src PYTEST_PLUGINS=gpumatrix.plugin; }
steps=("$@")
[ ${#steps[@]} = 0 ] && steps=(tests sweep)
status=0
has() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
if has tests; then
  if has sweep; then
    # shellcheck disable=SC2086
    python3 -m benchmarks hc_boundary_sweep ${HC_SWEEP_ARGS:-} --precompile-only --jobs 12 >"$out/precompile.log" 2>&1 &
    pre=$!
  fi
  printf '%s\n' tests/kernels/mxfuse/hc/test_hc_boundary.py tests/e2e/mxfuse/models/test_dsv41_decode.py >"$out/hc-tests.txt"
  timeout 400 gpumatrix run --runner 1-gpu-h100 --tests-file "$out/hc-tests.txt" --report "$out/hc-tests.json" \
    2>&1 | tail -25
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  [ -n "${pre:-}" ] && { wait "$pre"; tail -3 "$out/precompile.log"; }
fi
if has sweep; then
  jobs=12; has tests && jobs=0  # compiled already
  # shellcheck disable=SC2086
  python3 -m benchmarks hc_boundary_sweep ${HC_SWEEP_ARGS:-} --jobs $jobs --write src/mxfuse/kernels/hc/configs.json \
    || status=1
  cp src/mxfuse/kernels/hc/configs.json "$out/" 2>/dev/null
fi
if has phases; then
  python3 -m benchmarks hc_phases --hiddens 5120,7168 || status=1
fi
if has bench; then
  python3 -m benchmarks hc_boundary --compile "${HC_COMPILE:-dynamic-tokens}" || status=1
fi
if has step; then
  python3 -m benchmarks dsv41_decode --tokens 1,4,16,64 --replays 50 || status=1
fi
exit $status
