"""Summarises a gpu-check.sh run: reads its work directory, writes
summary.json and prints a short table (the last thing gpu-check.sh prints).
  python3 gpu_summary.py WORK_DIR SUMMARY_JSON"""
import glob
import json
import os
import re
import statistics
import sys

W, OUT = sys.argv[1], sys.argv[2]
S = {}


def read(name):
    try:
        with open(os.path.join(W, name)) as f:
            return f.read()
    except OSError:
        return ""


def jsonl(name):
    rows = []
    for line in read(name).splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


status = {}
for line in read("status.txt").splitlines():
    parts = line.split()
    if len(parts) == 2:
        status[parts[0]] = int(parts[1])
S["status"] = status

# Launch paths: CHECK lines per run.
S["paths"] = {}
for log in sorted(glob.glob(os.path.join(W, "paths_*.log")) + glob.glob(os.path.join(W, "mps_*.log"))):
    run = os.path.basename(log)[:-4]
    checks = []
    text = open(log).read()
    for m in re.finditer(r"^CHECK (.+?) +(PASS|FAIL) seen=(\d+) expected=(\d+) outside=(\d+)(.*)$", text, re.M):
        checks.append({"name": m.group(1).strip(), "ok": m.group(2) == "PASS", "seen": int(m.group(3)),
                       "expected": int(m.group(4)), "outside": int(m.group(5)), "note": m.group(6).strip()})
    g = re.search(r"^GRAPH descriptors built: (.*)$", text, re.M)
    S["paths"][run] = {"checks": checks, "graph": g.group(1) if g else None,
                       "errors": re.findall(r"^ERROR .*$", text, re.M)[:3]}

# Statistics files of liblithos.so.
S["stats"] = {}
for f in sorted(glob.glob(os.path.join(W, "stats-*.jsonl"))):
    rows = jsonl(os.path.basename(f))
    S["stats"][os.path.basename(f)] = [
        {k: r.get(k) for k in ("program", "backend", "qmd_version", "process_mask", "kernel_launches",
                                "graph_launches", "masks_applied", "descriptors", "not_applied",
                                "launches_without_descriptor", "procaddress_unrecognised", "internal_errors",
                                "interposition_failed", "paths")}
        for r in rows]

# PyTorch coverage, confinement, outputs.
S["torch"] = {}
for tag in ("plain", "lithos8", "mps8"):
    t = read(f"check-{tag}.json")
    if t:
        S["torch"][tag] = json.loads(t)
m = re.search(r"^COMPARE (.*)$", read("torch_compare.log"), re.M)
S["torch_compare"] = json.loads(m.group(1)) if m else None

# Overhead.
def bench(prefix, key="runtime_median_us"):
    vals = []
    for f in sorted(glob.glob(os.path.join(W, prefix + "_*.log"))):
        m = re.search(r'"%s":([0-9.]+)' % key, open(f).read())
        if m:
            vals.append(float(m.group(1)))
    return vals


def e2e(prefix, key="OVERHEAD_TORCH", field="median_ms"):
    vals = []
    # In round order (e2e_plain_1, _2, ..., _10), so that rounds pair up.
    logs = glob.glob(os.path.join(W, prefix + "_*.log"))
    for f in sorted(logs, key=lambda f: int(re.search(r"_(\d+)\.log$", f).group(1))):
        m = re.search(r"^%s (.*)$" % key, open(f).read(), re.M)
        if m:
            vals.append(json.loads(m.group(1))[field])
    return vals


ov = {"e2e_plain_ms": e2e("e2e_plain"), "e2e_lithosall_ms": e2e("e2e_lithosall")}
for path in ("runtime", "driver"):
    for cfg in ("plain", "disabled", "lithos", "mask8", "lithosall"):
        ov[f"bench_{cfg}_{path}_us"] = bench("bench_" + cfg, path + "_median_us")
    p = ov[f"bench_plain_{path}_us"]
    for cfg in ("disabled", "lithos", "mask8", "lithosall"):
        v = ov[f"bench_{cfg}_{path}_us"]
        if p and v:
            ov[f"added_{cfg}_{path}_us"] = statistics.median(v) - statistics.median(p)
            n = min(len(p), len(v))
            ov[f"added_{cfg}_{path}_us_paired"] = statistics.median([v[i] - p[i] for i in range(n)])
