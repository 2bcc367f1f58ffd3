// A child process with a line protocol: JSON lines in on stdin, JSON lines
// out on stdout, stderr into a log file. Used for benchmark tenants and for
// the MPS control program.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"

namespace lithos::bench {

using EnvList = std::vector<std::pair<std::string, std::string>>;

class Child {
 public:
  // Starts argv[0] (searched on PATH) in its own process group with the
  // current environment plus `env` (later entries win), working directory
  // `cwd` ("" = unchanged) and stderr appended to `stderr_path` ("" = ours).
  static Result<std::unique_ptr<Child>> spawn(const std::vector<std::string>& argv, const EnvList& env,
                                              const std::string& cwd, const std::string& stderr_path);
  ~Child();  // kills the process group if it still runs, and reaps it
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return out_fd_; }

  // Writes `line` and a newline to the child's stdin; false if it is gone.
  bool write_line(const std::string& line);
  void close_stdin();

  // Reads what is available on stdout without blocking and appends complete
  // lines to `lines`. Returns false once stdout reached end of file.
  bool read_available(std::vector<std::string>& lines);
  bool stdout_closed() const { return out_fd_ < 0; }

  // Exit status if the child has exited (reaping it), else nullopt.
  // A status >= 128 means killed by signal (status - 128).
  std::optional<int> poll_exit();
  // Waits up to `timeout_s`; then SIGTERM, 2 s later SIGKILL, to the group.
  int wait_or_kill(double timeout_s);
  void kill_group(int sig);

 private:
  Child() = default;
  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string partial_;
  std::optional<int> status_;
};

// Runs argv to completion (stdin from `input`), returning its exit status;
// kills it after `timeout_s`. Its stdout goes to `stdout_text` if given.
Result<int> run_command(const std::vector<std::string>& argv, const EnvList& env, const std::string& input,
                        double timeout_s, const std::string& stderr_path, std::string* stdout_text = nullptr);

// Monotonic and wall-clock seconds.
double mono_now();
double wall_now();

}  // namespace lithos::bench
