#!/usr/bin/env python3
"""One tenant of `lithos bench`: a workload driven by a load generator.

The harness (src/bench) starts this script once per tenant and talks to it
over stdin/stdout as docs/bench-protocol.md section 1 specifies:

  stdin  line 1   the configuration (JSON)
  stdout          {"event": "ready", "calib": {...}, "info": {...}}
  stdin  line 2   {"start": T}       (EOF instead: abort, exit 0 quietly)
  stdout          {"event": "result", "phases": [...]}, then exit 0
  stdout          {"event": "error", "message": "..."} and exit 1 on any failure

From T on, every tenant follows the same timeline: per phase a warm-up and
`reps` windows of `window_s`, then a drain of `drain_s`. A service is an open
loop (Poisson arrivals, one FIFO server) whose latencies include queueing; a
closed loop and a training loop run back to back. Every kind keeps the GPU
busy until the end of the drain (a service: arrivals stop at the end, its
queue is served through the drain), so interference lasts as long as
anything is measured.

This module holds the protocol, the timeline, the load generators and the
`fake` workload (a sleep), and imports nothing outside the standard library,
so the CPU tests run it with a bare python3. The GPU workloads live in
workloads.py, imported only when a GPU workload is asked for; the `module`
workload (a Python file of the user's) in user_workload.py.

stdout carries protocol lines only: at start-up the script keeps a private
copy of file descriptor 1 for them and points descriptor 1 (and sys.stdout)
at stderr, so anything else printed, by Python code or native libraries,
lands in the log.
"""
import bisect
import gc
import json
import math
import os
import platform
import random
import sys
import time
import traceback
from dataclasses import dataclass

KINDS = ("service", "closed", "training")

# Calibration keys (docs/bench-protocol.md 1.2).
CAPACITY = "capacity_rps"
GPU_MS = "gpu_ms"
SPIN_IPM = "spin_iters_per_ms"


class ConfigError(Exception):
    """The configuration (or the start line) breaks the protocol."""


# --- Workload table -------------------------------------------------------
#
# Parameters are checked here, before anything heavy is imported, so a bad
# configuration fails at once and workloads.py receives complete parameter
# dicts (defaults filled in).

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v))


POS_INT = ("a positive integer", lambda v: _is_int(v) and v >= 1)
POS_NUM = ("a positive number", lambda v: _is_num(v) and v > 0)
NONNEG_INT = ("an integer >= 0", lambda v: _is_int(v) and v >= 0)
PATH = ("a non-empty string (a file path)", lambda v: isinstance(v, str) and v != "")
OBJECT = ("a table (an object)", lambda v: isinstance(v, dict))
BOOL = ("true or false", lambda v: isinstance(v, bool))
BERT_SEQ = ("an integer in 1..512", lambda v: _is_int(v) and 1 <= v <= 512)
WARPS = ("one of 1, 2, 4, 8, 16, 32", lambda v: _is_int(v) and v in (1, 2, 4, 8, 16, 32))


@dataclass(frozen=True)
class Workload:
    kinds: dict          # kind -> {param: (default, (what, check))}
    live: frozenset = frozenset()  # params a runner changes in place between phases


def _infer(**spec):
    return {"service": spec, "closed": spec}


# torch.compile's modes (Inductor). true is "default"; the modes marked
# True capture CUDA graphs of their own (cudagraph trees), so a workload that
# replays its own graph (graph = true) cannot take them.
COMPILE_MODES = {"default": False, "reduce-overhead": True, "max-autotune": True,
                 "max-autotune-no-cudagraphs": False}
COMPILE = ("true, false or a torch.compile mode (" + ", ".join(COMPILE_MODES) + ")",
           lambda v: isinstance(v, bool) or (isinstance(v, str) and v in COMPILE_MODES))
_COMPILE = {"compile": (False, COMPILE)}  # torch.compile the model (Inductor)


def compile_mode(params):
    """The torch.compile mode params.compile asks for, None for no compile."""
    c = params.get("compile", False)
    if c is False:
        return None
    return "default" if c is True else c


