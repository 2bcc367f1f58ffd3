#!/usr/bin/env bash
# Static checks: clang-format on every C++ source, clang-tidy (.clang-tidy)
# on the scheduling core, the simulator and the sim command. Needs a
# configured build for compile_commands.json (default build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
scripts/format.sh --check
[[ -f "$build/compile_commands.json" ]] || { echo "lint: no $build/compile_commands.json (configure first)" >&2; exit 1; }
files=$(ls src/common/*.cpp src/sched/*.cpp src/sched/policies/*.cpp src/sim/*.cpp src/cli/cmd_sim.cpp)
# One clang-tidy per file, as many at once as there are cores.
printf '%s\n' $files | xargs -P "$(nproc)" -I{} sh -c \
  'clang-tidy --quiet -p "$0" "$1" 2>/dev/null > "$1.tidy.log" || { cat "$1.tidy.log"; rm -f "$1.tidy.log"; exit 255; }; rm -f "$1.tidy.log"' "$build" {}
echo "lint: clang-format and clang-tidy clean" >&2
