#!/usr/bin/env bash
# A service on GPU 1 beside ONE best-effort process that trains on GPU 0 and
# GPU 1 (scripts/daemon/multi_gpu_pair.py), on a node of two GPUs under one
# lithosd for the node (device = "all", mps = "auto": both GPUs behind one
# MPS control daemon). Four runs, each a fresh start of the programs:
#
#   alone       the service alone under lithos (high priority, tenant svc)
#   train       the trainer alone under lithos (best effort, tenant train)
#   gpu0-only   both, the trainer sent to GPU 0's daemon socket: its launches
#               on GPU 1 are not that daemon's to decide and run unscheduled
#               (what every launch of a process on a second GPU did before
#               each GPU got a daemon client of its own)
#   every-gpu   both, the trainer given the %g socket: each of its GPUs'
#               launches decided by that GPU's daemon
#
# The service's rate is half its capacity alone (measured in `alone`) in
# every run. Runs on the device machine with the release build carried
# over; writes under $OUT (default /tmp/lithos-multi-pair) and prints a
# table last. PAIR_SECONDS: the service's measured span (default 25).
# Exit status: 0, or 1 when a run failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
LITHOS=$PWD/build/release/bin/lithos
PAIR=$PWD/scripts/daemon/multi_gpu_pair.py
OUT=${OUT:-/tmp/lithos-multi-pair}
SECS=${PAIR_SECONDS:-25}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export LITHOS_CACHE_DIR=$OUT/cache
stamp() { echo "[$(date +%T)] $*"; }
failed=0

"$LITHOS" --version
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
[[ $(nvidia-smi -L | wc -l) -ge 2 ]] || { echo "needs two GPUs"; exit 1; }
mapfile -t UUID < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)

stamp "calibrate both GPUs"
for d in 0 1; do
  timeout 120 "$LITHOS" calibrate --device "$d" --json >"$OUT/calibrate-$d.json" 2>"$OUT/calibrate-$d.err" ||
    { echo "calibrate --device $d failed: $(tail -n 2 "$OUT/calibrate-$d.err")"; exit 1; }
done

SOCKS=/tmp/lgp
PATTERN=$SOCKS/lithosd-%g.sock
SOCK0=$SOCKS/lithosd-${UUID[0]}.sock
rm -rf "$SOCKS"
mkdir -p "$SOCKS"
cat >"$OUT/lithosd.toml" <<TOML
[daemon]
socket = "$PATTERN"
state_dir = "$OUT/state-%g"
mps = "auto"
TOML
cat scripts/daemon/tenants.toml >>"$OUT/lithosd.toml"
stamp "lithosd for the node (MPS started by it)"
"$LITHOS" daemon --config "$OUT/lithosd.toml" --device all >"$OUT/lithosd.log" 2>&1 &
LP=$!
for s in "$SOCK0" "$SOCKS/lithosd-${UUID[1]}.sock"; do
  for _ in $(seq 1 600); do "$LITHOS" status --socket "$s" --json >/dev/null 2>&1 && break; sleep 0.1; done
done
if ! "$LITHOS" status --socket "$PATTERN" --json >"$OUT/status-start.jsonl" 2>&1; then
  echo "lithosd did not come up; its log:"
  cat "$OUT/lithosd.log"
  ps -eo pid,ppid,stat,etime,args | grep -E "lithos|mps" | grep -v grep
  kill -TERM $LP
  wait $LP
  exit 1
fi

# svc LABEL [RATE]: the service on GPU 1 under lithos.
svc() {
  timeout -s KILL 240 "$LITHOS" run --tenant svc --daemon "$PATTERN" --stats-file "$OUT/stats-svc-$1.json" -- \
    python3 "$PAIR" svc 1 "$SECS" ${2:-} >"$OUT/svc-$1.json" 2>"$OUT/svc-$1.err" || {
    echo "service run $1 failed: $(tail -n 3 "$OUT/svc-$1.err")"
    failed=1
  }
}
# train_start LABEL SOCKET: the trainer on GPUs 0 and 1 in the background;
# returns once it has made its first steps on both.
train_start() {
  "$LITHOS" run --tenant train --daemon "$2" --stats-file "$OUT/stats-train-$1.json" -- \
    python3 "$PAIR" train 0,1 0 >"$OUT/train-$1.jsonl" 2>"$OUT/train-$1.err" &
  TP=$!
  for _ in $(seq 1 900); do [[ -s $OUT/train-$1.jsonl ]] && break; kill -0 $TP 2>/dev/null || break; sleep 0.1; done
  [[ -s $OUT/train-$1.jsonl ]] || { echo "trainer $1 did not start: $(tail -n 3 "$OUT/train-$1.err")"; failed=1; }
}
train_stop() {
  kill -TERM $TP 2>/dev/null
  for _ in $(seq 1 300); do kill -0 $TP 2>/dev/null || break; sleep 0.1; done
  kill -KILL $TP 2>/dev/null
  wait $TP 2>/dev/null
}

