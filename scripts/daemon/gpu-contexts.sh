#!/usr/bin/env bash
# A process with two CUDA contexts on one GPU (PyTorch's primary context
# and one made with cuCtxCreate), under lithosd as a best-effort tenant that
# waits for every grant and as a high-priority tenant: contexts_check.py's
# two shapes, each against its plain run. CONTEXTS_BASELINE=DIR runs
# DIR/bin/lithos with DIR/lib/liblithos.so the same way (another build).
# Runs on the GPU machine with the release build carried over; writes under
# $OUT (default /tmp/lithos-contexts); prints a table last. Exit status: the
# number of failed runs of this build.
set -uo pipefail
cd "$(dirname "$0")/../.."
CHECK=$PWD/scripts/daemon/contexts_check.py
OUT=${OUT:-/tmp/lithos-contexts}
W=/tmp/lithos-contexts-work
rm -rf "$W"; mkdir -p "$OUT" "$W"
export LITHOS_CACHE_DIR=$W/cache CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
shapes=(primary-first created-first)
for s in "${shapes[@]}"; do
  timeout -s KILL 120 python3 "$CHECK" "$s" >"$W/plain-$s.json" 2>"$OUT/plain-$s.err"
done
fails=0
rows=()
for build in build/release ${CONTEXTS_BASELINE:-}; do
  L=$PWD/$build/bin/lithos
  tag=$(basename "$build")
  "$L" calibrate >/dev/null 2>&1
  cat >"$W/lithosd-$tag.toml" <<TOML
[daemon]
socket = "$W/lithosd-$tag.sock"
state_dir = "$W/state-$tag"
mps = "off"
best_effort_runs_free = false
TOML
  cat scripts/daemon/tenants.toml >>"$W/lithosd-$tag.toml"
  "$L" daemon --config "$W/lithosd-$tag.toml" >"$OUT/lithosd-$tag.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 300); do [[ -S $W/lithosd-$tag.sock ]] && break; sleep 0.1; done
  for tenant in train svc; do
    for s in "${shapes[@]}"; do
      label=$tag-$tenant-$s
      timeout -s KILL 120 "$L" run --tenant "$tenant" --daemon "$W/lithosd-$tag.sock" \
        --stats-file "$OUT/stats-$label-%p.json" -- python3 "$CHECK" "$s" >"$W/$label.json" 2>"$OUT/$label.err"
      rc=$?
      row=$(python3 - "$W/plain-$s.json" "$W/$label.json" "$rc" "$label" "$OUT" <<'PY'
import glob, json, sys
plain_p, got_p, rc, label, out = sys.argv[1:]
def load(p):
    try:
        return json.loads(open(p).readline())
    except Exception:
        return None
plain, got = load(plain_p), load(got_p)
stats = [json.loads(open(f).readline()) for f in glob.glob(f"{out}/stats-{label}-*.json")]
d = stats[0].get("daemon", {}) if stats else {}
info = f"{d.get('state')}, grants {d.get('grants')}, reported {d.get('reported')}" if d else "no stats"
ok = rc == "0" and got is not None and plain is not None and got == plain and got.get("failed") is None
what = "equal to plain" if ok else (got or {}).get("failed") or f"differs: {got}"
print(f"| {label} | {rc} | {what} | {info} | {'PASS' if ok else 'FAIL'} |")
PY
)
      echo "$row"
      rows+=("$row")
      [[ $build == build/release && $row != *PASS* ]] && fails=$((fails + 1))
    done
  done
  kill -TERM "$dpid"; wait "$dpid" 2>/dev/null
done
echo
"$PWD/build/release/bin/lithos" --version
for s in "${shapes[@]}"; do echo "plain $s: $(cat "$W/plain-$s.json")"; done
echo "| run | exit | result | daemon client | verdict |"
echo "|---|---:|---|---|---|"
printf '%s\n' "${rows[@]}"
exit "$fails"
