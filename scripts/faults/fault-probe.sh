#!/usr/bin/env bash
# What a fatal GPU fault does to the processes of one GPU, without lithos:
#   plain   a victim (~1 ms kernels in a loop) beside a process whose kernel
#           writes to an address it does not own, no MPS
#   mps     the same, both MPS clients; while the victim lingers after its
#           error: does a new client get a context? what do get_server_list,
#           get_client_list and terminate_client do? does a new client get
#           one after terminate_client?
#   outside the victim an MPS client, the faulter outside MPS (an empty
#           pipe folder of its own): is the victim touched?
# NVML's critical Xid events are recorded throughout (xid_watch.py).
# Writes JSON lines under $OUT (default /tmp/lithos-fault-probe) and prints
# them last. Every process runs under `timeout`; MPS is private (its own
# pipe and log folders) and quit at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/lithos-fault-probe}
mkdir -p "$OUT"
P=/tmp/fault_probe
nvcc -O2 -arch=sm_90 -o "$P" scripts/faults/fault_probe.cu -lcuda || exit 1
python3 scripts/faults/xid_watch.py 150 >"$OUT/xid.jsonl" 2>&1 &
XID=$!
sleep 1

PHASES=${PHASES:-plain mps outside}
if [[ " $PHASES " == *" plain "* ]]; then
echo "== plain" >&2
timeout 30 "$P" victim 5 1 >"$OUT/plain-victim.jsonl" 2>&1 &
V=$!
sleep 1.5
timeout 20 "$P" faulter 300 >"$OUT/plain-faulter.jsonl" 2>&1
wait $V
fi

if [[ " $PHASES " == *" mps "* ]]; then
echo "== mps" >&2
export CUDA_MPS_PIPE_DIRECTORY=/tmp/lithos-fp-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/lithos-fp-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
sleep 1
timeout 60 "$P" victim 6 25 >"$OUT/mps-victim.jsonl" 2>&1 &
V=$!
sleep 2
timeout 20 "$P" faulter 300 >"$OUT/mps-faulter.jsonl" 2>&1
sleep 1
timeout 8 "$P" newclient >"$OUT/mps-new-while-lingering.jsonl" 2>&1
echo "{\"newclient_rc\":$?}" >>"$OUT/mps-new-while-lingering.jsonl"
{
  echo "victim pid $V"
  servers=$(echo get_server_list | timeout 10 nvidia-cuda-mps-control)
  echo "servers: $servers"
  for s in $servers; do
    echo "clients of $s: $(echo "get_client_list $s" | timeout 10 nvidia-cuda-mps-control | tr '\n' ' ')"
    # every client MPS lists (the victim's probe process, not its `timeout`)
    for c in $(echo "get_client_list $s" | timeout 10 nvidia-cuda-mps-control); do
      echo "terminate_client $s $c at $(date +%s.%N): $(echo "terminate_client $s $c" | timeout 20 nvidia-cuda-mps-control | tr '\n' ' ')"
      echo "rc $? at $(date +%s.%N)"
    done
    echo "clients of $s after: $(echo "get_client_list $s" | timeout 10 nvidia-cuda-mps-control | tr '\n' ' ')"
  done
} >"$OUT/mps-control.txt" 2>&1
sleep 1
timeout 20 "$P" newclient >"$OUT/mps-new-1s-after-terminate.jsonl" 2>&1
echo "{\"newclient_rc\":$?}" >>"$OUT/mps-new-1s-after-terminate.jsonl"
sleep 1
echo "victim alive after terminate_client: $(kill -0 $V 2>/dev/null && echo yes || echo no)" >>"$OUT/mps-control.txt"
timeout 20 "$P" newclient >"$OUT/mps-new-after-terminate.jsonl" 2>&1
echo "{\"newclient_rc\":$?}" >>"$OUT/mps-new-after-terminate.jsonl"
kill $V 2>/dev/null
wait $V 2>/dev/null
timeout 20 "$P" newclient >"$OUT/mps-new-after-victim-gone.jsonl" 2>&1
echo "{\"newclient_rc\":$?}" >>"$OUT/mps-new-after-victim-gone.jsonl"
fi

if [[ " $PHASES " == *" outside "* ]]; then
echo "== outside" >&2
timeout 30 "$P" victim 5 1 >"$OUT/outside-victim.jsonl" 2>&1 &
V=$!
sleep 2
mkdir -p /tmp/lithos-fp-nompss
CUDA_MPS_PIPE_DIRECTORY=/tmp/lithos-fp-nompss timeout 20 "$P" faulter 300 >"$OUT/outside-faulter.jsonl" 2>&1
wait $V
timeout 20 "$P" newclient >"$OUT/outside-new.jsonl" 2>&1
fi

echo quit | timeout 20 nvidia-cuda-mps-control
sleep 2
pkill -9 -f nvidia-cuda-mps 2>/dev/null
cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps-log" 2>/dev/null
kill $XID 2>/dev/null
for f in "$OUT"/*.jsonl "$OUT"/*.txt; do echo "--- $(basename "$f")"; cat "$f"; done
for f in "$OUT"/mps-log/*; do echo "--- $f"; tail -30 "$f"; done
