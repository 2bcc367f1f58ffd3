#!/usr/bin/env bash
# The safe-mask evidence (docs/safe-masks.md), in one call on the GPU machine.
#
#   here:   cmake --build --preset release && scripts/safe/build.sh
#           (carry build/release/bin/lithos, build/release/lib/liblithos.so, build/safe)
#   device: OUT=$OUT LITHOS_COMMIT=<commit> scripts/safe/gpu-safe.sh
#
# Phases (SAFE_PHASES, default all):
#   topo      `lithos calibrate --json --force` (slot map + GPCs); topo_probe qmd
#             (which descriptor bytes carry the cluster shape)
#   corpus    safe_corpus.py: the reference without lithos, then every set of
#             sets.txt under `lithos run` (plain, then --atomize), each case
#             compared bit for bit; a hung set is recorded and the sweep resumes
#   train     GPT and ResNet-50 training on 0-7 and 0-12 (the sets that hung
#             them) and on the whole GPU, with the safe-mask statistics
# Every GPU process runs under a watchdog; clocks, power, compute mode and MIG
# are never changed; no MPS daemon is started.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
PHASES=${SAFE_PHASES:-topo corpus train}
LITHOS=${LITHOS:-$PWD/build/release/bin/lithos}
SB=${SAFE_BUILD:-$PWD/build/safe}
WORK=${WORK:-/tmp/lithos-safe}
export LITHOS_CACHE_DIR=$WORK/cache
mkdir -p "$WORK" "$OUT"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
has() { [[ " $PHASES " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8

{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ) commit ${LITHOS_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,uuid,driver_version,mig.mode.current,compute_mode --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)'
} | tee "$WORK/env.txt"

stamp "calibrate"
timeout -k 5 120 "$LITHOS" calibrate --json --force >"$WORK/calibrate.json" 2>"$WORK/calibrate.err"
echo "calibrate exit $?"
python3 - "$WORK/calibrate.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
t = c.get("topology", {})
print("GPCs:", [g["tpcs"] for g in t.get("gpcs", [])] or t)
EOF

if has topo; then
  stamp "qmd"
  timeout -k 5 60 "$SB/topo_probe" qmd >"$WORK/qmd.jsonl" 2>&1
  echo "qmd exit $?"
  cut -c1-200 "$WORK/qmd.jsonl"
fi

# The sets: every slot group, pairs of groups, the fine sets that hung
# PyTorch before, and 50 random sets of 1-60 TPCs (seeded).
python3 - "$WORK/calibrate.json" "$WORK/sets.txt" <<'EOF'
import json, random, sys
c = json.load(open(sys.argv[1]))
groups = [g["tpcs"] for g in c["groups"] if g["tpcs"]]
live = sorted(t for g in groups for t in g)
sets = []
for i, g in enumerate(groups):
    sets.append((f"group {i}", g))
for i in range(len(groups) - 1):
    sets.append((f"groups {i}+{i + 1}", groups[i] + groups[i + 1]))
rng = random.Random(11)
for _ in range(6):
    a, b = rng.sample(range(len(groups)), 2)
    sets.append((f"groups {a}+{b}", groups[a] + groups[b]))
for fine in ("0-7", "0-12", "0-15", "40-52", "53-65"):
    a, b = map(int, fine.split("-"))
    sets.append((f"fine {fine}", list(range(a, b + 1))))
for i in range(50):
    n = rng.randint(1, 60)
    sets.append((f"random {i}", rng.sample(live, n)))
with open(sys.argv[2], "w") as f:
    for name, ts in sets:
        f.write(",".join(map(str, sorted(ts))) + "  # " + name + "\n")
print(len(sets), "sets")
EOF

sweep() {  # name, extra lithos run flags...
  local name=$1
  shift
  local out=$WORK/sweep-$name.jsonl
  : >"$out"
  local total tries=0
  total=$(grep -c . "$WORK/sets.txt")
  while true; do
    local done_n
    done_n=$(grep -c . "$out")
    [[ $done_n -ge $total ]] && break
    tries=$((tries + 1))
    [[ $tries -gt 30 ]] && { echo "sweep $name: giving up after 30 restarts"; break; }
    timeout -s KILL 600 "$LITHOS" run --tpc-set 0-65 --stats-file "$WORK/stats-$name-%p.json" "$@" -- \
      python3 scripts/safe/safe_corpus.py sweep "$WORK/ref.json" "$WORK/sets.txt" "$out" \
      --lib "$SB/libsafe_kernels.so" --skip "$done_n" --set-timeout 30 >>"$WORK/sweep-$name.log" 2>&1
    echo "sweep $name: exit $? after $(grep -c . "$out") of $total sets"
    sleep 1
  done
}

if has corpus; then
  stamp "corpus: reference"
  timeout -k 5 300 python3 scripts/safe/safe_corpus.py ref "$WORK/ref.json" --lib "$SB/libsafe_kernels.so" \
    2>&1 | tail -n 3
  stamp "corpus: plain"
  sweep plain
  stamp "corpus: atomize"
  sweep atomize --atomize
fi

train() {  # label set workload
  local label=$1 set=$2 workload=$3
  stamp "train $label"
  local args=(--stats-file "$WORK/stats-train-$label-%p.json")
  [[ $set != whole ]] && args+=(--tpc-set "$set")
  timeout -s KILL 240 "$LITHOS" run "${args[@]}" -- python3 scripts/bench/mask_diag.py "$workload" training '{}' 20 \
    >"$WORK/train-$label.out" 2>"$WORK/train-$label.err"
  echo "train $label: exit $? $(tail -c 300 "$WORK/train-$label.out")"
}
if has train; then
  for w in gpt resnet50; do
    train "$w-whole" whole "$w"
    train "$w-0-7" 0-7 "$w"
    train "$w-0-12" 0-12 "$w"
  done
fi

stamp "summary"
python3 scripts/safe/summary.py "$WORK" | tee "$WORK/summary.md"
tar czf "$OUT/safe.tgz" -C "$WORK" --exclude='cache' . 2>/dev/null
cp "$WORK/summary.md" "$OUT/" 2>/dev/null
stamp "done"
