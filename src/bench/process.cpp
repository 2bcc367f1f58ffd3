#include "bench/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace lithos::bench {

double mono_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double wall_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

namespace {

int decode_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 255;
}

}  // namespace

Result<std::unique_ptr<Child>> Child::spawn(const std::vector<std::string>& argv, const EnvList& env,
                                            const std::string& cwd, const std::string& stderr_path) {
  if (argv.empty()) return Status::invalid_argument("empty command");
  // Everything the child needs is prepared before fork: after it only
  // async-signal-safe calls are made.
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) merged[std::string(static_cast<const char*>(*e), eq)] = eq + 1;
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(merged.size());
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // execvpe searches PATH of the *new* environment.
  int in_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  int err_fd = -1;
  if (!stderr_path.empty()) {
    err_fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      const int e = errno;
      for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
      return Status::unavailable("cannot open " + stderr_path + ": " + std::strerror(e));
    }
  }
  // A pipe reports exec failure: it closes on a successful exec (CLOEXEC).
  int exec_pipe[2] = {-1, -1};
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return Status::unavailable(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) return Status::unavailable(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    ::signal(SIGPIPE, SIG_DFL);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      const int e = errno;
      (void)!::write(exec_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    ::execvpe(cargv[0], cargv.data(), envp.data());
    const int e = errno;
    (void)!::write(exec_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with a kill before the child ran
  ::close(exec_pipe[1]);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (err_fd >= 0) ::close(err_fd);
  int child_errno = 0;
  ssize_t n = 0;
  do {
    n = ::read(exec_pipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == sizeof child_errno) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    return Status::unavailable("cannot start " + argv[0] + ": " + std::strerror(child_errno));
  }
  ::fcntl(out_pipe[0], F_SETFL, ::fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
  std::unique_ptr<Child> c(new Child());
  c->pid_ = pid;
  c->in_fd_ = in_pipe[1];
  c->out_fd_ = out_pipe[0];
  return c;
}

Child::~Child() {
  close_stdin();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (!status_ && pid_ > 0) {
    kill_group(SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
}

bool Child::write_line(const std::string& line) {
  if (in_fd_ < 0) return false;
  std::string buf = line + "\n";
  std::size_t off = 0;
  while (off < buf.size()) {
    const ssize_t n = ::write(in_fd_, buf.data() + off, buf.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // EPIPE: the child is gone (SIGPIPE is ignored by the harness)
    }
    off += static_cast<std::size_t>(n);
  }
  return true;
}

void Child::close_stdin() {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
}

bool Child::read_available(std::vector<std::string>& lines) {
  if (out_fd_ < 0) return false;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n > 0) {
      partial_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // End of file (or an error): whatever is left is the last line.
    if (!partial_.empty()) lines.push_back(std::move(partial_));
    partial_.clear();
    ::close(out_fd_);
    out_fd_ = -1;
    return false;
  }
  std::size_t start = 0;
  for (std::size_t nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n', start)) {
    lines.push_back(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
  return true;
}

std::optional<int> Child::poll_exit() {
  if (status_) return status_;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = decode_status(st);
  return status_;
}

void Child::kill_group(int sig) {
  if (pid_ > 0 && !status_) ::kill(-pid_, sig);
}

int Child::wait_or_kill(double timeout_s) {
  const double deadline = mono_now() + timeout_s;
  std::vector<std::string> sink;
  while (!poll_exit()) {
    if (mono_now() >= deadline) {
      kill_group(SIGTERM);
      const double hard = mono_now() + 2.0;
      while (!poll_exit() && mono_now() < hard) ::usleep(20'000);
      if (!poll_exit()) {
        kill_group(SIGKILL);
        int st = 0;
        ::waitpid(pid_, &st, 0);
        status_ = decode_status(st);
      }
      break;
    }
    ::usleep(10'000);
  }
  return *status_;
}

Result<int> run_command(const std::vector<std::string>& argv, const EnvList& env, const std::string& input,
                        double timeout_s, const std::string& stderr_path, std::string* stdout_text) {
  auto c = Child::spawn(argv, env, "", stderr_path);
  if (!c) return c.status();
  if (!input.empty()) (*c)->write_line(input);
  (*c)->close_stdin();
  // Drain stdout so that a chatty command never blocks on a full pipe.
  std::vector<std::string> sink;
  const double deadline = mono_now() + timeout_s;
  auto drain = [&] {
    (*c)->read_available(sink);
    for (const auto& l : sink) {
      if (stdout_text != nullptr) *stdout_text += l + "\n";
    }
    sink.clear();
  };
  while (!(*c)->poll_exit() && mono_now() < deadline) {
    drain();
    ::usleep(10'000);
  }
  const int st = (*c)->wait_or_kill(0.0);
  while ((*c)->read_available(sink)) {
    drain();
    if (sink.empty()) break;
  }
  drain();
  return st;
}

}  // namespace lithos::bench
