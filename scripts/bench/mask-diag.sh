#!/usr/bin/env bash
# Which workloads complete under which TPC sets (no MPS; each run under a
# hard watchdog, so a hung launch costs one timeout and is killed).
#   device: scripts/bench/mask-diag.sh  (after lithos calibrate)
set -u
LITHOS=${LITHOS:-build/release/bin/lithos}
"$LITHOS" calibrate >/dev/null 2>&1 || echo "calibrate failed"
run() {  # label set workload kind params
  local log="${OUT:-/tmp}/diag-$1.log"
  local t0=$(date +%s%N)
  LITHOS_LOG=debug timeout -s KILL "${DIAG_TIMEOUT:-45}" "$LITHOS" run --tpc-set "$2" -- \
    python3 scripts/bench/mask_diag.py "$3" "$4" "$5" 3 >"$log.out" 2>"$log"
  local rc=$?
  printf '%-14s %-40s %-16s rc=%-4s %6sms  %s\n' "$1" "$2" "$3/$4" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))" \
    "$(cat "$log.out")"
  if [[ $rc -ne 0 ]]; then grep -a "cuLaunch\|Launch" "$log" | tail -n 2 | cut -c1-300; fi
}
G67="6,14,22,30,37,44,51,58,60,7,15,23,31,38,45,52,59,61"
run gpt-53-65 53-65 gpt training '{}'
run gpt-0-12 0-12 gpt training '{}'
run gpt-g67 "$G67" gpt training '{}'
run r50-40-52 40-52 resnet50 closed '{}'
run r50-g67 "$G67" resnet50 closed '{}'
