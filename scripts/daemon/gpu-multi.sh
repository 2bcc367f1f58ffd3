#!/usr/bin/env bash
# lithos on a node of two GPUs (docs/daemon.md "Nodes with several GPUs"):
# lithosd for both GPUs from one configuration (%g): one process for the
# node, then one per GPU; processes on either GPU,
# a torchrun job of two ranks, a process on both GPUs (scheduled on each by
# its daemon; with GPU 0's socket, on GPU 0 only), confinement on GPU 1 by
# a process whose first launch is there, and on both GPUs by one process.
# Runs on the device machine with the release build carried over; writes
# under $OUT (default
# /tmp/lithos-multi) and prints PASS/FAIL lines and a short table last.
# MULTI_DAEMONS chooses the arrangements (default "node per-gpu"), MULTI_MPS
# the daemons' mps setting (default off; "auto": the one lithosd for the
# node starts an MPS control daemon for both GPUs and quits it at the end;
# "attach": this script starts one MPS control daemon before each
# arrangement, every lithosd attaches to it, and it must outlive them).
# Exit status: the number of failed checks.
set -uo pipefail
cd "$(dirname "$0")/../.."
LITHOS=$PWD/build/release/bin/lithos
CHECK=$PWD/scripts/daemon/multi_gpu_check.py
OUT=${OUT:-/tmp/lithos-multi}
mkdir -p "$OUT"
# NVLink multicast stays off (the machine's rule; torchrun's NCCL too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LITHOS_CACHE_DIR=$OUT/cache
fails=0
: >"$OUT/checks.txt"
pass() { echo "PASS $*"; echo "| $* | pass |" >>"$OUT/checks.txt"; }
fail() { echo "FAIL $*"; echo "| $* | **FAIL** |" >>"$OUT/checks.txt"; fails=$((fails + 1)); }
stamp() { echo "[$(date +%T)] $*"; }
# gone_within N: no MPS process (control daemon or server) within N seconds.
# The kernel keeps 15 characters of a process name: "nvidia-cuda-mps" is
# both of them.
gone_within() {
  for _ in $(seq 1 $(($1 * 10))); do pgrep -x nvidia-cuda-mps >/dev/null || return 0; sleep 0.1; done
  return 1
}

"$LITHOS" --version
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
n=$(nvidia-smi -L | wc -l)
[[ $n -ge 2 ]] || { echo "needs two GPUs, sees $n"; exit 1; }
mapfile -t UUID < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)

stamp "calibrate"
for d in 0 1; do
  timeout 120 "$LITHOS" calibrate --device "$d" --json >"$OUT/calibrate-$d.json" 2>"$OUT/calibrate-$d.err" ||
    fail "calibrate --device $d: $(tail -n 2 "$OUT/calibrate-$d.err")"
done
python3 - "$OUT" <<'PY'
import json, sys
maps = [json.load(open(f"{sys.argv[1]}/calibrate-{d}.json")) for d in (0, 1)]
key = lambda m: json.dumps([m.get("slots"), m.get("dead_slots")], sort_keys=True)
print("slot maps of GPU 0 and GPU 1:", "the same layout" if key(maps[0]) == key(maps[1]) else "different layouts",
      "| live TPCs:", [m.get("live_tpcs") for m in maps], "| dead slots:", [m.get("dead_slots") for m in maps])
PY

stamp "plain runs"
for d in 0 1; do timeout 300 python3 "$CHECK" one "$d" >"$OUT/plain-one$d.json" 2>"$OUT/plain-one$d.err"; done
timeout 300 python3 "$CHECK" both >"$OUT/plain-both.json" 2>"$OUT/plain-both.err"
timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$CHECK" ddp \
  >"$OUT/plain-ddp.json" 2>"$OUT/plain-ddp.err"
