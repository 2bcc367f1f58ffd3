#!/usr/bin/env python3
"""Prints the atomizer evidence of one gpu-atom.sh run as a markdown table.

    summary.py WORKDIR
"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


STRUCTURAL = ("cooperative", "cluster-indivisible", "single-unit")


def unsplittable_long_ms(report_path, atom_us=500.0):
    """GPU time of launches that could not be split although a launch of
    that kernel lasts longer than one atom (mean of its timed launches):
    the time that can still block another tenant for more than one atom."""
    try:
        rep = json.load(open(report_path))
    except (OSError, ValueError):
        return 0.0
    ms = 0.0
    for k in rep["kernels"]:
        if not k["timed"]:
            continue
        mean_us = k["timed_ns"] / k["timed"] / 1e3
        whole = sum(v for r, v in k["whole"].items() if r in STRUCTURAL)
        if k["status"] != "patched":
            whole = k["launches"]
        if mean_us > atom_us:
            ms += whole * mean_us / 1e3
    return ms


def main():
    w = sys.argv[1]
    print("## Atomizer evidence\n")
    comps = sorted(glob.glob(os.path.join(w, "compare-*.txt")))
    if comps:
        print("| corpus run | result |\n|---|---|")
        for c in comps:
            lines = open(c).read().strip().splitlines()
            print(f"| {os.path.basename(c)[8:-4]} | {lines[-1] if lines else 'no output'} |")
        print()
    ac = load(os.path.join(w, "atomcost.json"))
    if ac:
        print(f"Per-atom cost: {ac['per_atom_us']:.1f} us (slope over 1..256 atoms of a {ac['kernel_ms']:.2f} ms kernel)\n")
        print("| atoms | atom us | ms | overhead |\n|---:|---:|---:|---:|")
        for r in ac["rows"]:
            print(f"| {r['atoms']} | {r['atom_us']:.0f} | {r['ms']:.3f} | {100 * r['overhead']:+.1f}% |")
        print()
    base = [load(p) for p in sorted(glob.glob(os.path.join(w, "train-*-base*.json"))) if not p.endswith(".report.json")]
    base = [b for b in base if b]
    if base:
        b = sum(x["steps_per_s"] for x in base) / len(base)
        runs = ", ".join("%.2f" % x["steps_per_s"] for x in base)
        print(f"Training throughput (baseline without lithos: {b:.2f} steps/s, runs {runs})\n")
        print("| atom target | steps/s | vs baseline | atoms split |\n|---:|---:|---:|---:|")
        for us in (250, 500, 1000):
            for p in glob.glob(os.path.join(w, f"train-*-{us}.json")):
                r = load(p)
                if not r:
                    continue
                rep = load(p.replace(".json", ".report.json"))
                split = sum(k["split_launches"] for k in rep["kernels"]) if rep else 0
                print(f"| {us} us | {r['steps_per_s']:.2f} | {r['steps_per_s'] / b:.3f}x | {split} |")
        print()
    covs = [load(p) for p in sorted(glob.glob(os.path.join(w, "coverage-*.json"))) if not p.endswith(".report.json")]
    covs = [c for c in covs if c]
    if covs:
        print("| workload | launches rewritten | GPU time rewritten | GPU time splittable | unsplittable in launches > 500 us "
              "| load ms |\n|---|---:|---:|---:|---:|---:|")
        for c in covs:
            long_ms = unsplittable_long_ms(os.path.join(w, f"coverage-{c['workload']}.json.report.json"))
            total_ms = sum(c["gpu_ns"].values()) / 1e6
            print(f"| {c['workload']} | {100 * c['launch_share']:.1f}% | {100 * c['time_share']:.1f}% | "
                  f"{100 * c['splittable_time_share']:.1f}% | {100 * long_ms / total_ms:.1f}% | "
                  f"{c['images']['load_ns'] / 1e6:.0f} |")
        print()


if __name__ == "__main__":
    main()
