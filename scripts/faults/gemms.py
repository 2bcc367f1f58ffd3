#!/usr/bin/env python3
"""N GEMMs in PyTorch, synchronised every 10, and how long the CUDA part
took: {"n":N,"init_s":...,"loop_s":...,"total_s":...} (init: the first CUDA
call, which makes the context; loop: the GEMMs; total: both). For
scripts/faults/gpu-trust.sh: a process started under a stopped lithosd
against the same process without lithos."""
import json
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
t0 = time.perf_counter()
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t1 = time.perf_counter()
for i in range(n):
    c = a @ b
    if i % 10 == 9:
        torch.cuda.synchronize()
torch.cuda.synchronize()
t2 = time.perf_counter()
print(json.dumps({"n": n, "init_s": t1 - t0, "loop_s": t2 - t1, "total_s": t2 - t0}), flush=True)
