#!/usr/bin/env python3
"""Where a PyTorch service's time goes as an MPS client (the half of
scripts/daemon/gpu-daemon.sh's phase mpscost that runs the bench's own
model; mps_cost.cu is the other half, with bare kernels).

Builds a bench workload as `lithos bench` does (scripts/bench/workloads.py;
default llama1b-decode, inference-stacking's HP-A, replayed from a CUDA
graph), then:

  - times REPS requests back to back, each synchronised: wall time and the
    GPU time between events around the request;
  - profiles 20 requests with the torch profiler: kernels per request, the
    sum of their durations (the kernels' own time) and the span from the
    first kernel's start to the last one's end (the gaps between kernels
    are span - sum).

Run it once as a plain process and once as an MPS client and compare: a
cost in the gaps is launch and scheduling latency; a cost in the sum is the
kernels running slower.

  python3 scripts/daemon/mps_cost.py [--workload W] [--params JSON] [--reps N] [--label L] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))


def quantile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="llama1b-decode")
    ap.add_argument("--params", default='{"batch": 8, "ctx": 1024, "graph": true}',
                    help="the workload's params as JSON (defaults filled in as the bench does)")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="also write the numbers here")
    a = ap.parse_args()
    import torch
    import tenant
    import workloads
    params = tenant.resolve_params(a.workload, "service", ("--params", json.loads(a.params)))
    runner = workloads.make_runner(a.workload, "service", params, 0)
    mps = None
    try:
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(-1)
        if cuda.cuDeviceGetAttribute(ctypes.byref(v), 133, 0) == 0:  # CU_DEVICE_ATTRIBUTE_MPS_ENABLED
            mps = bool(v.value)
    except OSError:
        pass
    wall, gpu = [], []
    for i in range(20 + a.reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        runner.step()
        e.record()
        e.synchronize()
        if i >= 20:
            wall.append((time.perf_counter() - t0) * 1e3)
            gpu.append(s.elapsed_time(e))
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marks = []
        for _ in range(20):
            runner.step()
            runner.sync()
            marks.append(time.perf_counter())
    kernels = sorted((ev for ev in prof.events() if ev.device_type.name == "CUDA"),
                     key=lambda ev: ev.time_range.start)
    # Split the kernels into requests at the gaps the host's synchronisation
    # leaves: the 19 largest gaps between consecutive kernels.
    gaps = sorted(range(1, len(kernels)), key=lambda i: kernels[i].time_range.start - kernels[i - 1].time_range.end)
    cuts = sorted(gaps[-19:]) if len(kernels) >= 20 else []
    reqs, lo = [], 0
    for c in cuts + [len(kernels)]:
        reqs.append(kernels[lo:c])
        lo = c
    # Each kernel's own time per request, by name: which kernels an MPS
    # client runs slower (or which it runs that a plain process does not).
    by_name = {}
    for ev in kernels:
        by_name.setdefault(ev.name, []).append(ev.time_range.end - ev.time_range.start)
    n_req = max(1, len(reqs))
    names = sorted(by_name, key=lambda k: -sum(by_name[k]))
    per = []
    for r in reqs:
        if not r:
            continue
        busy = sum(ev.time_range.end - ev.time_range.start for ev in r)
        span = r[-1].time_range.end - r[0].time_range.start
        per.append((len(r), busy, span))
    out = {
        "label": a.label, "workload": a.workload, "params": params, "mps_client": mps,
        "wall_ms_p50": quantile(wall, 0.5), "wall_ms_p90": quantile(wall, 0.9), "wall_ms_p99": quantile(wall, 0.99),
        "gpu_ms_p50": quantile(gpu, 0.5), "gpu_ms_p90": quantile(gpu, 0.9),
        "kernels_per_request": statistics.median(p[0] for p in per) if per else None,
        "kernel_sum_us": statistics.median(p[1] for p in per) if per else None,
        "span_us": statistics.median(p[2] for p in per) if per else None,
    }
    out["kernels"] = [{"name": k[:160], "per_request": len(by_name[k]) / n_req,
                       "us_per_request": sum(by_name[k]) / n_req, "us_median": statistics.median(by_name[k])}
                      for k in names[:25]]
    if per:
        out["gap_us_per_kernel"] = (out["span_us"] - out["kernel_sum_us"]) / max(1, out["kernels_per_request"] - 1)
    print(f"{a.label or 'mps_cost'}: MPS client {mps}: wall p50 {out['wall_ms_p50']:.3f} p90 {out['wall_ms_p90']:.3f} "
          f"p99 {out['wall_ms_p99']:.3f} ms; GPU p50 {out['gpu_ms_p50']:.3f} ms; "
          f"{out['kernels_per_request']} kernels, their sum {out['kernel_sum_us'] or 0:.0f} us, "
          f"span {out['span_us'] or 0:.0f} us, gap {out.get('gap_us_per_kernel', 0):.2f} us per kernel")
    for k in out["kernels"][:8]:
        print(f"  {k['us_per_request']:8.1f} us/request  {k['per_request']:5.1f}x  {k['name'][:90]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