if ov["e2e_plain_ms"] and ov["e2e_lithosall_ms"]:
    p = statistics.median(ov["e2e_plain_ms"])
    ov["e2e_slowdown_pct"] = 100 * (statistics.median(ov["e2e_lithosall_ms"]) - p) / p
for tag, key in (("b8", "OVERHEAD_TORCH"), ("b1", "OVERHEAD_TORCH_B1")):
    for field in ("median_ms", "min_ms"):
        p = e2e("e2e_plain", key, field)
        ov[f"e2e_{tag}_{field}_plain"] = p
        for cfg, name in (("lithosall", "lithos"), ("disabled", "disabled")):
            l = e2e("e2e_" + cfg, key, field)
            ov[f"e2e_{tag}_{field}_{name}"] = l
            if p and l:
                ov[f"e2e_{tag}_{field}_{name}_slowdown_pct"] = (
                    100 * (statistics.median(l) - statistics.median(p)) / statistics.median(p))
                n = min(len(p), len(l))
                ov[f"e2e_{tag}_{field}_{name}_paired_pct"] = [100 * (l[i] - p[i]) / p[i] for i in range(n)]
tog = os.path.join(W, "e2e_toggle.log")
if os.path.exists(tog):
    text = open(tog).read()
    ov["toggle"] = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("OVERHEAD_TOGGLE ")]
    m = re.search(r"kernel launches seen: (\d+)", text)
    if m:
        ov["toggle_launches"] = int(m.group(1))
S["overhead"] = ov

t = read("sweep.json")
S["sweep"] = json.loads(t) if t else None
t = read("calibrate.json")
try:
    c = json.loads(t)
    S["calibrate"] = {k: c.get(k) for k in ("gpu_name", "gpu_uuid", "driver_version", "live_tpcs", "live_tpc_set",
                                            "source", "qmd_version", "checks", "stats")}
except ValueError:
    S["calibrate"] = None
S["environment"] = read("environment.txt")

with open(OUT, "w") as f:
    json.dump(S, f, indent=1)

# ---- the table ----
print("=" * 100)
print("lithos interposer: GPU check")
print(S["environment"].strip())
cal = S.get("calibrate") or {}
print(f"calibrate: {cal.get('live_tpcs')} live TPCs, source {cal.get('source')}, QMD {cal.get('qmd_version')}, "
      f"exit {status.get('calibrate')}")
print("-" * 100)
print(f"{'launch paths (CHECK)':<28} {'pass':>5} {'fail':>5}  failures / graph descriptors")
for run, r in S["paths"].items():
    ok = sum(c["ok"] for c in r["checks"])
    bad = [c["name"] for c in r["checks"] if not c["ok"]]
    print(f"{run:<28} {ok:>5} {len(bad):>5}  {'; '.join(bad)[:60] or '-'}  {r['graph'] or ''} "
          f"{'ERR: ' + r['errors'][0][:60] if r['errors'] else ''}")
print("-" * 100)
for name, rows in S["stats"].items():
    for r in rows:
        if not r.get("kernel_launches") and not r.get("interposition_failed"):
            continue
        d = r.get("descriptors") or {}
        na = {k: v for k, v in (r.get("not_applied") or {}).items() if v}
        print(f"{name:<26} {str(r.get('program'))[:14]:<14} launches {r.get('kernel_launches'):>7} graphs "
              f"{r.get('graph_launches'):>4} masks {r.get('masks_applied'):>7} desc {d.get('in_launch')}/"
              f"{d.get('in_graph')}/{d.get('outside')} skipped {na or '-'} fail={r.get('interposition_failed')}")