_BERT = Workload({**_infer(batch=(8, POS_INT), seq=(128, BERT_SEQ), graph=(True, BOOL), **_COMPILE),
                  "training": {"batch": (32, POS_INT), "seq": (128, BERT_SEQ), **_COMPILE}})
_SPIN = {"kernel_ms": (1.0, POS_NUM), "blocks_per_sm": (2, POS_INT), "num_warps": (4, WARPS), "waves": (1, POS_INT)}
WORKLOADS = {
    "resnet50": Workload({**_infer(batch=(32, POS_INT), graph=(True, BOOL), **_COMPILE),
                          "training": {"batch": (128, POS_INT), **_COMPILE}}),
    "bert-base": _BERT,
    "bert-large": _BERT,
    "llama1b-prefill": Workload(_infer(batch=(1, POS_INT), seq=(512, POS_INT), graph=(True, BOOL), **_COMPILE)),
    "llama1b-decode": Workload(_infer(batch=(8, POS_INT), ctx=(1024, POS_INT), graph=(True, BOOL), **_COMPILE)),
    "gpt": Workload({"training": {"batch": (8, POS_INT), "seq": (1024, POS_INT), **_COMPILE}}),
    "spin": Workload({"service": _SPIN, "closed": _SPIN, "training": _SPIN}, live=frozenset({"kernel_ms"})),
    "fake": Workload({k: {"ms": (1.0, POS_NUM)} for k in KINDS}, live=frozenset({"ms"})),
    # A workload of the user's: params.path defines build(kind, args, device)
    # (user_workload.py); no default path: it must be given.
    "module": Workload({k: {"path": (None, PATH), "args": ({}, OBJECT), "warmup": (10, NONNEG_INT)}
                        for k in KINDS}),
}


def resolve_params(workload, kind, *layers):
    """The defaults overridden by each dict of `layers` in turn, checked."""
    spec = WORKLOADS[workload].kinds[kind]
    out = {k: dict(default) if isinstance(default, dict) else default for k, (default, _) in spec.items()}
    for where, layer in layers:
        for k, v in layer.items():
            if k not in spec:
                raise ConfigError(f"{where}: unknown parameter '{k}' for {workload} ({kind}); "
                                  f"known: {', '.join(sorted(spec)) or 'none'}")
            what, ok = spec[k][1]
            if not ok(v):
                raise ConfigError(f"{where}: parameter '{k}' must be {what}, got {json.dumps(v)}")
            out[k] = v
    if workload == "module" and out["path"] is None:
        raise ConfigError(f"{layers[-1][0] if layers else 'params'}: workload module needs params.path, "
                          f"a Python file that defines build(kind, args, device)")
    mode = compile_mode(out)
    if "compile" in out:
        out["compile"] = mode or False  # the mode's name, or false
    if out.get("graph") and mode is not None and COMPILE_MODES[mode]:
        raise ConfigError(f"{layers[-1][0] if layers else 'params'}: compile mode '{mode}' replays CUDA graphs "
                          f"of its own (cudagraph trees) and cannot be captured into another: set graph = false")
    return out


# --- Configuration ----------------------------------------------------------

@dataclass
class Phase:
    name: str
    params: dict   # complete, checked parameters of this phase


@dataclass
class Config:
    name: str
    kind: str
    workload: str
    phases: list
    load: float
    rate_rps: float   # None: load x capacity
    calib: dict
    calibrate: bool
    warmup_s: float
    window_s: float
    reps: int
    drain_s: float
    seed: int
    device: int


_KNOWN_KEYS = {"name", "role", "kind", "workload", "params", "load", "rate_rps", "calib", "calibrate",
               "phases", "warmup_s", "window_s", "reps", "drain_s", "seed", "device"}


_REQUIRED = object()


def _is_obj(v):
    return isinstance(v, dict)


def _field(obj, key, what, ok, default=_REQUIRED, where="config"):
    """obj[key] checked with `ok`; `default` when absent (or an error)."""
    if key not in obj:
        if default is _REQUIRED:
            raise ConfigError(f"{where}: missing field '{key}'")
        return default
    v = obj[key]
    if not ok(v):
        raise ConfigError(f"{where}: field '{key}' must be {what}, got {json.dumps(v)}")
    return v