timeout 120 python3 "$CHECK" smid 1 >"$OUT/plain-smid1.json" 2>"$OUT/plain-smid1.err"
timeout 120 python3 "$CHECK" smid-both >"$OUT/plain-smidboth.json" 2>"$OUT/plain-smidboth.err"

# Equal results (all but the timing), one JSON line per process, any order.
same() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def rows(p):
    out = []
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            j.pop("seconds", None)
            out.append(json.dumps(j, sort_keys=True))
    return sorted(out)
a, b = rows(sys.argv[1]), rows(sys.argv[2])
sys.exit(0 if a and a == b else 1)
PY
}

SOCKS=/tmp/lg
PATTERN=$SOCKS/lithosd-%g.sock
SOCK0=$SOCKS/lithosd-${UUID[0]}.sock SOCK1=$SOCKS/lithosd-${UUID[1]}.sock
# start_daemons ARRANGEMENT: "node" (one lithosd, device = "all") or
# "per-gpu" (one lithosd per GPU, --device N), from one configuration.
start_daemons() {
  rm -rf "$SOCKS"; mkdir -p "$SOCKS"
  if [[ ${MULTI_MPS:-off} == attach ]]; then
    nvidia-cuda-mps-control -d && pass "$1: MPS control daemon started for the daemons to attach to" ||
      fail "$1: cannot start an MPS control daemon"
  fi
  cat >"$OUT/lithosd.toml" <<TOML
[daemon]
socket = "$PATTERN"
state_dir = "$OUT/state-$1-%g"
mps = "${MULTI_MPS:-off}"
best_effort_runs_free = false
TOML
  cat scripts/daemon/tenants.toml >>"$OUT/lithosd.toml"
  pids=()
  if [[ $1 == node ]]; then
    "$LITHOS" daemon --config "$OUT/lithosd.toml" --device all >"$OUT/lithosd-node.log" 2>&1 &
    pids+=($!)
  else
    for d in 0 1; do
      "$LITHOS" daemon --config "$OUT/lithosd.toml" --device "$d" >"$OUT/lithosd-$d.log" 2>&1 &
      pids+=($!)
    done
  fi
  for s in "$SOCK0" "$SOCK1"; do
    for _ in $(seq 1 300); do "$LITHOS" status --socket "$s" --json >/dev/null 2>&1 && break; sleep 0.1; done
    "$LITHOS" status --socket "$s" --json >/dev/null 2>&1 && pass "$1: lithosd up at $s" || fail "$1: no lithosd at $s"
  done
}

# run LABEL TENANT SOCKET ARGS...: the check under lithos run, stats per pid.
run() {
  local label=$1 tenant=$2 sock=$3; shift 3
  rm -f "$OUT/stats-$label-"*.json
  timeout -s KILL 300 "$LITHOS" run --tenant "$tenant" --daemon "$sock" --stats-file "$OUT/stats-$label-%p.json" \
    -- "$@" >"$OUT/$label.json" 2>"$OUT/$label.err"
  echo "$?" >"$OUT/$label.rc"
}
# stat LABEL EXPR: EXPR (Python, over `s`, each process's stats, and `d`,
# its daemon part) holds for every process of the run that went to a
# daemon; prints the values it read.
stat() {
  python3 - "$OUT" "$1" "$2" <<'PY'
import glob, json, sys
out, label, expr = sys.argv[1:]
files = sorted(glob.glob(f"{out}/stats-{label}-*.json"))
ok = bool(files)
for f in files:
    for line in open(f):
        s = json.loads(line)
        d = s.get("daemon", {})
        if d.get("state", "idle") == "idle":  # never reached for a daemon (torchrun's launcher)
            print("   ", label, "a process that made no launch: skipped")
            continue
        print("   ", label, {k: d.get(k) for k in ("state", "gpu", "class", "grants", "reported", "launches_scheduled")},
              "not_applied:", {k: v for k, v in s.get("not_applied", {}).items() if v})
        ok = ok and bool(eval(expr, {"s": s, "d": d}))
sys.exit(0 if ok else 1)
PY
}
verdict() {  # verdict LABEL PLAIN WHAT EXPR
  local label=$1 plain=$2 what=$3 expr=$4
  [[ $(cat "$OUT/$label.rc") == 0 ]] || { fail "$what: exit $(cat "$OUT/$label.rc"): $(tail -n 3 "$OUT/$label.err")"; return; }
  same "$OUT/$plain" "$OUT/$label.json" && pass "$what: results equal to plain" || fail "$what: results differ from plain"
  stat "$label" "$expr" && pass "$what: $expr" || fail "$what: not $expr"
}

