#!/usr/bin/env bash
# Issue 36 on the GPU: a hung lithosd and a faulting tenant, with PyTorch.
# Runs on the GPU machine with the release build carried over
# (build/release/bin/lithos, build/release/lib/liblithos.so); writes under
# $OUT (default /tmp/lithos-trust) and prints a table last
# (scripts/faults/trust_report.py).
#
# Phases (TRUST_PHASES, default all, in this order):
#   stopped  a PyTorch process of 200 GEMMs (gemms.py) without lithos, then
#            as an hp and as a be tenant of a lithosd stopped with SIGSTOP
#            before it starts, then of a running one; STOPPED_ROUNDS rounds
#            (default 3), interleaved
#   fault    lithosd with MPS; an hp service (svc.py, 100 requests/s) and a
#            be trainer whose Triton kernel writes where it must not after
#            5 s; lithos status polled every 50 ms; when the service has
#            gone, a new service and a new trainer are started: when does
#            each get scheduled?
#   linger   the same, with a service that catches the error and stays (as
#            some servers do): lithosd ends it after fault_exit_grace_ms
#   outside  the same, with the trainer a tenant outside MPS (mps = false):
#            the service goes on
#   cost     what running outside MPS costs the service: the service alone,
#            beside the trainer inside MPS and beside it outside MPS
# Every process runs under `timeout`; the MPS lithosd starts is stopped with
# it, and a last `quit` runs at exit.
set -uo pipefail
cd "$(dirname "$0")/../.."
LITHOS=${LITHOS:-$PWD/build/release/bin/lithos}
OUT=${OUT:-/tmp/lithos-trust}
WORK=$OUT
mkdir -p "$WORK"
SOCK=/tmp/lithos-trust.sock
PHASES=${TRUST_PHASES:-stopped fault linger outside cost}
ROUNDS=${STOPPED_ROUNDS:-3}
PY=python3
export PYTHONUNBUFFERED=1
# The commit measured: LITHOS_COMMIT when given (the copy on the GPU machine
# may not carry its history), else git's.
echo "${LITHOS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" >"$WORK/commit.txt"
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader >"$WORK/gpu.txt"
"$LITHOS" calibrate >"$WORK/calibrate.txt" 2>&1 || { cat "$WORK/calibrate.txt"; exit 1; }

daemon_pid=""
start_daemon() {  # $1: mps mode, $2: label
  cat >"$WORK/lithosd-$2.toml" <<TOML
[daemon]
socket = "$SOCK"
mps = "$1"
fault_exit_grace_ms = 2000
fault_term_grace_ms = 2000
[[tenant]]
name = "svc"
priority = "high"
quota = 40
[[tenant]]
name = "train"
priority = "best-effort"
[[tenant]]
name = "untrusted"
priority = "best-effort"
mps = false
[[tenant]]
name = "default"
priority = "best-effort"
TOML
  "$LITHOS" daemon --config "$WORK/lithosd-$2.toml" --device 0 >"$WORK/lithosd-$2.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 1 600); do
    "$LITHOS" status --socket "$SOCK" --json >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "lithosd did not come up:"; tail -n 20 "$WORK/lithosd-$2.log"; return 1
}
stop_daemon() {  # $1: label
  [[ -n $daemon_pid ]] || return 0
  kill -CONT "$daemon_pid" 2>/dev/null
  "$LITHOS" status --socket "$SOCK" --json >"$WORK/status-$1.json" 2>/dev/null
  kill -TERM "$daemon_pid"; wait "$daemon_pid"; daemon_pid=""
}
cleanup() {
  stop_daemon end
  echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
}
trap cleanup EXIT

run_tenant() {  # $1: tenant ("" = no lithos), $2: log, rest: the command
  local tenant=$1 log=$2; shift 2
  local t0 rc
  t0=$(date +%s.%N)
  if [[ -z $tenant ]]; then
    timeout 300 "$@" >"$log" 2>"$log.err"
  else
    timeout 300 "$LITHOS" run --daemon "$SOCK" --tenant "$tenant" -- "$@" >"$log" 2>"$log.err"
  fi
  rc=$?
  echo "{\"wall_s\":$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')}" >"$log.wall"
  return $rc
}

