#!/usr/bin/env python3
"""Right-sizing alone, from `lithos bench` output folders (issue 38).

    scripts/bench/rightsize_report.py OUT [OUT ...] [--json FILE]

Each OUT holds runs of modes lithos-alone and rightsize-alone (for example
`lithos bench rightsize-services --out OUT`). Per tenant it prints:

- the slowdown of right-sizing: services P50 and P99 of rightsize-alone over
  lithos-alone (medians over the repetitions, from OUT/results.json),
  training jobs lithos-alone's steps/s over rightsize-alone's;
- what lithosd's status says right-sizing did in the rightsize-alone run
  (OUT/runs/rightsize-alone-<tenant>.json, member "lithosd"): the share of
  the tenant's TPC-time left to others, which decision made the counts
  (occupancy bound, model), probes and their predicted cost, and the
  slowdown lithosd measured on timed kernels;
- lithosd's hp predictions checked against timed launches, and the power
  governor's dry-run choice, where the run had them.

The table goes to stdout; --json writes every number.
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def median(stat):
    return stat.get("median") if isinstance(stat, dict) else None


def mode_tenants(results, mode):
    for m in (results or {}).get("modes", []):
        if m.get("mode") == mode and m.get("phases"):
            return {t["name"]: t for t in m["phases"][0].get("tenants", [])}
    return {}


def daemon_tenant(run, name):
    st = (run or {}).get("lithosd") or {}
    for t in st.get("tenants", []):
        if t.get("name") == name:
            return t, st
    return {}, st


def ratio(a, b):
    return a / b if a and b else None


def fmt(x, spec="{:.3f}", none="-"):
    return none if x is None else spec.format(x)


def report(out):
    results = load(os.path.join(out, "results.json"))
    if results is None:
        sys.exit(f"rightsize_report.py: {out}/results.json is missing or not JSON (run lithos bench first)")
    base, sized = mode_tenants(results, "lithos-alone"), mode_tenants(results, "rightsize-alone")
    rows = []
    for name in sorted(set(base) | set(sized)):
        b, s = base.get(name, {}), sized.get(name, {})
        run = load(os.path.join(out, "runs", f"rightsize-alone-{name}.json"))
        brun = load(os.path.join(out, "runs", f"lithos-alone-{name}.json"))
        dt, st = daemon_tenant(run, name)
        rs = dt.get("rightsize") or {}
        timed = ((st.get("predictor") or {}).get("high_timed")) or {}
        btimed = (((brun or {}).get("lithosd") or {}).get("predictor") or {}).get("high_timed") or {}
        power = st.get("power") or {}
        service = median(b.get("p50_ms")) is not None and (b.get("slo") or b.get("norm", {}).get("p50")) is not None
        p50 = ratio(median(s.get("p50_ms")), median(b.get("p50_ms")))
        p99 = ratio(median(s.get("p99_ms")), median(b.get("p99_ms")))
        thr = ratio(median(b.get("throughput")), median(s.get("throughput")))
        execs = rs.get("executions") or 0
        rows.append({
            "out": out, "tenant": name, "class": dt.get("class") or dt.get("priority"),
            "p50_slowdown": p50, "p99_slowdown": p99, "throughput_slowdown": thr,
            "saved_share": rs.get("saved_share"), "saved_tpc_us": rs.get("saved_tpc_us"),
            "executions": execs,
            "by_occupancy_share": (rs.get("by_occupancy", 0) / execs) if execs else None,
            "by_model_share": (rs.get("by_model", 0) / execs) if execs else None,
            "probes": rs.get("probes"), "probe_cost_us": rs.get("probe_cost_us"),
            "measured_slowdown": rs.get("slowdown"), "table_entries": rs.get("table_entries"),
            "hp_timed_samples": timed.get("samples"), "hp_timed_miss_share": timed.get("miss_share"),
            "hp_timed_p99_error_us": timed.get("p99_abs_error_us"),
            "base_hp_timed_samples": btimed.get("samples"), "base_hp_timed_miss_share": btimed.get("miss_share"),
            "power_mode": power.get("mode"), "power_chosen_mhz": power.get("chosen_mhz"),
            "power_w": power.get("power_w"), "power_kernels_learned": power.get("kernels_learned"),
            "power_modelled_saving_j": power.get("modelled_saving_j"), "power_energy_j": power.get("energy_j"),
            "service": service,
        })
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outs", nargs="+", metavar="OUT")
    ap.add_argument("--json", metavar="FILE", help="write every number here")
    a = ap.parse_args()
    rows = [r for out in a.outs for r in report(out)]
    hdr = ["tenant", "P50 x", "P99 x", "steps x", "TPC-time saved", "by occ.", "by model", "probes",
           "probe us", "lithosd slowdown", "hp timed (miss)", "power MHz (W)"]
    lines = [hdr]
    for r in rows:
        lines.append([
            r["tenant"], fmt(r["p50_slowdown"]), fmt(r["p99_slowdown"]), fmt(r["throughput_slowdown"]),
            fmt(r["saved_share"] and r["saved_share"] * 100, "{:.1f}%"),
            fmt(r["by_occupancy_share"] and r["by_occupancy_share"] * 100, "{:.0f}%"),
            fmt(r["by_model_share"] and r["by_model_share"] * 100, "{:.0f}%"),
            fmt(r["probes"], "{}"), fmt(r["probe_cost_us"], "{:.0f}"), fmt(r["measured_slowdown"]),
            "-" if r["hp_timed_samples"] is None else
            f"{r['hp_timed_samples']} ({fmt(r['hp_timed_miss_share'] and r['hp_timed_miss_share'] * 100, '{:.1f}%', '0%')})",
            "-" if r["power_chosen_mhz"] is None else f"{r['power_chosen_mhz']} ({fmt(r['power_w'], '{:.0f}')})",
        ])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(hdr))]
    for l in lines:
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(l)))
    saved = [r["saved_share"] for r in rows if r["saved_share"] is not None]
    if saved:
        print(f"mean TPC-time saved over {len(saved)} tenant(s): {100 * sum(saved) / len(saved):.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "lithos.rightsize-report/1", "tenants": rows}, f, indent=1)


if __name__ == "__main__":
    main()
