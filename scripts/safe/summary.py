#!/usr/bin/env python3
"""Summary of scripts/safe/gpu-safe.sh's work folder: a markdown table of the
corpus sweeps (sets run, hung, wrong), the training runs and the safe-mask
statistics. Usage: summary.py WORK"""
import glob
import json
import os
import sys


def load_jsonl(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def main():
    work = sys.argv[1]
    print(open(os.path.join(work, "env.txt")).read().strip() if os.path.exists(os.path.join(work, "env.txt")) else "")
    ref = os.path.join(work, "ref.json")
    if os.path.exists(ref):
        r = json.load(open(ref))
        errs = [k for k, v in r["digests"].items() if "error" in v]
        print(f"\nreference: {len(r['digests'])} cases, unstable without lithos: {r['unstable'] or 'none'}, "
              f"errors: {errs or 'none'}")
    print("\n| sweep | sets | ok | wrong | hung | cases | widened (cluster / coop) | whole GPU | median s/set |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in sorted(glob.glob(os.path.join(work, "sweep-*.jsonl"))):
        name = os.path.basename(path)[6:-6]
        recs = load_jsonl(path)
        ok = sum(r["result"] == "ok" for r in recs)
        wrong = [r for r in recs if r["result"] == "wrong"]
        hung = [r for r in recs if r["result"] == "hung"]
        wc = sum(r.get("safe", {}).get("widened_cluster", 0) for r in recs)
        wk = sum(r.get("safe", {}).get("widened_cooperative", 0) for r in recs)
        wh = sum(r.get("safe", {}).get("whole_by_rule", 0) for r in recs)
        secs = sorted(r["seconds"] for r in recs if "seconds" in r)
        med = secs[len(secs) // 2] if secs else 0
        cases = len(json.load(open(ref))["digests"]) if os.path.exists(ref) else 0
        print(f"| {name} | {len(recs)} | {ok} | {len(wrong)} | {len(hung)} | {cases} | {wc} / {wk} | {wh} | {med:.2f} |")
        for r in wrong[:10]:
            print(f"|   wrong: {r['set'][:40]} | | | {r.get('wrong')} {r.get('errors')} | | | | | |")
        for r in hung[:10]:
            print(f"|   hung: {r['set'][:40]} | | | | case {r.get('case')} | | | | |")
    print("\n| training | set | exit | step ms | launches | widened cluster | widened coop | whole GPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for path in sorted(glob.glob(os.path.join(work, "train-*.out"))):
        label = os.path.basename(path)[6:-4]
        out = load_jsonl(path)
        step = out[-1]["step_ms"] if out else None
        stats = []
        for sp in glob.glob(os.path.join(work, f"stats-train-{label}-*.json")):
            stats += load_jsonl(sp)
        launches = sum(s.get("kernel_launches", 0) for s in stats)
        safe = {}
        for s in stats:
            for k, v in s.get("safe", {}).items():
                safe[k] = safe.get(k, 0) + v
        wl, _, rest = label.partition("-")
        print(f"| {wl} | {rest} | {'ok' if out else 'FAILED'} | {step} | {launches} | {safe.get('widened_cluster', 0)} "
              f"| {safe.get('widened_cooperative', 0)} | {safe.get('whole_by_rule', 0)} |")
    q = load_jsonl(os.path.join(work, "qmd.jsonl"))
    if q:
        print("\nQMD bytes 264-279 (cluster launches vs plain):")
        for r in q:
            if "launch" in r:
                print(f"  {r['launch']:28s} {r['bytes_264_280']}  differs at {r['differs_from_plain_at'][:12]}")


if __name__ == "__main__":
    main()
