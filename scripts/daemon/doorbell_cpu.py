#!/usr/bin/env python3
"""A best-effort launch after a pause, over the FAKE driver: how long it waits
for its grant while lithosd sleeps in poll() between launches (docs/daemon.md,
"The daemon's loop": the client's doorbell wakes it).

    scripts/daemon/doorbell_cpu.py [--build build/release] [--baseline OTHER_BUILD_DIR]
        [--launches 40] [--pause-ms 10] [--grid 64] [--rounds 2] [--json OUT.json]

For each build (this one, and --baseline's: another build directory with
bin/lithos and lib/liblithos.so, e.g. an older commit's), each round runs a
daemon whose best-effort tenant waits for every grant, and one
lithos_daemon_client_app making LAUNCHES launches PAUSE_MS apart, twice:
with the daemon and the client pinned to CPUs 0 and 1, and unpinned. The
table gives the client's grant-wait statistics (mean, p50 bucket, longest)
and the doorbells it rang. Needs a release build with the GPU adapters and,
for the pinned runs, 2 CPUs and taskset."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"), help="build directory (default build/release)")
    ap.add_argument("--baseline", help="another build directory (bin/lithos, lib/liblithos.so) run the same way")
    ap.add_argument("--launches", type=int, default=40, help="launches per run (default 40)")
    ap.add_argument("--pause-ms", type=int, default=10, help="pause between launches in ms (default 10: the daemon sleeps)")
    ap.add_argument("--grid", type=int, default=64, help="blocks per launch (default 64)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    if a.launches < 1 or a.pause_ms < 0 or a.grid < 1 or a.rounds < 1:
        ap.error("--launches, --grid and --rounds must be positive, --pause-ms not negative")
    b = os.path.abspath(a.build)
    app = os.path.join(b, "bin", "lithos_daemon_client_app")
    fake = os.path.join(b, "tests", "intercept", "fake_driver")
    slot_map = os.path.join(ROOT, "tests", "intercept", "data", "fake-slot-map-gpcs.txt")
    builds = [("this", b)] + ([("baseline", os.path.abspath(a.baseline))] if a.baseline else [])
    for _, d in builds:
        for p in ("bin/lithos", "lib/liblithos.so"):
            if not os.path.exists(os.path.join(d, p)):
                sys.exit(f"doorbell_cpu: {d} has no {p}: build the release preset with the GPU adapters first")
    for p in (app, os.path.join(fake, "libcuda.so.1"), slot_map):
        if not os.path.exists(p):
            sys.exit(f"doorbell_cpu: {p} is missing: build the release preset with the GPU adapters first")
    can_pin = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
    work = tempfile.mkdtemp(prefix="lithos-doorbell-")
    config = os.path.join(work, "lithosd.toml")
    with open(config, "w") as f:
        f.write('[daemon]\npolicy = "lithos"\nmps = "off"\nbest_effort_runs_free = false\n'
                '[[tenant]]\nname = "svc"\npriority = "high"\nquota = 2\n'
                '[[tenant]]\nname = "train"\npriority = "best-effort"\n')

    def run(label, build, pinned):
        sock = os.path.join(work, "lithosd.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        cmd = [os.path.join(build, "bin", "lithos"), "daemon", "--slot-map", slot_map, "--config", config, "--socket", sock,
               "--state-dir", os.path.join(work, "state-" + label)]
        d = subprocess.Popen((["taskset", "-c", "0"] if pinned else []) + cmd, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(work, "lithosd.log"), "a"))
        try:
            deadline = time.time() + 10
            while not os.path.exists(sock) and time.time() < deadline:
                time.sleep(0.02)
            if not os.path.exists(sock):
                raise RuntimeError(f"lithosd ({build}) did not come up (see {work}/lithosd.log)")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LITHOS_", "FAKE_")) and k != "LD_PRELOAD"}
            env.update(LD_LIBRARY_PATH=fake, LD_PRELOAD=os.path.join(build, "lib", "liblithos.so"), LITHOS_SLOT_MAP=slot_map,
                       LITHOS_LOG="error", LITHOS_DAEMON=sock, LITHOS_TENANT="train", LITHOS_DEFER_LAUNCHES="0")
            argv = (["taskset", "-c", "1"] if pinned else []) + [app, str(a.launches), str(a.pause_ms), "0", str(a.grid)]
            out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()}")
            stats = json.loads(out.stdout.strip().splitlines()[-1])["stats"]["daemon"]
        finally:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(timeout=10)
            except subprocess.TimeoutExpired:
                d.kill()
        return {k: stats.get(k) for k in ("grants", "grant_wait_mean_us", "grant_wait_p50_us_at_most", "grant_wait_max_us",
                                          "doorbells")}

    runs = []
    try:
        for r in range(a.rounds):
            for pinned in ([True, False] if can_pin else [False]):
                for label, build in builds:
                    res = run(label, build, pinned)
                    runs.append({"round": r + 1, "build": label, "pinned": pinned, **res})
                    print(f"round {r + 1} {label:<8} {'pinned  ' if pinned else 'unpinned'} "
                          f"mean {res['grant_wait_mean_us']:8.1f} us  p50 <= {res['grant_wait_p50_us_at_most']:6.0f} us  "
                          f"max {res['grant_wait_max_us']:8.1f} us  doorbells {res['doorbells']}", flush=True)
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        sys.exit(f"doorbell_cpu: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ngrant wait of a best-effort launch {a.pause_ms} ms after the last ({a.launches} launches of {a.grid} blocks"
          f" a run, fake driver); mean over rounds of each run's mean, and the largest p50 bucket")
    print("| build | CPUs | mean wait (us) | p50 bucket (us) | doorbells per run |")
    print("|---|---|---:|---:|---:|")
    for label, _ in builds:
        for pinned in ([True, False] if can_pin else [False]):
            v = [x for x in runs if x["build"] == label and x["pinned"] == pinned]
            mean = sum(x["grant_wait_mean_us"] for x in v) / len(v)
            p50 = max(x["grant_wait_p50_us_at_most"] for x in v)
            bells = sum((x["doorbells"] or 0) for x in v) / len(v)
            print(f"| {label} | {'pinned apart' if pinned else 'unpinned'} | {mean:.0f} | <= {p50:.0f} | {bells:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launches": a.launches, "pause_ms": a.pause_ms, "grid": a.grid, "rounds": a.rounds,
                       "baseline": a.baseline, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
