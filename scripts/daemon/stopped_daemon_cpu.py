#!/usr/bin/env python3
"""What a hung lithosd costs a process that starts while it is stopped, on
the CPU over the FAKE driver (tests/intercept/fake_cuda.cpp): the wall time
of daemon_client_app (LAUNCHES kernel launches, PAUSE_MS apart, then its
exit) run as

  pass-through   liblithos.so preloaded, no daemon configured (the baseline)
  no-daemon      LITHOS_DAEMON set, nobody listening there
  stopped-be     under a SIGSTOPped lithosd, as its best-effort tenant
  stopped-hp     under a SIGSTOPped lithosd, as its high-priority tenant
  live-be        under a running lithosd, best effort (it runs free alone)
  live-hp        under a running lithosd, high priority

The target (issue 36): a process started under a stopped lithosd runs within
10% of its pass-through time.

    scripts/daemon/stopped_daemon_cpu.py [--build build/release] [--rounds 15]
        [--workload 200x1 --workload 2000x0] [--json OUT.json]

Builds nothing: BUILD must hold bin/lithos, bin/lithos_daemon_client_app,
lib/liblithos.so and the fake driver (a release build with the GPU
adapters). Every round runs each mode once per workload, in a shuffled
order; the stopped daemon is started afresh (and stopped) every round, so
that the connections the clients leave in its backlog never fill it. The
table gives each mode's median wall time over the rounds with its
interquartile range and range, the ratio of medians to pass-through, and
from the clients' own statistics (lithos_stats_json) how many registered
and the median time their first launch waited for registration; the JSON
has every run."""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["pass-through", "no-daemon", "stopped-be", "stopped-hp", "live-be", "live-hp"]


