#!/usr/bin/env bash
# The green-context backend (and the descriptor backend beside it) under
# stream captures, on the GPU machine with the release build carried over:
# zoo_check.py's capture-first (the first kernel made inside a capture) and
# threads shapes, and graph_check.py (graphs replayed on alternating
# streams, torch.compile's cudagraph trees), each plain and under
# `lithos run --backend B --tpcs 24`; outputs compared with plain byte for
# byte; liblithos's statistics (routed launches, internal errors) under
# $OUT.
set -uo pipefail
L=./build/release/bin/lithos; $L --version
OUT=${OUT:-/tmp/green-capture}; W=/tmp/green-capture-work; mkdir -p "$OUT" "$W"
for sh in capture-first threads; do
  timeout -s KILL 120 python3 scripts/daemon/zoo_check.py $sh >$W/$sh-plain.json 2>$W/$sh-plain.err
  echo "$sh plain: exit $?"
  for b in green descriptor; do
    LITHOS_STATS_FILE=$OUT/stats-$sh-$b-%p.json timeout -s KILL 180 $L run --backend $b --tpcs 24 -- \
      python3 scripts/daemon/zoo_check.py $sh >$W/$sh-$b.json 2>$W/$sh-$b.err
    rc=$?
    echo "$sh $b: exit $rc; equal to plain: $(cmp -s $W/$sh-plain.json $W/$sh-$b.json && echo yes || echo NO)"
    [[ $rc == 0 ]] || tail -n 5 $W/$sh-$b.err
  done
done
for f in "$OUT"/stats-*.json; do
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split("/")[-1], {k: d.get(k) for k in ("backend", "kernel_launches", "graph_launches", "green_routed", "masks_applied", "internal_errors")})' "$f"
done
timeout -s KILL 200 $L run --backend green --tpcs 24 -- python3 scripts/daemon/graph_check.py >$W/gc-green.json 2>$W/gc-green.err
echo "graph_check green: exit $?"
timeout -s KILL 200 python3 scripts/daemon/graph_check.py >$W/gc-plain.json 2>$W/gc-plain.err
echo "graph_check plain: exit $?; equal: $(cmp -s $W/gc-plain.json $W/gc-green.json && echo yes || echo NO)"
