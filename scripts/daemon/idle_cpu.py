#!/usr/bin/env python3
"""What lithosd and a client cost while little happens, over the FAKE driver
(tests/intercept/fake_cuda.cpp), and how soon a killed client's work is
reclaimed: the timing claims of the end-to-end tests (tests/daemon/
e2e_test.cpp), which assert only the behaviour behind them, measured.

    scripts/daemon/idle_cpu.py [--build build/release] [--baseline OTHER_BUILD_DIR]
        [--rounds 3] [--window-s 1.0] [--json OUT.json]

Each round, for this build and --baseline's (another build directory with
bin/lithos and lib/liblithos.so, e.g. an older commit's), one after the
other:
  daemon CPU   lithosd's CPU time over --window-s while its only client, a
               high-priority one, launches every millisecond (hp_poll_us: the
               daemon naps between turns; it spun a whole core before);
               claim: well under 0.4 of a core
  idle wakes   the voluntary context switches per second of every thread of
               a high-priority client that made four bursts of launches and
               is now idle (its tracker naps ~1 ms at a time, not 0.1 ms);
               claim: about 1000 a second, not ~5000
  reclaim      the time from SIGKILL of a best-effort client whose atoms are
               on the GPU (their markers never land) until lithosd shows
               none of them in flight and the client gone; claim: within a
               second
The table gives each build's median over the rounds with the range; the
JSON has every run. Needs a release build with the GPU adapters (the fake
driver, lithos_daemon_client_app, liblithos.so). Run it on an otherwise idle
machine: on a loaded one every number is the load's as much as lithos's."""
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
DEADLINE_S = 60


def wait_until(pred, what):
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.002)
    raise RuntimeError(f"timed out waiting for {what}")


def voluntary_switches(pid):
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        n += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return n


