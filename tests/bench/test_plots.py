"""Tests of scripts/bench/plots.py on the hand-made results files in
tests/bench/data (schema lithos.bench/1, docs/bench-protocol.md 2.2):

  results-sample.json      one phase, hp service "svc" + be training "train",
                           modes alone, time-slicing, mps, static-partition and
                           a failed mps-priority;
  results-hol-sample.json  three phases (x = 0.05, 1, 20 ms), hp closed "hp" +
                           be training "be", no energy counter (all null).

plots.py runs as a subprocess, as `lithos bench` runs it. The tests check the
files it reports (exactly the expected ones, each a real PNG), what it skips
and why, and its exit status on bad input (2) and without matplotlib (3).

Needs matplotlib (Debian: python3-matplotlib); without it every test fails
with that message instead of being skipped.

    python3 -m unittest discover -s tests/bench -p 'test_plots*.py' -v
"""
import copy
import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOTS = os.path.join(ROOT, "scripts", "bench", "plots.py")
DATA = os.path.join(ROOT, "tests", "bench", "data")
SAMPLE = os.path.join(DATA, "results-sample.json")
HOL_SAMPLE = os.path.join(DATA, "results-hol-sample.json")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALL_PLOTS = ["p99-norm.png", "throughput.png", "hol-p99.png", "energy.png"]

try:
    importlib.import_module("matplotlib")  # only whether it imports
    MATPLOTLIB_ERROR = None
except ImportError as e:  # reported by every test, never skipped
    MATPLOTLIB_ERROR = str(e)


def run_plots(*args, env=None):
    """Runs plots.py with this interpreter; returns the CompletedProcess."""
    return subprocess.run([sys.executable, PLOTS, *args], capture_output=True, text=True,
                          timeout=900, env=env)


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, or None if it is no PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


