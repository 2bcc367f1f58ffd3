#!/usr/bin/env python3
"""Where a best-effort queue's time goes in a lithosd trace (LITHOSD_TRACE):
for each queue of the chosen tenants, the time between one atom's observed
end and the next atom's dispatch when the queue had nothing left in flight
(the GPU had nothing of this queue to run then), split by whose it was:

  client   the next launch was not submitted yet (the application, or the
           deferred-launch worker, was late)
  daemon   it was submitted but the daemon granted it later (throttle,
           placement, or a wait for the queue's last completion)

and, for the atoms granted, how many TPCs they got (weighted by how long
they ran), how often the Engine had no prediction, and how the predictions
compared with the observed run time. Times are the daemon's (markers read
from host memory), so the detection delay and the launch latency after a
grant are not in the gaps: each gap counted is a stretch with at least that
much idle on the GPU. Prints a table; --json for one JSON object.

  pipeline_gaps.py TRACE.jsonl [--tenant NAME ...] [--json]
"""
import argparse
import json
import statistics
import sys


def quantile(v, q):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def analyse(lines, tenants):
    names = {}  # tenant id -> name
    queue_tenant = {}
    submits = {}  # launch -> submit time
    atoms = {}  # atom id (reused) -> open record
    done = []  # finished atom records
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("e")
        if kind == "add_tenant" and e.get("ok"):
            names[e["tenant"]] = e["name"]
        elif kind == "add_queue" and e.get("ok"):
            queue_tenant[e["queue"]] = e["tenant"]
        elif kind == "submit" and e.get("ok"):
            submits[e["launch"]] = e["t"]
        elif kind == "dispatch":
            for a in e["atoms"]:
                atoms[a["atom"]] = {
                    "queue": a["queue"], "launch": a["launch"], "index": a["index"], "t": e["t"],
                    "tpcs": a["tpcs"], "pred": a.get("pred_ns"),
                    "submit": submits.get(a["launch"]) if a["index"] == 0 else None,
                }
        elif kind == "atom_finished" and e.get("atom") in atoms:
            r = atoms.pop(e["atom"])
            r["start"], r["end"] = e["start"], e["t"]
            done.append(r)
    want = {t for t, n in names.items() if not tenants or n in tenants}
    by_queue = {}
    for r in done:
        if queue_tenant.get(r["queue"]) in want:
            by_queue.setdefault(r["queue"], []).append(r)
    out = {"queues": {}, "tpcs": {}, "atoms": 0}
    ratios, no_pred, tpc_time, ran_all = [], 0, {}, []
    span = client = daemon = 0
    gaps = {"client": [], "daemon": []}  # each drained stretch, by whose it was
    for q, rs in by_queue.items():
        rs.sort(key=lambda r: r["t"])
        q_client = q_daemon = 0
        # Walk the dispatches; track when the queue's in-flight work drained.
        inflight_end = None  # latest observed end of atoms dispatched so far
        for r in rs:
            if inflight_end is not None and r["t"] > inflight_end:
                gap = r["t"] - inflight_end
                sub = r["submit"]
                if sub is not None and sub > inflight_end:
                    q_client += min(gap, sub - inflight_end)
                    q_daemon += max(0, r["t"] - sub)
                    gaps["client"].append(gap)
                else:
                    q_daemon += gap
                    gaps["daemon"].append(gap)
            inflight_end = r["end"] if inflight_end is None else max(inflight_end, r["end"])
        q_span = rs[-1]["end"] - rs[0]["t"]
        span += q_span
        client += q_client
        daemon += q_daemon
        out["queues"][str(q)] = {"tenant": names.get(queue_tenant.get(q)), "atoms": len(rs), "span_ms": q_span / 1e6,
                                 "idle_client_ms": q_client / 1e6, "idle_daemon_ms": q_daemon / 1e6}
        for r in rs:
            ran = r["end"] - r["start"]
            ran_all.append(ran)
            n = count_tpcs(r["tpcs"])
            tpc_time[n] = tpc_time.get(n, 0) + ran
            if r["pred"] is None:
                no_pred += 1
            elif r["pred"] > 0 and ran > 0:
                ratios.append(ran / r["pred"])
        out["atoms"] += len(rs)
    total = sum(tpc_time.values()) or 1
    out["tpcs"] = {str(k): round(v / total, 4) for k, v in sorted(tpc_time.items())}
    out["span_ms"] = span / 1e6
    out["idle_client_frac"] = client / span if span else None
    out["idle_daemon_frac"] = daemon / span if span else None
    out["drains"] = {k: {"count": len(v), "p50_us": (quantile(v, 0.5) or 0) / 1e3, "p90_us": (quantile(v, 0.9) or 0) / 1e3,
                         "ms_by_length": by_length(v)}
                     for k, v in gaps.items()}
    out["no_prediction_frac"] = no_pred / out["atoms"] if out["atoms"] else None
    # How long one atom ran (observed start to end): what an owner coming
    # back may wait for.
    out["atom_us"] = {k: (quantile(ran_all, q) or 0) / 1e3 for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    out["atom_us"]["max"] = max(ran_all, default=0) / 1e3
    out["ran_over_pred"] = {"p10": quantile(ratios, 0.1), "p50": quantile(ratios, 0.5), "p90": quantile(ratios, 0.9),
                            "mean": statistics.fmean(ratios) if ratios else None}
    return out


# Drained stretches by length: short ones are the launch pipeline's (a
# launch not ready in time), long ones the application's own (a step's end).
LENGTH_EDGES_US = [(20, "<20us"), (100, "20-100us"), (1000, "0.1-1ms"), (10000, "1-10ms"), (float("inf"), ">10ms")]


def by_length(gaps_ns):
    """Milliseconds of drained stretches per length bucket."""
    out = {label: 0.0 for _, label in LENGTH_EDGES_US}
    for g in gaps_ns:
        for edge, label in LENGTH_EDGES_US:
            if g / 1e3 < edge:
                out[label] += g / 1e6
                break
    return {k: round(v, 1) for k, v in out.items()}


def count_tpcs(s):
    """TPCs in a TpcSet's text form ("0-7,9,12-13")."""
    n = 0
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            n += int(hi) - int(lo) + 1
        else:
            n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--tenant", action="append", default=[], help="only this tenant's queues (repeatable)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            out = analyse(f, set(args.tenant))
    except OSError as e:
        sys.exit(f"pipeline_gaps.py: {e}")
    if args.json:
        print(json.dumps(out))
        return
    print(f"atoms {out['atoms']}, queue span {out['span_ms']:.0f} ms; queue empty waiting for the client "
          f"{100 * (out['idle_client_frac'] or 0):.1f}%, for the daemon {100 * (out['idle_daemon_frac'] or 0):.1f}%")
    for k, v in out["drains"].items():
        print(f"  drained, {k}'s: {v['count']} times, p50 {v['p50_us']:.1f} us, p90 {v['p90_us']:.1f} us; ms by length: "
              + ", ".join(f"{b} {ms:.0f}" for b, ms in v["ms_by_length"].items()))
    r = out["ran_over_pred"]
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    print(f"no prediction {100 * (out['no_prediction_frac'] or 0):.1f}% of atoms; ran/predicted p10 {fmt(r['p10'])} "
          f"p50 {fmt(r['p50'])} p90 {fmt(r['p90'])} mean {fmt(r['mean'])}")
    a = out["atom_us"]
    print(f"atom run time p50 {a['p50']:.0f} us, p90 {a['p90']:.0f} us, p99 {a['p99']:.0f} us, max {a['max']:.0f} us")
    print("TPCs granted (share of run time): " + ", ".join(f"{k}: {100 * v:.1f}%" for k, v in out["tpcs"].items()))
    for q, v in out["queues"].items():
        print(f"  queue {q} ({v['tenant']}): {v['atoms']} atoms over {v['span_ms']:.0f} ms, "
              f"idle client {v['idle_client_ms']:.1f} ms, daemon {v['idle_daemon_ms']:.1f} ms")


if __name__ == "__main__":
    main()
