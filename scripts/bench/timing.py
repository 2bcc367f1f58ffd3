"""Torch-free timing loops of the bench tenant, shared by the built-in
workloads (workloads.py) and the user's own (user_workload.py)."""
import statistics
import time

CAPACITY_S = 2.0  # closed-loop capacity: measured over at least this long


def closed_loop_rps(step, sync, seconds=CAPACITY_S):
    """Requests per second of step() + sync() back to back, over `seconds`."""
    sync()
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        sync()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return n / elapsed


def wall_ms(step, sync, n=20, budget_s=2.0):
    """Median wall time in ms of step() + sync() over n runs (fewer, but at
    least 5, once budget_s seconds have passed)."""
    times = []
    t0 = time.perf_counter()
    while len(times) < n and (len(times) < 5 or time.perf_counter() - t0 < budget_s):
        s = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - s) * 1000.0)
    return statistics.median(times)