print("-" * 100)
for tag, r in S["torch"].items():
    L = r.get("lithos") or {}
    prof = r.get("profiler_kernels")
    cov = (f"{L.get('kernel_launches')}/{prof} = {100.0 * L.get('kernel_launches', 0) / prof:.1f}%"
           if prof and L else f"profiler {prof} {r.get('profiler_error', '')[:40]}")
    sm = r.get("smid", {})
    print(f"torch {tag:<8} coverage(lithos launches/profiler kernels) {cov}; masks {L.get('masks_applied')} of "
          f"desc {L.get('descriptors_in_launch')}+{L.get('descriptors_outside')}; triton %smid {sm.get('seen')} SMs "
          f"(expected {sm.get('expected')}, outside {sm.get('outside')}); graph {'ok' if 'graph' in r else r.get('graph_error', '')[:40]}")
cmp_ = S.get("torch_compare")
if cmp_:
    worst = max((v["max_abs_diff"] for v in cmp_["outputs"].values() if isinstance(v, dict)), default=None)
    eq = all(v.get("bitwise_equal") for v in cmp_["outputs"].values() if isinstance(v, dict))
    print(f"torch outputs plain vs lithos --tpcs 8: all_close={cmp_['all_close']} bitwise_equal={eq} max_abs_diff={worst}")
print("-" * 100)
o = S["overhead"]
for path in ("runtime", "driver"):
    p = o.get(f"bench_plain_{path}_us")
    if not p:
        continue
    parts = []
    for cfg, label in (("disabled", "loaded, disabled"), ("lithos", "no mask"), ("mask8", "8-TPC mask"),
                       ("lithosall", "all TPCs")):
        if f"added_{cfg}_{path}_us" in o:
            parts.append(f"{label} {o[f'added_{cfg}_{path}_us']:+.3f} (paired {o[f'added_{cfg}_{path}_us_paired']:+.3f})")
    print(f"tiny launch, {path:<7}: plain {statistics.median(p):.3f} us/launch; added by lithos: " + ", ".join(parts))
for tag in ("b8", "b1"):
    p = o.get(f"e2e_{tag}_median_ms_plain")
    if not p:
        continue
    print(f"ResNet-50 {tag} fp16 eager loop, {len(p)} rounds, plain {statistics.median(p):.3f} ms/iter; "
          "paired per round vs plain (same cores, order rotated):")
    for name, label in (("disabled", "lithos loaded, disabled"), ("lithos", "lithos, all TPCs")):
        pp = o.get(f"e2e_{tag}_median_ms_{name}_paired_pct")
        if pp:
            print(f"  {label:<24} {statistics.median(o[f'e2e_{tag}_median_ms_{name}']):.3f} ms/iter: "
                  f"median {statistics.median(pp):+.2f}%, range {min(pp):+.2f}% .. {max(pp):+.2f}%")
for t in o.get("toggle", []):
    n = t["pairs"]
    sem = t["paired_pct_stdev"] / n ** 0.5
    print(f"ResNet-50 b{t['batch']} in one process, lithos (all TPCs) switched on/off, {n} window pairs: "
          f"on {t['on_median_ms']:.3f} vs off {t['off_median_ms']:.3f} ms/iter, paired "
          f"median {t['paired_pct_median']:+.2f}%, mean {t['paired_pct_mean']:+.2f}% +- {sem:.2f}% (s.e.)")
if o.get("toggle_launches"):
    print(f"  (launches seen in that process: {o['toggle_launches']})")
if S["sweep"]:
    for k, v in S["sweep"]["kernels"].items():
        print(f"sweep {k:<34} 1 TPC {v['ms'][0]:8.3f} ms  all {v['ms'][-1]:7.3f} ms  unmasked {v['unmasked_ms']:7.3f} ms"
              f"  m/t+b R^2 {v['fit']['r2']:.4f}")
bad_steps = {k: v for k, v in status.items() if v != 0}
print(f"steps with a non-zero exit: {bad_steps or 'none'}")
print("=" * 100)
