"""plots.py on the results of real H100 runs (docs/results/2026-11-21-h100-bench)
and on hand-made files with a failed mode and no energy (tests/bench/data):
every plot is written as a valid PNG, what cannot be drawn is listed as
skipped, and bad input fails with exit status 2.

Needs matplotlib (Debian: python3-matplotlib, installed by scripts/setup.sh);
without it the tests fail with that message rather than being skipped.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOTS = os.path.join(ROOT, "scripts", "bench", "plots.py")
RESULTS = os.path.join(ROOT, "docs", "results", "2026-11-21-h100-bench")


def run(*args):
    return subprocess.run([sys.executable, PLOTS, *args], capture_output=True, text=True, timeout=900)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


class RecordedH100Plots(unittest.TestCase):
    def setUp(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.fail("matplotlib is missing: install python3-matplotlib (scripts/setup.sh does)")
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def plot(self, scenario):
        p = run(os.path.join(RESULTS, scenario, "results.json"), "--out", self.tmp.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        names = sorted(os.path.basename(w) for w in out["written"])
        for w in out["written"]:
            size = png_size(w)
            self.assertIsNotNone(size, w)
            self.assertGreater(size[0], 400)
            self.assertGreater(size[1], 200)
            self.assertGreater(os.path.getsize(w), 5000, w)
        return names, out

    def test_hybrid_stacking(self):
        names, out = self.plot("hybrid-stacking")
        self.assertEqual(names, ["cdf-svc.png", "energy.png", "p99-norm.png", "throughput.png"])
        self.assertEqual([s["plot"] for s in out["skipped"]], ["hol-p99.png"])  # one phase only

    def test_head_of_line_sweep_gets_its_plot(self):
        names, _ = self.plot("head-of-line")
        self.assertIn("hol-p99.png", names)
        self.assertIn("cdf-hp.png", names)

    def test_every_hp_tenant_gets_a_cdf(self):
        names, _ = self.plot("inference-stacking")
        self.assertIn("cdf-hp-a.png", names)
        self.assertIn("cdf-hp-b.png", names)
        self.assertNotIn("cdf-be.png", names)

    def test_failed_modes_and_missing_energy_are_skipped_not_fatal(self):
        data = os.path.join(ROOT, "tests", "bench", "data")
        p = run(os.path.join(data, "results-sample.json"), "--out", self.tmp.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        failed = [s for s in out["skipped"] if s.get("mode") == "mps-priority"]
        self.assertEqual(len(failed), 1)
        self.assertIn("failed", failed[0]["why"])
        p = run(os.path.join(data, "results-hol-sample.json"), "--out", self.tmp.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertIn("hol-p99.png", [os.path.basename(w) for w in out["written"]])
        self.assertEqual([s["plot"] for s in out["skipped"]], ["energy.png"])

    def test_bad_input_exits_2(self):
        p = run(os.path.join(self.tmp.name, "missing.json"))
        self.assertEqual(p.returncode, 2)
        self.assertTrue(p.stderr.strip())
        wrong = os.path.join(self.tmp.name, "wrong.json")
        with open(wrong, "w") as f:
            json.dump({"schema": "lithos.sim/1"}, f)
        p = run(wrong)
        self.assertEqual(p.returncode, 2)
        self.assertIn("lithos.bench/1", p.stderr)


if __name__ == "__main__":
    unittest.main()
