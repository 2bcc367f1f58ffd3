// Serving a node: what `lithos daemon` does once it has merged its
// configuration (docs/daemon.md). For every GPU the configuration's `device`
// names (N, a list, or all) it reads the slot map and GPCs from the
// calibration cache (calibrating once in a forked child if there is none;
// this process never initialises CUDA), puts the GPU's UUID in for "%g" in
// the socket, state-folder and trace paths, and makes a daemon::Daemon. One
// MPS control daemon serves them all: started or attached to as configured,
// asked for its clients after a GPU fault, and quit at the end if this node
// started it. Each Daemon's loop runs on its own thread until SIGINT or
// SIGTERM, or until one of them fails.
//
// Needs the GPU adapters (lithos_gpu: the calibration child) and the process
// helpers of lithos_bench (nvidia-cuda-mps-control); the Daemon itself needs
// neither.
#pragma once

#include <string>

#include "daemon/config.hpp"

namespace lithos::daemon {

struct NodeOptions {
  // The merged configuration (defaults < file < environment < flags): the
  // GPUs served (`device`), the paths that may hold %g, the MPS mode.
  DaemonConfig config;
  // Read no GPU: assume an H100 SXM (tests, CPU-only machines).
  bool no_gpu = false;
  // The GPU's TPCs, GPCs and UUID from this slot-map file instead of the
  // calibration cache ("": the cache).
  std::string slot_map;
  // Print each GPU's configuration as JSON on stdout and serve nothing.
  bool print_config = false;
};

// Serves the node until SIGINT or SIGTERM (it catches both, and ignores
// SIGPIPE, once the daemons are made). Says on stderr what it serves and,
// at the end, what it served. Returns the process's exit status: 0; 1 for a
// failure (no slot map for a GPU that must be known, MPS that cannot be
// started or attached to, a daemon that cannot be made, a loop that
// failed); 2 for a configuration that cannot be served.
int serve_node(NodeOptions options);

}  // namespace lithos::daemon
