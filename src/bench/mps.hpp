// A private MPS daemon for one benchmark mode: its own pipe and log
// directories under /tmp, so it never meets another user's daemon, started
// with `nvidia-cuda-mps-control -d` and stopped with `quit`. It changes no
// GPU setting (compute mode, clocks and the rest stay as found).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/process.hpp"
#include "common/status.hpp"

namespace lithos::bench {

// Processes of nvidia-cuda-mps-* programs (control daemons, servers) on
// this machine; only those whose environment sets CUDA_MPS_PIPE_DIRECTORY
// to `pipe_dir` when it is not empty.
std::vector<pid_t> mps_process_ids(const std::string& pipe_dir);

class MpsDaemon {
 public:
  // `control` is the nvidia-cuda-mps-control program (a path or a name on
  // PATH); `log_path` collects the control program's own stderr.
  static Result<std::unique_ptr<MpsDaemon>> start(const std::string& control, const std::string& log_path);
  ~MpsDaemon();  // stops it if stop() was not called
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  // What a client needs in its environment to reach this daemon.
  EnvList client_env() const;
  // Sends quit and waits (up to 15 s) for the daemon to be gone.
  Status stop();
  const std::string& dir() const { return dir_; }

 private:
  MpsDaemon() = default;
  std::string control_;
  std::string log_path_;
  std::string dir_;  // /tmp/lithos-mps-XXXXXX with pipe/ and log/
  bool running_ = false;
};

}  // namespace lithos::bench
