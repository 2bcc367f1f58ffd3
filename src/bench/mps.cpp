#include "bench/mps.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace lithos::bench {

namespace {

// The control daemon listens on pipe/control while it runs.
bool control_socket_exists(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/pipe/control").c_str(), &st) == 0;
}

}  // namespace

// nvidia-cuda-mps-* programs (the control daemon, its servers), those
// whose environment names `pipe_dir` when it is not empty. The socket file
// can outlive the daemon, so this is what says it is gone.
std::vector<pid_t> mps_process_ids(const std::string& pipe_dir) {
  std::vector<pid_t> pids;
  std::error_code ec;
  const std::string needle = "CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(e.path() / "comm");
    std::string c;
    std::getline(comm, c);
    if (c.rfind("nvidia-cuda-mps", 0) != 0) continue;
    if (pipe_dir.empty()) {
      pids.push_back(static_cast<pid_t>(std::stol(name)));
      continue;
    }
    std::string text;
    const int fd = ::open((e.path() / "environ").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[8192];
    for (ssize_t n = 0; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    std::size_t at = 0;
    while ((at = text.find(needle, at)) != std::string::npos) {
      const std::size_t end = at + needle.size();
      if ((at == 0 || text[at - 1] == '\0') && (end == text.size() || text[end] == '\0')) {
        pids.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
      at = end;
    }
  }
  return pids;
}

Result<std::unique_ptr<MpsDaemon>> MpsDaemon::start(const std::string& control, const std::string& log_path) {
  char tmpl[] = "/tmp/lithos-mps-XXXXXX";  // short: the socket path must fit sun_path
  if (::mkdtemp(tmpl) == nullptr) return Status::unavailable(std::string("mkdtemp: ") + std::strerror(errno));
  std::unique_ptr<MpsDaemon> d(new MpsDaemon());
  d->control_ = control;
  d->log_path_ = log_path;
  d->dir_ = tmpl;
  for (const char* sub : {"/pipe", "/log"}) {
    if (::mkdir((d->dir_ + sub).c_str(), 0700) != 0) {
      return Status::unavailable("mkdir " + d->dir_ + sub + ": " + std::strerror(errno));
    }
  }
  auto rc = run_command({control, "-d"}, d->client_env(), "", 30.0, log_path);
  if (!rc) return rc.status().with_context("cannot start the MPS daemon (" + control + ")");
  if (*rc != 0) {
    return Status::unavailable("the MPS daemon did not start: " + control + " -d exited with " + std::to_string(*rc) +
                               " (see " + log_path + " and " + d->dir_ + "/log)");
  }
  d->running_ = true;
  // The control daemon forks into the background; wait for its socket.
  for (int i = 0; i < 500 && !control_socket_exists(d->dir_); ++i) ::usleep(10'000);
  if (!control_socket_exists(d->dir_)) {
    (void)d->stop();
    return Status::unavailable("the MPS daemon started but no control socket appeared in " + d->dir_ + "/pipe");
  }
  return d;
}

EnvList MpsDaemon::client_env() const {
  return {{"CUDA_MPS_PIPE_DIRECTORY", dir_ + "/pipe"}, {"CUDA_MPS_LOG_DIRECTORY", dir_ + "/log"}};
}

Status MpsDaemon::stop() {
  if (!running_) return Status::ok();
  running_ = false;
  auto rc = run_command({control_}, client_env(), "quit", 30.0, log_path_);
  const std::string pipe = dir_ + "/pipe";
  // The server exits once its clients are gone, then the control daemon.
  for (int i = 0; i < 1500 && !mps_process_ids(pipe).empty(); ++i) ::usleep(10'000);
  for (int i = 0; i < 100 && control_socket_exists(dir_) && mps_process_ids(pipe).empty(); ++i) ::usleep(10'000);
  if (!rc) return rc.status().with_context("stopping the MPS daemon");
  if (const auto left = mps_process_ids(pipe); !left.empty()) {
    // Ours, with no clients left (they were stopped first): end it.
    for (pid_t p : left) ::kill(p, SIGTERM);
    return Status::unavailable("the MPS daemon in " + dir_ + " did not exit 15 s after quit; sent SIGTERM to " +
                               std::to_string(left.size()) + " process(es)");
  }
  // Keep the daemon's logs beside ours, then remove the private directory.
  std::error_code ec;
  const std::string logs = log_path_ + ".d";
  std::filesystem::create_directories(logs, ec);
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/log", ec)) {
    std::filesystem::copy_file(e.path(), logs + "/" + e.path().filename().string(),
                               std::filesystem::copy_options::overwrite_existing, ec);
  }
  std::filesystem::remove_all(dir_, ec);
  return Status::ok();
}

MpsDaemon::~MpsDaemon() { (void)stop(); }

}  // namespace lithos::bench
