#!/bin/bash
# 5x release + 3x asan ctest -j2 with one extra CPU hog, at "${1:-.}"
cd "${1:-.}" || exit 1
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
for p in release asan; do cmake --preset $p >/dev/null && cmake --build --preset $p -j2 >/tmp/loop-build-$p.log 2>&1 || { echo "build $p failed"; exit 1; }; done
timeout 20000 sh -c 'while :; do :; done' & hog=$!
for p in release release release release release asan asan asan; do
  n=$((n+1))
  t0=$(date +%s)
  ctest --preset $p -j2 --output-on-failure > /tmp/loop-$n-$p.log 2>&1; rc=$?
  echo "run $n $p rc=$rc $(( $(date +%s)-t0 ))s $(grep -E 'tests passed' /tmp/loop-$n-$p.log)"
  grep -E '^\s+[0-9]+ - .*\(Failed|Timeout' /tmp/loop-$n-$p.log
done
kill $hog
