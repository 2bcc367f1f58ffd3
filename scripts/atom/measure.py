#!/usr/bin/env python3
"""Atomizer cost and coverage measurements on the GPU (docs/atomizer.md).

    measure.py atomcost  --out F.json        cost of one more atom vs atom size (needs lithos --atomize)
    measure.py train     --out F.json --workload resnet50 [--seconds S]
                                             training steps/s (run with and without lithos, compare)
    measure.py coverage  --out F.json --workload W [--warmup 3 --steps 10]
                                             share of launches / GPU time in rewritten kernels, in
                                             splittable launches, and in launches that keep a waiting
                                             kernel to at most one atom (under lithos --atomize with
                                             LITHOS_ATOM_TIME=1; warm-up steps are not counted)

Each prints one line of JSON and writes it to --out.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))


def lithos():
    lib = ctypes.CDLL(None)
    try:
        lib.lithos_atom_configure.argtypes = [ctypes.c_uint, ctypes.c_double]
        lib.lithos_atom_report.argtypes = [ctypes.c_char_p]
        return lib
    except AttributeError:
        return None


def event_ms(fn, n):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def atomcost(args):
    """A kernel of `waves` waves of short blocks (a Triton spin kernel over
    every SM), run whole and as 2..256 atoms: the extra time per atom."""
    import workloads
    lib = lithos()
    if lib is None:
        raise SystemExit("atomcost needs liblithos.so with the atomizer (lithos run --atomize)")
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    waves = 64
    grid = sms * 2 * waves
    block = 32 * 32
    out = torch.empty(grid * block, device=dev)
    iters = 2000

    def launch():
        workloads._spin_kernel[(grid,)](out, iters, BLOCK=block, num_warps=32)

    launch()
    torch.cuda.synchronize()
    rows = []
    for atoms in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        lib.lithos_atom_configure(atoms, 0.0)
        launch()
        samples = [event_ms(launch, 5) for _ in range(5)]
        rows.append({"atoms": atoms, "ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples)})
        print(f"atoms {atoms:4d}: {rows[-1]['ms']:.3f} ms", file=sys.stderr)
    lib.lithos_atom_configure(0, 0.0)
    base = rows[0]["ms"]
    # Least-squares slope of time against atom count: the cost of one atom.
    xs = [r["atoms"] for r in rows]
    ys = [r["ms"] for r in rows]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    for r in rows:
        r["atom_us"] = 1000.0 * base / r["atoms"]
        r["overhead"] = r["ms"] / base - 1.0
    return {"measure": "atomcost", "kernel_ms": base, "waves": waves, "grid": grid,
            "per_atom_us": slope * 1000.0, "rows": rows}


def train(args):
    import workloads
    dev = torch.device("cuda")
    params = {"resnet50": {"batch": 128}, "bert-base": {"batch": 32, "seq": 512},
              "gpt": {"batch": 16, "seq": 1024}}[args.workload]
    torch.manual_seed(0)
    model, loss_fn = workloads._training_model(args.workload, params, dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    rates = []
    t_end = time.monotonic() + args.seconds
    while time.monotonic() < t_end:
        n = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            step()
            n += 1
            if n % 4 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        rates.append(n / (time.monotonic() - t0))
    res = {"measure": "train", "workload": args.workload, "params": params, "steps_per_s": statistics.median(rates),
           "min": min(rates), "max": max(rates), "windows": len(rates),
           "lithos": lithos() is not None, "atom_us": os.environ.get("LITHOS_ATOM_US")}
    lib = lithos()
    if lib is not None and args.report:
        lib.lithos_atom_report(args.report.encode())
    return res


def coverage(args):
    import workloads
    lib = lithos()
    if lib is None:
        raise SystemExit("coverage needs liblithos.so with the atomizer (lithos run --atomize, LITHOS_ATOM_TIME=1)")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    w = args.workload
    if w in ("resnet50", "bert-base"):
        params = {"resnet50": {"batch": 64}, "bert-base": {"batch": 16, "seq": 512}}[w]
        model, loss_fn = workloads._training_model(w, params, dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()
    else:
        params = {"llama1b-prefill": {"batch": 1, "seq": 1024}, "llama1b-decode": {"batch": 8, "ctx": 1024}}[w]
        _, fn = workloads._inference_model(w, params, dev)

        def step():
            with torch.no_grad():
                fn()

    def snapshot(path):
        torch.cuda.synchronize()
        if lib.lithos_atom_report(path.encode()) != 0:
            raise SystemExit("lithos_atom_report failed")
        return json.load(open(path))

    # Warm-up steps (module loading, first launches, allocator growth, cuDNN
    # autotuning) are left out: the counters are differenced between a
    # report after them and one after the measured steps.
    for _ in range(args.warmup):
        step()
    before = snapshot(args.out + ".warm.report.json")
    for _ in range(args.steps):
        step()
    rep = snapshot(args.out + ".report.json")
    return coverage_from_reports(before, rep, w, params, args)


NUMERIC = ("launches", "split_launches", "atoms", "timed", "timed_ns", "long_whole", "long_whole_ns")


def diff_kernels(before, after):
    """Per-kernel counters of `after` minus those of `before` (kernels keyed by name)."""
    old = {k["name"]: k for k in before.get("kernels", [])}
    out = []
    for k in after.get("kernels", []):
        o = old.get(k["name"], {})
        d = dict(k)
        for f in NUMERIC:
            d[f] = k.get(f, 0) - o.get(f, 0)
        d["whole"] = {r: v - o.get("whole", {}).get(r, 0) for r, v in k.get("whole", {}).items()}
        if d["launches"] > 0:
            out.append(d)
    return out


def coverage_from_reports(before, rep, w, params, args):
    kernels = diff_kernels(before, rep)
    launches = {"rewritten": 0, "other": 0}
    ns = {"rewritten": 0, "other": 0}
    splittable_ns = 0
    unbounded_ns = 0
    by_status = {}
    top_other = []
    top_unbounded = []
    for k in kernels:
        key = "rewritten" if k["status"] == "patched" else "other"
        launches[key] += k["launches"]
        scale = k["launches"] / k["timed"] if k["timed"] else 0
        t = k["timed_ns"] * scale
        ns[key] += t
        by_status[k["status"]] = by_status.get(k["status"], 0) + t
        # Launches that ran whole and lasted longer than one atom: a
        # high-priority kernel may wait for more than one atom behind them.
        long_t = k.get("long_whole_ns", 0) * scale
        unbounded_ns += long_t
        if long_t > 0:
            top_unbounded.append((long_t, k["name"][:120], k["status"], dict(k["whole"])))
        if key == "rewritten":
            structural = sum(v for r, v in k["whole"].items() if r in ("cooperative", "cluster-indivisible", "single-unit"))
            splittable_ns += t * (1 - structural / k["launches"])
        else:
            top_other.append((t, k["name"], k["status"]))
    total_l = sum(launches.values())
    total_ns = sum(ns.values())
    top_other.sort(reverse=True)
    top_unbounded.sort(reverse=True)
    share = (lambda x: x / total_ns) if total_ns else (lambda x: 0)
    return {"measure": "coverage", "workload": w, "params": params, "warmup_steps": args.warmup, "steps": args.steps,
            "atom_us": float(os.environ.get("LITHOS_ATOM_US", "500")),
            "launches": launches, "gpu_ns": ns,
            "launch_share": launches["rewritten"] / total_l if total_l else 0,
            "time_share": share(ns["rewritten"]),
            "splittable_time_share": share(splittable_ns),
            "bounded_time_share": 1 - share(unbounded_ns),
            "time_by_status": by_status,
            "top_not_rewritten": [{"ms": t / 1e6, "name": n[:120], "status": s} for t, n, s in top_other[:8]],
            "top_unbounded": [{"ms": t / 1e6, "name": n, "status": s, "whole": r} for t, n, s, r in top_unbounded[:8]],
            "images": {k: rep[k] for k in ("images_seen", "images_rewritten", "images_refused_by_driver", "images_jit",
                                            "kernels_patched", "kernels_unpatched", "load_ns", "unknown_launches",
                                            "unsupported_paths")}}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["atomcost", "train", "coverage"])
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="resnet50")
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3, help="coverage: steps run before counting starts")
    p.add_argument("--report")
    args = p.parse_args()
    res = {"atomcost": atomcost, "train": train, "coverage": coverage}[args.what](args)
    line = json.dumps(res)
    print(line)
    with open(args.out, "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
