#!/usr/bin/env bash
# Evidence for the gpu/ adapter on the H100 device machine.
#
# Runs `lithos calibrate --json` twice (fresh with --force, then from the
# cache) with timing, checks the map against ../shared/docs/h100-facts.md,
# runs the descriptor-hook and green-context confinement checks, runs the CPU
# test binary against the real driver, and prints a short table last.
# Results go to $OUT (default: a new temporary directory).
#
# Build first, here (the device lacks fmt/CLI11/gtest): scripts/gpu/build.sh;
# then carry build/gpu-release/bin to the device and run this script from the
# repository root. Read-only on the GPU's settings: it never changes clocks,
# power, compute mode, MIG or persistence; every launch runs under lithos's
# watchdog and every command under timeout(1).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
BIN=${LITHOS_BIN:-build/gpu-release/bin/lithos}
TESTS=${LITHOS_GPU_TEST:-build/gpu-release/bin/gpu_test}
CACHE="$OUT/cache"
rm -rf "$CACHE"
: > "$OUT/times.txt"
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.3f}')"; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | grep -q . && echo '(uncommitted changes)')"
  nvidia-smi --query-gpu=name,uuid,driver_version,compute_mode,mig.mode.current,persistence_mode,clocks.sm \
    --format=csv 2>&1
  echo "lithos: $("$BIN" --version 2>&1)"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

echo "== 1. fresh calibration"
t0=$(now)
timeout -k 5 120 "$BIN" calibrate --json --force --cache-dir "$CACHE" --timeout 60 \
  > "$OUT/calibrate-fresh.json" 2> "$OUT/calibrate-fresh.err"
rc_fresh=$?
t1=$(now)
echo "fresh $(elapsed "$t0" "$t1")" >> "$OUT/times.txt"
echo "rc=$rc_fresh"; cat "$OUT/calibrate-fresh.err"
if [ $rc_fresh -ne 0 ]; then
  # Diagnostics for a failed calibration: longer-spinning blocks, then the
  # complement pass alone. Nothing here enables only unproven slots either.
  echo "== 1b. diagnostics"
  timeout -k 5 120 "$BIN" calibrate --json --force --cache-dir "$OUT/diag-cache" --spin-cycles 200000 --retries 5 \
    > "$OUT/diag-spin.json" 2> "$OUT/diag-spin.err"; echo "long spin: rc=$?"; cat "$OUT/diag-spin.err"
  timeout -k 5 120 "$BIN" calibrate --json --force --cache-dir "$OUT/diag-cache" --no-verify \
    > "$OUT/diag-noverify.json" 2> "$OUT/diag-noverify.err"; echo "no verify: rc=$?"; cat "$OUT/diag-noverify.err"
  head -c 3000 "$OUT/diag-noverify.json"
fi

echo "== 2. cached"
t0=$(now)
timeout -k 5 60 "$BIN" calibrate --json --cache-dir "$CACHE" > "$OUT/calibrate-cached.json" 2> "$OUT/calibrate-cached.err"
rc_cached=$?
t1=$(now)
echo "cached $(elapsed "$t0" "$t1")" >> "$OUT/times.txt"
echo "rc=$rc_cached"; cat "$OUT/calibrate-cached.err"
cp "$CACHE"/slot-map-*.txt "$OUT/" 2>/dev/null

echo "== 3. table"
timeout -k 5 60 "$BIN" calibrate --cache-dir "$CACHE" > "$OUT/calibrate-table.txt" 2>&1
cat "$OUT/calibrate-table.txt"

echo "== 4. confinement"
t0=$(now)
timeout -k 5 180 "$BIN" calibrate --json --cache-dir "$CACHE" --timeout 90 \
  --mask-check 0 --mask-check 1 --mask-check 0-7 --mask-check 8-15,40-47 --mask-check 62-65 \
  --mask-check 0-32 --mask-check 0-65 --mask-check 66 --mask-check 66-70 \
  --green-check 0 --green-check 0-7 --green-check 62-65 --green-check 0-32 --green-check 0-65 \
  > "$OUT/confinement.json" 2> "$OUT/confinement.err"
rc_conf=$?
t1=$(now)
echo "confinement $(elapsed "$t0" "$t1")" >> "$OUT/times.txt"
echo "rc=$rc_conf"; cat "$OUT/confinement.err"

echo "== 5. CPU tests against the real driver"
timeout -k 5 120 "$TESTS" --gtest_brief=1 > "$OUT/gpu_test.txt" 2>&1
rc_tests=$?
tail -5 "$OUT/gpu_test.txt"

echo "== summary (rc fresh=$rc_fresh cached=$rc_cached confinement=$rc_conf tests=$rc_tests)"
python3 scripts/gpu/check_calibration.py "$OUT"
rc_check=$?
echo "gpu_test: rc=$rc_tests ($(grep -E 'PASSED|FAILED' "$OUT/gpu_test.txt" | head -2 | tr '\n' ' '))"
[ $rc_check -eq 0 ] && [ $rc_tests -eq 0 ]