def parse_config(line):
    """The Config of the first stdin line; ConfigError when it is not one."""
    try:
        c = json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"config is not JSON: {e}") from None
    if not isinstance(c, dict):
        raise ConfigError("config must be a JSON object")
    unknown = sorted(set(c) - _KNOWN_KEYS)
    if unknown:
        log(f"warning: ignoring unknown config fields: {', '.join(unknown)}")
    kind = _field(c, "kind", "one of " + ", ".join(KINDS), lambda v: isinstance(v, str) and v in KINDS)
    workload = _field(c, "workload", "one of " + ", ".join(WORKLOADS),
                      lambda v: isinstance(v, str) and v in WORKLOADS)
    if kind not in WORKLOADS[workload].kinds:
        raise ConfigError(f"config: workload {workload} cannot run as kind {kind} "
                          f"(kinds: {', '.join(WORKLOADS[workload].kinds)})")
    base = _field(c, "params", "an object", _is_obj, {})
    raw_phases = _field(c, "phases", "a non-empty array", lambda v: isinstance(v, list) and v)
    phases = []
    for i, p in enumerate(raw_phases):
        where = f"config: phases[{i}]"
        if not _is_obj(p):
            raise ConfigError(f"{where} must be an object")
        name = _field(p, "name", "a non-empty string", lambda v: isinstance(v, str) and v, where=where)
        over = _field(p, "params", "an object", _is_obj, {}, where=where)
        phases.append(Phase(name, resolve_params(workload, kind, ("config: params", base),
                                                 (where + ".params", over))))
    rate = None
    load = 0.0
    if kind == "service":
        rate = _field(c, "rate_rps", "null or a positive number", lambda v: v is None or POS_NUM[1](v), None)
        if rate is None:
            load = _field(c, "load", "a positive number (rate_rps is null)", POS_NUM[1])
    calib = _field(c, "calib", "an object", _is_obj, {})
    for k in (CAPACITY, GPU_MS, SPIN_IPM):
        if k in calib and not POS_NUM[1](calib[k]):
            raise ConfigError(f"config: calib.{k} must be a positive number, got {json.dumps(calib[k])}")
    return Config(
        name=_field(c, "name", "a string", lambda v: isinstance(v, str), "tenant"),
        kind=kind, workload=workload, phases=phases, load=load, rate_rps=rate, calib=dict(calib),
        calibrate=_field(c, "calibrate", "true or false", BOOL[1], False),
        warmup_s=_field(c, "warmup_s", "a number >= 0", lambda v: _is_num(v) and v >= 0),
        window_s=_field(c, "window_s", "a positive number", POS_NUM[1]),
        reps=_field(c, "reps", "a positive integer", POS_INT[1]),
        drain_s=_field(c, "drain_s", "a number >= 0", lambda v: _is_num(v) and v >= 0),
        seed=_field(c, "seed", "an integer", _is_int),
        device=_field(c, "device", "an integer >= 0", lambda v: _is_int(v) and v >= 0, 0),
    )


# --- Workload runners -------------------------------------------------------
#
# A runner is one built workload. The interface, shared with workloads.py:
#   step()               enqueue one request (training: one step); no waiting
#   sync()               wait until everything enqueued has finished
#   set_params(params)   adopt a phase's params (only Workload.live may differ)
#   apply_calib(calib)   take what it needs from the calibration (spin: its rate)
#   measure(key)         measure one calibration key (CAPACITY, GPU_MS, SPIN_IPM)
#   info()               free-form facts for the ready event

class FakeRunner:
    """`fake`: a request is time.sleep(ms); no GPU, no torch (CPU tests)."""

    def __init__(self, params):
        self.ms = params["ms"]

    def step(self):
        time.sleep(self.ms / 1000.0)

    def sync(self):
        pass

    def set_params(self, params):
        self.ms = params["ms"]

    def apply_calib(self, calib):
        pass

    def measure(self, key):
        # Exact by construction, and instant: the CPU tests calibrate often.
        return {CAPACITY: 1000.0 / self.ms, GPU_MS: self.ms}[key]

    def info(self):
        return {"torch": None, "graph": False, "device_name": "none (fake workload)"}


