#!/usr/bin/env bash
# GPU evidence for liblithos.so and `lithos run` (docs/interposer.md,
# "Measured on the H100"). Runs on the GPU machine, from the repository root:
#
#   scripts/intercept/gpu-check.sh [phase...]     phases: calibrate paths mps torch overhead sweep
#                                                  (default: all, in that order)
#
# Needs, built on the development machine (docs/interposer.md says how):
#   build/release/bin/lithos, build/release/lib/liblithos.so   (cmake --preset release;
#     or set LITHOS_BIN to another build's bin/lithos, with ../lib/liblithos.so beside it)
#   build/icpt-gpu/ (or $ICPT_BIN), with N=/usr/local/cuda/bin/nvcc, S=scripts/intercept,
#   L="-lcuda -L/usr/local/cuda/lib64/stubs":
#     $N -arch=sm_90 -O2 -std=c++17 -o icpt_paths $S/icpt_paths.cu $L
#     $N -arch=sm_90 -O2 -std=c++17 --default-stream per-thread -o icpt_paths_ptds $S/icpt_paths.cu $L
#     $N -arch=sm_90 -O2 -o icpt_bench $S/icpt_bench.cu $L
#     $N -arch=sm_90 -cubin -o smid_lib.cubin $S/smid_lib.cu
# and python3 with PyTorch, torchvision, transformers and Triton.
#
# Everything it writes goes under $OUT (default ./out/gpu-check): a log per
# step in work/, then results.tgz (work/ packed), summary.json and summary.txt
# (the table it prints last). Every GPU step runs under a watchdog (timeout);
# an MPS daemon it starts is always stopped (trap), and a step that hangs
# under MPS is killed only after MPS is stopped.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-check}
W=$OUT/work
mkdir -p "$W"
LITHOS=${LITHOS_BIN:-$ROOT/build/release/bin/lithos}
BIN=${ICPT_BIN:-$ROOT/build/icpt-gpu}
PY=${PYTHON:-python3}
SCRIPTS=$ROOT/scripts/intercept
export LITHOS_CACHE_DIR=$W/cache
export ICPT_CUBIN=$BIN/smid_lib.cubin
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PHASES=${*:-calibrate paths mps torch overhead sweep}
T0=$(date +%s)

note() { echo "[gpu-check +$(($(date +%s) - T0))s] $*"; }

# step NAME TIMEOUT CMD...: runs CMD with a watchdog, output to $W/NAME.log
# (and the last lines to the console); records the exit status.
step() {
  local name=$1 limit=$2
  shift 2
  note "$name: $*"
  timeout -k 5 "$limit" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "$name $rc" >>"$W/status.txt"
  tail -n 25 "$W/$name.log" | sed "s/^/  [$name] /"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && note "$name: WATCHDOG fired (timeout ${limit}s)"
  return $rc
}

MPS_STARTED=0
stop_mps() {
  if [ "$MPS_STARTED" = 1 ]; then
    note "stopping MPS"
    echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
    MPS_STARTED=0
  fi
}
finish() {
  stop_mps
  note "summary"
  "$PY" "$SCRIPTS/gpu_summary.py" "$W" "$OUT/summary.json" | tee "$OUT/summary.txt"
  rm -f "$W"/outputs-*.pt  # compared on the GPU machine (torch_compare.log); too big to bring back
  tar czf "$OUT/results.tgz" -C "$OUT" work 2>/dev/null && rm -rf "$W"
}
trap finish EXIT

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,uuid,driver_version,compute_mode,mig.mode.current --format=csv,noheader 2>&1
  ldd --version 2>&1 | head -1
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)' 2>&1
  "$LITHOS" --version 2>&1
} >"$W/environment.txt"
cat "$W/environment.txt"

live_count() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["live_tpcs"])' "$W/calibrate.json" 2>/dev/null || echo 0; }

