"""Tests of the `module` workload (scripts/bench/user_workload.py): a
workload of the user's own, a Python file that defines
build(kind, args, device), run by tenant.py through the protocol as the
harness runs it. The files written here sleep instead of using a GPU, so
the tests need neither torch nor a GPU.

  python3 -m unittest discover -s tests/bench -p 'test_tenant*.py' -v
"""
import tempfile
import textwrap
import unittest
from pathlib import Path

from test_tenant import assert_back_to_back, config, run_tenant

# A unit of work that sleeps args.ms, counts what it did and tells the
# tenant about it; build() checks what it was called with.
SLEEPER = textwrap.dedent('''
    import time
    import helper_of_the_module  # beside this file: its folder is on sys.path while it loads

    class Unit:
        def __init__(self, kind, args):
            self.kind, self.ms, self.steps, self.syncs = kind, args["ms"], 0, 0

        def step(self):
            time.sleep(self.ms / 1000.0)
            self.steps += 1

        def sync(self):
            self.syncs += 1

        def info(self):
            return {"kind": self.kind, "steps": self.steps, "syncs": self.syncs, "helper": helper_of_the_module.NAME}

    def build(kind, args, device):
        assert device == 0, device
        return Unit(kind, args)
    ''')


class ModuleWorkloadTest(unittest.TestCase):

    def setUp(self):
        self._dir = tempfile.TemporaryDirectory()
        self.dir = Path(self._dir.name)
        (self.dir / "helper_of_the_module.py").write_text("NAME = 'helper'\n")

    def tearDown(self):
        self._dir.cleanup()

    def write(self, name, text):
        path = self.dir / name
        path.write_text(text)
        return str(path)

    def module_config(self, params, **over):
        return config(workload="module", params=params, **over)

    def error_of(self, cfg):
        run = run_tenant(self, cfg)
        self.assertEqual(run.rc, 1, run.stderr)
        self.assertEqual([e["event"] for e in run.events], ["error"], run.stderr)
        return run.event("error")["message"]

    def test_a_closed_loop_runs_the_users_unit_of_work(self):
        path = self.write("sleeper.py", SLEEPER)
        run = run_tenant(self, self.module_config({"path": path, "args": {"ms": 10.0}, "warmup": 3},
                                                  calibrate=True, window_s=0.3))
        self.assertEqual(run.rc, 0, run.stderr)
        ready = run.event("ready")
        info = ready["info"]
        self.assertEqual((info["workload"], info["module"]), ("module", path))
        self.assertEqual(info["params"], {"path": path, "args": {"ms": 10.0}, "warmup": 3})
        # Its own info, taken at ready: 3 warm-up steps, one per phase, and the
        # calibration's; every step was synchronised through its sync().
        own = info["module_info"]
        self.assertEqual((own["kind"], own["helper"]), ("closed", "helper"))
        self.assertGreaterEqual(own["steps"], 3 + 1 + 5)
        self.assertEqual(own["syncs"], own["steps"] + 1)  # the capacity loop syncs once before it starts
        # No torch here: one request's time is its wall time; the capacity
        # is measured in a closed loop (10 ms requests: at most 100/s). A
        # sleep never ends early but may end late by any amount on a loaded
        # machine: only the bounds that follow from that.
        self.assertGreaterEqual(ready["calib"]["gpu_ms"], 9.9, ready["calib"])
        self.assertTrue(0.0 < ready["calib"]["capacity_rps"] <= 101.0, ready["calib"])
        for rep in run.event("result")["phases"][0]["reps"]:
            self.assertLessEqual(rep["completed"], 31)  # 0.3 s / 10 ms at most
            self.assertTrue(all(lat >= 9.9 for lat in rep["latencies_ms"]))
            assert_back_to_back(self, rep)

    def test_a_callable_is_a_unit_of_work_and_measure_is_asked_first(self):
        path = self.write("callable.py", textwrap.dedent('''
            import time

            class Unit:
                def __init__(self):
                    self.n = 0

                def __call__(self):
                    self.n += 1
                    time.sleep(0.002)

            class Measured:
                step = Unit()

                def sync(self):
                    pass

                def measure(self, key):
                    return {"gpu_ms": 1.5}.get(key)   # None: the tenant measures it

            def build(kind, args, device):
                return Measured() if args.get("measured") else (lambda: None)
            '''))
        run = run_tenant(self, self.module_config({"path": path, "args": {"measured": True}}, kind="service",
                                                  load=0.5, calibrate=True, window_s=0.3))
        self.assertEqual(run.rc, 0, run.stderr)
        calib = run.event("ready")["calib"]
        self.assertEqual(calib["gpu_ms"], 1.5)
        self.assertTrue(0.0 < calib["capacity_rps"] <= 501.0, calib)  # 2 ms requests: at most 500/s
        # Every finished arrival took at least the unit's 2 ms (how many
        # arrive follows the measured capacity, and how many finish the load).
        for rep in run.event("result")["phases"][0]["reps"]:
            self.assertEqual(rep["completed"], len(rep["latencies_ms"]))
            self.assertTrue(all(lat >= 1.9 for lat in rep["latencies_ms"]), rep)

    def test_a_callable_without_sync_needs_torch(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is importable here: the tenant would synchronise through it")
        except ImportError:
            pass
        path = self.write("bare.py", "def build(kind, args, device):\n    return lambda: None\n")
        msg = self.error_of(self.module_config({"path": path}))
        self.assertIn("has no sync()", msg)
        self.assertIn("torch cannot be imported", msg)

    def test_phases_with_other_args_get_a_unit_each(self):
        path = self.write("sleeper.py", SLEEPER)
        cfg = self.module_config({"path": path, "args": {"ms": 4.0}, "warmup": 0}, window_s=0.2,
                                 phases=[{"name": "short", "params": {}},
                                         {"name": "long", "params": {"args": {"ms": 16.0}}}])
        run = run_tenant(self, cfg)
        self.assertEqual(run.rc, 0, run.stderr)
        short, long = run.event("result")["phases"]
        # Each phase's unit slept its own args.ms, never less: the long
        # phase's requests took 16 ms or more although the tenant's args say
        # 4. (A loaded machine may oversleep any request by any amount, so
        # nothing is asserted about how much shorter the short ones were.)
        self.assertTrue(all(lat >= 3.9 for rep in short["reps"] for lat in rep["latencies_ms"]), short)
        self.assertTrue(all(lat >= 15.9 for rep in long["reps"] for lat in rep["latencies_ms"]), long)

    def test_bad_modules_fail_with_an_error_event(self):
        no_build = self.write("no_build.py", "x = 1\n")
        not_a_unit = self.write("not_a_unit.py", "def build(kind, args, device):\n    return 42\n")
        raises = self.write("raises.py", "def build(kind, args, device):\n    raise ValueError('no such model: ' + args['m'])\n")
        broken = self.write("broken.py", "def build(kind, args, device)\n")
        cases = [
            ({}, "workload module needs params.path"),
            ({"path": ""}, "parameter 'path' must be a non-empty string"),
            ({"path": str(self.dir / "missing.py")}, "params.path: no such file: " + str(self.dir / "missing.py")),
            ({"path": no_build}, "defines no build(kind, args, device)"),
            ({"path": not_a_unit}, "build() returned int: neither a callable nor an object with step()"),
            ({"path": raises, "args": {"m": "gpt-9"}}, "ValueError: no such model: gpt-9"),
            ({"path": broken}, "SyntaxError"),
            ({"path": no_build, "args": []}, "parameter 'args' must be a table"),
            ({"path": no_build, "graph": True}, "unknown parameter 'graph' for module (closed); known: args, path, warmup"),
            ({"path": no_build, "warmup": -1}, "parameter 'warmup' must be an integer >= 0"),
        ]
        for params, expected in cases:
            with self.subTest(params=params):
                self.assertIn(expected, self.error_of(self.module_config(params)))


if __name__ == "__main__":
    unittest.main()
