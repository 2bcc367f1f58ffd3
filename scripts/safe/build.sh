#!/usr/bin/env bash
# Builds the safe-mask evidence programs here (nvcc from /usr/local/cuda), so
# that the GPU machine only runs them: build/safe/topo_probe and
# build/safe/libsafe_kernels.so. Needs the release build's static libraries
# (cmake --build --preset release) for topo_probe.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${NVCC:-/usr/local/cuda/bin/nvcc}
B=build/release/lib
mkdir -p build/safe
"$N" -arch=sm_90a -O2 -std=c++20 -Isrc -o build/safe/topo_probe scripts/safe/topo_probe.cu \
  "$B/liblithos_gpu.a" "$B/liblithos_ipc.a" "$B/liblithos_sched.a" "$B/liblithos_common.a" -ldl
"$N" -arch=sm_90a -O2 -std=c++17 -shared -Xcompiler -fPIC -o build/safe/libsafe_kernels.so scripts/safe/safe_kernels.cu
echo "built build/safe/topo_probe build/safe/libsafe_kernels.so"
