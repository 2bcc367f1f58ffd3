#!/usr/bin/env python3
"""Checks the output of `lithos calibrate --json` against the H100 facts
(../shared/docs/h100-facts.md section 1) and prints the summary table of
scripts/gpu/calibrate-check.sh.

usage: check_calibration.py OUT_DIR
Reads OUT_DIR/{calibrate-fresh,calibrate-cached,confinement}.json and
OUT_DIR/times.txt; writes OUT_DIR/checks.txt; exit status 0 when every check
passed.
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001 - report any failure as a check
        return {"_error": f"{os.path.basename(path)}: {e}"}


def main():
    out = sys.argv[1]
    fresh = load(os.path.join(out, "calibrate-fresh.json"))
    cached = load(os.path.join(out, "calibrate-cached.json"))
    conf = load(os.path.join(out, "confinement.json"))
    times = {}
    try:
        with open(os.path.join(out, "times.txt")) as f:
            for line in f:
                k, v = line.split()
                times[k] = float(v)
    except Exception:  # noqa: BLE001
        pass
    results = []

    def check(name, ok, detail=""):
        results.append((name, bool(ok), detail))

    if "_error" in fresh:
        check("fresh calibration ran", False, fresh["_error"])
    else:
        slot = {s["slot"]: s["tpc"] for s in fresh["slots"]}
        sms = {s["slot"]: s["sms"] for s in fresh["slots"]}
        check("fresh calibration ran", fresh["source"] == "calibrated", fresh["source"])
        check("QMD layout V04_00", fresh.get("qmd_version") == "V04_00", str(fresh.get("qmd_version")))
        check("live TPCs 66 of 132 SMs", fresh["live_tpcs"] == 66 and fresh["sm_count"] == 132,
              f'{fresh["live_tpcs"]} TPCs, {fresh["sm_count"]} SMs')
        stated = {0: [0, 1], 1: [16, 17], 2: [32, 33], 3: [48, 49], 9: [2, 3], 10: [18, 19],
                  62: [120, 121], 63: [14, 15], 64: [30, 31], 71: [122, 123]}
        bad = [f"{s}->{sms.get(s)}" for s, want in stated.items() if sms.get(s) != want]
        check("stated slot -> SM pairs", not bad, ", ".join(bad) or "all 10 match")
        dead = [4, 5, 6, 7, 8, 17, 26, 35, 44, 53]
        alive = [s for s in dead if s in slot]
        check("stated dead slots 4-8,17,26,35,44,53", not alive, f"live: {alive}" if alive else "all dead")
        below = sum(1 for s in slot if s < 72)
        check("slots 0-71 reach 62 TPCs", below == 62, str(below))
        high_sms = sorted(sm for s, pair in sms.items() if s >= 72 for sm in pair)
        check("SMs 124-131 answer to slots >= 72", high_sms == list(range(124, 132)),
              f"slots {sorted(s for s in slot if s >= 72)}")
        counts = sorted({g["live"] for g in fresh["groups"][:8]})
        check("groups of 9 (slots 0-71) hold 4, 8 or 9", set(counts) <= {4, 8, 9},
              " ".join(str(g["live"]) for g in fresh["groups"]))
        check("calibration under 10 s", times.get("fresh", 99) < 10, f'{times.get("fresh", "?")} s')
    if "_error" in cached:
        check("cached load", False, cached["_error"])
    else:
        same = "_error" not in fresh and cached["slots"] == fresh["slots"]
        check("second run loads the cache", cached["source"] == "cache", cached["source"])
        check("cached map equals fresh map", same)
    if "_error" in conf:
        check("confinement checks ran", False, conf["_error"])
    else:
        for c in conf.get("checks", []):
            if c.get("refused"):
                want_refused = c["tpcs"] in ("66", "66-70")
                check(f'{c["backend"]} {c["tpcs"]} refused', want_refused, c["error"])
            else:
                check(f'{c["backend"]} {c["tpcs"]} confined', c["exact"],
                      f'{c["seen_sms"]}/{c["expected_sms"]} SMs, setup {c["setup_ms"]:.2f} ms'
                      + (f', unexpected {c["unexpected"]}' if c["unexpected"] else "")
                      + (f', missing {c["missing"]}' if c["missing"] else ""))
        g = conf.get("green", {})
        if "error" in g:
            check("green-context catalog", False, g["error"])
        elif g:
            check("green-context catalog", g.get("groups") == 66, f'{g.get("groups")} groups in {g.get("catalog_ms", 0):.1f} ms')

    width = max(len(r[0]) for r in results)
    lines = [f"{'check'.ljust(width)}  ok    detail"]
    for name, ok, detail in results:
        lines.append(f"{name.ljust(width)}  {'yes' if ok else 'NO '}   {detail}")
    lines.append("")
    lines.append("times: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
    text = "\n".join(lines)
    with open(os.path.join(out, "checks.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
