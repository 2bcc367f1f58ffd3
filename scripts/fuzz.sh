#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan) and
# runs each for a bounded time from its seeds and committed corpora, then
# writes a summary (tests/fuzz/README.md):
#
#   scripts/fuzz.sh [--time S] [--out DIR] [--no-build] [TARGET...]
#
#   --time S    seconds per target (default 60)
#   --out DIR   where the corpora, crash inputs, logs and the summary go
#               (default build/fuzz/run); a corpus there grows run to run
#   --no-build  use the targets as built
#   TARGET      only these (fuzz_container, fuzz_hello, ...); default: all
#
# DIR/summary.json (schema lithos.fuzz-run/1: the commit, and per target
# executions, executions per second, coverage, corpus and crashes) and
# DIR/summary.txt (the same as a table, also printed). Exit status 1 when a
# target crashed on something new; each crash input's path is printed with
# the command that replays it.
#
# Known open bugs: tests/fuzz/regressions/open/<target>/<name>.bin with
# <name>.pattern (a line its crash output contains). A crash whose output
# matches a pattern of its target is counted as known, and the target goes
# on fuzzing for the rest of its time; an open input that no longer crashes
# is reported (move it to tests/fuzz/regressions/<target>/, where it is
# replayed by every run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

secs=60
out=build/fuzz/run
build=1
targets=()
while (($#)); do
  case "$1" in
    --time) secs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ "$secs" =~ ^[0-9]+$ ]] || ((secs == 0)); then
  echo "fuzz.sh: --time takes a positive number of seconds" >&2
  exit 2
fi

if ((build)); then
  command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs clang and libFuzzer)" >&2; exit 2; }
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  echo "== fuzz: building the targets (build/fuzz)" >&2
  cmake --preset fuzz "${launcher[@]}" >/dev/null
  cmake --build --preset fuzz -j "$(nproc)"
fi