# As a supervisor restarts a job: run_tenant again while it fails before
# it is ready (the MPS server refuses new clients until a fault's affected
# processes are gone), up to 20 times; every attempt's lines in one file.
restarted() {
  local tenant=$1 log=$2; shift 2
  for attempt in $(seq 1 20); do
    run_tenant "$tenant" "$log.try" "$@"
    local rc=$?
    echo "{\"attempt\":$attempt,\"rc\":$rc,\"t\":$(date +%s.%N)}" >>"$log"
    cat "$log.try" >>"$log"
    grep -q '"event": "ready"' "$log.try" && return $rc
    sleep 0.2
  done
  return 1
}

if [[ " $PHASES " == *" stopped "* ]]; then
  echo "== stopped" >&2
  start_daemon off stopped || exit 1
  for r in $(seq 1 "$ROUNDS"); do
    run_tenant "" "$WORK/plain-$r.json" $PY scripts/faults/gemms.py 200
    kill -STOP "$daemon_pid"
    run_tenant svc "$WORK/stopped-hp-$r.json" $PY scripts/faults/gemms.py 200
    run_tenant train "$WORK/stopped-be-$r.json" $PY scripts/faults/gemms.py 200
    kill -CONT "$daemon_pid"
    run_tenant svc "$WORK/live-hp-$r.json" $PY scripts/faults/gemms.py 200
    run_tenant train "$WORK/live-be-$r.json" $PY scripts/faults/gemms.py 200
  done
  stop_daemon stopped
fi

# One fault scenario: $1 label, $2 the trainer's tenant, $3 the service's
# extra arguments. The status is polled every 50 ms into status-$1.jsonl.
fault_run() {
  local label=$1 trainer=$2 svc_args=$3
  start_daemon start "$label" || return 1
  $PY scripts/faults/poll_status.py "$LITHOS" "$SOCK" 0.05 >"$WORK/$label-status.jsonl" 2>&1 &
  local poller=$!
  run_tenant svc "$WORK/$label-svc1.jsonl" $PY scripts/faults/svc.py --kind service --seconds 40 --rate 100 $svc_args &
  local svc1=$!
  sleep 12  # both processes have imported torch and made their contexts
  run_tenant "$trainer" "$WORK/$label-train1.jsonl" $PY scripts/faults/svc.py --kind train --seconds 30 --fault-after 3 &
  local train1=$!
  # The replacements start once the first service has gone (or after 25 s).
  for _ in $(seq 1 250); do kill -0 $svc1 2>/dev/null || break; sleep 0.1; done
  date +%s.%N >"$WORK/$label-restart.txt"
  restarted svc "$WORK/$label-svc2.jsonl" $PY scripts/faults/svc.py --kind service --seconds 8 --rate 100 &
  local svc2=$!
  restarted train "$WORK/$label-train2.jsonl" $PY scripts/faults/svc.py --kind train --seconds 8 &
  local train2=$!
  wait $svc1; echo "$?" >"$WORK/$label-svc1.rc"
  wait $train1; echo "$?" >"$WORK/$label-train1.rc"
  wait $svc2; echo "$?" >"$WORK/$label-svc2.rc"
  wait $train2; echo "$?" >"$WORK/$label-train2.rc"
  kill $poller 2>/dev/null
  stop_daemon "$label"
}

if [[ " $PHASES " == *" fault "* ]]; then
  echo "== fault" >&2
  fault_run fault train ""
fi
if [[ " $PHASES " == *" linger "* ]]; then
  echo "== linger" >&2
  fault_run linger train "--linger 60"
fi
if [[ " $PHASES " == *" outside "* ]]; then
  echo "== outside" >&2
  fault_run outside untrusted ""
fi

if [[ " $PHASES " == *" cost "* ]]; then
  echo "== cost" >&2
  start_daemon start cost || exit 1
  # COST_ROUNDS rounds (default 2) of alone, beside a trainer inside MPS,
  # beside one outside MPS; each service window 15 s.
  for r in $(seq 1 "${COST_ROUNDS:-2}"); do
    run_tenant svc "$WORK/cost-alone-$r.jsonl" $PY scripts/faults/svc.py --kind service --seconds 15 --rate 100
    for t in train untrusted; do
      run_tenant "$t" "$WORK/cost-$t-$r-trainer.jsonl" $PY scripts/faults/svc.py --kind train --seconds 60 &
      tp=$!
      sleep 8
      run_tenant svc "$WORK/cost-$t-$r.jsonl" $PY scripts/faults/svc.py --kind service --seconds 15 --rate 100
      pkill -TERM -f "svc.py --kind train --seconds 60"
      wait $tp
    done
  done
  stop_daemon cost
fi

$PY scripts/faults/trust_report.py "$WORK" | tee "$WORK/report.txt"
