#!/usr/bin/env python3
"""The cluster and cooperative facts behind safe masks, on the GPU (docs/safe-masks.md).

    python3 scripts/safe/topo_run.py --probe build/safe/topo_probe --lithos build/release/bin/lithos --out DIR

1. `lithos calibrate --json` (slot map), 2. `topo_probe qmd` (which descriptor
bytes carry the cluster shape), 3. `topo_probe discover` (GPCs from clusters,
no masks), 4. confined launches, each in its own process under a watchdog:
cluster sizes 2-16 on k TPCs of one GPC, across GPCs, the fine sets that hung
PyTorch, and cooperative grids at and beyond the set's capacity. Writes
topo.json and prints a table. A "hung" launch is killed; that is the point of
the negative cases (expected: hang).
"""
import argparse
import json
import os
import subprocess
import sys
import time


def sh(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out, "timeout"


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                # a run killed mid-line: close the object
                try:
                    return json.loads(line + ', "result": "hung"}')
                except json.JSONDecodeError:
                    return {"raw": line}
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--lithos", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=240)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": os.environ.get("LITHOS_COMMIT", "?")}
    env = dict(os.environ, LITHOS_CACHE_DIR=os.path.join(args.out, "cache"))
    p = subprocess.run([args.lithos, "calibrate", "--json", "--force"], capture_output=True, text=True, env=env,
                       timeout=120)
    cal = json.loads(p.stdout)
    res["calibrate"] = {k: cal.get(k) for k in ("gpu_uuid", "gpu_name", "driver_version", "live_tpcs", "groups")}
    smap = cal["cache_path"]
    rc, out, err = sh([args.probe, "qmd"], 60)
    res["qmd"] = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    print("\n".join(out.splitlines()), flush=True)
    rc, out, err = sh([args.probe, "discover", smap], 120)
    disc = last_json(out)
    res["discover"] = disc
    print(json.dumps(disc), flush=True)
    gpcs = [g["tpcs"] for g in disc.get("gpcs", [])]
    slots = {}
    for g in disc.get("gpcs", []):
        for t, s in zip(g["tpcs"], g["slots"]):
            slots[t] = s
    groups = [g["tpcs"] for g in cal["groups"] if g["tpcs"]]
    res["groups_are_gpcs"] = sorted(map(sorted, groups)) == sorted(map(sorted, gpcs))

    def tpcs_text(ts):
        return ",".join(str(t) for t in sorted(ts))

    runs = []

    def run(name, ts, c, smem, grid, coop=False, expect=None):
        if time.time() - t0 > args.budget_s:
            return
        cmd = [args.probe, "run", smap, ts if isinstance(ts, str) else tpcs_text(ts), str(c), str(smem), str(grid)]
        if coop:
            cmd.append("coop")
        rc, out, err = sh(cmd, 8)
        r = last_json(out)
        if rc == 124 or r.get("result") is None:
            r["result"] = r.get("result", "hung" if rc in (3, 124) else "error")
        r.update(name=name, rc=rc, expect=expect)
        runs.append(r)
        print(f"{name:40s} tpcs={r.get('n_tpcs')!s:3s} c={c:2d} smem={smem:6d} grid={grid:5d} "
              f"bps={r.get('blocks_per_sm')} -> {r['result']} (expect {expect}) "
              f"outside={r.get('outside')} dsmem_bad={r.get('dsmem_bad')} sync_bad={r.get('sync_bad')}",
              flush=True)
        if r["result"] == "hung":
            time.sleep(0.5)  # let the driver tear the killed context down

    one = 150 * 1024  # one block per SM
    if gpcs:
        big = sorted(gpcs, key=len, reverse=True)
        g0 = big[0]
        g1 = big[1] if len(big) > 1 else []
        # k TPCs of one GPC, 1 block/SM: needs c/2 TPCs
        for c in (2, 4, 8, 16):
            need = c // 2
            if len(g0) >= need:
                run(f"gpc0 k={need} c={c}", g0[:need], c, one, c * 4, expect="ran")
        for c in (4, 8, 16):
            need = c // 2
            if len(g0) >= need:
                run(f"gpc0 k={need - 1} c={c}", g0[:need - 1], c, one, c * 4, expect="hung")
        # every GPC hosts clusters of its own size class
        for i, g in enumerate(gpcs):
            c = 8 if len(g) >= 4 else 4
            run(f"gpc{i}({len(g)}) k={c // 2} c={c}", g[:c // 2], c, one, c * 2, expect="ran")
            if len(g) >= 8:
                run(f"gpc{i}({len(g)}) k=8 c=16", g[:8], 16, one, 32, expect="ran")
        # two GPCs, one TPC each: 4 SMs in all, but 2 per GPC
        if g1:
            run("gpc0+gpc1 1+1 c=4", [g0[0], g1[0]], 4, one, 16, expect="hung")
        # more blocks per SM: clusters may share an SM
        run("gpc0 k=1 c=4 bps~2", g0[:1], 4, 100 * 1024, 16, expect="ran?")
        run("gpc0 k=1 c=8 bps~4", g0[:1], 8, 40 * 1024, 32, expect="ran?")
        run("gpc0 k=1 c=8 bps~8", g0[:1], 8, 0, 32, expect="ran?")
    # the fine sets that hung PyTorch before
    for ts in ("0-7", "0-12", "0-15", "40-52", "53-65"):
        for c in (2, 4):
            run(f"fine {ts} c={c}", ts, c, one, c * 8, expect=None)
    # cooperative: capacity = blocks/SM x SMs of the set
    if gpcs:
        g = sorted(gpcs, key=len, reverse=True)[0]
        n = len(g)
        rc, out, err = sh([args.probe, "run", smap, tpcs_text(g), "1", "0", "1", "coop"], 8)
        bps = last_json(out).get("blocks_per_sm") or 1
        run(f"coop gpc0 grid=cap", g, 1, 0, bps * 2 * n, coop=True, expect="ran")
        run(f"coop gpc0 grid=cap+1", g, 1, 0, bps * 2 * n + 1, coop=True, expect="hung")
        run(f"coop 0-7 grid=cap", "0-7", 1, 0, bps * 16, coop=True, expect="ran")
        run(f"coop 0-7 grid=132*bps", "0-7", 1, 0, bps * 132, coop=True, expect="hung")
    res["runs"] = runs
    res["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "topo.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"groups_are_gpcs={res['groups_are_gpcs']}  gpcs={[len(g) for g in gpcs]}  "
          f"groups={[len(g) for g in groups]}  {len(runs)} runs in {res['seconds']:.0f} s")
    bad = [r for r in runs if r.get("expect") in ("ran", "hung") and r["result"] != r["expect"]]
    print(f"unexpected: {len(bad)}")
    for r in bad:
        print("  ", r["name"], r["result"])


if __name__ == "__main__":
    sys.exit(main())