descs=(build/fuzz/fuzz-targets/*.sh)
[[ -e "${descs[0]}" ]] || { echo "fuzz.sh: no targets in build/fuzz/fuzz-targets (build first)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=false
[[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && dirty=true
results="$out/results.tsv"
: >"$results"
new_crash=0

# The known-bug patterns of a target (one per line), from its open inputs.
patterns_of() {
  local dir="$root/tests/fuzz/regressions/open/$1"
  [[ -d "$dir" ]] || return 0
  cat "$dir"/*.pattern 2>/dev/null || true
}

# Whether replaying `input` on `binary` crashes with a known pattern of the target.
is_known() {
  local binary=$1 input=$2 pats=$3 log
  [[ -n "$pats" ]] || return 1
  log=$("$binary" "$input" 2>&1) && return 1
  grep -qF -- "$pats" <<<"$log"
}

for desc in "${descs[@]}"; do
  name='' binary='' dict=''
  seeds=() corpora=()
  # shellcheck disable=SC1090
  source "$desc"
  if ((${#targets[@]})) && [[ ! " ${targets[*]} " == *" $name "* ]]; then continue; fi
  corpus="$out/corpus/$name" art="$out/artifacts/$name" log="$out/logs/$name.log"
  mkdir -p "$corpus" "$art" "$out/logs"
  for s in "${seeds[@]}"; do
    if [[ -f "$s" ]]; then cp -n "$s" "$corpus/" 2>/dev/null || true; fi
  done
  pats=$(patterns_of "$name")
  : >"$log"

  # Open bugs: do they still crash as described?
  for bin in "$root/tests/fuzz/regressions/open/$name"/*.bin; do
    [[ -e "$bin" ]] || continue
    if is_known "$binary" "$bin" "$pats"; then
      echo "fuzz: $name: open bug still there: ${bin#"$root"/}" >&2
    else
      echo "fuzz: $name: ${bin#"$root"/} no longer crashes as its .pattern says: if fixed, move it to tests/fuzz/regressions/$name/" >&2
    fi
  done

  echo "== fuzz: $name for ${secs} s" >&2
  start=$(date +%s)
  execs=0 runs=0 known=0 status=ok crash_paths=()
  args=(-print_final_stats=1 "-artifact_prefix=$art/" -timeout=30 -rss_limit_mb=4096)
  [[ -n "$dict" && -f "$dict" ]] && args+=("-dict=$dict")
  while :; do
    left=$((secs - ($(date +%s) - start)))
    ((left > 0)) || break
    before=$(find "$art" -maxdepth 1 -type f -printf '%f\n' | sort)
    set +e
    timeout $((left + 120)) "$binary" "${args[@]}" "-max_total_time=$left" "$corpus" "${corpora[@]}" >>"$log" 2>&1
    rc=$?
    set -e
    runs=$((runs + 1))
    n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
    execs=$((execs + n))
    ((rc == 0)) && break
    fresh=$(comm -13 <(echo "$before") <(find "$art" -maxdepth 1 -type f -printf '%f\n' | sort) | head -1)
    if [[ -z "$fresh" ]]; then
      status="error (exit $rc)"; new_crash=1; break
    fi
    if is_known "$binary" "$art/$fresh" "$pats"; then
      known=$((known + 1))
      mv "$art/$fresh" "$art/known-$fresh"
      ((runs < 50)) && continue
      break
    fi
    status=crash; new_crash=1; crash_paths+=("$art/$fresh")
    break
  done
  elapsed=$(($(date +%s) - start))
  # Coverage from libFuzzer's last status line ("#N ... cov: C ft: F corp: U/...").
  last=$(grep -E '^#[0-9]+' "$log" | grep ' cov: ' | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  units=$(find "$corpus" -type f | wc -l)
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' | sort -n | tail -1 || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$elapsed" "$execs" "${cov:-0}" "${ft:-0}" "$units" \
    "${rss:-0}" "$known" "$status" "${crash_paths[*]:-}" "$log" >>"$results"
  for p in "${crash_paths[@]}"; do
    echo "fuzz: $name CRASHED; the input: $p" >&2
    echo "fuzz:   replay it with: $binary $p" >&2
    echo "fuzz:   the log: $log" >&2
  done
done

python3 - "$results" "$out" "$commit" "$dirty" "$secs" <<'EOF'
import json, os, sys, datetime
results, out, commit, dirty, secs = sys.argv[1:6]
rows = []
for line in open(results):
    f = line.rstrip("\n").split("\t")
    name, elapsed, execs, cov, ft, units, rss, known, status, crashes, log = f
    el = max(int(elapsed), 1)
    rows.append({"name": name, "seconds": int(elapsed), "execs": int(execs),
                 "execs_per_s": round(int(execs) / el, 1), "coverage_edges": int(cov), "features": int(ft),
                 "corpus_units": int(units), "peak_rss_mb": int(rss), "known_crashes": int(known),
                 "status": status, "crashes": crashes.split() if crashes else [], "log": log})
summary = {"schema": "lithos.fuzz-run/1", "commit": commit, "dirty": dirty == "true",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "seconds_per_target": int(secs), "cpus": os.cpu_count(), "targets": rows}
with open(os.path.join(out, "summary.json"), "w") as fh:
    json.dump(summary, fh, indent=2)
    fh.write("\n")
head = f"fuzz run of {commit[:12]}{' (dirty)' if dirty == 'true' else ''}, {secs} s per target\n"
table = ["%-16s %8s %12s %10s %8s %8s %8s %6s  %s" % ("target", "seconds", "execs", "execs/s", "cov", "ft",
                                                     "corpus", "known", "status")]
for r in rows:
    table.append("%-16s %8d %12d %10.1f %8d %8d %8d %6d  %s" % (r["name"], r["seconds"], r["execs"], r["execs_per_s"],
                 r["coverage_edges"], r["features"], r["corpus_units"], r["known_crashes"], r["status"]))
text = head + "\n".join(table) + "\n"
open(os.path.join(out, "summary.txt"), "w").write(text)
print(text, end="")
print(f"summary: {os.path.join(out, 'summary.json')}")
EOF

if ((new_crash)); then
  echo "fuzz: a target crashed (see above)" >&2
  exit 1
fi
