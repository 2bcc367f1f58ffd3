#!/usr/bin/env python3
"""When does lithosd learn that a launch ended? (issue 12: completion
detection within 20 us.)

probe N OUT.json   (run as a high-priority tenant of a tracing lithosd)
    N tiny launches, 1 ms apart (the daemon keeps spinning: it sleeps only
    after 2 ms without events), each timed on the host with CLOCK_MONOTONIC
    (the daemon's clock) just before and after the launch call; then the
    same launches followed by torch.cuda.synchronize(), whose return is when
    a host that spins on the stream learns of the end.
analyse TRACE OUT.json
    Matches each probe launch with the trace's submit_running event reported
    within 0.5 ms of its launch call, and that atom's atom_finished (the time
    the daemon saw the completion marker). Prints one JSON line: quantiles
    (us) of seen - before (launch call to the daemon knowing), of the same
    for synchronize(), and their difference of medians: the detection delay
    beyond what a spinning host gets."""
import bisect
import json
import sys
import time


def probe(n, out):
    import torch

    x = torch.zeros(1, device="cuda")
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    before, after, synced = [], [], []
    for _ in range(n):
        time.sleep(0.001)
        t0 = time.monotonic_ns()
        x.add_(1)
        before.append(t0)
        after.append(time.monotonic_ns())
    time.sleep(0.01)
    for _ in range(n):
        time.sleep(0.001)
        t0 = time.monotonic_ns()
        x.add_(1)
        torch.cuda.synchronize()
        synced.append(time.monotonic_ns() - t0)
    json.dump({"before": before, "after": after, "sync_ns": synced}, open(out, "w"))


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] / 1e3


def analyse(trace, out):
    p = json.load(open(out))
    running, seen = [], {}
    with open(trace) as f:
        next(f)  # header
        for line in f:
            e = json.loads(line)
            k = e["e"]
            if k == "submit_running" and e["ok"]:
                running.append((e["queue"], e["atoms"][0]["atom"], e["t"], len(running)))
            elif k == "atom_finished":
                seen.setdefault(e["atom"], []).append(e["t"])
    # Atom ids are reused: the k-th finish of an id belongs to its k-th use.
    uses, launches = {}, []
    for queue, atom, t, _ in running:
        i = uses.get(atom, 0)
        uses[atom] = i + 1
        ends = seen.get(atom, [])
        launches.append((queue, t, ends[i] if i < len(ends) else None))
    # A probe launch is the one the daemon saw reported within 0.5 ms of its
    # launch call (they are 1 ms apart).
    launches.sort(key=lambda l: l[1])
    times = [t for _, t, _ in launches]
    n = len(p["before"])
    seen_us, report_us = [], []
    for b, a in zip(p["before"], p["after"]):
        i = bisect.bisect_left(times, b)
        if i == len(times) or times[i] > b + 500_000 or launches[i][2] is None:
            continue
        seen_us.append(launches[i][2] - b)
        report_us.append(times[i] - a)
    if not seen_us:
        sys.exit("none of the probe's launches is in the trace")
    res = {
        "launches": n,
        "matched": len(seen_us),
        "daemon_sees_end_us": {"p50": q(seen_us, 0.5), "p90": q(seen_us, 0.9), "p99": q(seen_us, 0.99)},
        "sync_returns_us": {"p50": q(p["sync_ns"], 0.5), "p90": q(p["sync_ns"], 0.9), "p99": q(p["sync_ns"], 0.99)},
        "report_after_launch_us": {"p50": q(report_us, 0.5), "p99": q(report_us, 0.99)},
    }
    res["detection_delay_us_p50"] = res["daemon_sees_end_us"]["p50"] - res["sync_returns_us"]["p50"]
    print(json.dumps(res))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "probe":
        probe(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "analyse":
        analyse(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
