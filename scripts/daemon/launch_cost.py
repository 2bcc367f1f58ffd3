#!/usr/bin/env python3
"""Host cost of one kernel launch from PyTorch: N tiny in-place adds on one
element, timed on the host (launch only) and to the end of the GPU work.
Run it plain, under `lithos run`, and under `lithos run --tenant T` (lithosd)
to see what each adds per launch (scripts/daemon/gpu-daemon.sh).
Prints one JSON line: launches, host_us (per launch, median of REPS) and
total_us, with every repetition."""
import json
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
x = torch.zeros(1, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
host, total = [], []
for _ in range(reps):
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    host.append((t1 - t0) / n * 1e6)
    total.append((t2 - t0) / n * 1e6)
med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
print(json.dumps({"launches": n, "host_us": round(med(host), 3), "total_us": round(med(total), 3),
                  "host_us_all": [round(v, 3) for v in host], "total_us_all": [round(v, 3) for v in total]}),
      flush=True)