# The same checks with each arrangement of daemons (MULTI_DAEMONS, default
# both: one lithosd for the node, then one per GPU).
for A in ${MULTI_DAEMONS:-node per-gpu}; do
stamp "$A: daemons from one configuration"
start_daemons "$A"

stamp "$A: processes on GPU 1 and GPU 0, each to its GPU's daemon"
run be1-$A train "$PATTERN" python3 "$CHECK" one 1
verdict be1-$A plain-one1.json "$A: best-effort on GPU 1" \
  "d['gpu'] == '${UUID[1]}' and d['state'] == 'connected' and d['grants'] > 0 and s['not_applied'].get('other_device', 0) == 0"
run hp0-$A svc "$PATTERN" python3 "$CHECK" one 0
verdict hp0-$A plain-one0.json "$A: high-priority on GPU 0" "d['gpu'] == '${UUID[0]}' and d['reported'] > 0"
run hp1-$A svc "$PATTERN" python3 "$CHECK" one 1
verdict hp1-$A plain-one1.json "$A: high-priority on GPU 1" "d['gpu'] == '${UUID[1]}' and d['reported'] > 0"

stamp "$A: torchrun, two ranks, one GPU each"
run ddp-$A train "$PATTERN" python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$CHECK" ddp
verdict ddp-$A plain-ddp.json "$A: torchrun 2 ranks" \
  "d['state'] == 'connected' and d['grants'] > 0 and s['not_applied'].get('other_device', 0) == 0"
python3 - "$OUT" "${UUID[0]}" "${UUID[1]}" "$A" <<'PY' && pass "$A: torchrun: each rank at its own GPU's daemon" || fail "$A: torchrun: ranks not one per daemon"
import glob, json, sys
gpus = sorted(json.loads(open(f).readline())["daemon"]["gpu"] for f in glob.glob(f"{sys.argv[1]}/stats-ddp-{sys.argv[4]}-*.json")
              if json.loads(open(f).readline())["daemon"].get("registered"))
sys.exit(0 if gpus == sorted(sys.argv[2:4]) else 1)
PY

# Half its launches on each GPU, a daemon client per GPU: with the %g
# socket each GPU's launches are granted by that GPU's daemon; with GPU 0's
# socket, GPU 1's client meets a daemon of another GPU (other_gpu) and its
# launches run unscheduled (no grant, no mask asked for: not_requested).
stamp "$A: one process on both GPUs, the %g socket"
run both-$A train "$PATTERN" python3 "$CHECK" both
verdict both-$A plain-both.json "$A: both GPUs, each GPU's daemon" \
  "d['gpu'] == '${UUID[0]}' and len(d['gpus']) == 2 and all(g['state'] == 'connected' and g['grants'] > 0 and g['gpu'] == ['${UUID[0]}', '${UUID[1]}'][g['device']] for g in d['gpus']) and s['not_applied'].get('other_device', 0) == 0"
run bothhp-$A svc "$PATTERN" python3 "$CHECK" both
verdict bothhp-$A plain-both.json "$A: both GPUs, high priority, each GPU's daemon" \
  "len(d['gpus']) == 2 and all(g['state'] == 'connected' and g['reported'] > 0 for g in d['gpus'])"
