#!/usr/bin/env bash
# One pass over everything that needs real GPUs: hardware detection, each GPU runner's slice
# through `gpumatrix run` (plugin, leases, guards), the lease tests serial and parallel, and the
# lease benchmark. Logs go to $OUT (or ./reports).
# Usage on a GPU machine: bash benchmarks/gpu_session.sh [--no-bench]
set -u
out=${OUT:-reports}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; export PYTHONPATH=$PWD/src PYTEST_PLUGINS=gpumatrix.plugin; }
gm() { python3 -c 'from gpumatrix.cli import main; main()' "$@"; }
declare -A rc
step() { local name=$1; shift; echo "=== $name: $*"; "$@" 2>&1 | tee "$out/$name.log"; rc[$name]=${PIPESTATUS[0]}; }
nvidia-smi -L
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
step detect gm detect
step run-1gpu env CUDA_VISIBLE_DEVICES=0 python3 -c 'from gpumatrix.cli import main; main()' run --runner 1-gpu-h100 --junit-xml "$out/junit-1gpu.xml" --report "$out/report-1gpu.json"
step run-auto gm run --runner auto --junit-xml "$out/junit-2gpu.xml" --report "$out/report-2gpu.json"
step leases-n0 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gpu_leases.py tests/e2e/test_gpu_leases_multi.py -n 0
step leases-n2 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gpu_leases.py tests/e2e/test_gpu_leases_multi.py -n 2
step mismatch gm run --runner 4-gpu-b200
[ "${1:-}" = --no-bench ] || step bench-leases python3 benchmarks/leases.py
echo "=== summary"
for k in detect run-1gpu run-auto leases-n0 leases-n2 mismatch bench-leases; do printf '%-14s rc=%s\n' "$k" "${rc[$k]}"; done
