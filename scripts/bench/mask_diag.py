#!/usr/bin/env python3
"""Builds one bench workload and runs a few requests or steps, for checking
that a workload completes under a TPC set (`lithos run --tpc-set S -- python3
scripts/bench/mask_diag.py WORKLOAD KIND PARAMS_JSON [N]`). Prints one line
with the time per step; a launch that never completes shows as a timeout of
the caller's watchdog, and with LITHOS_LOG=debug the log's last launch names
the kernel."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tenant  # noqa: E402  (fills in the workload's default parameters)
import workloads  # noqa: E402

workload, kind, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
n = int(sys.argv[4]) if len(sys.argv) > 4 else 5
params = tenant.resolve_params(workload, kind, ("argv", params))
t0 = time.time()
r = workloads.make_runner(workload, kind, params, 0)
r.sync()
built = time.time()
for _ in range(n):
    r.step()
    r.sync()
done = time.time()
print(json.dumps({"workload": workload, "kind": kind, "build_s": round(built - t0, 2),
                  "step_ms": round(1000 * (done - built) / n, 3)}), flush=True)
