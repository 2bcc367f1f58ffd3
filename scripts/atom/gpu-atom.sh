#!/usr/bin/env bash
# The kernel atomizer's GPU evidence (docs/atomizer.md), in one call on the
# GPU machine; everything lands in $OUT/atom.tgz and a table is printed last.
#
#   here:   cmake --build build/release   (lithos and liblithos.so are carried)
#   device: OUT=$OUT ATOM_PHASES='disasm corpus costs coverage' scripts/atom/gpu-atom.sh
#
# Phases (ATOM_PHASES, default all but hol):
#   disasm    nvcc the corpus kernels; `lithos atomize` them; nvdisasm the
#             original and rewritten cubins (the prelude must disassemble)
#   corpus    scripts/atom/corpus.py without lithos, then under
#             `lithos run --atomize` with LITHOS_ATOMS=2, 7, 64 and with the
#             planner (500 us atoms); bit-for-bit comparison
#   costs     cost of one more atom (spin kernel, 1..256 atoms); ResNet-50
#             training steps/s without lithos and with 250/500/1000 us atoms
#   coverage  share of launches and GPU time in rewritten kernels: ResNet-50
#             and BERT training, Llama-1B prefill and decode
#   hol       `lithos bench head-of-line-atoms`: alone, MPS and lithosd's
#             500 us atoms; then lithosd's 250 us atoms (LITHOSD_ATOM_US)
#   steal     `lithos bench head-of-line-steal`: an hp service at 5% load
#             beside 5-20 ms be kernels; MPS and lithosd (be atoms borrow
#             hp's idle TPCs)
# Every GPU process runs under `timeout` (a hang costs one phase, not the
# call). The GPU's clocks, power limit and compute mode are never changed.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
PHASES=${ATOM_PHASES:-disasm corpus costs coverage}
WORK=${WORK:-/tmp/lithos-atom}
LITHOS=${LITHOS:-$PWD/build/release/bin/lithos}
TMO=${ATOM_TIMEOUT:-240}
mkdir -p "$WORK" "$OUT"
t0=$(date +%s)
has() { [[ " $PHASES " == *" $1 "* ]]; }
run_lithos() { timeout -k 5 "$TMO" "$LITHOS" run --atomize -- "$@"; }
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,power.limit,compute_mode --format=csv \
  | tee "$WORK/gpu-state.csv"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee "$WORK/versions.txt"
echo "commit ${LITHOS_COMMIT:-unknown}" >>"$WORK/versions.txt"

K=$WORK/kernels
mkdir -p "$K"
nvcc -cubin -arch=sm_90 -o "$K/corpus_kernels.cubin" scripts/atom/corpus_kernels.cu
nvcc -fatbin -gencode arch=compute_90,code=sm_90 --compress-mode=size -o "$K/corpus_kernels.fatbin" scripts/atom/corpus_kernels.cu
nvcc -ptx -arch=compute_90 -o "$K/corpus_kernels.ptx" scripts/atom/corpus_kernels.cu

if has disasm; then
  stamp "disasm"
  "$LITHOS" atomize "$K/corpus_kernels.fatbin" "$WORK/corpus_kernels.atomized.cubin" --json >"$WORK/atomize.json"
  nvdisasm -c "$K/corpus_kernels.cubin" >"$WORK/original.sass" 2>&1
  nvdisasm -c "$WORK/corpus_kernels.atomized.cubin" >"$WORK/atomized.sass" 2>&1
  echo "nvdisasm exit $?" >>"$WORK/atomized.sass"
  cuobjdump -elf "$WORK/corpus_kernels.atomized.cubin" >"$WORK/atomized.elf.txt" 2>&1
  grep -A16 -m1 "Function : block_ids\|block_ids:" "$WORK/atomized.sass" | head -40
  grep -n "EXIT\|BRA\|S2UR\|ISETP\|LDC" "$WORK/atomized.sass" | tail -20
fi

