#!/usr/bin/env python3
"""Polls `LITHOS status --socket SOCK --json` every INTERVAL seconds until
killed, printing one JSON line per answer: {"t": time.time(), "fault": ...,
"clients": [{tenant, pid, launches, grants, since_s, ...}], "counters":
...} ({"t":..., "down": true} when lithosd does not answer).

  poll_status.py LITHOS SOCK INTERVAL"""
import json
import subprocess
import sys
import time


def main():
    lithos, sock, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
    while True:
        t = time.time()
        try:
            out = subprocess.run([lithos, "status", "--socket", sock, "--json"], capture_output=True, text=True,
                                 timeout=5).stdout
            j = json.loads(out)
            print(json.dumps({"t": t, "fault": j.get("fault"), "clients": j.get("clients"),
                              "counters": j.get("counters")}), flush=True)
        except (subprocess.SubprocessError, ValueError):
            print(json.dumps({"t": t, "down": True}), flush=True)
        time.sleep(max(0.0, interval - (time.time() - t)))


if __name__ == "__main__":
    main()
