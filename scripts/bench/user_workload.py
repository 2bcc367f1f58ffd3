"""The `module` workload of the bench tenant (tenant.py): a workload of the
user's own, in a Python file, driven by the same load generators, timeline
and measurements as the built-in ones, under every sharing mode.

The file defines

    def build(kind, args, device):
        ...

called once per distinct set of params, before the tenant is ready, with
`kind` ("service", "closed" or "training"), `args` (the scenario's
params.args, a dict) and `device` (the CUDA device index). It builds its
model and inputs and returns what runs one unit of work: a request
(service, closed) or a training step (training). That is either

  - a callable taking no arguments, or
  - an object with a step() method and, optionally, sync() (wait until
    everything step() enqueued has finished), measure(key) (a number for
    a calibration key, or None to let the tenant measure it), info() (a
    dict for the ready event) and a `model` attribute (an nn.Module, for
    the parameter count).

step() enqueues the work and need not wait for it: the tenant calls
sync() to complete a request. Without a sync() of the object's,
torch.cuda.synchronize(device) is used. The file is run as a module of its
own (not imported by name), so it may sit anywhere; its folder is put at
the front of sys.path while it loads, for its own imports.

A request that replays a CUDA graph is the user's to capture in build()
(torch.cuda.CUDAGraph; step = graph.replay): lithos then schedules the
replay as it does any graph launch. params.warmup: step() + sync() this
many times before anything is measured (default 10).

This module imports nothing outside the standard library: torch only when
it is needed (no sync() of the object's; GPU timing when the user's code
loaded torch), so the CPU tests run it with a bare python3.
"""
import importlib.util
import os
import sys

from timing import closed_loop_rps, wall_ms


class ModuleError(Exception):
    """The user's file, or what its build() returned, does not fit."""


def load_module(path):
    """The user's file run as a module of its own; ModuleError when it cannot be."""
    if not os.path.isfile(path):
        raise ModuleError(f"params.path: no such file: {path}")
    name = "lithos_user_workload_" + str(abs(hash(os.path.abspath(path))))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleError(f"params.path: {path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    if not callable(getattr(module, "build", None)):
        raise ModuleError(f"{path} defines no build(kind, args, device)")
    return module


class ModuleRunner:
    """`module`: the object (or callable) the user's build() returned, behind
    the tenant's runner interface."""

    def __init__(self, kind, params, device):
        self.path = params["path"]
        self.device = device
        built = load_module(self.path).build(kind, dict(params["args"]), device)
        step = getattr(built, "step", None)
        if callable(step):
            self._obj = built
        elif callable(built):
            self._obj, step = None, built
        else:
            raise ModuleError(f"{self.path}: build() returned {type(built).__name__}: "
                              "neither a callable nor an object with step()")
        self._step = step
        own_sync = getattr(self._obj, "sync", None)
        if callable(own_sync):
            self._sync = own_sync
        else:
            torch = _torch(f"{self.path}: what build() returned has no sync()")
            self._sync = lambda: torch.cuda.synchronize(device)
        self.model = getattr(self._obj, "model", None)
        for _ in range(params.get("warmup", 10)):
            self._step()
            self._sync()

    def step(self):
        self._step()

    def sync(self):
        self._sync()

    def set_params(self, params):
        """Every param is fixed at build: phases whose params differ get a runner each."""

    def apply_calib(self, calib):
        pass

    def measure(self, key):
        own = getattr(self._obj, "measure", None)
        if callable(own):
            v = own(key)
            if v is not None:
                return v
        if key == "capacity_rps":
            return closed_loop_rps(self.step, self.sync)
        if key == "gpu_ms":
            if "torch" in sys.modules:
                import workloads  # torch
                return workloads.event_ms(self.step, 20, budget_s=2.0)
            return wall_ms(self.step, self.sync)
        raise ValueError(f"the module workload cannot measure {key}")

    def info(self):
        d = {"module": self.path}
        torch = sys.modules.get("torch")
        if torch is not None:
            d["torch"] = torch.__version__
            if torch.cuda.is_available():
                d["device_name"] = torch.cuda.get_device_name(self.device)
        params = getattr(self.model, "parameters", None)
        if callable(params):
            d["param_count"] = sum(p.numel() for p in params())
        own = getattr(self._obj, "info", None)
        if callable(own):
            extra = own()
            if isinstance(extra, dict):
                d["module_info"] = extra
        return d


def _torch(why):
    try:
        import torch
    except ImportError:
        raise ModuleError(f"{why}, and torch cannot be imported to synchronise the device") from None
    return torch
