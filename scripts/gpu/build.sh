#!/usr/bin/env bash
# Builds the binaries that scripts/gpu/calibrate-check.sh runs on the GPU
# machine, into build/gpu-release (git-ignored; carry build/gpu-release/bin).
# Release, static libstdc++/libgcc for every executable (tests included).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/gpu-release
mkdir -p "$B"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLITHOS_WERROR="${LITHOS_WERROR:-ON}" \
  -DLITHOS_BUILD_BENCH=OFF -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build "$B" --target lithos gpu_test
for f in "$B/bin/lithos" "$B/bin/gpu_test"; do
  need=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -V | uniq | tail -1)
  echo "$f needs $need; $(ldd "$f" | grep -c 'libstdc++') libstdc++ dependency"
done
