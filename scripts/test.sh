#!/usr/bin/env bash
# Every test: set up, then build and run the tests as CI does:
#   1. release build, warnings are errors, then clang-format and clang-tidy
#   2. ASan + UBSan build of everything
#   3. the libFuzzer targets (clang), LITHOS_FUZZ_TIME (25) seconds each from
#      their seeds and committed inputs (scripts/fuzz.sh); a crash fails,
#      naming the input that replays it
# Pass --fast to skip the sanitizer build and the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

jobs=$(nproc)
fast=0
[[ "${1:-}" == "--fast" ]] && fast=1

echo "== release build + tests" >&2
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

echo "== clang-format + clang-tidy" >&2
scripts/lint.sh build/release

if ((fast == 0)); then
  echo "== ASan + UBSan build + tests" >&2
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"

  echo "== libFuzzer targets" >&2
  scripts/fuzz.sh --time "${LITHOS_FUZZ_TIME:-25}" --out build/fuzz/ci
fi
echo "lithos: all tests passed" >&2
