#!/usr/bin/env bash
# GPU checks in one go, for a machine with a CUDA device and nvcc:
#   1. builds the plain tree with CUDA required (build-gpu/, -DLAYERSTREAM_CUDA=ON),
#   2. runs the GPU tests (ctest -L gpu: event pool, completion, the kernel-fault
#      failure, kernel bytes == kv_pattern, staging == device bytes),
#   3. the equivalence harness on GPU: the pool checks (GpuKvPool: CPU model
#      and kernel pools byte-identical; KvExport: staged layers == CPU bytes)
#      and EquivalenceGpu (the whole demo path with prefill.device = "gpu":
#      decode's pool equals the CPU forward's, bit-exact, per-layer and bulk;
#      and with kv_export auto/hmem over shm and tcp: which export each got,
#      or why hmem was refused, is printed in the table),
#   4. `layerstream bench tail --quick --device gpu` (the GPU forward, staging),
# and prints a short table last. Exits 77 (skip) without a device.
# Usage: tests/gpu/run.sh [--prebuilt] [build-dir]   (about 2-4 minutes on 16 cores)
#   --prebuilt: step 1 is skipped; build-dir already holds those targets, built
#   with -DLAYERSTREAM_CUDA=ON where the Debian packages are (a GPU machine
#   without them runs the tests from that tree: pack_prebuilt.sh, and the
#   README's GPU section, say how).
set -uo pipefail
cd "$(dirname "$0")/../.."
source tests/gpu/gpu_binaries.sh
prebuilt=0
if [ "${1:-}" = "--prebuilt" ]; then prebuilt=1; shift; fi
BUILD=${1:-build-gpu}
export PATH=/usr/local/cuda/bin:$PATH

if [ $prebuilt -eq 0 ] && ! command -v nvcc >/dev/null; then
  echo "SKIP: nvcc not found (PATH, /usr/local/cuda/bin)"; exit 77
fi
if ! (command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU); then
  echo "SKIP: no CUDA device (nvidia-smi -L lists none)"; exit 77
fi
nvidia-smi -L

jobs=$(nproc)
declare -a rows
row() { rows+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }

t0=$(date +%s)
if [ $prebuilt -eq 1 ]; then
  for bin in "${gpu_binaries[@]}"; do
    if [ ! -x "$BUILD/$bin" ]; then
      echo "--prebuilt: $BUILD/$bin is missing"; exit 2
    fi
  done
  row "build (CUDA on)" ok "prebuilt: $BUILD"
elif cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAYERSTREAM_CUDA=ON >"$BUILD.configure.log" 2>&1 &&
   cmake --build "$BUILD" -j"$jobs" --target "${gpu_binaries[@]##*/}" \
     >"$BUILD.build.log" 2>&1; then
  row "build (CUDA on)" ok "$(( $(date +%s) - t0 )) s"
else
  row "build (CUDA on)" FAIL "see $BUILD.configure.log / $BUILD.build.log"
  tail -30 "$BUILD.build.log" 2>/dev/null
  printf '%s\n' "${rows[@]}"; exit 1
fi

status=0
run_ctest() { # name, ctest args...
  local name=$1; shift
  local log="$BUILD/$(echo "$name" | tr ' /' '__').log"
  (cd "$BUILD" && timeout 240 ctest --output-on-failure --no-tests=error -j4 "$@") >"$log" 2>&1
  local rc=$?
  local summary; summary=$(grep -E "tests passed|No tests" "$log" | tail -1)
  local skipped; skipped=$(grep -c "Skipped" "$log")
  if [ $rc -eq 0 ] && [ "$skipped" -eq 0 ]; then row "$name" ok "$summary"
  else row "$name" FAIL "$summary, $skipped skipped (log: $log)"; status=1; tail -40 "$log"; fi
}
run_ctest "gpu tests (label gpu)" -L gpu
run_ctest "event waiter (CPU logic)" -R '^EventWaiterTest'
run_ctest "equivalence on GPU (pools)" -R '^gpu\.(GpuKvPool|GpuKvKernelFormula|KvExport)'
run_ctest "equivalence on GPU (demo path)" -R '^EquivalenceGpu\.'
# Which export the fabric allowed (direct FI_HMEM or staging), in one row each.
while IFS= read -r line; do row "  ${line%%:*}" info "${line#*: }"; done < <(
  timeout 120 "$BUILD/tests/equivalence_test" --gtest_filter='EquivalenceGpu.EveryKvExport*' 2>/dev/null |
    grep '^kv_export' | cut -c1-160)

t1=$(date +%s)
if timeout 240 "$BUILD/layerstream" bench tail --quick --device gpu \
     --json "$BUILD/bench_tail_gpu.json" >"$BUILD/bench_tail.log" 2>&1; then
  row "bench tail --quick --device gpu" ok "$(( $(date +%s) - t1 )) s, $BUILD/bench_tail_gpu.json"
else
  row "bench tail --quick --device gpu" FAIL "see $BUILD/bench_tail.log"; status=1
fi
tail -12 "$BUILD/bench_tail.log"

echo
echo "== tests/gpu/run.sh ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
printf '%s\n' "${rows[@]}"
exit $status
