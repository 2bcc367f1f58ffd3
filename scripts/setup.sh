#!/usr/bin/env bash
# Installs what lithos needs to build and test on Debian/Ubuntu, with apt-get.
# Idempotent: packages already present are not reinstalled, and apt-get
# update runs only when something is missing. CUDA headers come from the
# toolkit in /usr/local/cuda when present (the GPU adapters need cuda.h; the
# core, simulator and CLI do not).
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format clang-tidy
  clang libclang-rt-dev  # the libFuzzer targets (scripts/fuzz.sh): clang and its fuzzer/sanitizer runtimes
  zstd lz4  # the programs that make the decompressor tests' data (tests/cubin/decompress.cmake)
  python3 python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "lithos setup: installing ${missing[*]}" >&2
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "lithos setup: need root or sudo to install packages" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -f /usr/local/cuda/include/cuda.h ]]; then
  echo "lithos setup: no CUDA toolkit headers in /usr/local/cuda: the GPU adapters (liblithos.so, lithos run/calibrate) will not be built" >&2
fi
