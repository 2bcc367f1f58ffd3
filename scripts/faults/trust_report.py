#!/usr/bin/env python3
"""The table of scripts/faults/gpu-trust.sh, from the files it wrote in DIR,
and DIR/trust.json with the same numbers.

  trust_report.py DIR"""
import glob
import json
import os
import statistics
import sys


def lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def first(evs, name):
    for e in evs:
        if e.get("event") == name:
            return e
    return None


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def stopped(d, res):
    labels = ["plain", "stopped-hp", "stopped-be", "live-hp", "live-be"]
    rows = {}
    for lab in labels:
        files = sorted(glob.glob(f"{d}/{lab}-*.json"))
        runs = [lines(p) for p in files]
        tot = [r[0]["total_s"] for r in runs if r]
        walls = [w[0]["wall_s"] for w in (lines(p + ".wall") for p in files) if w]
        if tot:
            rows[lab] = {"runs": len(tot), "total_s_median": statistics.median(tot), "total_s": tot,
                         "wall_s_median": statistics.median(walls) if walls else None, "wall_s": walls}
    if not rows:
        return
    base = rows.get("plain", {}).get("total_s_median")
    wbase = rows.get("plain", {}).get("wall_s_median")
    print("\nA process of 200 GEMMs (gemms.py): its CUDA time (context included) and the whole process's wall time "
          "(python, torch, lithos run), medians of rounds")
    print(f"{'run':<12} {'rounds':>6} {'CUDA s':>7} {'vs plain':>9} {'wall s':>7} {'vs plain':>9}  CUDA s of each")
    for lab, r in rows.items():
        ratio = r["total_s_median"] / base if base else None
        wr = r["wall_s_median"] / wbase if wbase and r["wall_s_median"] else None
        r["vs_plain"], r["wall_vs_plain"] = ratio, wr
        print(f"{lab:<12} {r['runs']:>6} {r['total_s_median']:>7.3f} {ratio or 0:>8.3f}x {r['wall_s_median'] or 0:>7.2f} "
              f"{wr or 0:>8.3f}x  " + " ".join(f"{x:.3f}" for x in r["total_s"]))
    res["stopped"] = rows


