# Sourced by the device passes (speed_gpu_run.sh, gluon_gemm_check.sh): `. benchmarks/device_pass.sh LOG
# BUDGET TAIL` sets $out ($OUT, else ./reports; exported), $log ($out/LOG), $scratch (a temporary folder for
# what need not come back: test lists, JUnit XML, report pages), the pass's budget in seconds, installs the
# checkout (editable; PYTHONPATH if that fails) and defines
#   run NAME SECONDS COMMAND...   at most SECONDS and never past the budget; its output appended to $log,
#                                 its last TAIL lines shown; a failure sets status=1
#   finish                        says how many files $out holds: a lent device machine returns at most
#                                 MAX_FILES (8) of them, so a pass keeps its side files in $scratch
out=${OUT:-reports}
mkdir -p "$out" && out=$(cd "$out" && pwd)
scratch=$(mktemp -d)
MAX_FILES=8
export OUT=$out PYTHONUNBUFFERED=1
log=$out/$1
budget=${2:-570}
tail_lines=${3:-30}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
python3 -m pip install -q --no-deps --no-build-isolation -e ./packaging/gpumatrix -e . >>"$log" 2>&1 \
  || { echo "editable install failed; using PYTHONPATH"; export PYTHONPATH=$PWD/src PYTEST_PLUGINS=gpumatrix.plugin; }
status=0
run() {
  local name=$1 limit=$2; shift 2
  [ "$(left)" -lt "$limit" ] && limit=$(left)
  [ "$limit" -le 10 ] && { echo "=== $name: skipped (no time left)"; return; }
  echo "=== $name (up to ${limit}s): $*" | tee -a "$log"
  timeout "$limit" "$@" >"$out/step.log" 2>&1; local rc=$?
  cat "$out/step.log" >>"$log" && tail -n "$tail_lines" "$out/step.log" && rm -f "$out/step.log"
  [ $rc = 0 ] || { echo "=== $name: exit $rc"; status=1; }
}
finish() {
  local count
  count=$(find "$out" -type f | wc -l)
  if [ "$count" -gt "$MAX_FILES" ]; then
    echo "=== warning: $out holds $count files; a device machine returns at most $MAX_FILES:" | tee -a "$log"
    find "$out" -type f | sort | tee -a "$log"
  else
    echo "=== $out holds $count file(s)" | tee -a "$log"
  fi
}