class PlotsTest(unittest.TestCase):
    def setUp(self):
        if MATPLOTLIB_ERROR is not None:
            self.fail(f"matplotlib cannot be imported ({MATPLOTLIB_ERROR}): install "
                      "python3-matplotlib (apt-get install python3-matplotlib) to run these tests")
        self.tmp = tempfile.mkdtemp(prefix="lithos-plots-test-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    # -- helpers ------------------------------------------------------------

    def load(self, path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def write(self, name, doc):
        """Writes `doc` (JSON-serialised unless a str) into the temp dir."""
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def plot_ok(self, results, out):
        """Runs plots.py, expects exit 0 and one JSON object on stdout."""
        p = run_plots(results, "--out", out)
        self.assertEqual(p.returncode, 0, f"exit {p.returncode}; stderr:\n{p.stderr}")
        try:
            report = json.loads(p.stdout)
        except json.JSONDecodeError:
            self.fail(f"stdout is not one JSON object:\n{p.stdout}")
        self.assertEqual(sorted(report), ["skipped", "written"])
        for s in report["skipped"]:
            self.assertIn("plot", s)
            self.assertTrue(s.get("why"), s)
        return report

    def assert_valid_pngs(self, paths):
        for path in paths:
            self.assertTrue(os.path.isfile(path), path)
            size = png_size(path)
            self.assertIsNotNone(size, f"{path}: not a PNG (signature or IHDR)")
            w, h = size
            # ~8 x 4.5 in at 120 dpi = 960 x 540; allow wider multi-panel plots.
            self.assertTrue(400 <= w <= 4000 and 250 <= h <= 2000, f"{path}: {w}x{h}")
            self.assertGreater(os.path.getsize(path), 5 * 1024, f"{path}: suspiciously small")

    def assert_error_exit(self, p, *expected):
        """Exit 2, nothing on stdout, one line on stderr naming `expected`."""
        self.assertEqual(p.returncode, 2, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        self.assertEqual(p.stdout.strip(), "")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for e in expected:
            self.assertIn(e, lines[0])

    # -- the samples ----------------------------------------------------------

    def test_one_phase_sample(self):
        out = os.path.join(self.tmp, "out")  # does not exist yet: created
        report = self.plot_ok(SAMPLE, out)
        self.assertEqual(sorted(os.path.basename(w) for w in report["written"]),
                         ["cdf-svc.png", "energy.png", "p99-norm.png", "throughput.png"])
        for w in report["written"]:
            self.assertEqual(os.path.dirname(os.path.abspath(w)), os.path.abspath(out))
        self.assert_valid_pngs(report["written"])
        self.assertEqual(sorted(os.listdir(out)),
                         sorted(os.path.basename(w) for w in report["written"]))
        # The failed mode is left out, with its error; one phase: no hol plot.
        failed = [s for s in report["skipped"] if s.get("mode") == "mps-priority"]
        self.assertEqual(len(failed), 1, report["skipped"])
        self.assertEqual(failed[0]["plot"], "*")
        self.assertIn("failed", failed[0]["why"])
        self.assertIn("CUDA error", failed[0]["why"])
        self.assertIn("hol-p99.png", [s["plot"] for s in report["skipped"]])
        self.assertEqual(len(report["skipped"]), 2, report["skipped"])

    def test_head_of_line_sample(self):
        report = self.plot_ok(HOL_SAMPLE, self.tmp)
        self.assertEqual(sorted(os.path.basename(w) for w in report["written"]),
                         ["cdf-hp.png", "hol-p99.png", "p99-norm.png", "throughput.png"])
        self.assert_valid_pngs(report["written"])
        # Energy is null everywhere in this sample: skipped, saying so.
        self.assertEqual([s["plot"] for s in report["skipped"]], ["energy.png"])
        self.assertIn("null", report["skipped"][0]["why"])

    def test_out_defaults_to_the_json_folder(self):
        results = os.path.join(self.tmp, "OUT", "results.json")
        os.makedirs(os.path.dirname(results))
        shutil.copy(SAMPLE, results)
        p = run_plots(results)
        self.assertEqual(p.returncode, 0, p.stderr)
        written = json.loads(p.stdout)["written"]
        self.assertEqual(len(written), 4)
        for w in written:
            self.assertEqual(os.path.dirname(os.path.abspath(w)), os.path.dirname(results))
        self.assert_valid_pngs(written)

    # -- robustness -----------------------------------------------------------

    def test_every_mode_failed(self):
        doc = self.load(SAMPLE)
        for m in doc["modes"]:
            m["status"] = "failed"
            m["error"] = f"{m['mode']}: tenant svc exited with status 1"
            m["phases"] = []
        report = self.plot_ok(self.write("all-failed.json", doc), self.tmp)
        self.assertEqual(report["written"], [])
        self.assertEqual(os.listdir(self.tmp), ["all-failed.json"])  # no PNG at all
        skipped_modes = {s.get("mode") for s in report["skipped"] if s["plot"] == "*"}
        self.assertEqual(skipped_modes, {m["mode"] for m in doc["modes"]})
        by_plot = {s["plot"]: s["why"] for s in report["skipped"] if s["plot"] != "*"}
        for name in ["cdf-svc.png"] + ALL_PLOTS:
            self.assertIn(name, by_plot)
            self.assertIn("no usable mode", by_plot[name])

    def test_nulls_and_absent_tenants_do_not_crash(self):
        doc = self.load(SAMPLE)
        modes = {m["mode"]: m for m in doc["modes"]}
        # mps lost its training tenant; static-partition has no normalised P99
        # nor CDF for svc; time-slicing has a null energy; a mode with no phases.
        mps = modes["mps"]["phases"][0]
        mps["tenants"] = [t for t in mps["tenants"] if t["name"] != "train"]
        svc_sp = modes["static-partition"]["phases"][0]["tenants"][0]
        svc_sp["norm"]["p99"] = None
        svc_sp["cdf_ms"] = None
        svc_sp["p99_ms"] = {"median": None, "min": None, "max": None, "n": 0}
        for t in modes["time-slicing"]["phases"][0]["tenants"]:
            t["energy_per_unit_j"] = None
        extra = copy.deepcopy(modes["mps"])
        extra.update(mode="lithos-fixed", label="lithos fixed sets")
        del extra["phases"]
        doc["modes"].append(extra)
        report = self.plot_ok(self.write("holes.json", doc), self.tmp)
        self.assertEqual(sorted(os.path.basename(w) for w in report["written"]),
                         ["cdf-svc.png", "energy.png", "p99-norm.png", "throughput.png"])
        self.assert_valid_pngs(report["written"])
        whys = [(s.get("mode"), s["why"]) for s in report["skipped"] if s["plot"] == "*"]
        self.assertIn(("lithos-fixed", "no phases"), whys)
        self.assertTrue(any(m == "mps" and "train" in w for m, w in whys), whys)

    def test_no_alone_run_leaves_normalised_plots_out(self):
        doc = self.load(SAMPLE)
        doc["modes"] = [m for m in doc["modes"] if m["mode"] != "alone"]
        for m in doc["modes"]:
            for ph in m.get("phases", []):
                for t in ph["tenants"]:
                    t["norm"] = {k: None for k in ("p50", "p99", "p999", "throughput")}
        report = self.plot_ok(self.write("no-alone.json", doc), self.tmp)
        self.assertEqual(sorted(os.path.basename(w) for w in report["written"]),
                         ["cdf-svc.png", "energy.png"])
        by_plot = {s["plot"]: s["why"] for s in report["skipped"]}
        self.assertIn("alone", by_plot["p99-norm.png"])
        self.assertIn("alone", by_plot["throughput.png"])

    # -- bad input ------------------------------------------------------------

    def test_wrong_schema_exits_2(self):
        doc = self.load(SAMPLE)
        doc["schema"] = "lithos.bench.run/1"
        p = run_plots(self.write("wrong.json", doc), "--out", self.tmp)
        self.assert_error_exit(p, "schema", "lithos.bench/1", "lithos.bench.run/1")

    def test_missing_file_exits_2(self):
        missing = os.path.join(self.tmp, "nope", "results.json")
        p = run_plots(missing)
        self.assert_error_exit(p, missing, "no such file")

    def test_not_json_exits_2(self):
        p = run_plots(self.write("garbage.json", "{not json"), "--out", self.tmp)
        self.assert_error_exit(p, "not JSON")

    def test_without_matplotlib_exits_3(self):
        # A stand-in `matplotlib` package that fails to import, first on the path.
        fake = os.path.join(self.tmp, "fake")
        os.makedirs(os.path.join(fake, "matplotlib"))
        with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
            f.write('raise ImportError("No module named \'matplotlib\' (test stand-in)")\n')
        env = dict(os.environ, PYTHONPATH=fake, PYTHONDONTWRITEBYTECODE="1")
        p = run_plots(SAMPLE, "--out", os.path.join(self.tmp, "out"), env=env)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stdout.strip(), "")
        self.assertIn("matplotlib", p.stderr)
        self.assertIn("install", p.stderr)


if __name__ == "__main__":
    unittest.main()
