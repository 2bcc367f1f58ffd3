"""End-to-end cost of lithos on a PyTorch inference loop: ResNet-50, fp16,
eager, batch 8 and batch 1 (batch 1 is bound by the host's launch path, so
host-side costs show most). Prints one JSON line per batch size with the
median and minimum milliseconds per iteration over several windows, and the
GPU time of one iteration (CUDA events) for reference.

With --toggle (run under `lithos run`), lithos is switched off and on inside
the process (lithos_set_enabled) between windows, in pairs ordered on/off,
off/on, ...: the paired differences measure lithos's own cost with the
process, its memory and the host's noise shared by both sides.
  python3 torch_overhead.py [--iters 30] [--windows 15] [--toggle]"""
import argparse
import ctypes
import json
import statistics
import time

import torch
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=30)
ap.add_argument("--windows", type=int, default=15)
ap.add_argument("--toggle", action="store_true", help="switch lithos off and on between windows (needs lithos)")
args = ap.parse_args()
set_enabled = None
if args.toggle:
    try:
        set_enabled = ctypes.CDLL(None).lithos_set_enabled
        set_enabled.argtypes = [ctypes.c_int]
    except AttributeError:
        raise SystemExit("--toggle needs liblithos.so (run under `lithos run`)")
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
        def window():
            t0 = time.perf_counter()
            for _ in range(args.iters):
                m(x)
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1000 / args.iters

        if set_enabled is None:
            ms = [window() for _ in range(args.windows)]
            key = "OVERHEAD_TORCH" if batch == 8 else "OVERHEAD_TORCH_B1"
            print(key, json.dumps({"batch": batch, "median_ms": statistics.median(ms), "min_ms": min(ms),
                                   "one_iter_span_ms": s.elapsed_time(e), "windows_ms": ms}))
            continue
        on, off, pct = [], [], []
        for w in range(2 * args.windows):
            pair = {}
            for state in ((1, 0) if w % 2 == 0 else (0, 1)):
                set_enabled(state)
                pair[state] = window()
            on.append(pair[1])
            off.append(pair[0])
            pct.append(100 * (pair[1] - pair[0]) / pair[0])
        set_enabled(1)
        print("OVERHEAD_TOGGLE", json.dumps({"batch": batch, "pairs": len(pct), "on_median_ms": statistics.median(on),
                                             "off_median_ms": statistics.median(off),
                                             "paired_pct_median": statistics.median(pct),
                                             "paired_pct_mean": statistics.mean(pct),
                                             "paired_pct_stdev": statistics.stdev(pct), "paired_pct": pct}))
