#!/usr/bin/env bash
# A trace recorded by one build's lithosd replays to the same decisions in
# another's (`lithos daemon --replay`): the check that a change of structure
# (settings, Engine, policies) decided nothing differently. No GPU: lithosd
# over the fake slot map, its clients the test client (client_app.cpp) over
# the fake driver.
#
#   scripts/daemon/replay_across.sh BASE_DIR [BUILD_DIR]
#
#   BASE_DIR   the build that records: BASE_DIR/bin/lithos (a release build of
#              the commit before the change, or its two files copied there)
#   BUILD_DIR  the build that replays, and whose test client and fake driver
#              are used (default build/release)
#
# Records one trace per policy run (lithos, lithos with best effort waiting
# for grants, mps-like policies where the daemon takes them) with a
# high-priority client and two best-effort clients, then replays each; exit
# 0 when every replay decided the same.
set -uo pipefail
cd "$(dirname "$0")/../.."
BASE=${1:?usage: replay_across.sh BASE_DIR [BUILD_DIR]}
B=${2:-build/release}
MAP=tests/intercept/data/fake-slot-map-gpcs.txt
APP=$B/bin/lithos_daemon_client_app
for f in "$BASE/bin/lithos" "$B/bin/lithos" "$APP" "$B/lib/liblithos.so"; do
  [[ -x $f || -f $f ]] || { echo "replay_across.sh: $f is missing (build it first)" >&2; exit 2; }
done
FAKE=$(dirname "$(find "$B" -name 'libcuda.so.1' -path '*fake*' -print -quit 2>/dev/null || true)")
[[ -n $FAKE && $FAKE != . ]] || FAKE=$(dirname "$(find "$B" -name 'libcuda.so*' -print -quit)")
W=$(mktemp -d /tmp/lithos-replay-across.XXXXXX)
trap 'rm -rf "$W"' EXIT
echo "recording with $("$BASE/bin/lithos" --version), replaying with $("$B/bin/lithos" --version)"
fail=0
for variant in "lithos:true" "lithos:false" "static-partition:true"; do
  policy=${variant%%:*}
  free=${variant#*:}
  cat >"$W/lithosd.toml" <<EOF
[daemon]
policy = "$policy"
mps = "off"
best_effort_runs_free = $free
[[tenant]]
name = "svc"
priority = "high"
quota = 2
[[tenant]]
name = "train"
priority = "best-effort"
EOF
  sock=$W/s.sock
  trace=$W/trace-$policy-$free.jsonl
  "$BASE/bin/lithos" daemon --config "$W/lithosd.toml" --slot-map "$MAP" --socket "$sock" --state-dir "$W/state" \
    --trace "$trace" >"$W/daemon.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 300); do "$B/bin/lithos" status --socket "$sock" --json >/dev/null 2>&1 && break; sleep 0.1; done
  client() {  # tenant launches pause_ms hold_ms
    env -i PATH="$PATH" LD_PRELOAD="$B/lib/liblithos.so" LD_LIBRARY_PATH="$FAKE" LITHOS_DAEMON="$sock" \
      LITHOS_TENANT="$1" LITHOS_SLOT_MAP="$MAP" LITHOS_LOG=error LITHOS_REGISTER_WAIT_MS=20000 \
      LITHOS_GRANT_TIMEOUT_MS=60000 timeout 120 "$APP" "$2" "$3" "$4" 4096 >"$W/client-$1-$RANDOM.out" 2>&1
  }
  client svc 200 1 2 &
  a=$!
  client train 150 0 3 &
  b=$!
  client train 100 2 1 &
  c=$!
  wait $a $b $c
  kill -TERM $dpid
  wait $dpid
  if "$B/bin/lithos" daemon --replay "$trace" >"$W/replay.txt" 2>&1; then
    echo "ok   $policy (best_effort_runs_free = $free): $(grep -c . "$trace") trace lines replay the same"
  else
    echo "FAIL $policy (best_effort_runs_free = $free):"
    tail -n 8 "$W/replay.txt"
    fail=1
  fi
done
exit $fail
