#!/usr/bin/env python3
"""The host time of a launch on the CPU, over the FAKE driver
(tests/intercept/fake_cuda.cpp): what liblithos.so adds to a kernel launch
and a CUDA-graph launch as `lithos run` (interposed, no daemon) and as a
high-priority tenant of lithosd, without a GPU. The fake driver's own cost
is in every column; the differences are lithos's (software and the shared
memory it writes), not the real driver's calls (a completion marker costs
~2 us on the H100: docs/results/2026-11-25-h100-daemon-hpcost).

    scripts/daemon/launch_cost_cpu.py [--build build/release] [--rounds 5]
        [--launches 20000] [--batches 9] [--baseline OTHER_BUILD_DIR]
        [--json OUT.json]

This build's lithosd (and --baseline's, for its hp column: another build
directory, e.g. an older commit's, with bin/lithos and lib/liblithos.so)
runs pinned to CPU 0, each client to CPU 1 (its tracker thread shares that
core); every round runs plain, interposed and hp (and hp-baseline), one
after the other, for eager launches and graph launches. Each run prints the median ns per launch over BATCHES
batches of LAUNCHES; the table gives each label's median over the rounds
with the range, and the JSON has every run. Needs a release build with the
GPU adapters (the fake driver, lithos_launch_cost_app, liblithos.so) and a
machine with 2 CPUs or more."""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"), help="build directory (default build/release)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--launches", type=int, default=20000, help="launches per batch (default 20000)")
    ap.add_argument("--batches", type=int, default=9, help="batches per run, median taken (default 9)")
    ap.add_argument("--baseline", help="another build directory whose lithosd and liblithos.so run an hp column too")
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    if a.rounds < 1 or a.launches < 1 or a.batches < 1:
        ap.error("--rounds, --launches and --batches must be positive")
    b = os.path.abspath(a.build)
    lithos = os.path.join(b, "bin", "lithos")
    app = os.path.join(b, "bin", "lithos_launch_cost_app")
    lib = os.path.join(b, "lib", "liblithos.so")
    fake = os.path.join(b, "tests", "intercept", "fake_driver")
    slot_map = os.path.join(ROOT, "tests", "intercept", "data", "fake-slot-map-gpcs.txt")
    for p in (lithos, app, lib, os.path.join(fake, "libcuda.so.1"), slot_map):
        if not os.path.exists(p):
            sys.exit(f"launch_cost_cpu: {p} is missing: build the release preset with the GPU adapters first")
    if a.baseline:
        for p in ("bin/lithos", "lib/liblithos.so"):
            if not os.path.exists(os.path.join(a.baseline, p)):
                sys.exit(f"launch_cost_cpu: --baseline {a.baseline} has no {p}")
    pin = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
    work = tempfile.mkdtemp(prefix="lithos-launch-cost-")
    with open(os.path.join(work, "lithosd.toml"), "w") as f:
        f.write('[daemon]\npolicy = "lithos"\nmps = "off"\n'
                '[[tenant]]\nname = "svc"\npriority = "high"\nquota = 2\n'
                '[[tenant]]\nname = "default"\npriority = "best-effort"\n')
    daemons = []

    def start_daemon(exe, name):
        sock = os.path.join(work, name + ".sock")
        cmd = [exe, "daemon", "--slot-map", slot_map, "--config", os.path.join(work, "lithosd.toml"), "--socket", sock,
               "--state-dir", os.path.join(work, name + "-state")]
        daemons.append(subprocess.Popen((["taskset", "-c", "0"] if pin else []) + cmd, stdout=subprocess.DEVNULL,
                                        stderr=open(os.path.join(work, name + ".log"), "w")))
        deadline = time.time() + 10
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.02)
        if not os.path.exists(sock):
            for d in daemons:
                d.kill()
            sys.exit(f"launch_cost_cpu: lithosd ({exe}) did not come up (see {work}/{name}.log)")
        return sock

    sock = start_daemon(lithos, "lithosd")
    base_sock = start_daemon(os.path.join(os.path.abspath(a.baseline), "bin", "lithos"), "baseline") if a.baseline else None

    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("LITHOS_", "FAKE_")) and k != "LD_PRELOAD"}
    base_env["LD_LIBRARY_PATH"] = fake
    labels = [("plain", None, None), ("interposed", lib, None), ("hp", lib, sock)]
    if a.baseline:
        labels.append(("hp-baseline", os.path.join(os.path.abspath(a.baseline), "lib", "liblithos.so"), base_sock))

    def run(preload, daemon_sock, graph):
        env = dict(base_env)
        if preload:
            env.update(LD_PRELOAD=preload, LITHOS_SLOT_MAP=slot_map, LITHOS_LOG="error")
        if daemon_sock:
            env.update(LITHOS_DAEMON=daemon_sock, LITHOS_TENANT="svc")
        argv = (["taskset", "-c", "1"] if pin else []) + [app, str(a.launches), str(a.batches), "1" if graph else "0"]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    runs = []
    try:
        for r in range(a.rounds):
            for graph in (False, True):
                for name, preload, tenant in labels:
                    res = run(preload, tenant, graph)
                    runs.append({"round": r + 1, "launch": "graph" if graph else "kernel", "label": name, **res})
                    print(f"round {r + 1} {'graph ' if graph else 'kernel'} {name:<12} {res['median_ns']:8.1f} ns",
                          file=sys.stderr, flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        sys.exit(f"launch_cost_cpu: {e}")
    finally:
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(timeout=10)
            except subprocess.TimeoutExpired:
                d.kill()
        shutil.rmtree(work, ignore_errors=True)

    table = {}
    print(f"\nns per launch over the fake driver: median of {a.rounds} rounds (range); "
          f"{a.launches} launches x {a.batches} batches a run{'' if pin else ' (not pinned: taskset or a 2nd CPU missing)'}")
    print(f"| launch | {' | '.join(n for n, _, _ in labels)} | hp minus interposed |")
    print("|---|" + "---:|" * (len(labels) + 1))
    for kind in ("kernel", "graph"):
        meds = {}
        cells = []
        for name, _, _ in labels:
            v = [x["median_ns"] for x in runs if x["launch"] == kind and x["label"] == name]
            meds[name] = statistics.median(v)
            cells.append(f"{meds[name]:.0f} ({min(v):.0f}-{max(v):.0f})")
        table[kind] = meds
        print(f"| {kind} | {' | '.join(cells)} | {meds['hp'] - meds['interposed']:+.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launches": a.launches, "batches": a.batches, "rounds": a.rounds, "pinned": pin,
                       "baseline": a.baseline, "medians": table, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
