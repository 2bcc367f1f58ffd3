#!/usr/bin/env bash
# That a change of structure changed no behaviour on the GPU: the existing
# GPU checks that compare results bit for bit, and the two numbers a
# restructuring could move (the host cost of a high-priority launch, against
# a baseline build in lock step; hybrid-stacking under lithosd), in two calls
# of at most 10 minutes on the H100.
#
#   here:   cmake --build --preset release && scripts/safe/build.sh
#           a baseline build of the commit before the change, its two files
#           copied to build/base/bin/lithos and build/base/lib/liblithos.so
#           (carry build/release/bin/lithos, build/release/lib/liblithos.so,
#           build/safe, build/base)
#   device: OUT=$OUT LITHOS_COMMIT=<commit> scripts/gpu-unchanged.sh correct
#           OUT=$OUT LITHOS_COMMIT=<commit> BASE_COMMIT=<commit> scripts/gpu-unchanged.sh cost
#
#   correct  (or zoo alone) safe/gpu-safe.sh corpus (every TPC set of its sweep: 0 hangs,
#            0 wrong results), atom/gpu-atom.sh disasm and corpus (the
#            atomizer corpus bit-identical at 2, 7 and 64 atoms and with the
#            planner), daemon/gpu-daemon.sh zoo (the program-shape zoo under
#            lithosd as best effort and high priority, equal to plain)
#   cost     daemon/gpu-daemon.sh hpstep (plain, `lithos run`, an hp tenant
#            of lithosd and one of the baseline's lithosd, in lock step) and
#            bench (hybrid-stacking: alone and lithos)
#
# Each part runs under a time limit and writes its log and its own outputs
# under $OUT/<part>/; the last lines are each part's verdict lines. Clocks,
# power limits, compute mode and MIG are never changed; the scripts it calls
# stop every lithosd and MPS daemon they start.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/lithos-unchanged}
mkdir -p "$OUT"
what=${1:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }
verdicts=()

part() {  # name, limit in seconds, then the environment and the command
  local name=$1 limit=$2
  shift 2
  mkdir -p "$OUT/$name"
  stamp "$name"
  timeout -k 10 "$limit" env OUT="$OUT/$name" WORK="/tmp/lithos-unchanged-$name" "$@" >"$OUT/$name/log.txt" 2>&1
  local rc=$?
  stamp "$name: exit $rc"
  verdicts+=("== $name: exit $rc ($( (($rc == 124 || $rc == 137)) && echo "cut at $limit s" || echo done))")
}

case "$what" in
  correct)
    part safe 120 SAFE_PHASES=corpus bash scripts/safe/gpu-safe.sh
    part atom 140 ATOM_PHASES="disasm corpus" bash scripts/atom/gpu-atom.sh
    part zoo 320 DAEMON_PHASES=zoo bash scripts/daemon/gpu-daemon.sh
    ;;
  zoo)
    part zoo 560 DAEMON_PHASES=zoo bash scripts/daemon/gpu-daemon.sh
    ;;
  cost)
    [[ -x build/base/bin/lithos ]] || { echo "gpu-unchanged.sh: no baseline build at build/base (see the header)" >&2; exit 2; }
    part hpstep 170 DAEMON_PHASES=hpstep HPSTEP_ROUNDS=30 HPCOST_BASELINE=build/base bash scripts/daemon/gpu-daemon.sh
    part bench 400 DAEMON_PHASES=bench BENCH_MODES=alone,lithos bash scripts/daemon/gpu-daemon.sh
    ;;
  -h | --help)
    sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "gpu-unchanged.sh: say which part: correct, zoo or cost (--help)" >&2
    exit 2
    ;;
esac

echo
echo "lithos ${LITHOS_COMMIT:-unknown}, baseline ${BASE_COMMIT:-none}, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
for v in "${verdicts[@]}"; do
  echo "$v"
  name=${v#== }
  name=${name%%:*}
  case "$name" in
    safe) grep -E "sweep .*: exit|hang|wrong|mismatch|sets" "$OUT/safe/log.txt" | tail -n 8 ;;
    atom) grep -E "identical|differ|compare|exit" "$OUT/atom/log.txt" | tail -n 10 ;;
    zoo) grep -E "^zoo " "$OUT/zoo/log.txt" | grep -v ": exit 0 .*equal to plain: yes" | head -n 20
      echo "zoo runs exit 0 and equal to plain: $(grep -cE '^zoo .* (be|hp): exit 0 .*equal to plain: yes' "$OUT/zoo/log.txt") of $(grep -cE '^zoo .* (be|hp): ' "$OUT/zoo/log.txt")" ;;
    *) tail -n 14 "$OUT/$name/log.txt" ;;
  esac
done