stamp "$A: one process on both GPUs, GPU 0's daemon named"
run both0-$A train "$SOCK0" python3 "$CHECK" both
verdict both0-$A plain-both.json "$A: both GPUs, daemon of GPU 0" \
  "d['gpu'] == '${UUID[0]}' and d['grants'] > 0 and [g['state'] for g in d['gpus']] == ['connected', 'other_gpu'] and d['gpus'][1]['grants'] == 0 and s['not_applied'].get('not_requested', 0) == d['grants']"

stamp "$A: a process on GPU 1 sent to GPU 0's daemon"
run other-$A train "$SOCK0" python3 "$CHECK" one 1
# Its GPU's client meets a daemon of another GPU and leaves at
# registration: none of its launches is scheduled.
verdict other-$A plain-one1.json "$A: GPU 1 process, GPU 0's daemon" \
  "d['state'] == 'other_gpu' and d['device'] == 1 and d['grants'] == 0 and d['reported'] == 0 and s['not_applied'].get('not_requested', 0) > 0"

stamp "$A: lithos status over both"
"$LITHOS" status --socket "$PATTERN" --json >"$OUT/status-$A.jsonl" 2>"$OUT/status-$A.err"
python3 - "$OUT/status-$A.jsonl" "${UUID[0]}" "${UUID[1]}" <<'PY' && pass "$A: status: both GPUs, each its own" || fail "$A: status over the pattern"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    c = r["counters"]
    print("   ", r["device"]["uuid"], "pid", r.get("pid"), {k: c.get(k) for k in ("clients_accepted", "grants", "clients_gone")})
sys.exit(0 if sorted(r["device"]["uuid"] for r in rows) == sorted(sys.argv[2:]) else 1)
PY
"$LITHOS" status --socket "$PATTERN" >"$OUT/status-$A.txt" 2>&1
"$LITHOS" status --socket "$PATTERN" --prometheus >/dev/null 2>"$OUT/status-prom-$A.err"
[[ $? == 2 ]] && pass "$A: status --prometheus over two sockets: exit 2" || fail "$A: status --prometheus over two: not exit 2"

if [[ $A == node ]]; then
  python3 - "$OUT/status-$A.jsonl" <<'PY' && pass "node: one process behind both sockets" || fail "node: not one process"
