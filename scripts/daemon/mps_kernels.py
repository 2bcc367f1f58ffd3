#!/usr/bin/env python3
"""Which of PyTorch's short kernels an MPS client runs slower, and beside
what (the third part of scripts/daemon/gpu-daemon.sh's phase mpscost).

In the bench's Llama decode graph an MPS client's short elementwise and
reduction kernels run 0.3-1.6 us longer each, where bare kernels of the same
size pay ~2.5% (docs/results/2026-11-26-h100-mps-cost). This captures small
CUDA graphs of PyTorch ops at decode sizes (batch 8, d 2048, bf16 as the
bench's model), each op or sequence repeated, and times them:

  rsqrt8      rsqrt of 8 floats (RMSNorm's), one function repeated
  addeps8     + eps on 8 floats
  mean        x.float().pow(2).mean(-1) on 8 x 2048 (a reduction)
  add16k      a + b on 8 x 2048 bf16 (a vectorised elementwise kernel)
  strided     a transposed copy (the non-vectorised elementwise kernel)
  rmsnorm     the bench's RMSNorm, 9 kernels, repeated
  gemm_norm   a 8 x 2048 x 2048 linear, then RMSNorm: the short kernels
              between GEMMs, as in the decode graph
  gemm_only   the linear alone, repeated

For each: GPU time per replay (events, REPS replays after a warm-up), the
kernels per replay and each kernel name's median time from the torch
profiler over 5 replays. Run it as a plain process and as an MPS client and
compare.

  python3 scripts/daemon/mps_kernels.py [--reps N] [--cases a,b] [--label L] [--json FILE]
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--cases", default="rsqrt8,addeps8,mean,add16k,strided,rmsnorm,gemm_norm,gemm_only")
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.reps < 1:
        sys.exit("mps_kernels: --reps must be at least 1")
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    bf = torch.bfloat16
    x8 = torch.rand(8, 1, device=dev) + 0.5
    y8 = torch.empty_like(x8)
    h = torch.randn(8, 2048, device=dev, dtype=bf)
    h2 = torch.randn(8, 2048, device=dev, dtype=bf)
    hout = torch.empty_like(h)
    ht = torch.randn(2048, 8, device=dev, dtype=bf)
    w = torch.randn(2048, 2048, device=dev, dtype=bf) * 0.02
    nw = torch.ones(2048, device=dev, dtype=bf)

    def rmsnorm(x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        return (xf * nw.float()).to(x.dtype)

    cases = {
        "rsqrt8": (256, lambda: torch.rsqrt(x8, out=y8)),
        "addeps8": (256, lambda: torch.add(x8, 1e-5, out=y8)),
        "mean": (128, lambda: h.float().pow(2).mean(-1, keepdim=True)),
        "add16k": (256, lambda: torch.add(h, h2, out=hout)),
        "strided": (256, lambda: hout.view(8, 2048).copy_(ht.t())),
        "rmsnorm": (64, lambda: rmsnorm(h)),
        "gemm_norm": (32, lambda: rmsnorm(F.linear(h, w))),
        "gemm_only": (64, lambda: F.linear(h, w)),
    }
    mps = None
    try:
        import ctypes
        v = ctypes.c_int(-1)
        if ctypes.CDLL("libcuda.so.1").cuDeviceGetAttribute(ctypes.byref(v), 133, 0) == 0:
            mps = bool(v.value)
    except OSError:
        pass
    out = {"label": a.label, "mps_client": mps, "cases": {}}
    s = torch.cuda.Stream()
    for name in a.cases.split(","):
        if name not in cases:
            sys.exit(f"mps_kernels: unknown case {name!r} (known: {', '.join(cases)})")
        n, fn = cases[name]
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(n):
                fn()
        for _ in range(20):
            g.replay()
        torch.cuda.synchronize()
        gpu = []
        for _ in range(a.reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            gpu.append(e0.elapsed_time(e1) * 1000.0)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                g.replay()
                torch.cuda.synchronize()
        by = {}
        count = 0
        for ev in prof.events():
            if ev.device_type.name == "CUDA":
                by.setdefault(ev.name, []).append(ev.time_range.end - ev.time_range.start)
                count += 1
        per_replay = count / 5
        p50 = statistics.median(gpu)
        kernels = sorted(({"name": k[:120], "n": len(v) / 5, "us_median": statistics.median(v)}
                          for k, v in by.items()), key=lambda r: -r["n"] * r["us_median"])
        out["cases"][name] = {"repeats": n, "kernels_per_replay": per_replay, "gpu_us_p50": p50,
                              "gpu_us_p90": sorted(gpu)[int(0.9 * (len(gpu) - 1))],
                              "us_per_kernel": p50 / max(1, per_replay), "kernels": kernels}
        print(f"{a.label} {name}: MPS client {mps}: {per_replay:.0f} kernels, GPU {p50:.1f} us per replay, "
              f"{p50 / max(1, per_replay):.3f} us per kernel; "
              + "; ".join(f"{k['name'][:48]} {k['us_median']:.2f}" for k in kernels[:4]), flush=True)
        del g
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
