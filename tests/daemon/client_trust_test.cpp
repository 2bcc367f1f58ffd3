// liblithos.so as a client of lithosd when the daemon cannot be trusted or
// does not answer, across real processes over the FAKE driver (as
// e2e_test.cpp): daemon_client_app processes with liblithos.so preloaded
// talk to
//  - a fake daemon (FakeDaemon below: this test speaking the protocol with
//    lithos_ipc) that sends a channel it could still shrink, or of the wrong
//    size, or that listens in a folder of another uid, or as another uid;
//  - the real `lithos daemon`, stopped (SIGSTOP) before the client starts or
//    while it runs.
// The client's view comes from its lithos_stats_json ("daemon" member),
// which daemon_client_app prints at its end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"

extern char** environ;

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
namespace ipc = lithos::ipc;

using lithos::test::since;
using lithos::test::wait_until;

// A client application (client_app.cpp): its launches and statistics.
struct Proc : lithos::test::Proc {
  static Proc spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                    const std::string& out_path) {
    Proc p;
    static_cast<lithos::test::Proc&>(p) = lithos::test::Proc::spawn(argv, env_add, out_path);
    return p;
  }
  std::vector<json> launches() const {
    std::vector<json> v;
    for (const json& j : lines())
      if (j.contains("i")) v.push_back(j);
    return v;
  }
  json daemon_stats() const {
    for (const json& j : lines())
      if (j.contains("stats") && j["stats"].contains("daemon")) return j["stats"]["daemon"];
    return nullptr;
  }
};

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A socket bound at `path`, not listening yet (serve() listens: a child
// that setuid()s in between listens as another user, and the credentials a
// client sees are those of the listen()). No folder checks: a fake daemon
// may sit where lithosd would refuse to. -1 on failure.
// A socket bound at `path`, listening when `listen_now` (a listener's
// SO_PEERCRED is the process that calls listen(): a fake daemon of another
// uid listens in its child, after setuid).
int listen_at(const std::string& path, bool listen_now = true) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // Listening before the function returns: a client started right after
  // must find someone there, not a refused connection.
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::chmod(path.c_str(), 0777) != 0 ||
      (listen_now && ::listen(fd, 16) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What a fake daemon answers a Hello with.
enum class Answer {
  kClose,       // nothing: it closes the connection
  kUnsealed,    // a channel of the right size and header, not sealed; then shrinks it to nothing
  kWrongSize,   // a sealed memfd of 4096 bytes
  kNoSealSeal,  // sealed against resizing but left open to more seals (no F_SEAL_SEAL): not a lithosd channel
  kChannel,     // a real channel (ipc::Channel::create), kept: the client registers
};

// One fake daemon's loop on a listening socket: accepts connections, reads
// each one's Hello (2 s at most) and answers it. Writes one line per
// connection to `report`: "C" (nothing was sent to it) or "H <pid>
// <tenant>" (a Hello came). Runs until *stop (a thread) or forever (a
// forked child). With kChannel, *beats gets the client's client_beat_ns
// now and then.
void serve(int listen_fd, Answer answer, int report, const std::atomic<bool>* stop,
           std::atomic<std::uint64_t>* beats = nullptr) {
  std::vector<int> keep;
  std::vector<ipc::Channel> channels;
  while (stop == nullptr || !stop->load()) {
    for (ipc::Channel& ch : channels)
      if (beats != nullptr) beats->store(ch.layout().header.client_beat_ns.load());
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, 5) <= 0) continue;
    const int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    keep.push_back(c);
    ipc::Hello h;
    auto got = ipc::recv_packet(c, &h, sizeof h, nullptr, 2000);
    std::string line = "C\n";
    if (got && got.value() == sizeof h) {
      h.tenant[sizeof h.tenant - 1] = '\0';
      line = "H " + std::to_string(h.pid) + " " + h.tenant + "\n";
    }
    if (::write(report, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return;
    if (line == "C\n" || answer == Answer::kClose) {
      ::close(keep.back());
      keep.pop_back();
      continue;
    }
    ipc::Welcome w;
    w.tenant_class = ipc::TenantClass::kHigh;          // its launches wait for nothing
    std::memcpy(w.tenant, h.tenant, sizeof w.tenant);  // NUL-terminated above
    int memfd = -1;
    if (answer == Answer::kChannel) {
      auto ch = ipc::Channel::create(1, 1, 1);
      if (!ch) return;
      channels.push_back(std::move(ch).value());
      memfd = channels.back().fd();
      w.channel_bytes = static_cast<std::uint32_t>(ipc::Channel::kBytes);
    } else {
      memfd = ::memfd_create("fake-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      const std::size_t bytes = answer == Answer::kWrongSize ? 4096 : ipc::Channel::kBytes;
      if (memfd < 0 || ::ftruncate(memfd, static_cast<off_t>(bytes)) != 0) return;
      if (answer != Answer::kWrongSize) {
        // A header the client would take: only the seals give it away.
        void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (m == MAP_FAILED) return;
        auto* layout = new (m) ipc::ChannelLayout();
        layout->header.bytes = static_cast<std::uint32_t>(bytes);
        ::munmap(m, bytes);
      }
      const int seals = answer == Answer::kUnsealed     ? 0
                        : answer == Answer::kNoSealSeal ? F_SEAL_SHRINK | F_SEAL_GROW
                                                        : F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
      if (seals != 0 && ::fcntl(memfd, F_ADD_SEALS, seals) != 0) return;
      w.channel_bytes = static_cast<std::uint32_t>(bytes);
      keep.push_back(memfd);
    }
    if (!ipc::send_packet(c, &w, sizeof w, memfd).is_ok()) continue;
    // What the attack was: the file shrinks under a client that mapped it,
    // whose next access to it raises SIGBUS.
    if (answer == Answer::kUnsealed) (void)::ftruncate(memfd, 0);
  }
  for (int fd : keep) ::close(fd);
}

class ClientTrust : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: a socket path holds 107 bytes.
    char tmpl[] = "/tmp/lithos-trust-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);  // (a user of its own reaches the sockets under it)
    sock_ = (dir_ / "lithosd.sock").string();
    ASSERT_EQ(::pipe2(report_, O_CLOEXEC), 0);
  }
  void TearDown() override {
    stop_.store(true);
    if (server_.joinable()) server_.join();
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    daemon_.signal(SIGCONT);
    daemon_.signal(SIGKILL);
    daemon_.wait(5);
    for (int fd : report_)
      if (fd >= 0) ::close(fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // A fake daemon at `path` in a thread of this process (this uid).
  void fake_daemon(const std::string& path, Answer answer) {
    listen_fd_ = listen_at(path);
    ASSERT_GE(listen_fd_, 0) << path << ": " << std::strerror(errno);
    server_ = std::thread([this, answer] { serve(listen_fd_, answer, report_[1], &stop_, &beat_); });
  }
  // The same in a child process that listens as `uid`.
  // Returns once the child listens: a client started right after finds it.
  void fake_daemon_as(const std::string& path, uid_t uid, Answer answer) {
    const int fd = listen_at(path, /*listen_now=*/false);
    ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
    int ready[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    child_ = ::fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      ::close(ready[0]);
      if (::setgid(uid) != 0 || ::setuid(uid) != 0 || ::listen(fd, 16) != 0) ::_exit(1);
      const char one = 1;
      if (::write(ready[1], &one, 1) != 1) ::_exit(1);
      ::close(ready[1]);
      serve(fd, answer, report_[1], nullptr);
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(fd);
    pollfd p{ready[0], POLLIN, 0};
    char one = 0;
    const bool up = ::poll(&p, 1, 30000) > 0 && ::read(ready[0], &one, 1) == 1;
    ::close(ready[0]);
    ASSERT_TRUE(up) << "the fake daemon of uid " << uid << " did not come up";
  }
  // The fake daemon's report lines so far.
  std::vector<std::string> reported() {
    pollfd p{report_[0], POLLIN, 0};
    while (::poll(&p, 1, 0) > 0) {
      char buf[512];
      const ssize_t n = ::read(report_[0], buf, sizeof buf);
      if (n <= 0) break;
      report_text_.append(buf, static_cast<std::size_t>(n));
    }
    std::vector<std::string> out;
    std::stringstream s(report_text_);
    for (std::string line; std::getline(s, line);) out.push_back(line);
    return out;
  }

  Proc client(const std::string& socket, int launches, int pause_ms, const std::vector<std::string>& extra = {},
              int hold_ms = 0) {
    std::vector<std::string> env = {"LD_PRELOAD=" LITHOS_PRELOAD,       "LD_LIBRARY_PATH=" LITHOS_FAKE_DRIVER_DIR,
                                    "LITHOS_SLOT_MAP=" LITHOS_FAKE_MAP, "LITHOS_LOG=warn",
                                    "LITHOS_DAEMON=" + socket,          "LITHOS_TENANT=train",
                                    "LITHOS_GRANT_TIMEOUT_MS=60000",    "LITHOS_DEFER_LAUNCHES=0"};
    // `extra` wins over these (getenv() finds the first of a name).
    for (const std::string& kv : extra) {
      const std::string name = kv.substr(0, kv.find('=') + 1);
      std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
    }
    env.insert(env.end(), extra.begin(), extra.end());
    Proc p = Proc::spawn(
        {LITHOS_CLIENT_APP, std::to_string(launches), std::to_string(pause_ms), std::to_string(hold_ms), "4096"}, env,
        (dir_ / ("client-" + std::to_string(++clients_) + ".out")).string());
    EXPECT_GT(p.pid, 0);
    return p;
  }

  // A client that ran as without a daemon: every launch made, none masked.
  static void expect_ran_unscheduled(const Proc& c, std::size_t launches) {
    const auto l = c.launches();
    EXPECT_EQ(l.size(), launches);
    for (const json& j : l) {
      EXPECT_EQ(j["rc"], 0) << j.dump();
      EXPECT_EQ(j["tpcs"], "all") << j.dump();
    }
  }

  // The real lithosd (tenants: svc high with quota 2, train best effort).
  void start_daemon() {
    const std::string config = (dir_ / "lithosd.toml").string();
    std::ofstream(config) << "[daemon]\npolicy = \"lithos\"\nmps = \"off\"\n"
                             "[[tenant]]\nname = \"svc\"\npriority = \"high\"\nquota = 2\n"
                             "[[tenant]]\nname = \"train\"\npriority = \"best-effort\"\n";
    daemon_ = Proc::spawn({LITHOS_EXE, "daemon", "--slot-map", LITHOS_FAKE_MAP, "--config", config, "--socket", sock_,
                           "--state-dir", (dir_ / "state").string(), "--best-effort-runs-free", "false"},
                          {}, (dir_ / "daemon.log").string());
    ASSERT_GT(daemon_.pid, 0);
    ASSERT_TRUE(wait_until([&] { return status().is_object(); }, 20)) << daemon_.err();
  }
  // A client of the fake daemon at `path` (of uid 65534) is refused before
  // it sends anything: said once, with `why` and what to do; it runs
  // unscheduled and the fake daemon saw only a connection. Named as the
  // daemon's uid (LITHOS_DAEMON_UID), the next client trusts it and is
  // greeted.
  void expect_refused_unless_named(const std::string& path, const std::string& why) {
    Proc c = client(path, 4, 0, {"LITHOS_REGISTER_WAIT_MS=20000"});
    ASSERT_EQ(c.wait(), 0) << c.err();
    expect_ran_unscheduled(c, 4);
    const json s = c.daemon_stats();
    ASSERT_TRUE(s.is_object()) << c.err();
    EXPECT_EQ(s["state"], "refused") << s.dump();
    EXPECT_EQ(count_of(c.err(), "is not trusted"), 1U) << c.err();
    EXPECT_NE(c.err().find(why), std::string::npos) << c.err();
    EXPECT_NE(c.err().find("LITHOS_DAEMON_UID"), std::string::npos) << c.err();  // what to do
    ASSERT_TRUE(wait_until([&] { return !reported().empty(); })) << "the client never connected";
    EXPECT_EQ(reported(), std::vector<std::string>{"C"});
    Proc named = client(path, 4, 0, {"LITHOS_REGISTER_WAIT_MS=20000", "LITHOS_DAEMON_UID=65534"});
    const pid_t pid = named.pid;
    ASSERT_EQ(named.wait(), 0) << named.err();
    EXPECT_EQ(named.err().find("is not trusted"), std::string::npos) << named.err();
    ASSERT_TRUE(wait_until([&] { return reported().size() >= 2; }));
    EXPECT_EQ(reported()[1], "H " + std::to_string(pid) + " train");
  }
  // lithosd's status (JSON), null when it does not answer within 2 s.
  json status() const { return lithos::test::lithosd_status(sock_, 200, 2000); }
  std::uint64_t grants() const {
    const json st = status();
    return st.is_object() ? st["counters"]["grants"].get<std::uint64_t>() : 0;
  }

  fs::path dir_;
  std::string sock_;
  int report_[2] = {-1, -1};
  std::string report_text_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> beat_{0};
  std::thread server_;
  pid_t child_ = -1;
  Proc daemon_;
  int clients_ = 0;
};

// A daemon of this uid that sends a channel it could still shrink (a memfd
// without seals, which it shrinks to nothing right after sending it), one
// not sealed as lithosd seals its channels (no F_SEAL_SEAL), or one of the
// wrong size: the client maps none of them (a shrunk mapping raises SIGBUS
// at the next access). It says why once, never asks that daemon again, and
// runs as without a daemon; the application exits 0.
TEST_F(ClientTrust, AChannelThatCouldShrinkIsRefused) {
  struct Case {
    Answer answer;
    const char* why;
  };
  for (const Case& k : {Case{Answer::kUnsealed, "not sealed as"}, Case{Answer::kNoSealSeal, "not sealed as"},
                        Case{Answer::kWrongSize, "size 4096 bytes"}}) {
    SCOPED_TRACE(k.why);
    const std::string path = (dir_ / ("fake-" + std::to_string(static_cast<int>(k.answer)) + ".sock")).string();
    stop_.store(false);
    fake_daemon(path, k.answer);
    // 1.2 s: the client would have asked again after a second.
    Proc c = client(path, 24, 50, {"LITHOS_REGISTER_WAIT_MS=20000"});
    ASSERT_EQ(c.wait(), 0) << c.err();
    expect_ran_unscheduled(c, 24);
    const json s = c.daemon_stats();
    ASSERT_TRUE(s.is_object()) << c.err();
    EXPECT_EQ(s["state"], "refused") << s.dump();
    EXPECT_EQ(s["registered"], false) << s.dump();
    EXPECT_EQ(s["registration"]["attempts"], 1) << s.dump();
    EXPECT_EQ(s["launches_unregistered"], 24) << s.dump();
    EXPECT_EQ(count_of(c.err(), "is not trusted"), 1U) << c.err();
    EXPECT_NE(c.err().find(k.why), std::string::npos) << c.err();
    EXPECT_EQ(reported().size(), 1U);  // one connection, never another
    stop_.store(true);
    server_.join();
    ::close(listen_fd_);
    listen_fd_ = -1;
    report_text_.clear();
    while (!reported().empty()) report_text_.clear();
  }
}

// A socket in a folder that another uid owns (as /tmp/lithos-<uid> made by
// someone else first): the client sends nothing there (no Hello: not its
// pid, tenant or program) unless that uid is named as the daemon's.
TEST_F(ClientTrust, AFolderOfAnotherUidIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the folder of another uid is made with chown";
  const fs::path theirs = dir_ / "theirs";
  fs::create_directories(theirs);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  const std::string path = (theirs / "lithosd.sock").string();
  fake_daemon(path, Answer::kClose);  // listening as root: only the folder gives it away
  expect_refused_unless_named(path, "belongs to uid 65534");
}

// A daemon listening as another uid (SO_PEERCRED), in a folder of root's:
// refused before anything is sent, unless that uid is the daemon's
// (LITHOS_DAEMON_UID, `lithos run --daemon-uid`).
TEST_F(ClientTrust, AListenerOfAnotherUidIsRefusedUnlessNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the fake daemon setuid()s to another uid";
  fake_daemon_as(sock_, 65534, Answer::kClose);
  expect_refused_unless_named(sock_, "runs as uid 65534");
}

// Registered, the client's thread refreshes the channel's client_beat_ns
// (CLOCK_MONOTONIC) while the process runs, launching or not: set at
// registration, then again and again.
TEST_F(ClientTrust, ARegisteredClientBeats) {
  fake_daemon(sock_, Answer::kChannel);
  // One launch, then it only sleeps (up to a minute; killed below).
  Proc c = client(sock_, 1, 0, {"LITHOS_REGISTER_WAIT_MS=20000"}, 60000);
  ASSERT_TRUE(wait_until([&] { return c.launches().size() == 1 && beat_.load() != 0; })) << c.err();
  EXPECT_EQ(reported().size(), 1U);
  for (int i = 0; i < 3; ++i) {
    const std::uint64_t seen = beat_.load();
    EXPECT_TRUE(wait_until([&] { return beat_.load() > seen; })) << "the beat did not move";
  }
  EXPECT_EQ(c.err().find("is not trusted"), std::string::npos) << c.err();
  c.signal(SIGKILL);
  c.wait(5);
}

// lithosd stopped (SIGSTOP: a hung daemon) when a process starts: its first
// launch waits at most LITHOS_REGISTER_WAIT_MS (5 ms here) for the
// registration it started, and no launch waits after that; every launch is
// made (as without a daemon), and the client says it is not registered.
// Once the daemon runs again, the client registers in the background and
// its later launches are scheduled (granted).
TEST_F(ClientTrust, AClientStartedUnderAStoppedDaemonRunsAndRegistersLater) {
  start_daemon();
  daemon_.signal(SIGSTOP);
  Proc quick = client(sock_, 20, 0, {"LITHOS_REGISTER_WAIT_MS=5"});
  ASSERT_EQ(quick.wait(), 0) << quick.err();
  expect_ran_unscheduled(quick, 20);
  json s = quick.daemon_stats();
  ASSERT_TRUE(s.is_object()) << quick.err();
  EXPECT_EQ(s["registered"], false) << s.dump();
  EXPECT_EQ(s["launches_unregistered"], 20) << s.dump();
  EXPECT_EQ(s["registration"]["first_launch_waits"], 1) << s.dump();
  EXPECT_EQ(s["registration"]["first_launch_wait_timeouts"], 1) << s.dump();
  EXPECT_EQ(s["grants"], 0) << s.dump();
  EXPECT_EQ(s["fallbacks"], 0) << s.dump();

  const std::string until = (dir_ / "until").string();
  Proc c = client(sock_, 1000000, 5, {"LITHOS_REGISTER_WAIT_MS=5", "CLIENT_STOP_FILE=" + until});
  ASSERT_TRUE(wait_until([&] { return c.launches().size() >= 20; })) << c.err();
  daemon_.signal(SIGCONT);
  // Registered in the background, and granted from then on.
  EXPECT_TRUE(wait_until([&] { return grants() >= 10; })) << status().dump();
  std::ofstream(until) << "";
  ASSERT_EQ(c.wait(), 0) << c.err();
  s = c.daemon_stats();
  ASSERT_TRUE(s.is_object()) << c.err();
  EXPECT_EQ(s["registered"], true) << s.dump();
  EXPECT_EQ(s["state"], "connected") << s.dump();
  EXPECT_GE(s["grants"].get<int>(), 10) << s.dump();
  EXPECT_GE(s["launches_unregistered"].get<int>(), 20) << s.dump();
  EXPECT_EQ(s["registration"]["first_launch_waits"], 1) << s.dump();
  EXPECT_EQ(s["registration"]["first_launch_wait_timeouts"], 1) << s.dump();
  EXPECT_EQ(s["fallbacks"], 0) << s.dump();  // no launch waited for a grant it did not get
  EXPECT_EQ(s["outages"], 0) << s.dump();
  for (const json& j : c.launches()) EXPECT_EQ(j["rc"], 0) << j.dump();
}

// lithosd stopped while a best-effort client waits for its grants: the
// launch waiting then gives up after one grant timeout (its blocks run on
// the fallback set) and the client takes the daemon for gone; every later
// launch runs on the fallback set without waiting for the daemon (no
// other grant wait, no registration in the application's thread). Once the
// daemon runs again, the client registers again in the background and is
// granted again.
TEST_F(ClientTrust, ADaemonStoppedMidRunCostsOneGrantTimeout) {
  start_daemon();
  const std::string until = (dir_ / "until").string();
  // A grant timeout far beyond how long a loaded machine keeps a running
  // daemon off the CPU (a second outage would fail the test), and short
  // enough to wait for.
  Proc c = client(sock_, 1000000, 5,
                  {"LITHOS_REGISTER_WAIT_MS=20000", "LITHOS_GRANT_TIMEOUT_MS=2000", "CLIENT_STOP_FILE=" + until});
  ASSERT_TRUE(wait_until([&] { return grants() >= 10; })) << c.err();
  const std::uint64_t before = grants();
  daemon_.signal(SIGSTOP);
  // Launches on the fallback set (not the whole GPU, which the daemon granted).
  auto on_fallback = [&] {
    int n = 0;
    for (const json& j : c.launches()) n += j["tpcs"] != "all";
    return n;
  };
  ASSERT_TRUE(wait_until([&] { return on_fallback() >= 40; })) << c.err();
  daemon_.signal(SIGCONT);
  EXPECT_TRUE(wait_until([&] { return grants() >= before + 20; })) << status().dump();
  std::ofstream(until) << "";
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = c.daemon_stats();
  ASSERT_TRUE(s.is_object()) << c.err();
  EXPECT_EQ(s["outages"], 1) << s.dump();
  EXPECT_LE(s["fallbacks"].get<int>(), 1) << s.dump();  // one grant timeout for the outage, no more
  EXPECT_GE(s["launches_unregistered"].get<int>(), 39) << s.dump();
  EXPECT_EQ(s["reconnects"], 1) << s.dump();
  EXPECT_EQ(s["state"], "connected") << s.dump();
  EXPECT_EQ(s["registration"]["first_launch_wait_timeouts"], 0) << s.dump();
  for (const json& j : c.launches()) EXPECT_EQ(j["rc"], 0) << j.dump();
}

}  // namespace
