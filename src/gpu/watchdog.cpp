#include "gpu/watchdog.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

namespace lithos::gpu {

namespace {

// strerror is not guaranteed thread-safe; this library runs inside
// multithreaded hosts.
std::string errno_text(int e) {
  char buf[128];
  return ::strerror_r(e, buf, sizeof buf);  // GNU variant: returns the message
}

void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

// Wire format: "OK\n<payload>" or "ER <code>\n<message>".
std::string encode(const Result<std::string>& r) {
  if (r.is_ok()) return "OK\n" + *r;
  return "ER " + std::to_string(static_cast<int>(r.status().code())) + "\n" + r.status().message();
}

Result<std::string> decode(const std::string& wire, const std::string& what) {
  if (wire.rfind("OK\n", 0) == 0) return wire.substr(3);
  if (wire.rfind("ER ", 0) == 0) {
    const std::size_t nl = wire.find('\n');
    int code = static_cast<int>(StatusCode::kInternal);
    try {
      code = std::stoi(wire.substr(3, nl == std::string::npos ? std::string::npos : nl - 3));
    } catch (...) {
      code = static_cast<int>(StatusCode::kInternal);
    }
    if (code <= 0 || code > static_cast<int>(StatusCode::kInternal)) code = static_cast<int>(StatusCode::kInternal);
    return Status(static_cast<StatusCode>(code), nl == std::string::npos ? std::string() : wire.substr(nl + 1));
  }
  return Status::internal(what + ": the child process sent a malformed answer");
}

}  // namespace

Result<std::string> run_in_child(const std::function<Result<std::string>()>& work, double timeout_s,
                                 const std::string& what) {
  int fds[2];
  if (::pipe(fds) != 0) return Status::unavailable(what + ": pipe: " + errno_text(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::unavailable(what + ": fork: " + errno_text(e));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // Second line of defence: the default action of SIGALRM ends the child.
    ::signal(SIGALRM, SIG_DFL);
    ::alarm(static_cast<unsigned>(std::ceil(timeout_s)) + 1U);
    Result<std::string> r = Status::internal(what + ": the work threw an exception");
    try {
      r = work();
    } catch (...) {
      r = Status::internal(what + ": the work threw an exception");
    }
    write_all(fds[1], encode(r));
    ::close(fds[1]);
    ::_exit(r.is_ok() ? 0 : 2);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string wire;
  bool timed_out = false;
  char buf[4096];
  while (true) {
    // Rounded up: the child is given its whole time (truncated, the loop
    // could give up to 1 ms before the deadline).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int pr = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pr == 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;  // EOF: the child finished writing
    wire.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  // After EOF the child is exiting; give it a moment, then insist.
  const auto reap_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    const pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > reap_deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wstatus, 0);
      break;
    }
    const timespec pause{0, 5000000};  // 5 ms
    nanosleep(&pause, nullptr);
  }
  if (timed_out) {
    return Status::unavailable("watchdog: " + what + " did not finish within " + std::to_string(timeout_s) +
                               " s and was killed (a GPU launch that never finishes?)");
  }
  if (WIFSIGNALED(wstatus) && wire.empty()) {
    const int sig = WTERMSIG(wstatus);
    return Status::unavailable("watchdog: " + what + " was ended by signal " + std::to_string(sig) +
                               (sig == SIGALRM ? " (its alarm fired: a GPU launch that never finishes?)" : ""));
  }
  if (wire.empty()) return Status::internal(what + ": the child process ended without an answer");
  return decode(wire, what);
}

}  // namespace lithos::gpu
