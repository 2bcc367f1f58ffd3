#!/usr/bin/env python3
"""The host cost of a launch, measured in lock step: one long-lived worker
process per label (plain, `lithos run`, an hp tenant of lithosd, ...), each
running scripts/daemon/launch_cost.py in its serve mode, all started at once
and then asked in turn for a short burst of launches, round after round, the
order rotated every round. A machine whose speed drifts between seconds (the
GPU machines' host time per launch jumps between ~7.5 and ~10.5 us from one
repetition to the next) then drifts for every label alike, and the per-round
differences between labels cancel it: the table gives each label's median
host time per launch and, per round, its difference from the first label
(and from the second), as a median with the quartiles.

    launch_cost_lockstep.py --run plain: --run interposed:"lithos run --" \\
        --run hp:"lithos run --tenant svc --daemon SOCK --" [--graph] \\
        [--rounds 40] [--launches 2000] [--json OUT.json] [--logs DIR]

Each --run is LABEL:COMMAND PREFIX (split like a shell would; empty for a
plain process); the worker is that prefix followed by
`python3 launch_cost.py serve [graph]`. --graph replays a captured one-add
CUDA graph instead of launching the kernel (the path of a CUDA-graph
service). Needs a GPU and PyTorch; the workers share the GPU, one burst at a
time."""
import argparse
import json
import os
import select
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def quartiles(v):
    if len(v) < 2:
        return (v[0], v[0], v[0]) if v else (float("nan"),) * 3
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], statistics.median(v), q[2]


class Worker:
    def __init__(self, label, prefix, graph, logs):
        self.label = label
        argv = prefix + [sys.executable, os.path.join(HERE, "launch_cost.py"), "serve"] + (["graph"] if graph else [])
        err = open(os.path.join(logs, f"lockstep-{label}.err"), "w") if logs else subprocess.DEVNULL
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)

    def read(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.label}: no answer in {timeout:.0f} s")
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                line = self.p.stdout.readline()
                if not line:
                    raise RuntimeError(f"{self.label}: the worker exited (status {self.p.wait()})")
                return line.strip()

    def burst(self, n, timeout):
        self.p.stdin.write(f"{n}\n")
        self.p.stdin.flush()
        return json.loads(self.read(timeout))

    def stop(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--run", action="append", required=True, metavar="LABEL:PREFIX",
                    help="a worker: label, a colon, the command prefix (may be empty); repeat, first is the reference")
    ap.add_argument("--graph", action="store_true", help="replay a one-kernel CUDA graph instead of launching")
    ap.add_argument("--rounds", type=int, default=40, help="rounds, every label once per round (default 40)")
    ap.add_argument("--launches", type=int, default=2000, help="launches per burst (default 2000)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for a worker's answer (default 120)")
    ap.add_argument("--json", help="write every burst and the summary here")
    ap.add_argument("--logs", help="directory for the workers' stderr")
    a = ap.parse_args()
    if a.rounds < 1 or a.launches < 1:
        ap.error("--rounds and --launches must be positive")
    runs = []
    for spec in a.run:
        label, sep, prefix = spec.partition(":")
        if not sep or not label or not label.replace("-", "").replace("_", "").isalnum():
            ap.error(f"--run {spec!r}: expected LABEL:PREFIX with a label of letters, digits, - and _")
        if label in (r[0] for r in runs):
            ap.error(f"--run: label {label} given twice")
        runs.append((label, shlex.split(prefix)))
    if a.logs:
        os.makedirs(a.logs, exist_ok=True)
    workers = [Worker(label, prefix, a.graph, a.logs) for label, prefix in runs]
    samples = {w.label: [] for w in workers}
    try:
        for w in workers:
            line = w.read(a.timeout)
            if line != "ready":
                raise RuntimeError(f"{w.label}: expected 'ready', got {line!r}")
        for r in range(a.rounds):
            k = r % len(workers)
            for w in workers[k:] + workers[:k]:
                samples[w.label].append(w.burst(a.launches, a.timeout)["host_us"])
            if (r + 1) % 10 == 0:
                print(f"lockstep: {r + 1}/{a.rounds} rounds", file=sys.stderr, flush=True)
    except (TimeoutError, RuntimeError, ValueError) as e:
        for w in workers:
            w.p.kill()
        sys.exit(f"launch_cost_lockstep: {e}")
    for w in workers:
        w.stop()
    labels = [w.label for w in workers]
    summary = {}
    print(f"{'label':12s} {'us/launch':>9s} {'(q1-q3)':>15s}   {'- ' + labels[0]:>22s}"
          + (f"   {'- ' + labels[1]:>22s}" if len(labels) > 1 else ""))
    for label in labels:
        v = samples[label]
        q = quartiles(v)
        row = {"median_us": q[1], "q1_us": q[0], "q3_us": q[2]}
        line = f"{label:12s} {q[1]:9.3f} ({q[0]:6.3f}-{q[2]:6.3f})"
        for ref in labels[:2]:
            d = quartiles([x - y for x, y in zip(v, samples[ref])])
            row[f"minus_{ref}_us"] = {"median": d[1], "q1": d[0], "q3": d[2]}
            line += f"   {d[1]:+7.3f} ({d[0]:+6.3f} {d[2]:+6.3f})"
        summary[label] = row
        print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launches": a.launches, "rounds": a.rounds, "graph": a.graph,
                       "runs": {label: " ".join(shlex.quote(x) for x in p) for label, p in runs},
                       "samples": samples, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