def build_runners(cfg):
    """One runner per phase, shared by phases that differ in live params only.

    Everything a phase needs is built (and warmed up, graphs captured) here,
    before ready: nothing may be built during the measured timeline.
    """
    live = WORKLOADS[cfg.workload].live
    built = {}
    per_phase = []
    for ph in cfg.phases:
        key = json.dumps({k: v for k, v in ph.params.items() if k not in live}, sort_keys=True)
        if key not in built:
            if cfg.workload == "fake":
                built[key] = FakeRunner(ph.params)
            elif cfg.workload == "module":
                import user_workload  # torch only when the user's code needs it
                log(f"building {ph.params['path']} ({cfg.kind}) with args {ph.params['args']}")
                try:
                    built[key] = user_workload.ModuleRunner(cfg.kind, ph.params, cfg.device)
                except user_workload.ModuleError as e:
                    raise ConfigError(str(e)) from None
            else:
                import workloads  # torch: only for GPU workloads
                log(f"building {cfg.workload} ({cfg.kind}) with {ph.params}")
                built[key] = workloads.make_runner(cfg.workload, cfg.kind, ph.params, cfg.device)
        per_phase.append(built[key])
    return per_phase


class Phases:
    """Switches between the phases' runners and params, only when needed."""

    def __init__(self, cfg, runners):
        self.params = [ph.params for ph in cfg.phases]
        self.runners = runners
        self.current = None

    def activate(self, p):
        """The runner of phase p, set to phase p's params."""
        r = self.runners[p]
        if p != self.current:
            r.set_params(self.params[p])
            self.current = p
        return r

    def distinct(self):
        """Each runner once, in phase order."""
        seen = []
        for r in self.runners:
            if all(r is not s for s in seen):
                seen.append(r)
        return seen


def calibrate(cfg, phases):
    """The calibration the run uses, and what was measured although not asked.

    With cfg.calibrate everything that applies is measured afresh; without,
    only what the run needs and cfg.calib lacks (info.calibrated_here).
    Also returns the GPU time of every phase when measured (for info).
    """
    applicable = [GPU_MS]
    if cfg.kind in ("service", "closed"):
        applicable.append(CAPACITY)
    needed = []
    if cfg.workload == "spin":
        applicable.append(SPIN_IPM)
        needed.append(SPIN_IPM)
    if cfg.kind == "service" and cfg.rate_rps is None:
        needed.append(CAPACITY)
    calib = dict(cfg.calib)
    todo = applicable if cfg.calibrate else [k for k in needed if k not in calib]

    first = phases.activate(0)
    if SPIN_IPM in todo:
        log("calibrating the spin kernel's iterations per ms")
        calib[SPIN_IPM] = first.measure(SPIN_IPM)
    for r in phases.distinct():
        r.apply_calib(calib)
    # Every phase runs once before ready: a broken phase fails now, and any
    # lazy compilation (Triton specialisations) happens outside the timeline.
    for p in range(len(cfg.phases)):
        r = phases.activate(p)
        r.step()
        r.sync()
    phase_gpu_ms = None
    if GPU_MS in todo:
        log("measuring the GPU time of one request/step")
        phase_gpu_ms = [phases.activate(p).measure(GPU_MS) for p in range(len(cfg.phases))]
        calib[GPU_MS] = phase_gpu_ms[0]
    if CAPACITY in todo:
        log("measuring the closed-loop capacity (phase 0's params)")
        calib[CAPACITY] = phases.activate(0).measure(CAPACITY)
    return calib, ([] if cfg.calibrate else todo), phase_gpu_ms


# --- Timeline and recording ----------------------------------------------------

