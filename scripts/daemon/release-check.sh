#!/usr/bin/env bash
# The shipped scenarios under lithos at this build, each against its alone
# runs in the same call (hybrid-stacking, head-of-line-steal and
# inference-stacking), and the decode-service pairing of pairs.sh with
# MPS alone beside them (what being an MPS client costs that service).
# RC_RUNS picks runs (default "hybrid decode hol infer"; also
# decode-compiled and infer-compiled: the decode service torch.compile'd).
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
# inference-stacking with HP-A compiled (torch.compile's fused kernels pay
# MPS little: docs/results/2026-11-27-h100-mps-cost-kernels, section 4)
sed 's/params = { batch = 8, ctx = 1024, graph = true }/params = { batch = 8, ctx = 1024, graph = true, compile = true }/' \
  scenarios/bench/inference-stacking.toml >$W/inference-stacking-compiled.toml
grep -q "compile = true" $W/inference-stacking-compiled.toml || echo "release-check: HP-A's params not found"
has() { [[ " ${RC_RUNS:-hybrid decode hol infer} " == *" $1 "* ]]; }
has hybrid && run hybrid hybrid-stacking alone,lithos 200
has decode && run decode $W/p/work/pair-decode-gpt.toml alone,mps-alone,lithos 200 --reps 2 --window 4 --warmup 2
has hol && run hol head-of-line-steal alone,lithos 150
has infer && run infer inference-stacking alone,lithos 250 --reps 2
has decode-compiled && run decode-compiled $W/p/work/pair-decode-compiled-gpt.toml alone,mps-alone,lithos,static-partition 300 --reps 2 --window 4 --warmup 2
has infer-compiled && run infer-compiled $W/inference-stacking-compiled.toml alone,mps-alone,lithos 330 --reps 2
exit 0
