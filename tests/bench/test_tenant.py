"""Tests of scripts/bench/tenant.py, the `lithos bench` tenant process.

Each test starts tenant.py as the harness does (a subprocess, one JSON line
per message over stdin/stdout; docs/bench-protocol.md section 1) with the
`fake` workload, whose request is a sleep of params.ms, so the tests need
neither torch nor a GPU. Windows are a few tenths of a second long: the
whole file runs in about 15 s.

  python3 -m unittest discover -s tests/bench -p 'test_tenant*.py' -v
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TENANT = ROOT / "scripts" / "bench" / "tenant.py"


def config(**over):
    """A valid configuration of a fake closed-loop tenant, with `over` applied."""
    c = {"name": "t", "role": "hp", "kind": "closed", "workload": "fake", "params": {"ms": 5.0},
         "load": 0.0, "rate_rps": None, "calib": {}, "calibrate": False,
         "phases": [{"name": "main", "params": {}}],
         "warmup_s": 0.1, "window_s": 0.3, "reps": 2, "drain_s": 0.1, "seed": 1, "device": 0}
    c.update(over)
    return c


def arrival_offsets(seed, phase, rep, rate, window_s):
    """Arrivals in one window (seconds after its start), straight from the
    protocol's definition."""
    rng = random.Random(seed * 1000003 + phase * 1009 + rep)
    out, t = [], rng.expovariate(rate)
    while t < window_s:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def expected_arrivals(seed, phase, rep, rate, window_s):
    """The number of arrivals in one window."""
    return len(arrival_offsets(seed, phase, rep, rate, window_s))


def assert_back_to_back(test, rep):
    """A closed loop's requests run one after the other, each recorded in the
    window of its completion: their latencies add up to at most the window
    plus the first one (which may have started before the window). A
    latency that counted more than its own request would break this; how
    many requests fit depends on the machine, so that is not asserted."""
    lat = rep["latencies_ms"]
    if lat:
        slack = 0.001 * len(lat)  # each latency is rounded to 0.1 us
        test.assertLessEqual(sum(lat), rep["window_s"] * 1000.0 + lat[0] + slack, lat)


class Run:
    """What one tenant process did: its events, exit status, stderr, start T
    (None if no start was sent) and when it exited (time.time())."""

    def __init__(self, events, rc, stderr, start, exited):
        self.events, self.rc, self.stderr, self.start, self.exited = events, rc, stderr, start, exited

    def event(self, name):
        found = [e for e in self.events if e.get("event") == name]
        assert len(found) == 1, f"expected one {name} event, got {self.events}\nstderr:\n{self.stderr}"
        return found[0]


def run_tenant(test, cfg, start_in=1.0, send_start=True, start_line=None, timeout=120.0):
    """Runs tenant.py through the protocol: the configuration line; after its
    ready line, {"start": now + start_in} (or `start_line`, or EOF when not
    send_start); then reads stdout to the end. Asserts that every stdout line
    is a JSON object."""
    with tempfile.TemporaryFile(mode="w+") as err:
        with subprocess.Popen([sys.executable, str(TENANT)], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err) as p:
            killer = threading.Timer(timeout, p.kill)  # a hung tenant fails the test, not the suite
            killer.start()
            try:
                p.stdin.write((cfg if isinstance(cfg, str) else json.dumps(cfg)) + "\n")
                p.stdin.flush()
                lines = [p.stdout.readline()]
                start = None
                if lines[0] and json.loads(lines[0]).get("event") == "ready" and send_start:
                    start = time.time() + start_in
                    p.stdin.write((start_line or json.dumps({"start": start})) + "\n")
                    p.stdin.flush()
                p.stdin.close()
                lines += p.stdout.read().splitlines(keepends=True)
                rc = p.wait()
                exited = time.time()
            finally:
                killer.cancel()
        err.seek(0)
        stderr = err.read()
    events = []
    for line in filter(None, lines):
        test.assertTrue(line.endswith("\n"), f"unterminated stdout line {line!r}")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            test.fail(f"stdout line is not JSON: {line!r}\nstderr:\n{stderr}")
        test.assertIsInstance(obj, dict, line)
        test.assertIn("event", obj, line)
        events.append(obj)
    return Run(events, rc, stderr, start, exited)


