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


def hol_rows(w):
    """(run, mode, phase, hp p99 ms, hp p99 vs alone, be throughput vs alone, alone hp p99 ms) of the
    head-of-line runs."""
    rows = []
    alone = {}
    for name in ("hol", "hol-eager", "hol-250", "hol-steal"):
        try:
            res = json.load(open(os.path.join(w, name, "results.json")))
        except (OSError, ValueError):
            continue
        for m in sorted(res.get("modes", []), key=lambda m: m["mode"] != "alone"):
            for ph in m.get("phases", []):
                t = {x["name"]: x for x in ph.get("tenants", [])}
                if "hp" not in t:
                    continue
                p99 = t["hp"]["p99_ms"]["median"]
                if m["mode"] == "alone":
                    alone[(name, ph["name"])] = p99
                    continue
                be = t.get("be", {}).get("norm", {}).get("throughput", {}).get("median")
                rows.append((name, m["mode"], ph["name"], p99, t["hp"]["norm"]["p99"]["median"], be,
                             alone.get((name, ph["name"]))))
    return rows


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
        print("Coverage: GPU time of the measured steps (warm-up steps not counted); 'bounded' = in launches that "
              "were split or lasted at most one atom, i.e. behind which a waiting kernel waits at most one atom\n")
        print("| workload | steps | launches rewritten | GPU time rewritten | GPU time splittable | GPU time bounded "
              "| longest unbounded | load ms |\n|---|---:|---:|---:|---:|---:|---|---:|")
        for c in covs:
            if "bounded_time_share" not in c:
                continue
            top = c.get("top_unbounded") or []
            worst = f"{top[0]['name'][:40]} ({top[0]['ms']:.1f} ms)" if top else "-"
            print(f"| {c['workload']} | {c.get('warmup_steps', 0)}+{c['steps']} | {100 * c['launch_share']:.1f}% | "
                  f"{100 * c['time_share']:.1f}% | {100 * c['splittable_time_share']:.1f}% | "
                  f"{100 * c['bounded_time_share']:.1f}% | {worst} | {c['images']['load_ns'] / 1e6:.0f} |")
        print()
    rows = hol_rows(w)
    if rows:
        print("Head-of-line (lithos bench head-of-line-atoms; hol-250: lithosd's atoms of 250 us; "
              "target: HP P99 <= alone P99 + one atom)\n")
        print("| run | mode | BE kernel | HP P99 ms | vs alone | minus alone P99, in atoms | BE throughput vs alone |"
              "\n|---|---|---|---:|---:|---:|---:|")
        for name, mode, phase, p99, norm, be, alone_p99 in rows:
            atom_ms = (250 if name == "hol-250" else 500) / 1e3
            extra = (p99 - alone_p99) / atom_ms if alone_p99 else float("nan")
            be_s = f"{be:.2f}x" if be is not None else "-"
            print(f"| {name} | {mode} | {phase} | {p99:.3f} | {norm:.2f}x | {extra:.2f} | {be_s} |")
        print()


if __name__ == "__main__":
    main()
