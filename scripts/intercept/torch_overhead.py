"""End-to-end cost of lithos on a PyTorch inference loop: ResNet-50, fp16,
eager, batch 8 and batch 1 (batch 1 is bound by the host's launch path, so
host-side costs show most). Prints one JSON line per batch size with the
median and minimum milliseconds per iteration over several windows, and the
GPU time of one iteration (CUDA events) for reference.
  python3 torch_overhead.py [--iters 30] [--windows 15]"""
import argparse
import json
import statistics
import time

import torch
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=30)
ap.add_argument("--windows", type=int, default=15)
args = ap.parse_args()
torch.backends.cudnn.benchmark = False
torch.manual_seed(0)
m = torchvision.models.resnet50(weights=None).cuda().eval().half()
for batch in (8, 1):
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half)
    with torch.no_grad():
        for _ in range(20):
            m(x)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        m(x)
        e.record()
        e.synchronize()
        ms = []
        for _ in range(args.windows):
            t0 = time.perf_counter()
            for _ in range(args.iters):
                m(x)
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t0) * 1000 / args.iters)
    key = "OVERHEAD_TORCH" if batch == 8 else "OVERHEAD_TORCH_B1"
    print(key, json.dumps({"batch": batch, "median_ms": statistics.median(ms), "min_ms": min(ms),
                           "one_iter_span_ms": s.elapsed_time(e), "windows_ms": ms}))
