#!/usr/bin/env bash
# The hp tenant's pauses_best_effort setting, side by side on the GPU
# (docs/daemon.md "Pausing best-effort work"). For each scenario of
# PAUSE_SCENARIOS (names of shipped scenarios or paths of scenario files;
# default "module-example hybrid-stacking") and each
# setting of PAUSE_SETTINGS (default "auto false"; also "true"), a copy of
# the scenario file whose hp tenants have that setting runs
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
for entry in ${PAUSE_SCENARIOS:-module-example hybrid-stacking}; do
  # A shipped scenario's name, or the path of a scenario file.
  if [[ $entry == *.toml ]]; then src=$entry; else src=scenarios/bench/$entry.toml; fi
  sc=$(basename "$src" .toml)
  for setting in ${PAUSE_SETTINGS:-auto false}; do
    copy=$(dirname "$src")/$sc-pause-$setting.toml
    # The copy sits beside the original: its relative paths still resolve.
    python3 - "$src" "$copy" "$setting" <<'PY' || { fails=$((fails + 1)); continue; }
import re, sys
src, dst, setting = sys.argv[1:]
value = '"auto"' if setting == "auto" else setting
lines = [l for l in open(src).read().split("\n") if not re.match(r"\s*pauses_best_effort\s*=", l)]
out, in_tenant, done = [], False, False
for l in lines:
    out.append(l)
    if l.strip() == "[[tenant]]":
        in_tenant = True
    elif in_tenant and re.match(r'\s*role\s*=\s*"hp"', l):
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
import json, os, sys
out, sc, setting = sys.argv[1:]
names, row = [], {}
lines = open(f"{out}/report.md").read().split("\n") if os.path.exists(f"{out}/report.md") else []
for i, l in enumerate(lines):  # the main phase's table: its header names "P99 vs alone"
    if l.startswith("| mode |") and "P99 vs alone" in l:
        names = [c.strip() for c in l.split("|")[1:-1]]
        for r in lines[i + 2:]:
            if not r.startswith("|"):
                break
            if r.startswith("| lithos (lithosd) |"):
                row = dict(zip(names, [c.strip() for c in r.split("|")[1:-1]]))
        break
pick = lambda pred: next((v for k, v in row.items() if pred(k)), "-")
svc = pick(lambda k: k.endswith("P99 vs alone") and "P99.9" not in k)
slo = pick(lambda k: k.endswith("SLO 1.50x"))
train = pick(lambda k: k.endswith("vs alone") and "P99" not in k)
pause, cpu = "-", "-"
run = f"{out}/runs/lithos.json"
st = json.load(open(run)).get("lithosd") if os.path.exists(run) else None
if isinstance(st, dict):
    shown = []
    for t in st.get("tenants", []):
        p = t.get("pause")
        if p:
            recent = ", ".join(f"{x:.2f}" for x in p.get("recent_slowdowns", []))
            shown.append(f"{t.get('name')}: {p.get('phase')}; {p.get('verdicts')} verdicts ({recent}), "
                         f"busy {p.get('busy', 0):.2f}, paused {p.get('paused_slowdown', 0):.2f} (gain "
                         f"{p.get('gain', 0):.2f}), {p.get('pauses')} pauses, {p.get('probes')} probes")
    pause = "<br>".join(shown) or "-"
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
