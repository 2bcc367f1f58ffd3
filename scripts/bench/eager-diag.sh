#!/usr/bin/env bash
# Does an eager (launch-bound) service hold its calibrated rate alone, and
# does the tenant's sleep between arrivals matter? Runs an eager ResNet-50
# service (batch 32, 50% load) alone twice: with the tenant as shipped
# (sleep until 1 ms before each arrival, then spin) and with the whole wait
# spun (scripts/bench/tenant.py's Clock.SPIN_S raised for that run only and
# restored on exit). Prints each repetition's latency quantiles.
#
# For the device, with the release build carried over:
#   OUT=$OUT bash scripts/bench/eager-diag.sh
# It edits scripts/bench/tenant.py in place while the second run lasts.
set -uo pipefail
cd "$(dirname "$0")/../.."
L=$PWD/build/release/bin/lithos
OUT=${OUT:-/tmp/lithos-eager-diag}
W=$OUT/work
mkdir -p "$W"
"$L" --version
nvidia-smi --query-gpu=name,uuid --format=csv,noheader
cat >"$W/eager-svc.toml" <<T
name = "eager-svc"
description = "ResNet-50 service (eager, batch 32, 50% load) alone"
seed = 1
warmup_s = 3.0
window_s = 5.0
reps = 3
drain_s = 1.0
slo_factors = [1.5]
[[tenant]]
name = "svc"
role = "hp"
kind = "service"
workload = "resnet50"
load = 0.5
params = { batch = 32, graph = false }
T
TENANT=scripts/bench/tenant.py
cp "$TENANT" "$W/tenant.py.orig"
trap 'cp "$W/tenant.py.orig" "$TENANT"' EXIT
echo "[$(date +%T)] sleep, then spin 1 ms (as shipped)"
timeout -s KILL 150 "$L" bench "$W/eager-svc.toml" --modes alone --out "$OUT/sleep" --no-plots -q 2>&1 | grep -E "^alone"
sed -i 's/^    SPIN_S = 0.001 /    SPIN_S = 1000.0 /' "$TENANT"
grep -q "SPIN_S = 1000.0" "$TENANT" || { echo "eager-diag: could not set SPIN_S in $TENANT"; exit 1; }
echo "[$(date +%T)] the whole wait spun"
timeout -s KILL 150 "$L" bench "$W/eager-svc.toml" --modes alone --out "$OUT/spin" --no-plots -q 2>&1 | grep -E "^alone"
cp "$W/tenant.py.orig" "$TENANT"
for d in sleep spin; do
  python3 - "$OUT/$d/runs/alone-svc.json" "$d" <<'P'
import json, sys
try:
    t = json.load(open(sys.argv[1]))["tenants"][0]
except Exception as e:
    sys.exit(f"{sys.argv[2]}: no run ({e})")
print(sys.argv[2], "capacity/s", round(t["calib"].get("capacity_rps", 0), 1), "GPU ms", round(t["calib"].get("gpu_ms", 0), 3),
      "rate/s", round(t.get("rate_rps") or 0, 1))
for ph in t["phases"]:
    for r in ph["reps"]:
        l = sorted(r["latencies_ms"])
        n = len(l)
        if n:
            print(f"  n {n} p10 {l[n // 10]:.2f} p50 {l[n // 2]:.2f} p90 {l[int(n * 0.9)]:.2f} p99 {l[int(n * 0.99)]:.2f} ms,"
                  f" unfinished {len(r['unfinished_ms'])}")
P
done