def quartiles(v):
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"), help="build directory (default build/release)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds (default 15)")
    ap.add_argument("--workload", action="append", help="LAUNCHESxPAUSE_MS, repeatable (default 200x1 and 2000x0)")
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    workloads = []
    for w in a.workload or ["200x1", "2000x0"]:
        try:
            n, p = (int(x) for x in w.split("x"))
        except ValueError:
            ap.error(f"--workload {w}: expected LAUNCHESxPAUSE_MS, e.g. 200x1")
        if n < 1 or p < 0:
            ap.error(f"--workload {w}: launches must be positive, the pause not negative")
        workloads.append((n, p))
    if a.rounds < 1:
        ap.error("--rounds must be positive")
    b = os.path.abspath(a.build)
    lithos = os.path.join(b, "bin", "lithos")
    app = os.path.join(b, "bin", "lithos_daemon_client_app")
    lib = os.path.join(b, "lib", "liblithos.so")
    fake = os.path.join(b, "tests", "intercept", "fake_driver")
    slot_map = os.path.join(ROOT, "tests", "intercept", "data", "fake-slot-map-gpcs.txt")
    for p in (lithos, app, lib, os.path.join(fake, "libcuda.so.1"), slot_map):
        if not os.path.exists(p):
            sys.exit(f"stopped_daemon_cpu: {p} is missing: build the release preset with the GPU adapters first")
    work = tempfile.mkdtemp(prefix="lithos-stopped-")
    config = os.path.join(work, "lithosd.toml")
    with open(config, "w") as f:
        f.write('[daemon]\npolicy = "lithos"\nmps = "off"\n'
                '[[tenant]]\nname = "svc"\npriority = "high"\nquota = 2\n'
                '[[tenant]]\nname = "train"\npriority = "best-effort"\n')
    daemons = {}

    def start_daemon(name):
        sock = os.path.join(work, name + ".sock")
        if os.path.exists(sock):
            os.unlink(sock)
        cmd = [lithos, "daemon", "--slot-map", slot_map, "--config", config, "--socket", sock,
               "--state-dir", os.path.join(work, name + "-state")]
        d = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, name + ".log"), "a"))
        deadline = time.time() + 20
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.02)
        if not os.path.exists(sock):
            d.kill()
            sys.exit(f"stopped_daemon_cpu: lithosd did not come up (see {work}/{name}.log)")
        daemons[name] = d
        return sock

    def stop_daemon(name):
        d = daemons.pop(name, None)
        if d is None:
            return
        d.send_signal(signal.SIGCONT)
        d.send_signal(signal.SIGKILL)
        d.wait()

    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("LITHOS_", "FAKE_", "CLIENT_")) and k != "LD_PRELOAD"}
    base_env.update(LD_LIBRARY_PATH=fake, LD_PRELOAD=lib, LITHOS_SLOT_MAP=slot_map, LITHOS_LOG="error")

    def run(mode, sockets, launches, pause_ms):
        env = dict(base_env)
        if mode == "no-daemon":
            env["LITHOS_DAEMON"] = os.path.join(work, "nobody.sock")
        elif mode != "pass-through":
            env["LITHOS_DAEMON"] = sockets["stopped" if mode.startswith("stopped") else "live"]
            env["LITHOS_TENANT"] = "svc" if mode.endswith("hp") else "train"
        argv = [app, str(launches), str(pause_ms), "0", "4096"]
        t0 = time.monotonic()
        out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        wall = time.monotonic() - t0
        if out.returncode != 0:
            raise RuntimeError(f"{mode}: {' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()}")
        lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
        stamps = [x["t_ns"] for x in lines if "i" in x]
        stats = next((x["stats"] for x in lines if "stats" in x), {})
        d = stats.get("daemon") or {}
        reg = d.get("registration") or {}
        return {"wall_s": wall, "loop_s": (stamps[-1] - stamps[0]) / 1e9 if len(stamps) > 1 else 0.0,
                "launches": len(stamps), "state": d.get("state"), "registered": d.get("registered"),
                "class": d.get("class"), "first_launch_waited_us": reg.get("first_launch_waited_us"),
                "registered_after_us": reg.get("registered_after_us"),
                "launches_unregistered": d.get("launches_unregistered"), "grants": d.get("grants")}

    runs = []
    rng = random.Random(36)
    try:
        sockets = {"live": start_daemon("live")}
        for r in range(a.rounds):
            stop_daemon("stopped")
            sockets["stopped"] = start_daemon("stopped")
            daemons["stopped"].send_signal(signal.SIGSTOP)
            for launches, pause_ms in workloads:
                order = list(MODES)
                rng.shuffle(order)
                for mode in order:
                    res = run(mode, sockets, launches, pause_ms)
                    runs.append({"round": r + 1, "workload": f"{launches}x{pause_ms}", "mode": mode, **res})
                    print(f"round {r + 1} {launches}x{pause_ms} {mode:<13} {res['wall_s'] * 1e3:8.1f} ms "
                          f"registered={res['registered']}", file=sys.stderr, flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        sys.exit(f"stopped_daemon_cpu: {e}")
    finally:
        for name in list(daemons):
            stop_daemon(name)
        shutil.rmtree(work, ignore_errors=True)

    summary = {}
    print(f"\nWall time of daemon_client_app per process (ms): median of {a.rounds} rounds, IQR and range; "
          f"ratio = median / pass-through median")
    for launches, pause_ms in workloads:
        wl = f"{launches}x{pause_ms}"
        print(f"\n{launches} launches, {pause_ms} ms apart:\n")
        print("| mode | median | IQR | range | ratio | registered | first launch waited (median) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        base = statistics.median(x["wall_s"] for x in runs if x["workload"] == wl and x["mode"] == "pass-through")
        summary[wl] = {}
        for mode in MODES:
            rs = [x for x in runs if x["workload"] == wl and x["mode"] == mode]
            v = [x["wall_s"] * 1e3 for x in rs]
            med = statistics.median(v)
            q1, q3 = quartiles(v)
            reg = sum(1 for x in rs if x["registered"])
            waited = [x["first_launch_waited_us"] for x in rs if x["first_launch_waited_us"] is not None]
            wmed = statistics.median(waited) / 1e3 if waited else None
            summary[wl][mode] = {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "min_ms": min(v), "max_ms": max(v),
                                 "ratio": med / (base * 1e3), "registered": reg, "runs": len(rs),
                                 "first_launch_waited_ms_median": wmed}
            print(f"| {mode} | {med:.1f} | {q1:.1f}-{q3:.1f} | {min(v):.1f}-{max(v):.1f} | {med / (base * 1e3):.3f} | "
                  f"{reg}/{len(rs)} | {'-' if wmed is None else f'{wmed:.2f} ms'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rounds": a.rounds, "workloads": [f"{n}x{p}" for n, p in workloads], "build": b,
                       "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
