#!/usr/bin/env bash
# A client of lithosd with no slot map of its own: a job started without
# `lithos run` (LD_PRELOAD, LITHOS_DAEMON and LITHOS_TENANT only) whose
# calibration cache is empty, as in a container or under another user. Since
# 7d593ba it masks its launches with the map lithosd sends at registration
# (Welcome::slot_map); before, they ran on the whole GPU.
#
# One lithosd for every GPU of the machine (device = "all", a socket per GPU,
# mps off), tenants svc (high priority, quota 8) and hold (high priority,
# quota 50, never connected): svc's allocation is its 8 TPCs and the 8 that
# no quota holds, so its kernels may use 32 SMs at most. The %smid kernel of
# multi_gpu_check.py runs as svc on every GPU (smid-both on two GPUs, smid 0
# on one), plain first. NOMAP_BASELINE=DIR runs DIR/bin/lithos with
# DIR/lib/liblithos.so the same way (another commit's build).
# Runs on the GPU machine with the release build carried over; writes under
# $OUT (default /tmp/lithos-nomap); prints a table last. Exit status: the
# number of failed checks of this build.
set -uo pipefail
cd "$(dirname "$0")/../.."
CHECK=$PWD/scripts/daemon/multi_gpu_check.py
OUT=${OUT:-/tmp/lithos-nomap}
W=/tmp/lithos-nomap-work
rm -rf "$W"; mkdir -p "$OUT" "$W"
n=$(nvidia-smi -L | wc -l)
shape=(smid 0); [[ $n -ge 2 ]] && shape=(smid-both)
timeout -s KILL 120 python3 "$CHECK" "${shape[@]}" >"$W/plain.json" 2>"$W/plain.err"
fails=0
rows=()
for build in build/release ${NOMAP_BASELINE:-}; do
  L=$PWD/$build/bin/lithos LIB=$PWD/$build/lib/liblithos.so
  tag=$(basename "$build")
  socks=$W/socks-$tag; mkdir -p "$socks"
  cat >"$W/lithosd-$tag.toml" <<TOML
[daemon]
socket = "$socks/lithosd-%g.sock"
state_dir = "$W/state-$tag-%g"
mps = "off"
[[tenant]]
name = "svc"
priority = "high"
quota = 8
[[tenant]]
name = "hold"
priority = "high"
quota = 50
TOML
  LITHOS_CACHE_DIR=$W/daemon-cache "$L" daemon --config "$W/lithosd-$tag.toml" --device all \
    >"$OUT/lithosd-$tag.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 600); do [[ $(ls "$socks" | grep -c '\.sock$') -ge $n ]] && break; sleep 0.1; done
  ls "$socks" >"$OUT/sockets-$tag.txt"
  # The job as a container's entrypoint would start it: no lithos run, no map.
  env LD_PRELOAD="$LIB" LITHOS_DAEMON="$socks/lithosd-%g.sock" LITHOS_TENANT=svc \
    LITHOS_CACHE_DIR="$W/empty-cache-$tag" LITHOS_STATS_FILE="$OUT/stats-$tag-%p.json" \
    timeout -s KILL 120 python3 "$CHECK" "${shape[@]}" >"$W/$tag.json" 2>"$OUT/client-$tag.err"
  rc=$?
  "$L" status --socket "$socks/$(head -n 1 "$OUT/sockets-$tag.txt")" --json >"$OUT/status-$tag.json" 2>/dev/null
  kill -TERM "$dpid"; wait "$dpid" 2>/dev/null
  row=$(python3 - "$W/plain.json" "$W/$tag.json" "$rc" "$tag" "$OUT" <<'PY'
import glob, json, sys
plain_p, got_p, rc, tag, out = sys.argv[1:]
def sms(p):
    try:
        j = json.loads(open(p).readline())
    except Exception:
        return None
    return j["sms"] if isinstance(j["sms"], list) else [j["sms"]]
plain, got = sms(plain_p), sms(got_p)
stats = [json.loads(open(f).readline()) for f in glob.glob(f"{out}/stats-{tag}-*.json")]
d = stats[0].get("daemon", {}) if stats else {}
states = [g.get("state") for g in d.get("gpus", [d])] if d else []
ok = rc == "0" and got is not None and plain is not None and all(0 < g <= 32 < p for g, p in zip(got, plain))
print(f"| {tag} | {rc} | {plain} | {got} | {states} | {'PASS' if ok else 'FAIL'} |")
PY
)
  echo "$row"
  rows+=("$row")
  [[ $build == build/release && $row != *PASS* ]] && fails=$((fails + 1))
done
echo
"$PWD/build/release/bin/lithos" --version
echo "| build | exit | SMs plain | SMs as svc, no slot map (at most 32) | daemon clients | verdict |"
echo "|---|---:|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit "$fails"
