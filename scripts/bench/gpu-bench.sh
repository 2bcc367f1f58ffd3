#!/usr/bin/env bash
# Runs `lithos bench` jobs on the GPU machine and packs every output folder
# into $OUT/bench.tgz (the device returns at most 8 files).
#
#   here:   cmake --build build/release   (lithos and liblithos.so are carried)
#   device: OUT=$OUT LITHOS_COMMIT=<sha> BENCH_JOBS='hybrid-stacking;head-of-line --modes mps' \
#           scripts/bench/gpu-bench.sh
#
# BENCH_JOBS: ';'-separated `lithos bench` argument lists; each job writes
# into $WORK/<scenario> (WORK defaults to /tmp/lithos-bench) and is given
# --budget-min so that the whole call stays inside the machine's 10 minutes
# (BENCH_BUDGET_MIN, default 9, counted from the script's start). The GPU's
# clocks, power limit and compute mode are only read, never set.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
: "${BENCH_JOBS:?set BENCH_JOBS}"
WORK=${WORK:-/tmp/lithos-bench}
BUDGET=${BENCH_BUDGET_MIN:-9}
LITHOS=${LITHOS:-build/release/bin/lithos}
mkdir -p "$WORK" "$OUT"
t0=$(date +%s)

nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,power.limit,compute_mode,persistence_mode,mig.mode.current \
  --format=csv | tee "$WORK/gpu-state.csv"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

IFS=';' read -ra jobs <<<"$BENCH_JOBS"
for job in "${jobs[@]}"; do
  read -ra args <<<"$job"
  [[ ${#args[@]} -eq 0 ]] && continue
  scenario=${args[0]}
  elapsed=$(( ($(date +%s) - t0) / 60 ))
  left=$(( BUDGET - elapsed ))
  if (( left < 1 )); then
    echo "=== $scenario: skipped, no time left in this call" | tee -a "$WORK/skipped.txt"
    continue
  fi
  echo "=== lithos bench ${args[*]} (budget ${left} min)"
  "$LITHOS" bench "${args[@]}" --out "$WORK/$scenario" --budget-min "$left" >"$WORK/$scenario.summary.txt" \
    2>"$WORK/$scenario.progress.txt"
  echo "exit $?" >>"$WORK/$scenario.summary.txt"
  tail -n 4 "$WORK/$scenario.progress.txt"
done

# Never leave an MPS daemon behind (the harness stops its own; this is a net).
pgrep -a nvidia-cuda-mps || true
tar czf "$OUT/bench.tgz" -C "$WORK" . 2>/dev/null
ls -la "$OUT"
for f in "$WORK"/*.summary.txt; do echo "----- $f"; cat "$f"; done
