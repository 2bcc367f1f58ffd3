#!/usr/bin/env bash
# The shipped scenarios under lithos at this build, each against its alone
# runs in the same call (hybrid-stacking, head-of-line-steal and
# inference-stacking), and the decode-service pairing of pairs.sh with
# MPS alone beside them (what being an MPS client costs that service).
# Runs on the GPU machine with the release build carried over; report.md
# and results.json of each under $OUT/<name>/.
set -uo pipefail
L=./build/release/bin/lithos; $L --version; nvidia-smi --query-gpu=name,uuid --format=csv,noheader
OUT=${OUT:-/tmp/o}; W=/tmp/rc; mkdir -p $W
OUT=$W/p PAIRS_WRITE_ONLY=1 bash scripts/daemon/pairs.sh >/dev/null
run() { # name scenario modes timeout [args]
  local n=$1 sc=$2 m=$3 t=$4; shift 4
  echo "[$(date +%T)] $n"
  timeout -s KILL $t $L bench $sc --modes $m --out $W/$n --no-plots -q "$@" 2>$W/$n.err | grep -vE "^-+$|^$|^report:"
  tail -n 2 $W/$n.err; mkdir -p $OUT/$n; cp $W/$n/results.json $W/$n/report.md $OUT/$n/ 2>/dev/null
}
run hybrid hybrid-stacking alone,lithos 200
run decode $W/p/work/pair-decode-gpt.toml alone,mps-alone,lithos 200 --reps 2 --window 4 --warmup 2
run hol head-of-line-steal alone,lithos 150
run infer inference-stacking alone,lithos 250 --reps 2
