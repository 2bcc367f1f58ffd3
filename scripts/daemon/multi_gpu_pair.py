#!/usr/bin/env python3
"""A service on one GPU beside a best-effort process that trains on two
(scripts/daemon/gpu-multi-pair.sh): what a process using several GPUs does
to another tenant's GPU, and what lithos does about it.

  multi_gpu_pair.py svc DEVICE SECONDS [RATE]
      ResNet-50 inference, batch 32, replayed as a CUDA graph (the resnet50
      service of `lithos bench`) on cuda:DEVICE: Poisson arrivals at RATE
      per second (default: half its capacity, measured at start) for
      SECONDS, served first in, first out. Prints one JSON line: gpu_ms,
      rate, requests, latency p50/p99/mean in ms (queueing included) and
      t0/t1, the wall-clock span measured.
  multi_gpu_pair.py train DEVICES SECONDS
      ResNet-50 training, batch 128 (the resnet50 training of `lithos
      bench`), one model on each device of DEVICES ("0,1"), one step on each
      in turn in one process, for SECONDS after warm-up (0: until killed).
      Prints {"t": wall clock, "steps": [steps so far, per device]} each
      second from the first step on, and once more at the end.
"""
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))


def _runner(kind, device):
    import tenant  # the bench's parameter table (defaults)
    import workloads
    params = tenant.resolve_params("resnet50", kind)
    return workloads.make_runner("resnet50", kind, params, device)


def _quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def svc(device, seconds, rate):
    r = _runner("service", device)
    gpu_ms = r.measure("gpu_ms")
    if rate <= 0:
        rate = 0.5 * 1000.0 / gpu_ms
    rng = random.Random(1)
    lat = []
    t0 = time.time()
    start = time.perf_counter()
    arrival = start
    while True:
        arrival += rng.expovariate(rate)
        if arrival - start > seconds:
            break
        now = time.perf_counter()
        if now < arrival:
            time.sleep(arrival - now)
        r.step()
        r.sync()
        lat.append((time.perf_counter() - arrival) * 1e3)
    return {"device": device, "gpu_ms": round(gpu_ms, 4), "rate": round(rate, 3), "requests": len(lat),
            "p50_ms": round(_quantile(lat, 0.5), 4), "p99_ms": round(_quantile(lat, 0.99), 4),
            "mean_ms": round(sum(lat) / len(lat), 4), "t0": t0, "t1": time.time()}


def train(devices, seconds):
    runners = [_runner("training", d) for d in devices]
    steps = [0] * len(devices)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    start = time.perf_counter()
    last = 0.0
    while not stop and (seconds <= 0 or time.perf_counter() - start < seconds):
        for r in runners:
            r.step()
        for i, r in enumerate(runners):
            r.sync()
            steps[i] += 1
        if time.perf_counter() - last >= 1.0:
            last = time.perf_counter()
            print(json.dumps({"t": time.time(), "steps": steps}), flush=True)
    return {"t": time.time(), "steps": steps, "devices": devices, "end": True}


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("svc", "train"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "svc":
        out = svc(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
    else:
        out = train([int(d) for d in sys.argv[2].split(",")], float(sys.argv[3]))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    import tenant
    tenant.lithos_report_now()  # liblithos's exit report (--stats-file), which os._exit would skip
    os._exit(rc)  # no teardown of graphs and contexts at exit (tenant.py does the same)
