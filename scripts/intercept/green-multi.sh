#!/usr/bin/env bash
# The green-context backend in one process on two GPUs, on a machine of two
# GPUs with the release build carried over: multi_gpu_check.py's
# smid-both (the SMs a kernel ran on, on cuda:0 then cuda:1) and both
# (training steps on cuda:0 and cuda:1 in turn), plain and under
# `lithos run --backend green --tpcs 8`. Passes when both runs exit 0, the
# training results equal plain's and each GPU used at most 16 SMs (8 TPCs).
# GREEN_BASELINE=DIR also runs DIR/bin/lithos (another build, e.g. an older
# commit's, with DIR/lib/liblithos.so) the same way, for comparison.
# Prints PASS/FAIL lines and a table last; liblithos's statistics go under
# $OUT. Exit status: the number of failed checks of this build.
set -uo pipefail
cd "$(dirname "$0")/../.."
CHECK=scripts/daemon/multi_gpu_check.py
OUT=${OUT:-/tmp/green-multi}; W=/tmp/green-multi-work; mkdir -p "$OUT" "$W"
timeout -s KILL 120 python3 $CHECK smid-both >$W/smid-plain.json 2>$W/smid-plain.err
timeout -s KILL 200 python3 $CHECK both >$W/both-plain.json 2>$W/both-plain.err
fails=0
rows=()
for build in build/release ${GREEN_BASELINE:-}; do
  L=$build/bin/lithos
  tag=$(basename "$build")
  $L --version
  LITHOS_STATS_FILE=$OUT/stats-smid-$tag-%p.json timeout -s KILL 120 $L run --backend green --tpcs 8 -- \
    python3 $CHECK smid-both >$W/smid-$tag.json 2>$W/smid-$tag.err
  rs=$?
  LITHOS_STATS_FILE=$OUT/stats-both-$tag-%p.json timeout -s KILL 200 $L run --backend green --tpcs 8 -- \
    python3 $CHECK both >$W/both-$tag.json 2>$W/both-$tag.err
  rb=$?
  verdict=$(python3 - "$W" "$tag" "$rs" "$rb" <<'PY'
import json, sys
w, tag, rs, rb = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def first(p):
    try:
        return json.loads(open(p).readline())
    except (OSError, ValueError):
        return None
plain, conf = first(f"{w}/smid-plain.json"), first(f"{w}/smid-{tag}.json")
bp, bg = first(f"{w}/both-plain.json"), first(f"{w}/both-{tag}.json")
if bp: bp.pop("seconds", None)
if bg: bg.pop("seconds", None)
sms = conf["sms"] if conf else None
equal = bp is not None and bp == bg
ok = rs == 0 and rb == 0 and sms is not None and all(0 < c <= 16 for c in sms) and equal
print(f"{'PASS' if ok else 'FAIL'}|{rs}|{rb}|{plain['sms'] if plain else None}|{sms}|{'yes' if equal else 'NO'}")
PY
)
  IFS='|' read -r v rs2 rb2 psms gsms eq <<<"$verdict"
  echo "$v $tag: smid-both exit $rs2, SMs plain $psms, green $gsms; both exit $rb2, equal to plain: $eq"
  [[ $rs == 0 ]] || tail -n 4 $W/smid-$tag.err
  [[ $rb == 0 ]] || tail -n 4 $W/both-$tag.err
  rows+=("| $tag ($($L --version | awk '{print $3}')) | $rs2 | $psms | $gsms | $rb2 | $eq | $v |")
  [[ $tag == release && $v != PASS ]] && fails=$((fails + 1))
done
for f in "$OUT"/stats-*.json; do
  [[ -e $f ]] || continue
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k: d.get(k) for k in ("backend", "kernel_launches", "green_routed", "green_unrouted", "internal_errors")})' "$f"
done
echo
echo "| build | smid-both exit | SMs plain (GPU 0, 1) | SMs green --tpcs 8 | both exit | results equal | verdict |"
echo "|---|---:|---|---|---:|---|---|"
printf '%s\n' "${rows[@]}"
exit $fails