stamp "alone: the service"
svc alone
RATE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rate"])' "$OUT/svc-alone.json" 2>/dev/null)
[[ -n $RATE ]] || { echo "no rate from the alone run"; kill -TERM $LP; wait $LP; exit 1; }
stamp "train: the trainer alone ($SECS s)"
train_start train "$PATTERN"
sleep "$SECS"
train_stop
for mode in gpu0-only every-gpu; do
  stamp "$mode: the trainer, then the service at $RATE/s"
  [[ $mode == gpu0-only ]] && sock=$SOCK0 || sock=$PATTERN
  train_start "$mode" "$sock"
  svc "$mode" "$RATE"
  train_stop
done
"$LITHOS" status --socket "$PATTERN" --json >"$OUT/status-end.jsonl" 2>&1
kill -TERM $LP
wait $LP
pgrep -x nvidia-cuda-mps >/dev/null && echo "WARNING: MPS still running after lithosd exited"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def lines(p):
    try:
        return [json.loads(l) for l in open(p) if l.strip().startswith("{")]
    except OSError:
        return []
def rate_in(rows, t0=None, t1=None):
    """Training steps per second on each GPU over [t0, t1] (all: every row)."""
    rows = [r for r in rows if "steps" in r]
    if t0 is not None:
        rows = [r for r in rows if t0 <= r["t"] <= t1]
    if len(rows) < 2:
        return None
    dt = rows[-1]["t"] - rows[0]["t"]
    return [(b - a) / dt for a, b in zip(rows[0]["steps"], rows[-1]["steps"])]
def daemon_of(label):
    rows = lines(f"{out}/stats-train-{label}.json")
    d = rows[0].get("daemon", {}) if rows else {}
    per = d.get("gpus", [d])
    return ", ".join(f"GPU {g.get('device')}: {g.get('state')} grants {g.get('grants')}" for g in per)
alone = (lines(f"{out}/svc-alone.json") or [{}])[0]
train_alone = rate_in(lines(f"{out}/train-train.jsonl"))
rows = []
for mode in ("alone", "gpu0-only", "every-gpu"):
    s = (lines(f"{out}/svc-{mode}.json") or [{}])[0]
    if not s:
        rows.append(f"| {mode} | failed | | | |")
        continue
    tr = rate_in(lines(f"{out}/train-{mode}.jsonl"), s["t0"], s["t1"]) if mode != "alone" else None
    ratio = (lambda v, a: f"{v:.2f} ({v / a:.3f}x)" if v is not None and a else "-")
    trs = " / ".join(ratio(v, a) for v, a in zip(tr, train_alone)) if tr and train_alone else "-"
    rows.append(f"| {mode} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} ({s['p99_ms'] / alone['p99_ms']:.2f}x) | "
                f"{s['requests']} | {trs} | {daemon_of(mode) if mode != 'alone' else ''} |")
summary = {"alone": alone, "train_alone_steps_per_s": train_alone,
           "runs": {m: (lines(f"{out}/svc-{m}.json") or [{}])[0] for m in ("gpu0-only", "every-gpu")}}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print()
print(f"service: ResNet-50 batch 32 graph on GPU 1 at {alone.get('rate')}/s (half its capacity alone; gpu {alone.get('gpu_ms')} ms)")
print(f"trainer alone: {' / '.join(f'{v:.2f}' for v in train_alone or [])} steps/s on GPU 0 / GPU 1")
print("| run | svc P50 ms | svc P99 ms (vs alone) | requests | trainer steps/s GPU 0 / GPU 1 (vs alone) | trainer's daemon clients |")
print("|---|---:|---:|---:|---:|---|")
print("\n".join(rows))
PY
exit $failed