import json, sys
sys.exit(0 if len({json.loads(l)["pid"] for l in open(sys.argv[1]) if l.strip()}) == 1 else 1)
PY
fi
if [[ ${MULTI_MPS:-off} != off ]]; then
  # The clients went through MPS: its control daemon has spawned a server.
  srv=$(echo get_server_list | timeout 10 nvidia-cuda-mps-control 2>/dev/null | tr '\n' ' ')
  [[ -n ${srv// /} ]] && pass "$A: the clients ran under MPS (server $srv)" || fail "$A: no MPS server was spawned"
fi
for p in "${pids[@]}"; do kill -TERM "$p"; done
wait "${pids[@]}" 2>/dev/null
for s in "$SOCK0" "$SOCK1"; do [[ -e $s ]] && fail "$A: $s left after SIGTERM"; done
if [[ ${MULTI_MPS:-off} == attach ]]; then
  # A daemon that attached never quits MPS; the other GPU's clients need it.
  sleep 1
  pgrep -x nvidia-cuda-mps >/dev/null && pass "$A: MPS outlived the lithosd that attached to it" ||
    fail "$A: MPS gone after the attached lithosd stopped"
  echo quit | timeout 30 nvidia-cuda-mps-control
  gone_within 15 || fail "$A: MPS still running 15 s after quit"
fi
if [[ ${MULTI_MPS:-off} == auto && $A == node ]]; then
  grep -q "MPS started" "$OUT/lithosd-node.log" && pass "node: lithosd started MPS for both GPUs" ||
    fail "node: lithosd did not start MPS"
  # lithosd waits for the MPS it quits to be gone before it exits.
  pgrep -x nvidia-cuda-mps >/dev/null && fail "node: MPS left running after lithosd exited" ||
    pass "node: MPS quit with lithosd"
fi
done

stamp "confinement on GPU 1 (first launch there; lithos run --tpcs 8 checks against GPU 0's map)"
timeout -s KILL 120 "$LITHOS" run --tpcs 8 --stats-file "$OUT/stats-smid1-%p.json" -- python3 "$CHECK" smid 1 \
  >"$OUT/smid1.json" 2>"$OUT/smid1.err"
python3 - "$OUT" <<'PY' && pass "GPU 1 confined to 8 TPCs" || fail "GPU 1 not confined to 8 TPCs"
import glob, json, sys
out = sys.argv[1]
plain = json.loads(open(f"{out}/plain-smid1.json").readline())
conf = json.loads(open(f"{out}/smid1.json").readline())
stats = json.loads(open(glob.glob(f"{out}/stats-smid1-*.json")[0]).readline())
print("    SMs used on GPU 1: plain", plain["sms"], "| lithos run --tpcs 8:", conf["sms"], "| not_applied:",
      {k: v for k, v in stats.get("not_applied", {}).items() if v})
sys.exit(0 if 0 < conf["sms"] <= 16 < plain["sms"] else 1)
PY

stamp "confinement on both GPUs of one process (lithos run --tpcs 8: the set on each, with its own map)"
timeout -s KILL 120 "$LITHOS" run --tpcs 8 --stats-file "$OUT/stats-smidboth-%p.json" -- python3 "$CHECK" smid-both \
  >"$OUT/smidboth.json" 2>"$OUT/smidboth.err"
python3 - "$OUT" <<'PY' && pass "both GPUs of one process confined to 8 TPCs each" || fail "both GPUs of one process not confined to 8 TPCs each"
import glob, json, sys
out = sys.argv[1]
plain = json.loads(open(f"{out}/plain-smidboth.json").readline())["sms"]
conf = json.loads(open(f"{out}/smidboth.json").readline())["sms"]
stats = json.loads(open(glob.glob(f"{out}/stats-smidboth-*.json")[0]).readline())
print("    SMs used on GPU 0 / GPU 1: plain", plain, "| lithos run --tpcs 8:", conf, "| not_applied:",
      {k: v for k, v in stats.get("not_applied", {}).items() if v})
sys.exit(0 if all(0 < c <= 16 < p for c, p in zip(conf, plain)) else 1)
PY

stamp "sets given through lithos.h on both GPUs of one process (each with its own map)"
timeout -s KILL 120 "$LITHOS" run --stats-file "$OUT/stats-smidapi-%p.json" -- python3 "$CHECK" smid-api \
  >"$OUT/smidapi.json" 2>"$OUT/smidapi.err"
python3 - "$OUT" <<'PY' && pass "C API process set on both GPUs, stream set on GPU 1" || fail "C API sets not applied on both GPUs"
import json, sys
out = sys.argv[1]
r = json.loads(open(f"{out}/smidapi.json").readline())
print("    rc", r["rc"], "| process set TPCs 0-3, SM ids on GPU 0 / 1:", r["process_set"],
      "| stream set TPCs 10-11 on GPU 1:", r["stream_set_gpu1"], "| GPU 1 default stream after:",
      r["default_stream_gpu1"])
ok = r["rc"] == [0, 0] and all(ids and set(ids) <= set(range(8)) for ids in r["process_set"])
ok = ok and r["stream_set_gpu1"] and set(r["stream_set_gpu1"]) <= {20, 21, 22, 23}
ok = ok and r["default_stream_gpu1"] and set(r["default_stream_gpu1"]) <= set(range(8))
sys.exit(0 if ok else 1)
PY

echo
echo "| check | result |"
echo "|---|---|"
cat "$OUT/checks.txt"
echo "failed checks: $fails"
exit "$fails"
