#!/usr/bin/env bash
# One pass over everything that needs real GPUs: hardware detection, each GPU runner's slice
# through `gpumatrix run` (plugin, leases, guards), the lease tests serial and parallel, and the
# lease benchmark. Logs go to $OUT (or ./reports). Exits 1 when any step did not end as expected
# (every step must exit 0, except `mismatch`, which must be refused with exit 2), after the summary.
# Usage on a GPU machine: bash benchmarks/gpu_session.sh [--no-bench]
set -u
out=${OUT:-reports}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
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
step detect 0 gm detect
step run-1gpu 0 env CUDA_VISIBLE_DEVICES=0 python3 -c 'from gpumatrix.cli import main; main()' run --runner 1-gpu-h100 --junit-xml "$out/junit-1gpu.xml" --report "$out/report-1gpu.json"
step run-auto 0 gm run --runner auto --junit-xml "$out/junit-2gpu.xml" --report "$out/report-2gpu.json"
step leases-n0 0 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gpu_leases.py tests/e2e/test_gpu_leases_multi.py -n 0
step leases-n2 0 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gpu_leases.py tests/e2e/test_gpu_leases_multi.py -n 2
step mismatch 2 gm run --runner 4-gpu-b200
[ "${1:-}" = --no-bench ] || step bench-leases 0 python3 benchmarks/leases.py
echo "=== summary"
failed=0
for k in "${steps[@]}"; do
  verdict=ok
  if [ "${rc[$k]}" != "${expect[$k]}" ]; then verdict="FAILED (expected exit ${expect[$k]})"; failed=1; fi
  printf '%-14s rc=%-3s %s\n' "$k" "${rc[$k]}" "$verdict"
done
exit $failed
