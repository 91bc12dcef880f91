#!/usr/bin/env bash
# One pass over everything that needs real GPUs: hardware detection, each GPU runner's slice
# through `gpumatrix run` (plugin, leases, guards), the lease tests serial and parallel, a check of
# the lease logs (no GPU held by two tests at once; the TP=2 test held both), and the benchmarks
# that need the machine (leases, the V4.1 decode step at TP=2). Logs go to $OUT (or ./reports).
# Exits 1 when any step did not end as expected (every step must exit 0, except `mismatch`, which
# must be refused with exit 2), after the summary.
# Usage on a GPU machine: bash benchmarks/gpu_session.sh [--no-bench] [--skip-1gpu]
#   --skip-1gpu: leave out the 1-GPU runner's slice (registered estimates: about 14 minutes), e.g. to
#   verify the 2-GPU work alone.
set -u
out=${OUT:-reports}
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the lease logs are written from other directories
bench=1 one_gpu=1
for arg in "$@"; do
  case $arg in
    --no-bench) bench=0 ;;
    --skip-1gpu) one_gpu=0 ;;
    *) echo "unknown option $arg (expected --no-bench, --skip-1gpu)"; exit 2 ;;
  esac
done
export PYTHONUNBUFFERED=1
# gpumatrix and mxfuse are two distributions (packaging/gpumatrix and the root): install both, editable.
python3 -m pip install -q --no-deps --no-build-isolation -e ./packaging/gpumatrix -e . >"$out/install.log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; export PYTHONPATH=$PWD/src PYTEST_PLUGINS=gpumatrix.plugin; }
gm() { python3 -c 'from gpumatrix.cli import main; main()' "$@"; }
declare -A rc expect
steps=()
# step NAME EXPECTED_EXIT COMMAND...
step() {
  local name=$1 expected=$2; shift 2
  steps+=("$name"); expect[$name]=$expected
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"; rc[$name]=${PIPESTATUS[0]}
}
nvidia-smi -L
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
rm -f "$out/leases-auto.jsonl" "$out/leases-n2.jsonl"
step detect 0 gm detect
[ $one_gpu = 1 ] && step run-1gpu 0 env CUDA_VISIBLE_DEVICES=0 python3 -c 'from gpumatrix.cli import main; main()' run --runner 1-gpu-h100 --junit-xml "$out/junit-1gpu.xml" --report "$out/report-1gpu.json"
# On 2 GPUs this picks 2-gpu-h100: its 2-GPU files (the lease test, the V4.1 TP=2 step), 2 xdist workers.
step run-auto 0 env GPUMATRIX_LEASE_LOG="$out/leases-auto.jsonl" python3 -c 'from gpumatrix.cli import main; main()' run --runner auto --junit-xml "$out/junit-2gpu.xml" --report "$out/report-2gpu.json"
# The GPU tests ran above through `gpumatrix run`. These two steps check the leases on the other path
# users take, a kernel developer's local `pytest` (serial and `-n 2`), where the plugin alone keeps them.
step leases-n0 0 python3 -m pytest -q -p no:cacheprovider tests/kernels/gpumatrix/running/test_gpu_leases.py tests/e2e/gpumatrix/running/test_gpu_leases_multi.py -n 0
step leases-n2 0 env GPUMATRIX_LEASE_LOG="$out/leases-n2.jsonl" python3 -m pytest -q -p no:cacheprovider tests/kernels/gpumatrix/running/test_gpu_leases.py tests/e2e/gpumatrix/running/test_gpu_leases_multi.py -n 2
step lease-log 0 python3 -m benchmarks lease_log "$out/leases-auto.jsonl" "$out/leases-n2.jsonl" --need test_dsv41_tp2.py=2 --need test_gpu_leases_multi.py=2
step mismatch 2 gm run --runner 4-gpu-b200
if [ $bench = 1 ]; then
  step bench-leases 0 python3 -m benchmarks leases
  step bench-tp2 0 python3 -m benchmarks dsv41_tp2 --json "$out/dsv41_tp2.json"
fi
echo "=== summary"
failed=0
for k in "${steps[@]}"; do
  verdict=ok
  if [ "${rc[$k]}" != "${expect[$k]}" ]; then verdict="FAILED (expected exit ${expect[$k]})"; failed=1; fi
  printf '%-14s rc=%-3s %s\n' "$k" "${rc[$k]}" "$verdict"
done
exit $failed
