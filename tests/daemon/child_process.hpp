// What the tests of lithosd across real processes share (e2e_test.cpp,
// hostile_test.cpp, client_trust_test.cpp, fault_e2e_test.cpp): a child
// process with its output in files, waiting for a condition with a bound
// that only matters when a test fails, and lithosd's status over its socket.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"

extern char** environ;

namespace lithos::test {

inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Waits until `pred()` holds; false after `timeout_s` (which only matters
// when the test fails: a loaded machine may take long, never forever).
template <class Pred>
bool wait_until(Pred pred, double timeout_s = 60) {
  const auto t0 = std::chrono::steady_clock::now();
  while (since(t0) < timeout_s) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// A child process, its stdout in a file and its stderr in that file's
// ".err". The test's own LITHOS*, LD_PRELOAD, FAKE_* and CLIENT_* variables are not
// passed on; `env_add` is (its entries win).
struct Proc {
  pid_t pid = -1;
  std::string out;

  static Proc spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                    const std::string& out_path) {
    Proc p;
    p.out = out_path;
    std::vector<std::string> env;
    auto added = [&](const std::string& kv) {
      const std::string name = kv.substr(0, kv.find('=') + 1);
      for (const std::string& a : env_add)
        if (a.rfind(name, 0) == 0) return true;
      return false;
    };
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("LITHOS", 0) == 0 || kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("FAKE_", 0) == 0 ||
          kv.rfind("CLIENT_", 0) == 0)
        continue;
      if (added(kv)) continue;
      env.push_back(kv);
    }
    env.insert(env.end(), env_add.begin(), env_add.end());
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, (out_path + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (posix_spawn(&p.pid, a[0], &fa, nullptr, a.data(), e.data()) != 0) p.pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    return p;
  }
  // Exit status (-signal when killed), or -1000 after `timeout_s` (then it
  // is killed).
  int wait(double timeout_s = 60) {
    const auto t0 = std::chrono::steady_clock::now();
    while (pid > 0) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
      if (since(t0) > timeout_s) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        pid = -1;
        return -1000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1001;
  }
  // Whether it has not exited yet (reaps it when it has: wait() then
  // returns -1001).
  bool running() const {
    if (pid <= 0) return false;
    int st = 0;
    return ::waitpid(pid, &st, WNOHANG) == 0;
  }
  void signal(int sig) const {
    if (pid > 0) ::kill(pid, sig);
  }
  // Its stdout's JSON lines.
  std::vector<nlohmann::json> lines() const {
    std::vector<nlohmann::json> v;
    std::ifstream f(out);
    std::string line;
    while (std::getline(f, line)) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) v.push_back(j);
    }
    return v;
  }
  // The last line that has `key`; null when none.
  nlohmann::json printed(const char* key) const {
    nlohmann::json found = nullptr;
    for (const nlohmann::json& j : lines())
      if (j.is_object() && j.contains(key)) found = j;
    return found;
  }
  std::string err() const { return read_all(out + ".err"); }
};

// `lithos status --json` over lithosd's socket; null when no daemon answers
// (connects within `connect_ms`, answers within `answer_ms`) or its answer
// is not JSON.
inline nlohmann::json lithosd_status(const std::string& socket, int connect_ms = 200, int answer_ms = 5000) {
  auto fd = ipc::connect_socket(socket, connect_ms);
  if (!fd) return nullptr;
  ipc::Hello h;
  h.kind = ipc::HelloKind::kStatus;
  std::string buf(1 << 20, '\0');
  int passed = -1;
  nlohmann::json j = nullptr;
  if (ipc::send_packet(fd.value(), &h, sizeof h).is_ok()) {
    auto got = ipc::recv_packet(fd.value(), buf.data(), buf.size(), &passed, answer_ms);
    if (got && got.value() > 0) j = nlohmann::json::parse(buf.substr(0, got.value()), nullptr, false);
  }
  ::close(fd.value());
  if (passed >= 0) ::close(passed);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

}  // namespace lithos::test