class Timeline:
    """The run's instants, in seconds after T (docs/bench-protocol.md 1.3)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.phase_len = cfg.warmup_s + cfg.reps * cfg.window_s
        self.end = len(cfg.phases) * self.phase_len
        self.drain_end = self.end + cfg.drain_s
        # (start, phase, rep) of every window, in time order.
        self.windows = [(self.window_start(p, r), p, r)
                        for p in range(len(cfg.phases)) for r in range(cfg.reps)]
        self._starts = [w[0] for w in self.windows]

    def window_start(self, p, r):
        return p * self.phase_len + self.cfg.warmup_s + r * self.cfg.window_s

    def window_of(self, t):
        """(phase, rep) of the window holding t, or None (warm-up, drain)."""
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0 or t >= self.windows[i][0] + self.cfg.window_s:
            return None
        return self.windows[i][1:]

    def phase_at(self, t):
        """The phase running at t (the last one during the drain)."""
        return min(max(int(t // self.phase_len), 0), len(self.cfg.phases) - 1)


def service_arrivals(cfg, tl, rate):
    """Every arrival as (offset after T, phase, rep or None for warm-up).

    Each window's Poisson process starts afresh at the window's start with
    its own stream, and so does each phase's warm-up: every mode, and every
    window whatever came before it, sees the same arrival times.
    """
    out = []
    for p in range(len(cfg.phases)):
        streams = [(p * tl.phase_len, cfg.warmup_s, 997, None)]
        streams += [(tl.window_start(p, r), cfg.window_s, r, r) for r in range(cfg.reps)]
        for start, length, salt, rep in streams:
            rng = random.Random(cfg.seed * 1000003 + p * 1009 + salt)
            t = rng.expovariate(rate)
            while t < length:
                out.append((start + t, p, rep))
                t += rng.expovariate(rate)
    return out


class Rep:
    """What one window recorded."""

    def __init__(self):
        self.latencies = []
        self.unfinished = []

    def to_json(self, window_s):
        ms = lambda xs: [round(x * 1000.0, 4) for x in xs]  # noqa: E731  (0.1 us)
        return {"latencies_ms": ms(self.latencies), "unfinished_ms": ms(self.unfinished),
                "completed": len(self.latencies), "window_s": window_s}


class Clock:
    """Seconds after T on the monotonic clock, and sleeping until an instant.

    T is a CLOCK_REALTIME instant; it is mapped once onto perf_counter, which
    neither jumps nor drifts with NTP during the run.
    """

    SPIN_S = 0.001  # the last stretch of a wait is spun: sleep overshoots by ~0.1 ms

    def __init__(self, start_wall):
        self.base = time.perf_counter() + (start_wall - time.time())

    def now(self):
        return time.perf_counter() - self.base

    def wait_until(self, t):
        while True:
            left = t - self.now()
            if left <= 0:
                return
            if left > 1.5 * self.SPIN_S:
                time.sleep(left - self.SPIN_S)


def run_service(tl, arrivals, phases, clock, reps):
    """Open loop, one FIFO server: latency = completion - arrival, recorded
    in the window of the arrival. Served until the drain ends; what has not
    completed by then is reported as a lower bound (drain end - arrival)."""
    n = 0
    for a, p, r in arrivals:
        if clock.now() >= tl.drain_end:
            break
        clock.wait_until(a)
        runner = phases.activate(p)
        runner.step()
        runner.sync()
        done = clock.now()
        n += 1
        if r is None:
            continue
        if done <= tl.drain_end:
            reps[p][r].latencies.append(done - a)
        else:
            reps[p][r].unfinished.append(tl.drain_end - a)
    for a, p, r in arrivals[n:]:
        if r is not None:
            reps[p][r].unfinished.append(tl.drain_end - a)


def run_loop(tl, phases, clock, reps):
    """Closed loop or training: back to back from T until the drain ends;
    latency = completion - start, recorded in the window of the completion.
    Each request runs with the params of the phase it starts in."""
    clock.wait_until(0.0)
    while True:
        start = clock.now()
        if start >= tl.drain_end:
            return
        runner = phases.activate(tl.phase_at(start))
        runner.step()
        runner.sync()
        done = clock.now()
        w = tl.window_of(done)
        if w is not None:
            reps[w[0]][w[1]].latencies.append(done - start)


# --- Protocol -----------------------------------------------------------------

def log(msg):
    print(f"tenant: {msg}", file=sys.stderr, flush=True)


class Protocol:
    """The stdout pipe, for protocol lines only (see the module docstring)."""

    def __init__(self):
        sys.stdout.flush()
        self._out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def emit(self, obj):
        # allow_nan=False: NaN is not JSON; better an error than a bad line.
        self._out.write(json.dumps(obj, allow_nan=False) + "\n")
        self._out.flush()


def read_start(line):
    """T of the start line."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"start line is not JSON: {e}") from None
    if not isinstance(msg, dict) or not _is_num(msg.get("start")):
        raise ConfigError(f"expected {{\"start\": T}}, got {line.strip()[:200]}")
    return float(msg["start"])


