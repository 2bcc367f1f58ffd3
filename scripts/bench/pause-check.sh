#!/usr/bin/env bash
# The hp tenant's pauses_best_effort setting, side by side on the GPU
# (docs/daemon.md "Pausing best-effort work"). For each scenario of
# PAUSE_SCENARIOS (default "module-example hybrid-stacking") and each
# setting of PAUSE_SETTINGS (default "auto false"; also "true"), a copy of
# scenarios/bench/<name>.toml whose first hp tenant has that setting runs
# under `lithos bench --modes alone,lithos --sim none` (each run its own
# alone runs). Prints, per run, the service's P99 and SLO, the trainer's
# throughput against alone, and how lithosd's automatic pause stood at the
# end (lithos status, recorded by the bench). Runs on the device machine
# with the release build carried over; writes under $OUT (default
# /tmp/lithos-pause). Exit status: the number of runs that failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
LITHOS=$PWD/build/release/bin/lithos
OUT=${OUT:-/tmp/lithos-pause}
mkdir -p "$OUT"
"$LITHOS" --version
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
fails=0
: >"$OUT/table.md"
for sc in ${PAUSE_SCENARIOS:-module-example hybrid-stacking}; do
  for setting in ${PAUSE_SETTINGS:-auto false}; do
    copy=scenarios/bench/$sc-pause-$setting.toml
    # The copy sits beside the original: its relative paths still resolve.
    python3 - "scenarios/bench/$sc.toml" "$copy" "$setting" <<'PY' || { fails=$((fails + 1)); continue; }
import re, sys
src, dst, setting = sys.argv[1:]
value = '"auto"' if setting == "auto" else setting
lines = [l for l in open(src).read().split("\n") if not re.match(r"\s*pauses_best_effort\s*=", l)]
out, in_tenant, done = [], False, False
for l in lines:
    out.append(l)
    if l.strip() == "[[tenant]]":
        in_tenant = True
    elif in_tenant and not done and re.match(r'\s*role\s*=\s*"hp"', l):
        out.append(f"pauses_best_effort = {value}")
        done = True
if not done:
    sys.exit(f"{src}: no hp tenant")
open(dst, "w").write("\n".join(out))
PY
    echo "[$(date +%T)] $sc, pauses_best_effort = $setting"
    timeout 280 "$LITHOS" bench "$copy" --modes alone,lithos --sim none --out "$OUT/$sc-$setting" \
      >"$OUT/$sc-$setting.log" 2>&1
    rc=$?
    rm -f "$copy"
    [[ $rc == 0 ]] || { echo "  failed (exit $rc): $(tail -n 3 "$OUT/$sc-$setting.log")"; fails=$((fails + 1)); }
    python3 - "$OUT/$sc-$setting" "$sc" "$setting" >>"$OUT/table.md" <<'PY'
import json, sys
out, sc, setting = sys.argv[1:]
rows = [l for l in open(f"{out}/report.md") if l.startswith("| lithos (lithosd) |") and "vs alone" not in l]
cells = [c.strip() for c in rows[0].split("|")[1:-1]] if rows else []
head = [l for l in open(f"{out}/report.md") if l.startswith("| mode | ") and "P99 vs alone" in l]
names = [c.strip() for c in head[0].split("|")[1:-1]] if head else []
row = dict(zip(names, cells))
pick = lambda pred: next((v for k, v in row.items() if pred(k)), "-")
svc = pick(lambda k: k.endswith("P99 vs alone"))
slo = pick(lambda k: "SLO 1.50x" in k)
train = pick(lambda k: k.endswith("vs alone") and "P99" not in k)
def find(j):
    if isinstance(j, dict):
        if "lithosd" in j and isinstance(j["lithosd"], dict):
            yield j["lithosd"]
        for v in j.values():
            yield from find(v)
    elif isinstance(j, list):
        for v in j:
            yield from find(v)
pause, cpu = "-", "-"
for st in find(json.load(open(f"{out}/results.json"))):
    for t in st.get("tenants", []):
        if "pause" in t:
            p = t["pause"]
            pause = (f"{p.get('phase')}, slowdown {p.get('slowdown', 0):.2f}x, {p.get('verdicts')} verdicts, "
                     f"{p.get('pauses')} pauses, {p.get('probes')} probes")
    if st.get("uptime_s"):
        cpu = f"{100 * st.get('cpu_s', 0) / st['uptime_s']:.0f}%"
print(f"| {sc} | {setting} | {svc} | {slo} | {train} | {pause} | {cpu} |")
PY
    tail -n 1 "$OUT/table.md"
  done
done
echo
echo "| scenario | pauses_best_effort | svc P99 vs alone | SLO@1.5 | training vs alone | pause at the end | lithosd CPU |"
echo "|---|---|---|---|---|---|---|"
cat "$OUT/table.md"
exit "$fails"