def fault(d, label, res):
    train1 = lines(f"{d}/{label}-train1.jsonl")
    svc1 = lines(f"{d}/{label}-svc1.jsonl")
    polls = lines(f"{d}/{label}-status.jsonl")
    if not train1 and not polls:
        return
    r = {}
    fe = first(train1, "faulting")
    t_fault = fe["t"] if fe else None
    r["fault_t"] = t_fault
    # Detection: the first answer naming a fault; it says how old it is.
    for p in polls:
        f = p.get("fault") or {}
        cur = f.get("current") or f.get("last")
        if cur:
            r["detected_t"] = p["t"] - cur.get("age_s", 0)
            r["first_seen_poll_t"] = p["t"]
            break
    last = None
    for p in polls:
        f = p.get("fault") or {}
        if f.get("last"):
            last = f["last"]
        if f.get("current"):
            r.setdefault("states", [])
            if not r["states"] or r["states"][-1] != f["state"]:
                r["states"].append(f["state"])
    r["episode"] = last
    if t_fault and "detected_t" in r:
        r["detect_ms"] = (r["detected_t"] - t_fault) * 1e3
    err = first(svc1, "error")
    r["service"] = {"error": err.get("message") if err else None,
                    "error_after_ms": (err["t"] - t_fault) * 1e3 if err and t_fault else None,
                    "requests": sum(1 for e in svc1 if e.get("event") == "req"),
                    "done": first(svc1, "done") is not None, "rc": read(f"{d}/{label}-svc1.rc")}
    restart = read(f"{d}/{label}-restart.txt")
    r["restart_t"] = float(restart) if restart else None
    # New clients: the first answer in which a client of the tenant that
    # registered after the restart has launches (svc) or grants or launches
    # (train), and each new process's first request.
    for tenant, key in (("svc", "svc2"), ("train", "train2")):
        own = lines(f"{d}/{label}-{key}.jsonl")
        req = first(own, "req")
        # The last attempt's start (the one that ran).
        starts = [e for e in own if e.get("event") == "start"]
        start_t = starts[-1]["t"] if starts else None
        entry = {"first_request_after_fault_s": (req["t"] - t_fault) if req and t_fault else None,
                 "rc": read(f"{d}/{label}-{key}.rc"),
                 "attempts": sum(1 for e in own if "attempt" in e),
                 "errors": [e.get("message") for e in own if e.get("event") == "error"][:3]}
        if r["restart_t"]:
            for p in polls:
                if p["t"] < r["restart_t"]:
                    continue
                for c in p.get("clients") or []:
                    born = p["t"] - c.get("since_s", 1e9)
                    if c.get("tenant") == tenant and born >= r["restart_t"] - 0.5 and \
                            (c.get("launches", 0) > 0 or c.get("grants", 0) > 0):
                        entry["scheduled_after_fault_s"] = (p["t"] - t_fault) if t_fault else None
                        entry["scheduled_after_own_start_s"] = (p["t"] - start_t) if start_t else None
                        break
                if "scheduled_after_fault_s" in entry:
                    break
        r[key] = entry
    res[label] = r
    ep = last or {}
    print(f"\n{label}: fault at t0 (the trainer's 'faulting' line)")
    print(f"  detected after        {r.get('detect_ms', float('nan')):8.1f} ms  (states {r.get('states')})")
    print(f"  error / Xid           {ep.get('error_name')} / {ep.get('xid')}")
    print(f"  reported by           {[ (p['tenant'], p['pid']) for p in ep.get('reported_by', [])]}")
    print(f"  in flight             {[ (p['tenant'], p['pid'], p['inflight']) for p in ep.get('in_flight', [])]}")
    print(f"  affected              {[ (a['pid'], a['gone'], a['sigterm'], a['sigkill']) for a in ep.get('affected', [])]}")
    print(f"  episode               {ep.get('outcome')} after {ep.get('closed_after_ms')} ms")
    s = r["service"]
    print(f"  service               error={s['error']!r} after {s['error_after_ms']} ms, {s['requests']} requests, "
          f"done={s['done']}, rc={s['rc']}")
    for key in ("svc2", "train2"):
        e = r[key]
        fmt = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else str(v)
        print(f"  new {key:<6}            started {fmt(r['restart_t'] - t_fault if r['restart_t'] and t_fault else None)} s "
              f"after the fault, scheduled {fmt(e.get('scheduled_after_fault_s'))} s after it "
              f"({fmt(e.get('scheduled_after_own_start_s'))} s after its own start: python, torch, CUDA), first request "
              f"{fmt(e.get('first_request_after_fault_s'))} s, rc={e['rc']}, attempts {e['attempts']} "
              f"{e['errors'] if e['errors'] else ''}")


def cost(d, res):
    reqs = lambda pat: [e["ms"] for p in sorted(glob.glob(pat)) for e in lines(p) if e.get("event") == "req"]
    alone = reqs(f"{d}/cost-alone-*.jsonl")
    if not alone:
        return
    rows = {"alone": alone}
    for t in ("train", "untrusted"):
        rows[t] = reqs(f"{d}/cost-{t}-[0-9].jsonl")
    print("\nThe service (100 requests/s, all rounds pooled) beside a trainer inside MPS (train) and outside MPS "
          "(untrusted)")
    print(f"{'beside':<10} {'requests':>8} {'P50 ms':>8} {'P99 ms':>8} {'P99/alone':>10} {'trainer steps/s':>16}")
    out = {}
    for k, xs in rows.items():
        p50, p99 = pct(xs, 0.5), pct(xs, 0.99)
        rates = []
        for p in sorted(glob.glob(f"{d}/cost-{k}-*-trainer.jsonl")) if k != "alone" else []:
            steps = [e["t"] for e in lines(p) if e.get("event") == "req"]
            if len(steps) > 1:
                rates.append((len(steps) - 1) / (steps[-1] - steps[0]))
        sps = statistics.median(rates) if rates else None
        out[k] = {"requests": len(xs), "p50_ms": p50, "p99_ms": p99, "trainer_steps_per_s": sps,
                  "p99_vs_alone": p99 / pct(alone, 0.99) if p99 else None}
        print(f"{k:<10} {len(xs):>8} {p50 or 0:>8.2f} {p99 or 0:>8.2f} {out[k]['p99_vs_alone'] or 0:>9.2f}x "
              f"{sps if sps else 0:>16.2f}")
    res["cost"] = out


def main():
    d = sys.argv[1]
    res = {"commit": read(f"{d}/commit.txt"), "gpu": read(f"{d}/gpu.txt")}
    print(f"lithos {res['commit']} on {res['gpu']}")
    stopped(d, res)
    for label in ("fault", "linger", "outside"):
        fault(d, label, res)
    cost(d, res)
    with open(os.path.join(d, "trust.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
