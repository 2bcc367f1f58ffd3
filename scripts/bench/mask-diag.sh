#!/usr/bin/env bash
# Which workloads complete under which TPC sets (no MPS; each run under a
# hard watchdog, so a hung launch costs one timeout and is killed). With
# LITHOS_LOG=debug each launch is logged: the last one names the kernel.
#   device: OUT=$OUT scripts/bench/mask-diag.sh [all|sweep]
set -u
LITHOS=${LITHOS:-build/release/bin/lithos}
"$LITHOS" calibrate >/dev/null 2>&1 || echo "calibrate failed"
run() {  # label set program...
  local label=$1 set=$2
  shift 2
  local log="${OUT:-/tmp}/diag-$label.log"
  local t0
  t0=$(date +%s%N)
  LITHOS_LOG=debug timeout -s KILL "${DIAG_TIMEOUT:-45}" "$LITHOS" run --tpc-set "$set" -- "$@" >"$log.out" 2>"$log"
  local rc=$?
  printf '%-16s %-44s rc=%-4s %6sms  %s\n' "$label" "$set" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))" \
    "$(tail -c 200 "$log.out")"
  if [[ $rc -ne 0 ]]; then grep -a "cuLaunch" "$log" | tail -n 1 | cut -c1-220; fi
  gzip -f "$log"
}
workload() { echo python3 scripts/bench/mask_diag.py "$@"; }
ADD='import torch; x=torch.ones(1<<24, device="cuda"); y=x+1; torch.cuda.synchronize(); print("ok", float(y.sum()))'
G67="6,14,22,30,37,44,51,58,60,7,15,23,31,38,45,52,59,61"
if [[ "${1:-all}" == "all" ]]; then
  run gpt-53-65 53-65 $(workload gpt training '{}')
  run gpt-0-12 0-12 $(workload gpt training '{}')
  run gpt-g67 "$G67" $(workload gpt training '{}')
  run r50-40-52 40-52 $(workload resnet50 closed '{}')
  run r50-g67 "$G67" $(workload resnet50 closed '{}')
else
  # Which property of a set decides: TPCs per group, groups 8-9, the count.
  run add-0-12 0-12 python3 -c "$ADD"
  run add-0-7 0-7 python3 -c "$ADD"
  run add-0-15 0-15 python3 -c "$ADD"
  run add-g1 1,9,17,25,32,39,46,53 python3 -c "$ADD"
  run add-g89 62-65 python3 -c "$ADD"
  run add-all 0-65 python3 -c "$ADD"
  run gpt-0-7 0-7 $(workload gpt training '{}')
  run gpt-0-15 0-15 $(workload gpt training '{}')
  run gpt-g1 1,9,17,25,32,39,46,53 $(workload gpt training '{}')
fi
