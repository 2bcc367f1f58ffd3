#!/usr/bin/env bash
# Every GPU step of the interposition and TPC-control work, in one run on the
# H100 device machine, ending with a short table:
#   1. scripts/gpu/calibrate-check.sh   lithos calibrate (fresh and cached),
#      descriptor-hook and green-context confinement, gpu_test on the real driver
#   2. scripts/intercept/gpu-check.sh   every launch path plain and under MPS,
#      PyTorch coverage/confinement/outputs, overhead, TPC-count sweep
#
# The device machine has CUDA, PyTorch and MPS but not this project's build
# dependencies, so build here first and carry the outputs:
#   scripts/gpu-check.sh --build      (release preset + CUDA test programs)
# then, on the device, from the repository root:
#   LITHOS_COMMIT=<commit> OUT=<dir> scripts/gpu-check.sh
# It never changes clocks, power limits, compute mode, MIG or persistence;
# every GPU step runs under a watchdog and any MPS daemon it starts is stopped.
set -u
cd "$(dirname "$0")/.."
B=${LITHOS_BUILD:-build/release}
ICPT=${ICPT_BIN:-build/icpt-gpu}

if [ "${1:-}" = "--build" ]; then
  set -e
  cmake --preset release >/dev/null
  cmake --build --preset release --target lithos lithos_preload gpu_test
  mkdir -p "$ICPT"
  N=/usr/local/cuda/bin/nvcc S=scripts/intercept L="-lcuda -L/usr/local/cuda/lib64/stubs"
  $N -arch=sm_90 -O2 -std=c++17 -o "$ICPT/icpt_paths" $S/icpt_paths.cu $L
  $N -arch=sm_90 -O2 -std=c++17 --default-stream per-thread -o "$ICPT/icpt_paths_ptds" $S/icpt_paths.cu $L
  $N -arch=sm_90 -O2 -o "$ICPT/icpt_bench" $S/icpt_bench.cu $L
  $N -arch=sm_90 -cubin -o "$ICPT/smid_lib.cubin" $S/smid_lib.cu
  echo "built: $B/bin/lithos $B/bin/gpu_test $B/lib/liblithos.so $ICPT/"
  exit 0
fi

OUT=${OUT:-$PWD/out/gpu-check}
mkdir -p "$OUT"
T0=$(date +%s)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: ${LITHOS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,uuid,driver_version,mig.mode.current,compute_mode --format=csv,noheader 2>&1
} | tee "$OUT/env.txt"

echo "== calibration, hook and green-context confinement, gpu_test"
OUT=$OUT/calibrate LITHOS_BIN=$B/bin/lithos LITHOS_GPU_TEST=$B/bin/gpu_test \
  timeout -k 10 240 bash scripts/gpu/calibrate-check.sh > "$OUT/calibrate.log" 2>&1
echo "calibrate-check exit $?" | tee -a "$OUT/env.txt"
tail -n 30 "$OUT/calibrate.log"
tar czf "$OUT/calibrate.tgz" -C "$OUT" calibrate calibrate.log 2>/dev/null && rm -rf "$OUT/calibrate" "$OUT/calibrate.log"

echo "== interposition: launch paths, MPS, PyTorch, overhead, sweep"
remaining=$((560 - ($(date +%s) - T0)))
OUT=$OUT/intercept LITHOS_BIN=$B/bin/lithos ICPT_BIN=$ICPT \
  timeout -k 10 "$remaining" bash scripts/intercept/gpu-check.sh ${GPU_CHECK_PHASES:-} > "$OUT/intercept.log" 2>&1
echo "intercept gpu-check exit $?" | tee -a "$OUT/env.txt"
for f in results.tgz summary.json summary.txt; do
  [ -f "$OUT/intercept/$f" ] && mv "$OUT/intercept/$f" "$OUT/intercept-$f"
done
gzip -f "$OUT/intercept.log"
rm -rf "$OUT/intercept"
echo "== done in $(($(date +%s) - T0)) s"
cat "$OUT/intercept-summary.txt" 2>/dev/null