def run(proto):
    """The whole protocol; returns the exit status."""
    line = sys.stdin.readline()
    if not line.strip():
        raise ConfigError("no configuration on stdin")
    cfg = parse_config(line)
    log(f"{cfg.name}: {cfg.workload} as {cfg.kind}, {len(cfg.phases)} phase(s)")

    phases = Phases(cfg, build_runners(cfg))
    calib, calibrated_here, phase_gpu_ms = calibrate(cfg, phases)
    tl = Timeline(cfg)
    arrivals = None
    info = {"workload": cfg.workload, "kind": cfg.kind, "params": cfg.phases[0].params,
            "python": platform.python_version(),
            # Which MPS control daemon this process would join (the harness
            # names a private one, or an empty folder for modes without MPS).
            "mps_pipe_directory": os.environ.get("CUDA_MPS_PIPE_DIRECTORY")}
    if any(ph.params != cfg.phases[0].params for ph in cfg.phases):
        info["phase_params"] = [ph.params for ph in cfg.phases]
    if cfg.kind == "service":
        rate = cfg.rate_rps if cfg.rate_rps is not None else cfg.load * calib[CAPACITY]
        arrivals = service_arrivals(cfg, tl, rate)
        info["rate_rps"] = rate
    if phase_gpu_ms is not None and len(phase_gpu_ms) > 1:
        info["phase_gpu_ms"] = phase_gpu_ms
    if calibrated_here:
        info["calibrated_here"] = calibrated_here
    info.update(phases.runners[0].info())
    proto.emit({"event": "ready", "calib": calib, "info": info})

    line = sys.stdin.readline()
    while line and not line.strip():
        line = sys.stdin.readline()
    if not line:
        log("EOF before start: aborting")
        return 0
    clock = Clock(read_start(line))
    if clock.now() > 0:
        log(f"warning: start instant already {clock.now():.3f} s past")

    reps = [[Rep() for _ in range(cfg.reps)] for _ in cfg.phases]
    # No cyclic garbage collection during the timeline: a collection pass
    # over torch's many objects would show up as tail latency that belongs
    # to Python, not to the GPU. The loops make no reference cycles.
    gc.collect()
    gc.disable()
    if cfg.kind == "service":
        run_service(tl, arrivals, phases, clock, reps)
    else:
        run_loop(tl, phases, clock, reps)
    # Results go out at the common end, whatever the kind.
    clock.wait_until(tl.drain_end)
    proto.emit({"event": "result", "phases": [
        {"name": ph.name, "reps": [rep.to_json(cfg.window_s) for rep in reps[p]]}
        for p, ph in enumerate(cfg.phases)]})
    return 0


def main():
    proto = Protocol()
    try:
        return run(proto)
    except Exception as e:  # noqa: BLE001 -- every failure becomes an error event
        if isinstance(e, ConfigError):
            message = str(e)
        else:
            traceback.print_exc(file=sys.stderr)
            message = f"{type(e).__name__}: {e}"
        log(message)
        try:
            proto.emit({"event": "error", "message": message})
        except OSError:  # the harness is gone: nobody to tell
            pass
        return 1


def lithos_report_now():
    """Writes liblithos's exit report (LITHOS_STATS_FILE & co.) before the
    os._exit below skips it; nothing when liblithos is not in the process."""
    if not any(os.environ.get(k) for k in ("LITHOS_STATS", "LITHOS_STATS_FILE", "LITHOS_ATOM_REPORT")):
        return
    try:
        import ctypes
        ctypes.CDLL(None).lithos_report_now()
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    rc = main()
    lithos_report_now()
    sys.stderr.flush()
    # Skip the interpreter's teardown: after the result is out, destructors
    # of CUDA graphs, Triton and CUDA contexts running at exit can only turn
    # a finished run into a failure (or a hang).
    os._exit(rc)
