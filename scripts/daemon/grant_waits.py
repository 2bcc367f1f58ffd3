#!/usr/bin/env python3
"""Where best-effort launches wait in a lithosd trace (LITHOSD_TRACE): per
kernel identity, how many launches were submitted, how long each waited
from its submit to its first atom's dispatch, what the Engine predicted
for its atoms and how long they ran. Prints the kernels with the most
total wait first (gpu-daemon.sh, phase "graphs").

  grant_waits.py TRACE.jsonl [TOP]
"""
import json
import statistics
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    submits, first_dispatch, preds, runs, atom_kernel = {}, {}, {}, {}, {}
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            kind = e.get("e")
            if kind == "submit" and e.get("ok"):
                l = e["l"]
                tag = l["kernel"] + (" graph" if l.get("indivisible") and l.get("grid") == [1, 1, 1] else "")
                tag += " pinned " + l["pinned"] if "pinned" in l else ""
                submits[e["launch"]] = (tag, e["t"])
            elif kind == "dispatch":
                for a in e["atoms"]:
                    first_dispatch.setdefault(a["launch"], e["t"])
                    tag = submits.get(a["launch"], ("?", 0))[0]
                    atom_kernel[a["atom"]] = tag
                    if a.get("pred_ns") is not None:
                        preds.setdefault(tag, []).append(a["pred_ns"])
            elif kind == "atom_finished" and e.get("atom") in atom_kernel:
                runs.setdefault(atom_kernel[e["atom"]], []).append(e["t"] - e["start"])
    waits = {}
    for launch, (tag, t) in submits.items():
        if launch in first_dispatch:
            waits.setdefault(tag, []).append(first_dispatch[launch] - t)
    rows = sorted(waits.items(), key=lambda kv: -sum(kv[1]))[:top]
    print("kernel                          launches  wait p50 us  wait max us  pred p50 us  ran p50 us")
    for tag, w in rows:
        med = lambda v: statistics.median(v) / 1e3 if v else float("nan")  # noqa: E731
        print(f"{tag[:31]:31s} {len(w):9d} {med(w):12.1f} {max(w) / 1e3:12.1f} {med(preds.get(tag, [])):12.1f} "
              f"{med(runs.get(tag, [])):11.1f}")


if __name__ == "__main__":
    main()
