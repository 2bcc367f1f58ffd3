#!/usr/bin/env bash
# Two pairings not among the shipped scenarios (written to $OUT/work), each
# under alone, mps, static-partition and lithos: a Llama-1B prefill service
# (CUDA graph) beside BERT-base training, and an eager ResNet-50 service
# beside GPT training (whose alone run cannot hold its rate: see
# docs/benchmarks.md). Runs on the GPU machine with the release build
# carried over; results under $OUT/<pair>/ (report.md, results.json).
set -uo pipefail
L=$PWD/build/release/bin/lithos
OUT=${OUT:-/tmp/lithos-pairs}
W=$OUT/work; mkdir -p "$W"
cat >$W/pair-llama-bert.toml <<'T'
name = "pair-llama-bert"
description = "Llama-1B prefill service (graph, 50% load) + BERT-base training"
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
workload = "llama1b-prefill"
load = 0.5
thread_pct = 75
partition = 0.6
params = { batch = 1, seq = 512, graph = true }
[[tenant]]
name = "train"
role = "be"
kind = "training"
workload = "bert-base"
thread_pct = 25
partition = 0.4
params = { batch = 32, seq = 128 }
T
cat >$W/pair-resnet-gpt.toml <<'T'
name = "pair-resnet-gpt"
description = "ResNet-50 service (eager, batch 32, 50% load) + GPT-125M training"
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
workload = "resnet50"
load = 0.5
thread_pct = 75
partition = 0.6
params = { batch = 32, graph = false }
[[tenant]]
name = "train"
role = "be"
kind = "training"
workload = "gpt"
thread_pct = 25
partition = 0.4
params = { batch = 8, seq = 1024 }
T
for sc in pair-llama-bert pair-resnet-gpt; do
  echo "[$(date +%T)] $sc"
  timeout -s KILL 280 $L bench $W/$sc.toml --modes alone,mps,static-partition,lithos --out $OUT/$sc --no-plots -q 2>&1 | grep -vE "^(report:|$)"
  [[ -d $OUT/$sc/logs ]] && tar -czf $OUT/$sc/logs.tar.gz -C $OUT/$sc logs && rm -rf $OUT/$sc/logs
done
