#!/usr/bin/env bash
# Where does inference-stacking's HP-A tail come from? Runs variants of
# scenarios/bench/inference-stacking.toml that drop tenants or change their
# shares, each against the same alone runs, on one board in one call:
#
#   DIAG_SCENARIO  the scenario to vary (default inference-stacking)
#   DIAG_VARIANTS  space-separated NAME:SHARES:MODE entries. SHARES is a
#                  comma list TENANT=SHARE (the tenant's 'partition', which
#                  is also its lithos quota) or TENANT=- (kept, no share);
#                  tenants not named are dropped. MODE is one bench mode.
#   DIAG_REPS      repetitions per run (default 2)
#   DIAG_ROUNDS    how many times the list of variants is run (default 1)
#
# Prints one line per run (the bench's own table rows) and writes every run
# under $OUT/diag-NAME-ROUND/. Usage on the device:
#   OUT=$OUT bash scripts/daemon/stack-diag.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
LITHOS=$PWD/build/release/bin/lithos
OUT=${OUT:-/tmp/lithos-stack-diag}
WORK=$OUT/work
mkdir -p "$WORK"
SC=${DIAG_SCENARIO:-inference-stacking}
SRC=$SC; [[ -f $SRC ]] || SRC=scenarios/bench/$SC.toml
REPS=${DIAG_REPS:-2}
VARIANTS=${DIAG_VARIANTS:-"a40:hp-a=0.6:static-partition a50:hp-a=0.76:static-partition a66:hp-a=1:static-partition \
ab-overlap:hp-a=0.6,hp-b=0.2:lithos ab-disjoint:hp-a=0.76,hp-b=0.24:lithos \
abe:hp-a=0.6,be=-:lithos full:hp-a=0.6,hp-b=0.2,be=0.2:lithos full-disjoint:hp-a=0.76,hp-b=0.24,be=-:lithos"}
"$LITHOS" --version
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader

# variant FILE SHARES: the scenario with only the named tenants, their
# partition shares replaced (or removed for '-').
variant() {
  python3 - "$SRC" "$1" "$2" <<'EOF'
import re, sys
src, dst, spec = sys.argv[1], sys.argv[2], sys.argv[3]
shares = dict(p.split("=", 1) for p in spec.split(",") if p)
text = open(src).read()
head, *blocks = text.split("[[tenant]]")
# Tables after the last tenant (phases and the like) stay whatever is dropped.
tail = ""
if blocks:
    m = re.search(r"^\[", blocks[-1], re.M)
    if m:
        blocks[-1], tail = blocks[-1][:m.start()], blocks[-1][m.start():]
out = [head]
for b in blocks:
    name = re.search(r'^name\s*=\s*"([^"]+)"', b, re.M).group(1)
    if name not in shares:
        continue
    b = re.sub(r"^partition\s*=.*\n", "", b, flags=re.M)
    if shares[name] != "-":
        b = b.rstrip("\n") + f"\npartition = {float(shares[name])}\n\n"
    out.append(b)
missing = set(shares) - {re.search(r'^name\s*=\s*"([^"]+)"', b, re.M).group(1) for b in out[1:]}
if missing:
    sys.exit(f"stack-diag: no tenant {sorted(missing)} in {src}")
# A phase's params for a dropped tenant go with it ('{ be = { ... } }').
names = {re.search(r'^name\s*=\s*"([^"]+)"', b, re.M).group(1) for b in blocks}
for gone in names - set(shares):
    tail = re.sub(r'"?' + re.escape(gone) + r'"?\s*=\s*\{[^{}]*\}\s*,?\s*', "", tail)
tail = re.sub(r"^params\s*=\s*\{\s*\}\s*\n", "", tail, flags=re.M)
open(dst, "w").write("[[tenant]]".join(out) + tail)
EOF
}

base=$OUT/diag-alone
echo "[$(date +%T)] alone ($SC)"
timeout -s KILL 300 "$LITHOS" bench "$SRC" --modes alone --reps "$REPS" --out "$base" --no-plots -q | grep -E "^alone"
for r in $(seq 1 "${DIAG_ROUNDS:-1}"); do
  for v in $VARIANTS; do
    IFS=: read -r name shares mode <<<"$v"
    file=$WORK/$SC-$name.toml
    variant "$file" "$shares" || continue
    dir=$OUT/diag-$name-$r
    mkdir -p "$dir/runs" && cp "$base"/runs/alone-*.json "$dir/runs/"
    echo "[$(date +%T)] $name ($shares, $mode, round $r)"
    timeout -s KILL 200 "$LITHOS" bench "$file" --modes "$mode" --reps "$REPS" --out "$dir" --no-plots -q |
      grep -vE "^(alone|report:|$)"
    python3 - "$dir/results.json" "$name" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"{sys.argv[2]}: no results ({e})")
for m in d.get("modes", []):
    if m.get("mode") == "alone":
        continue
    for ph in m.get("phases", []):
        cells = []
        for t in ph.get("tenants", []):
            n = t.get("norm", {})
            if t.get("kind") == "training" or t["name"] == "be":
                cells.append(f"{t['name']} {n['throughput']['median']:.3f}x")
            else:
                cells.append(f"{t['name']} P50 {t['p50_ms']['median']:.2f} ms ({n['p50']['median']:.2f}x) "
                             f"P99 {t['p99_ms']['median']:.2f} ms ({n['p99']['median']:.2f}x) "
                             f"thr {n['throughput']['median']:.3f}x")
        print(f"{sys.argv[2]} {m.get('mode')} {ph.get('name')}: " + "; ".join(cells))
EOF
  done
done
