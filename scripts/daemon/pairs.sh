#!/usr/bin/env bash
# Pairings not among the shipped scenarios (written to $OUT/work), each
# under alone, mps-alone, mps, static-partition and lithos: a Llama-1B
# prefill service (CUDA graph) beside BERT-base training; an eager
# ResNet-50 service beside GPT training (whose alone run did not hold its
# rate on one board: see docs/benchmarks.md); and, both tenants
# torch.compile'd (Inductor's Triton kernels), a BERT-base service replaying a
# graph of the compiled forward beside GPT training, and an eager Llama-1B
# decode service beside ResNet-50 training; and both compiled in mode
# reduce-overhead (torch's own CUDA graphs, cudagraph trees: the trainer
# replays a forward and a backward graph every step), a BERT-base service
# beside GPT training; a Llama-1B decode service (graph; and compiled,
# whose fused kernels pay MPS little) beside GPT training; a ResNet-50 service (graph) beside best-effort BERT-large batch
# inference run eagerly in a closed loop. Runs on the GPU machine with the release build
# carried over; results under $OUT/<pair>/ (report.md, results.json).
# PAIRS="pair-resnet-gpt" runs only the pairings named; PAIR_MODES="alone,lithos"
# only those modes; PAIR_TRACE=1 has lithosd write its trace and prints
# where the trainer's time went in it (pipeline_gaps.py; JSON beside the
# report as pipeline_gaps.json).
set -uo pipefail
L=$PWD/build/release/bin/lithos
OUT=${OUT:-/tmp/lithos-pairs}
W=$OUT/work; mkdir -p "$W"
# pair NAME DESCRIPTION SVC_WORKLOAD SVC_PARAMS TRAIN_WORKLOAD TRAIN_PARAMS [BE_KIND]:
# a service at 50% load with a 60% partition beside a trainer (or, with
# BE_KIND closed, best-effort inference in a closed loop).
pair() {
  cat >"$W/$1.toml" <<T
name = "$1"
description = "$2"
seed = 1
warmup_s = 3.0
window_s = 5.0
reps = 3
drain_s = 1.0
slo_factors = [1.5, 2.0]
[[tenant]]
name = "svc"
role = "hp"
kind = "service"
workload = "$3"
load = 0.5
thread_pct = 75
partition = 0.6
params = $4
[[tenant]]
name = "train"
role = "be"
kind = "${7:-training}"
workload = "$5"
thread_pct = 25
partition = 0.4
params = $6
T
}
pair pair-llama-bert "Llama-1B prefill service (graph, 50% load) + BERT-base training" \
  llama1b-prefill "{ batch = 1, seq = 512, graph = true }" bert-base "{ batch = 32, seq = 128 }"
pair pair-resnet-gpt "ResNet-50 service (eager, batch 32, 50% load) + GPT-125M training" \
  resnet50 "{ batch = 32, graph = false }" gpt "{ batch = 8, seq = 1024 }"
pair pair-compiled "BERT-base service (torch.compile + graph, 50% load) + GPT-125M training (torch.compile)" \
  bert-base "{ batch = 16, seq = 128, graph = true, compile = true }" gpt "{ batch = 8, seq = 1024, compile = true }"
pair pair-compiled-eager "Llama-1B decode service (torch.compile, eager, 50% load) + ResNet-50 training (torch.compile)" \
  llama1b-decode "{ batch = 8, ctx = 1024, graph = false, compile = true }" resnet50 "{ batch = 128, compile = true }"
pair pair-cudagraphs "BERT-base service (torch.compile reduce-overhead: cudagraph trees, 50% load) + GPT-125M training (reduce-overhead)" \
  bert-base "{ batch = 16, seq = 128, graph = false, compile = \"reduce-overhead\" }" gpt "{ batch = 8, seq = 1024, compile = \"reduce-overhead\" }"
pair pair-decode-gpt "Llama-1B decode service (graph, batch 8, ctx 1024, 50% load) + GPT-125M training" \
  llama1b-decode "{ batch = 8, ctx = 1024, graph = true }" gpt "{ batch = 8, seq = 1024 }"
pair pair-decode-compiled-gpt "Llama-1B decode service (torch.compile + graph, batch 8, ctx 1024, 50% load) + GPT-125M training" \
  llama1b-decode "{ batch = 8, ctx = 1024, graph = true, compile = true }" gpt "{ batch = 8, seq = 1024 }"
pair pair-resnet-bertbatch "ResNet-50 service (graph, batch 32, 50% load) + BERT-large batch inference (eager, batch 64, closed loop)" \
  resnet50 "{ batch = 32, graph = true }" bert-large "{ batch = 64, seq = 128, graph = false }" closed
# PAIRS_WRITE_ONLY=1: only write the scenario files (for gpu-daemon.sh's matrix phase).
[[ -n ${PAIRS_WRITE_ONLY:-} ]] && { ls "$W"/*.toml; exit 0; }
for sc in ${PAIRS:-pair-llama-bert pair-resnet-gpt pair-compiled pair-compiled-eager pair-cudagraphs pair-decode-gpt pair-decode-compiled-gpt pair-resnet-bertbatch}; do
  echo "[$(date +%T)] $sc"
  # (the compiled pair's first run compiles: allow it more time)
  trace=(); [[ -n ${PAIR_TRACE:-} ]] && { rm -f "$W/$sc.trace.jsonl"; trace=(LITHOSD_TRACE="$W/$sc.trace.jsonl"); }
  env "${trace[@]}" timeout -s KILL "$([[ $sc == *compiled* || $sc == pair-cudagraphs ]] && echo 400 || echo 280)" $L bench $W/$sc.toml \
    --modes "${PAIR_MODES:-alone,mps-alone,mps,static-partition,lithos}" --out $OUT/$sc --no-plots -q 2>&1 | grep -vE "^(report:|$)"
  if [[ -s $W/$sc.trace.jsonl ]]; then
    python3 scripts/daemon/pipeline_gaps.py "$W/$sc.trace.jsonl" --tenant train
    python3 scripts/daemon/pipeline_gaps.py "$W/$sc.trace.jsonl" --tenant train --json >"$OUT/$sc/pipeline_gaps.json"
    rm -f "$W/$sc.trace.jsonl"
  fi
  [[ -d $OUT/$sc/logs ]] && tar -czf $OUT/$sc/logs.tar.gz -C $OUT/$sc logs && rm -rf $OUT/$sc/logs
done
