#!/usr/bin/env bash
# The main job: set up, build (release), and run the simulator's default
# scenario, printing every policy side by side. Extra arguments go to
# `lithos sim` (e.g. --scenario inference-stacking, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target lithos
exec build/release/bin/lithos sim "$@"