if has corpus; then
  stamp "corpus: baseline"
  export CUBLAS_WORKSPACE_CONFIG=:4096:8
  timeout -k 5 "$TMO" python3 scripts/atom/corpus.py run "$WORK/corpus-base.pt" --kernels "$K" >"$WORK/corpus-base.log" 2>&1
  echo "exit $?" >>"$WORK/corpus-base.log"
  for n in 2 7 64 plan; do
    stamp "corpus: atoms $n"
    if [[ $n == plan ]]; then
      LITHOS_ATOM_US=500 run_lithos python3 scripts/atom/corpus.py run "$WORK/corpus-$n.pt" --kernels "$K" \
        --report "$WORK/corpus-$n.report.json" >"$WORK/corpus-$n.log" 2>&1
    else
      LITHOS_ATOMS=$n run_lithos python3 scripts/atom/corpus.py run "$WORK/corpus-$n.pt" --kernels "$K" \
        --report "$WORK/corpus-$n.report.json" >"$WORK/corpus-$n.log" 2>&1
    fi
    echo "exit $?" >>"$WORK/corpus-$n.log"
    tail -n 3 "$WORK/corpus-$n.log"
    python3 scripts/atom/corpus.py compare "$WORK/corpus-base.pt" "$WORK/corpus-$n.pt" >"$WORK/compare-$n.txt" 2>&1
    tail -n 12 "$WORK/compare-$n.txt"
  done
fi

if has costs; then
  stamp "costs: per-atom"
  LITHOS_ATOMS=1 run_lithos python3 scripts/atom/measure.py atomcost --out "$WORK/atomcost.json" \
    >"$WORK/atomcost.log" 2>&1
  tail -n 2 "$WORK/atomcost.log"
  stamp "costs: training throughput"
  for w in resnet50; do
    timeout -k 5 "$TMO" python3 scripts/atom/measure.py train --workload $w --out "$WORK/train-$w-base.json" \
      >"$WORK/train-$w-base.log" 2>&1
    for us in 250 500 1000; do
      LITHOS_ATOM_US=$us run_lithos python3 scripts/atom/measure.py train --workload $w \
        --out "$WORK/train-$w-$us.json" --report "$WORK/train-$w-$us.report.json" >"$WORK/train-$w-$us.log" 2>&1
    done
    timeout -k 5 "$TMO" python3 scripts/atom/measure.py train --workload $w --out "$WORK/train-$w-base2.json" \
      >"$WORK/train-$w-base2.log" 2>&1
  done
fi

if has coverage; then
  for w in resnet50 bert-base llama1b-prefill llama1b-decode; do
    stamp "coverage: $w"
    LITHOS_ATOM_TIME=1 run_lithos python3 scripts/atom/measure.py coverage --workload $w --warmup 3 --steps 10 \
      --out "$WORK/coverage-$w.json" \
      >"$WORK/coverage-$w.log" 2>&1
    tail -n 1 "$WORK/coverage-$w.log" | cut -c1-400
  done
fi

# One `lithos bench` run: name, then extra environment, then -- and the bench arguments.
hol_run() {  # name, extra env..., then -- bench args
  local name=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  stamp "hol: $name"
  mkdir -p "$WORK/$name/runs" "$WORK/$name/be-reports"
  [[ $name == hol-250 ]] && cp "$WORK"/hol/runs/alone-*.json "$WORK/$name/runs/" 2>/dev/null
  local left=$(( ${ATOM_BUDGET_MIN:-9} - ($(date +%s) - t0) / 60 ))
  env "${envs[@]}" LITHOS_ATOM_REPORT="$WORK/$name/be-reports/%p.json" \
    "$LITHOS" bench "$@" --out "$WORK/$name" --budget-min "$left" \
    >"$WORK/$name.summary.txt" 2>"$WORK/$name.progress.txt"
  echo "exit $?" >>"$WORK/$name.summary.txt"
  tail -n 12 "$WORK/$name.summary.txt"
}

if has hol; then
  # hol: alone, MPS and lithosd's 500 us atoms; hol-250: lithosd's 250 us
  # atoms. The later run reuses the alone run of the first (same scenario,
  # same call).
  hol_run hol -- head-of-line-atoms
  hol_run hol-250 LITHOSD_ATOM_US=250 -- head-of-line-atoms --modes lithos
fi

if has steal; then
  # Stealing (scenarios/bench/head-of-line-steal.toml): an hp service at 5%
  # load; be atoms borrow its idle TPCs under lithosd.
  hol_run hol-steal -- head-of-line-steal
fi

pgrep -a nvidia-cuda-mps || true
stamp "packing"
python3 scripts/atom/summary.py "$WORK" | tee "$WORK/summary.md"
tar czf "$OUT/atom.tgz" -C "$WORK" --exclude='*.pt' . 2>/dev/null
ls -la "$OUT"
