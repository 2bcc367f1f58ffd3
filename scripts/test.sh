#!/usr/bin/env bash
# Every test: set up, then build and run the test suite twice, as CI does:
#   1. release build, warnings are errors, then clang-format and clang-tidy
#   2. ASan + UBSan build of everything
# Pass --fast to skip the sanitizer build.
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
fi
echo "lithos: all tests passed" >&2