class TenantProtocolTest(unittest.TestCase):

    def assert_ok(self, run):
        self.assertEqual(run.rc, 0, run.stderr)
        self.assertEqual([e["event"] for e in run.events], ["ready", "result"], run.stderr)

    def test_ready_reports_fake_calibration_and_info(self):
        run = run_tenant(self, config(calibrate=True, params={"ms": 4.0}))
        self.assert_ok(run)
        ready = run.event("ready")
        self.assertEqual(ready["calib"], {"gpu_ms": 4.0, "capacity_rps": 250.0})
        info = ready["info"]
        self.assertEqual((info["workload"], info["kind"], info["params"]), ("fake", "closed", {"ms": 4.0}))
        self.assertIsNone(info["torch"])
        self.assertFalse(info["graph"])
        self.assertIn("python", info)
        self.assertNotIn("calibrated_here", info)  # calibrate: true measures everything, by request

    def test_closed_loop_follows_the_timeline(self):
        run = run_tenant(self, config(params={"ms": 20.0}, window_s=0.4), start_in=0.6)
        self.assert_ok(run)
        # The result comes at the common end: T + warm-up + 2 windows + drain.
        self.assertGreaterEqual(run.exited, run.start + 0.1 + 0.8 + 0.1)
        phases = run.event("result")["phases"]
        self.assertEqual([p["name"] for p in phases], ["main"])
        self.assertEqual(len(phases[0]["reps"]), 2)
        for rep in phases[0]["reps"]:
            self.assertEqual(rep["window_s"], 0.4)
            self.assertEqual(rep["unfinished_ms"], [])
            self.assertEqual(rep["completed"], len(rep["latencies_ms"]))
            # A sleep never ends early, but on a loaded machine it may end
            # late, by any amount: only the bounds that follow from that.
            # 0.4 s / 20 ms: at most 20 requests end in the window, plus one
            # begun before it.
            self.assertLessEqual(rep["completed"], 21)
            self.assertTrue(all(lat >= 19.9 for lat in rep["latencies_ms"]), rep["latencies_ms"])
            assert_back_to_back(self, rep)

    def test_training_loop_counts_steps(self):
        run = run_tenant(self, config(kind="training", params={"ms": 10.0}))
        self.assert_ok(run)
        for rep in run.event("result")["phases"][0]["reps"]:
            self.assertLessEqual(rep["completed"], 31)  # 0.3 s / 10 ms at most
            self.assertEqual(rep["completed"], len(rep["latencies_ms"]))
            self.assertTrue(all(lat >= 9.9 for lat in rep["latencies_ms"]))
            assert_back_to_back(self, rep)

    def test_phase_params_override_tenant_params(self):
        phases = [{"name": "short", "params": {}}, {"name": "long", "params": {"ms": 25.0}}]
        run = run_tenant(self, config(params={"ms": 5.0}, phases=phases, calibrate=True))
        self.assert_ok(run)
        ready = run.event("ready")
        self.assertEqual(ready["info"]["phase_params"], [{"ms": 5.0}, {"ms": 25.0}])
        self.assertEqual(ready["info"]["phase_gpu_ms"], [5.0, 25.0])
        self.assertEqual(ready["calib"]["gpu_ms"], 5.0)  # phase 0's
        short, long = run.event("result")["phases"]
        self.assertEqual((short["name"], long["name"]), ("short", "long"))
        for rep in short["reps"]:
            self.assertLessEqual(rep["completed"], 61)  # 0.3 s / 5 ms at most
            self.assertTrue(all(lat >= 4.9 for lat in rep["latencies_ms"]), rep["latencies_ms"])
            assert_back_to_back(self, rep)
        for rep in long["reps"]:
            self.assertLessEqual(rep["completed"], 13)  # 0.3 s / 25 ms at most
            self.assertTrue(all(lat >= 24.9 for lat in rep["latencies_ms"]), rep["latencies_ms"])
            assert_back_to_back(self, rep)

    def test_service_arrivals_follow_the_seeded_streams(self):
        rate, window = 100.0, 0.3
        counts = {}
        for seed in (7, 7, 8):
            run = run_tenant(self, config(kind="service", params={"ms": 1.0}, rate_rps=rate, seed=seed,
                                          window_s=window))
            self.assert_ok(run)
            self.assertGreaterEqual(run.exited, run.start + 0.1 + 2 * window + 0.1)  # results at the end
            self.assertEqual(run.event("ready")["info"]["rate_rps"], rate)
            reps = run.event("result")["phases"][0]["reps"]
            # Every arrival of the seeded stream is recorded: a latency, or a
            # lower bound if the machine was too slow to finish it by the end
            # of the drain (at 10 % load that takes a very loaded machine).
            got = [rep["completed"] + len(rep["unfinished_ms"]) for rep in reps]
            self.assertEqual(got, [expected_arrivals(seed, 0, r, rate, window) for r in range(2)])
            for rep in reps:
                self.assertEqual(len(rep["latencies_ms"]), rep["completed"])
                self.assertTrue(all(lat >= 0.99 for lat in rep["latencies_ms"]))
            counts.setdefault(seed, []).append(got)
        self.assertEqual(counts[7][0], counts[7][1])
        self.assertNotEqual(counts[7][0], counts[8][0])

    def test_service_latency_includes_queueing(self):
        # 400 requests/s (load 2 x capacity 200/s from calib) on a 5 ms server.
        cfg = config(kind="service", params={"ms": 5.0}, load=2.0, calib={"capacity_rps": 200.0},
                     warmup_s=0.0, window_s=0.4, drain_s=0.1, seed=3)
        run = run_tenant(self, cfg)
        self.assert_ok(run)
        info = run.event("ready")["info"]
        self.assertEqual(info["rate_rps"], 400.0)
        self.assertNotIn("calibrated_here", info)
        reps = run.event("result")["phases"][0]["reps"]
        first = reps[0]["latencies_ms"]
        self.assertTrue(all(lat >= 4.9 for lat in first))
        # One FIFO server: the requests of the first window finished in
        # arrival order, each at least 5 ms after the one before, however
        # late it arrived: a latency counts the time spent queueing.
        arrived = [a * 1000.0 for a in arrival_offsets(3, 0, 0, 400.0, 0.4)]
        done = [a + lat for a, lat in zip(arrived, first)]
        for k in range(1, len(done)):
            self.assertGreaterEqual(done[k] - done[k - 1], 4.9, (k, done[k - 1], done[k]))
        # The server cannot keep up: it finishes at most one request per 5 ms
        # until the drain ends (0.9 s after T), so the rest are unfinished.
        unfinished = [u for rep in reps for u in rep["unfinished_ms"]]
        arrivals = sum(expected_arrivals(3, 0, r, 400.0, 0.4) for r in range(2))
        self.assertGreaterEqual(len(unfinished), arrivals - int(0.9 / 0.005))
        self.assertGreater(len(unfinished), 20)
        for r, rep in enumerate(reps):
            # Every arrival is either finished or a lower bound ...
            self.assertEqual(rep["completed"] + len(rep["unfinished_ms"]),
                             expected_arrivals(3, 0, r, 400.0, 0.4))
            self.assertEqual(rep["completed"], len(rep["latencies_ms"]))
            # ... and a lower bound is end + drain - arrival, for an arrival in this window.
            lo, hi = (0.1 + (1 - r) * 0.4) * 1000, (0.1 + (2 - r) * 0.4) * 1000
            for u in rep["unfinished_ms"]:
                self.assertTrue(lo - 1.0 <= u <= hi + 1.0, (r, u))

    def test_missing_capacity_is_measured(self):
        run = run_tenant(self, config(kind="service", params={"ms": 2.0}, load=0.5), send_start=False)
        ready = run.event("ready")
        self.assertEqual(ready["calib"], {"capacity_rps": 500.0})
        self.assertEqual(ready["info"]["calibrated_here"], ["capacity_rps"])
        self.assertEqual(ready["info"]["rate_rps"], 250.0)

    def test_eof_before_start_aborts_quietly(self):
        run = run_tenant(self, config(), send_start=False)
        self.assertEqual(run.rc, 0, run.stderr)
        self.assertEqual([e["event"] for e in run.events], ["ready"])

    def test_bad_configurations_fail_with_an_error_event(self):
        phases_bad = [{"name": "main", "params": {"ms": 0}}]
        cases = {
            "not json": ("{", "not JSON"),
            "no config": ("", "no configuration"),
            "unknown workload": (config(workload="gpt-9"), "workload"),
            "unknown kind": (config(kind="batch"), "kind"),
            "kind not offered": (config(workload="gpt", kind="service"), "gpt"),
            "unknown param": (config(params={"ms": 1.0, "msec": 2}), "msec"),
            "bad param": (config(params={"ms": -1}), "ms"),
            "bad phase param": (config(phases=phases_bad), "phases[0]"),
            "no phases": (config(phases=[]), "phases"),
            "zero reps": (config(reps=0), "reps"),
            "bad window": (config(window_s="1"), "window_s"),
            "service without rate or load": (config(kind="service", load=0.0), "load"),
            "bad calib": (config(calib={"capacity_rps": -3}), "capacity_rps"),
            "bad compile": (config(workload="gpt", kind="training", params={"compile": "yes"}), "compile"),
            "compile on spin": (config(workload="spin", params={"compile": True}), "compile"),
            "unknown compile mode": (config(workload="gpt", kind="training", params={"compile": "fast"}),
                                     "reduce-overhead"),
            "compile's graphs in a graph": (config(workload="bert-base", kind="service", load=0.5,
                                                   params={"compile": "reduce-overhead"}), "graph = false"),
        }
        missing = config()
        del missing["window_s"]
        cases["missing field"] = (missing, "window_s")
        for name, (cfg, word) in cases.items():
            with self.subTest(name):
                run = run_tenant(self, cfg)
                self.assertEqual(run.rc, 1, run.stderr)
                self.assertEqual([e["event"] for e in run.events], ["error"])
                self.assertIn(word, run.event("error")["message"])

    def test_model_workloads_take_compile(self):
        sys.path.insert(0, str(TENANT.parent))
        try:
            import tenant
        finally:
            sys.path.remove(str(TENANT.parent))
        for workload, w in tenant.WORKLOADS.items():
            for kind in w.kinds:
                with self.subTest(workload=workload, kind=kind):
                    model = workload not in ("spin", "fake", "module")  # module: compiling is the file's own business
                    self.assertEqual("compile" in w.kinds[kind], model)
                    if model:
                        self.assertFalse(tenant.resolve_params(workload, kind)["compile"])
                        on = tenant.resolve_params(workload, kind, ("params", {"compile": True}))
                        self.assertEqual(on["compile"], "default")
                        off = tenant.resolve_params(workload, kind, ("params", {"compile": False}))
                        self.assertIs(off["compile"], False)
                        for mode, own_graphs in tenant.COMPILE_MODES.items():
                            p = {"compile": mode}
                            if own_graphs and "graph" in w.kinds[kind]:
                                with self.assertRaises(tenant.ConfigError):  # graph defaults to true
                                    tenant.resolve_params(workload, kind, ("params", p))
                                p["graph"] = False
                            self.assertEqual(tenant.resolve_params(workload, kind, ("params", p))["compile"], mode)

    def test_bad_start_line_fails_with_an_error_event(self):
        run = run_tenant(self, config(), start_line='{"begin": 1}')
        self.assertEqual(run.rc, 1, run.stderr)
        self.assertEqual([e["event"] for e in run.events], ["ready", "error"])
        self.assertIn("start", run.event("error")["message"])

    def test_other_output_goes_to_stderr(self):
        # What libraries print, from Python or from native code, must not
        # reach the protocol pipe.
        code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import tenant; p = tenant.Protocol(); "
                "print('python chatter'); os.write(1, b'native chatter\\n'); p.emit({'event': 'x'})")
        out = subprocess.run([sys.executable, "-c", code, str(TENANT.parent)], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, '{"event": "x"}\n')
        self.assertIn("python chatter", out.stderr)
        self.assertIn("native chatter", out.stderr)


if __name__ == "__main__":
    unittest.main()
