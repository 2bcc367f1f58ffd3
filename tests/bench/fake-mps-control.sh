#!/usr/bin/env bash
# Stands in for nvidia-cuda-mps-control in CPU tests: `-d` starts a
# background "daemon" that owns $CUDA_MPS_PIPE_DIRECTORY/control and logs
# to $CUDA_MPS_LOG_DIRECTORY; without arguments it reads commands on stdin
# and `quit` stops the daemon. It checks that the harness hands both
# directories over, as the real program needs.
set -euo pipefail
: "${CUDA_MPS_PIPE_DIRECTORY:?}" "${CUDA_MPS_LOG_DIRECTORY:?}"
if [[ "${1:-}" == "-d" ]]; then
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  ( trap 'exit 0' TERM; while [[ -e "$CUDA_MPS_PIPE_DIRECTORY/control" ]]; do sleep 0.05; done ) \
    </dev/null >/dev/null 2>&1 &
  echo "$!" > "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid"
  echo "started" >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
  exit 0
fi
while read -r cmd; do
  if [[ "$cmd" == "quit" ]]; then
    echo "quit" >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
    rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
  fi
done