class Daemon:
    """One lithosd of `build` on the fake GPU, its clients and its status."""

    def __init__(self, build, work, label, slot_map, fake, app):
        self.build, self.work, self.label, self.slot_map, self.fake, self.app = build, work, label, slot_map, fake, app
        self.sock = os.path.join(work, "lithosd.sock")
        self.config = os.path.join(work, "lithosd.toml")
        with open(self.config, "w") as f:
            f.write('[daemon]\npolicy = "lithos"\nmps = "off"\n'
                    '[[tenant]]\nname = "svc"\npriority = "high"\nquota = 2\n'
                    '[[tenant]]\nname = "train"\npriority = "best-effort"\n')
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.log = open(os.path.join(work, "lithosd.log"), "a")
        self.proc = subprocess.Popen([os.path.join(build, "bin", "lithos"), "daemon", "--slot-map", slot_map, "--config",
                                      self.config, "--socket", self.sock, "--state-dir",
                                      os.path.join(work, "state-" + label)],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        self.clients = []
        wait_until(lambda: self.status() is not None, f"lithosd ({build}) to come up (see {work}/lithosd.log)")

    def status(self):
        out = subprocess.run([os.path.join(self.build, "bin", "lithos"), "status", "--socket", self.sock, "--json"],
                             capture_output=True, text=True, timeout=DEADLINE_S)
        return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else None

    def tenant(self, st, name):
        return next(t for t in st["tenants"] if t["name"] == name)

    def client(self, tenant, launches, pause_ms, hold_ms, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LITHOS_", "FAKE_", "CLIENT_")) and k != "LD_PRELOAD"}
        env.update(LD_LIBRARY_PATH=self.fake, LD_PRELOAD=os.path.join(self.build, "lib", "liblithos.so"),
                   LITHOS_SLOT_MAP=self.slot_map, LITHOS_LOG="error", LITHOS_DAEMON=self.sock, LITHOS_TENANT=tenant,
                   LITHOS_DEFER_LAUNCHES="0", **extra)
        out = os.path.join(self.work, f"client-{len(self.clients)}.out")
        p = subprocess.Popen([self.app, str(launches), str(pause_ms), str(hold_ms)], env=env, stdout=open(out, "w"),
                             stderr=subprocess.DEVNULL)
        p.out = out
        self.clients.append(p)
        return p

    @staticmethod
    def printed(p):
        with open(p.out) as f:
            return sum(1 for line in f if line.startswith('{"i":'))

    def close(self):
        for p in self.clients:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def daemon_cpu(d, window_s):
    """lithosd's share of a core over window_s with one hp client launching every ms."""
    total = 100000
    c = d.client("svc", total, 1, 0)
    wait_until(lambda: d.status()["counters"]["running_launches"] >= 100, "the client's first launches")
    a, t0 = d.status(), time.monotonic()
    time.sleep(window_s)
    b, t1 = d.status(), time.monotonic()
    if b["counters"]["running_launches"] >= total:
        raise RuntimeError("the client finished inside the window")
    c.kill()
    c.wait()
    return (b["cpu_s"] - a["cpu_s"]) / (t1 - t0)


def idle_wakes(d, window_s):
    """Voluntary context switches per second of an idle hp client."""
    c = d.client("svc", 80, 30, 600000, CLIENT_BURST="20")  # four bursts of twenty, then idle
    wait_until(lambda: Daemon.printed(c) >= 80 and d.status()["counters"]["completions"] >= 80, "the four bursts")
    time.sleep(0.2)
    before, t0 = voluntary_switches(c.pid), time.monotonic()
    time.sleep(window_s)
    after, t1 = voluntary_switches(c.pid), time.monotonic()
    c.kill()
    c.wait()
    return (after - before) / (t1 - t0)


def reclaim_s(d):
    """Seconds from SIGKILL of a client with atoms in flight to lithosd having reclaimed them."""
    c = d.client("train", 3, 0, 600000, FAKE_MARKERS_HANG="1")
    wait_until(lambda: d.tenant(d.status(), "train")["inflight_atoms"] > 0, "the client's atoms in flight")
    t0 = time.monotonic()
    c.kill()
    c.wait()

    def done():
        st = d.status()
        return d.tenant(st, "train")["inflight_atoms"] == 0 and not st["clients"]

    wait_until(done, "the killed client's atoms to be reclaimed")
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"), help="build directory (default build/release)")
    ap.add_argument("--baseline", help="another build directory (bin/lithos, lib/liblithos.so) run the same way")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--window-s", type=float, default=1.0, help="seconds each CPU and wake-up window lasts (default 1)")
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    if a.rounds < 1 or a.window_s <= 0:
        ap.error("--rounds and --window-s must be positive")
    b = os.path.abspath(a.build)
    app = os.path.join(b, "bin", "lithos_daemon_client_app")
    fake = os.path.join(b, "tests", "intercept", "fake_driver")
    slot_map = os.path.join(ROOT, "tests", "intercept", "data", "fake-slot-map-gpcs.txt")
    builds = [("this", b)] + ([("baseline", os.path.abspath(a.baseline))] if a.baseline else [])
    for _, d in builds:
        for p in ("bin/lithos", "lib/liblithos.so"):
            if not os.path.exists(os.path.join(d, p)):
                sys.exit(f"idle_cpu: {d} has no {p}: build the release preset with the GPU adapters first")
    for p in (app, os.path.join(fake, "libcuda.so.1"), slot_map):
        if not os.path.exists(p):
            sys.exit(f"idle_cpu: {p} is missing: build the release preset with the GPU adapters first")
    work = tempfile.mkdtemp(prefix="lithos-idle-")
    runs = []
    try:
        for r in range(a.rounds):
            for label, build in builds:
                d = Daemon(build, work, label, slot_map, fake, app)
                try:
                    res = {"daemon_cpu": daemon_cpu(d, a.window_s), "idle_wakes_per_s": idle_wakes(d, a.window_s),
                           "reclaim_s": reclaim_s(d)}
                finally:
                    d.close()
                runs.append({"round": r + 1, "build": label, **res})
                print(f"round {r + 1} {label:<8} daemon CPU {res['daemon_cpu']:.3f} of a core  idle client "
                      f"{res['idle_wakes_per_s']:.0f} wakes/s  reclaim {1000 * res['reclaim_s']:.1f} ms", flush=True)
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError, StopIteration) as e:
        sys.exit(f"idle_cpu: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def cell(label, key, scale, fmt):
        v = [x[key] * scale for x in runs if x["build"] == label]
        return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})"

    print(f"\nmedian (range) over {a.rounds} round(s), fake driver, windows of {a.window_s:g} s")
    print("| build | lithosd CPU, hp client only (cores) | idle hp client (wakes/s) | reclaim after SIGKILL (ms) |")
    print("|---|---:|---:|---:|")
    for label, _ in builds:
        print(f"| {label} | {cell(label, 'daemon_cpu', 1, '.3f')} | {cell(label, 'idle_wakes_per_s', 1, '.0f')} | "
              f"{cell(label, 'reclaim_s', 1000, '.1f')} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rounds": a.rounds, "window_s": a.window_s, "baseline": a.baseline, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
