#!/usr/bin/env python3
"""Host cost of one kernel launch from PyTorch: N tiny in-place adds on one
element, timed on the host (launch only) and to the end of the GPU work.
Run it plain, under `lithos run`, and under `lithos run --tenant T` (lithosd)
to see what each adds per launch (scripts/daemon/gpu-daemon.sh).

    launch_cost.py [N [REPS]]     N launches, REPS times; prints one JSON line:
                                  launches, host_us (per launch, median of
                                  REPS) and total_us, with every repetition
    launch_cost.py serve [graph]  lock-step worker for launch_cost_lockstep.py:
                                  prints "ready", then for each line N read
                                  from stdin makes N launches (graph: N
                                  replays of a captured one-add CUDA graph)
                                  and prints one JSON line (host_us, total_us)
"""
import json
import sys
import time

import torch


def burst(step, n):
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def main():
    x = torch.zeros(1, device="cuda")
    step = lambda: x.add_(1)  # noqa: E731
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        if len(sys.argv) > 2 and sys.argv[2] == "graph":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    x.add_(1)  # warm-up outside the capture
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                x.add_(1)
            step = g.replay
        for _ in range(2000):
            step()
        torch.cuda.synchronize()
        print("ready", flush=True)
        for line in sys.stdin:
            n = int(line)
            if n <= 0:
                break
            host, total = burst(step, n)
            print(json.dumps({"host_us": round(host, 4), "total_us": round(total, 4)}), flush=True)
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    for _ in range(2000):
        step()
    torch.cuda.synchronize()
    host, total = [], []
    for _ in range(reps):
        h, t = burst(step, n)
        host.append(h)
        total.append(t)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(json.dumps({"launches": n, "host_us": round(med(host), 3), "total_us": round(med(total), 3),
                      "host_us_all": [round(v, 3) for v in host], "total_us_all": [round(v, 3) for v in total]}),
          flush=True)


if __name__ == "__main__":
    main()
