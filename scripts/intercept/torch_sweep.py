"""Latency versus TPC count for real kernels, through liblithos.so's process
set (lithos_set_process_tpcs): a bf16 GEMM (cuBLAS), a convolution (cuDNN),
attention (scaled_dot_product_attention) and an elementwise kernel, each
confined to the first t live TPCs for t = 1..all. Fits latency = m/t + b and
reports R^2. Must run under `lithos run` (any options) on a calibrated GPU.
  python3 torch_sweep.py --out sweep.json [--step 1]"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lithos_py import Lithos  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--step", type=int, default=1)
ap.add_argument("--reps", type=int, default=5)
args = ap.parse_args()

lithos = Lithos()
live = lithos.live()
if not lithos.present() or not live:
    print("SWEEP needs liblithos.so with a slot map (run under `lithos run` after `lithos calibrate`)")
    sys.exit(2)

torch.manual_seed(0)
dev = "cuda"
bf = torch.bfloat16
A = torch.randn(8192, 8192, device=dev, dtype=bf)
B = torch.randn(8192, 8192, device=dev, dtype=bf)
X = torch.randn(32, 256, 56, 56, device=dev, dtype=bf).to(memory_format=torch.channels_last)
W = torch.randn(256, 256, 3, 3, device=dev, dtype=bf).to(memory_format=torch.channels_last)
Q = torch.randn(8, 16, 2048, 64, device=dev, dtype=bf)
K = torch.randn(8, 16, 2048, 64, device=dev, dtype=bf)
V = torch.randn(8, 16, 2048, 64, device=dev, dtype=bf)
E = torch.randn(1 << 27, device=dev, dtype=bf)
kernels = {
    "gemm_bf16_8192": lambda: A @ B,
    "conv3x3_bf16_b32_c256_56": lambda: F.conv2d(X, W, padding=1),
    "attention_bf16_b8_h16_s2048_d64": lambda: F.scaled_dot_product_attention(Q, K, V),
    "elementwise_bf16_128M": lambda: E.mul(1.0001).add_(0.5),
}


def time_ms(fn, reps):
    fn()
    fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def fit(ts, ms):
    # latency = m * (1/t) + b, least squares; R^2 of the fit.
    xs = [1.0 / t for t in ts]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ms) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ms))
    m = sxy / sxx if sxx else 0.0
    b = my - m * mx
    ss_res = sum((y - (m * x + b)) ** 2 for x, y in zip(xs, ms))
    ss_tot = sum((y - my) ** 2 for y in ms)
    return {"m_ms_tpc": m, "b_ms": b, "r2": 1 - ss_res / ss_tot if ss_tot else 1.0}


counts = list(range(1, len(live) + 1, args.step))
if counts[-1] != len(live):
    counts.append(len(live))
result = {"live_tpcs": len(live), "counts": counts, "kernels": {}}
for name, fn in kernels.items():
    lithos.set_process(None)
    full = time_ms(fn, args.reps)
    ms = []
    for t in counts:
        if lithos.set_process(live[:t]) != 0:
            print("SWEEP cannot set", t, "TPCs")
            sys.exit(1)
        ms.append(time_ms(fn, args.reps))
    lithos.set_process(None)
    f = fit(counts, ms)
    result["kernels"][name] = {"ms": ms, "unmasked_ms": full, "fit": f}
    print(f"SWEEP {name}: 1 TPC {ms[0]:.3f} ms, {counts[-1]} TPCs {ms[-1]:.3f} ms, unmasked {full:.3f} ms, "
          f"m/t+b fit R^2 {f['r2']:.4f}", flush=True)
with open(args.out, "w") as f:
    json.dump(result, f)