for phase in $PHASES; do
  case $phase in
  calibrate)
    step calibrate 120 sh -c '"$0" calibrate --json --mask-check 0-7 --mask-check 3,9-12,33,60-62 >"$1"' \
      "$LITHOS" "$W/calibrate.json"
    step calibrate_table 60 "$LITHOS" calibrate
    ;;
  paths)
    step paths_plain 120 "$BIN/icpt_paths"
    step paths_tpcs8 180 "$LITHOS" run --tpcs 8 --stats --stats-file "$W/stats-paths-tpcs8.jsonl" -- "$BIN/icpt_paths"
    step paths_set 180 "$LITHOS" run --tpc-set 3,9-12,33,60-62 --stats --stats-file "$W/stats-paths-set.jsonl" -- "$BIN/icpt_paths"
    step paths_ptds 180 "$LITHOS" run --tpcs 8 --stats --stats-file "$W/stats-paths-ptds.jsonl" -- "$BIN/icpt_paths_ptds"
    # The green-context fallback, forced: a static partition per process
    # (the per-stream API is unsupported there, so its checks fail by design).
    step paths_green 90 "$LITHOS" run --backend green --tpcs 8 --stats --stats-file "$W/stats-paths-green.jsonl" \
      --log info -- "$BIN/icpt_paths"
    ;;
  mps)
    export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d >"$W/mps_start.log" 2>&1; then
      MPS_STARTED=1
      sleep 1
      step mps_plain 120 env ICPT_COUNT_ONLY=1 "$BIN/icpt_paths" mps
      step mps_tpcs8 180 env ICPT_COUNT_ONLY=1 "$LITHOS" run --tpcs 8 --stats --stats-file "$W/stats-mps.jsonl" -- "$BIN/icpt_paths" mps
      step mps_torch 240 "$LITHOS" run --tpcs 8 --stats-file "$W/stats-mps-torch.jsonl" -- "$PY" "$SCRIPTS/torch_check.py" --out "$W" --tag mps8
      stop_mps
    else
      note "MPS did not start (see mps_start.log)"
      echo "mps_start 1" >>"$W/status.txt"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    ;;
  torch)
    step torch_plain 300 "$PY" "$SCRIPTS/torch_check.py" --out "$W" --tag plain --profile
    step torch_lithos8 300 "$LITHOS" run --tpcs 8 --stats --stats-file "$W/stats-torch.jsonl" -- "$PY" "$SCRIPTS/torch_check.py" --out "$W" --tag lithos8 --profile
    step torch_compare 120 "$PY" "$SCRIPTS/torch_compare.py" "$W/outputs-plain.pt" "$W/outputs-lithos8.pt"
    ;;
  overhead)
    LIVE=$(live_count)
    PIN=""
    taskset -c 2 true 2>/dev/null && PIN="taskset -c 2"
    EPIN=""
    taskset -c 2-7 true 2>/dev/null && EPIN="taskset -c 2-7"
    echo "pinning: ${PIN:-none}; e2e pinning: ${EPIN:-none}" >"$W/bench_pinning.txt"
    ALL="--tpcs $LIVE"
    [ "$LIVE" -gt 0 ] || ALL=""
    # Configurations: no lithos; lithos loaded but disabled (LITHOS_DISABLE:
    # the cost of being there); hooks with no mask (callback not subscribed);
    # a real 8-TPC mask written into every descriptor; every live TPC. Each
    # round runs them in a rotated order, so no configuration always comes
    # first or last; the summary pairs each with the plain run of its round.
    run_cfg() {  # run_cfg KIND CFG ROUND CMD...
      local kind=$1 cfg=$2 r=$3
      shift 3
      case $cfg in
        plain) step ${kind}_plain_$r 240 "$@" ;;
        disabled) step ${kind}_disabled_$r 240 env LITHOS_DISABLE=1 $LITHOS_PIN "$LITHOS" run -- "$@" ;;
        lithos) step ${kind}_lithos_$r 240 $LITHOS_PIN "$LITHOS" run -- "$@" ;;
        mask8) step ${kind}_mask8_$r 240 $LITHOS_PIN "$LITHOS" run --tpcs 8 -- "$@" ;;
        lithosall) step ${kind}_lithosall_$r 240 $LITHOS_PIN "$LITHOS" run $ALL -- "$@" ;;
      esac
    }
    rotate() {  # rotate N WORDS...: the words starting at index N mod count
      local n=$1
      shift
      local a=("$@") i
      for ((i = 0; i < ${#a[@]}; i++)); do echo -n "${a[$(((i + n) % ${#a[@]}))]} "; done
    }
    BENCH_CFGS=(plain disabled lithos mask8 lithosall)
    for r in 1 2 3 4 5 6; do
      for cfg in $(rotate $r "${BENCH_CFGS[@]}"); do
        if [ "$cfg" = plain ]; then LITHOS_PIN=""; run_cfg bench plain $r $PIN "$BIN/icpt_bench" 40 200
        else LITHOS_PIN="$PIN"; run_cfg bench $cfg $r "$BIN/icpt_bench" 40 200; fi
      done
    done
    # Inside one process: lithos switched on and off between windows.
    step e2e_toggle 300 $EPIN "$LITHOS" run $ALL --stats -- "$PY" "$SCRIPTS/torch_overhead.py" --toggle --windows 20
    E2E_CFGS=(plain disabled lithosall)
    for r in 1 2 3 4 5 6; do
      for cfg in $(rotate $r "${E2E_CFGS[@]}"); do
        if [ "$cfg" = plain ]; then LITHOS_PIN=""; run_cfg e2e plain $r $EPIN "$PY" "$SCRIPTS/torch_overhead.py"
        else LITHOS_PIN="$EPIN"; run_cfg e2e $cfg $r "$PY" "$SCRIPTS/torch_overhead.py"; fi
      done
    done
    ;;
  sweep)
    step sweep 300 "$LITHOS" run --stats -- "$PY" "$SCRIPTS/torch_sweep.py" --out "$W/sweep.json"
    ;;
  *) note "unknown phase $phase" ;;
  esac
done
