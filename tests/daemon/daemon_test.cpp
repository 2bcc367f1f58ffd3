// lithosd in this process (Daemon::create, step()), with raw clients on its
// socket: what it writes (state folder, trace, predictor cache: never
// through a planted link or temporary name, never into a folder another user
// can change), who a tenant admits by supplementary group (SO_PEERGROUPS),
// and what `lithos status` shows to whom. Cases that need another user or
// group run as root only (a child that setgroups/setgid/setuid) and are
// skipped with the reason otherwise.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/predictor_cache.hpp"
#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"

namespace lithos::daemon {
namespace {

using nlohmann::json;

constexpr uid_t kOtherUid = 4242;  // neither root nor the test's uid (root-only cases)
constexpr gid_t kOtherGid = 4444;  // its primary group
constexpr gid_t kGroup = 4343;     // a supplementary group of it

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <std::size_t N>
void set_text(char (&dst)[N], const std::string& s) {
  std::strncpy(dst, s.c_str(), N - 1);
}

class DaemonInProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lithos-daemon-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Other uids (root-only cases) reach the socket through it.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    victim_ = dir_ + "/victim";
    std::ofstream(victim_) << "precious\n";
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }

  DaemonOptions options(const std::string& tenants_toml = "") const {
    DaemonOptions o;
    if (tenants_toml.empty()) {
      o.config = default_config();
    } else {
      auto c = parse_config(tenants_toml, "test.toml");
      EXPECT_TRUE(c.is_ok()) << c.status().to_string();
      if (c.is_ok()) o.config = *c;
    }
    o.config.socket = dir_ + "/d.sock";
    o.config.state_dir.clear();
    o.config.trace.clear();
    return o;
  }

  // Steps the daemon until `done()` (30 s at most: that bound only matters
  // when something is broken).
  static bool serve_until(Daemon& d, const std::function<bool()>& done) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      d.step(Daemon::now_ns());
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return false;
  }

  // A client of this process on the daemon's socket: its Hello, then the
  // Welcome (served meanwhile). The socket stays open (registered) in *fd.
  static ipc::Welcome hello(Daemon& d, const std::string& tenant, const std::string& program, std::uint32_t flags,
                            int* fd) {
    ipc::Welcome w;
    auto c = ipc::connect_socket(d.socket_path(), 1000);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (!c.is_ok()) return w;
    ipc::Hello h;
    h.pid = ::getpid();
    h.flags = flags;
    set_text(h.tenant, tenant);
    set_text(h.program, program);
    EXPECT_TRUE(ipc::send_packet(*c, &h, sizeof h).is_ok());
    bool got = false;
    EXPECT_TRUE(serve_until(d, [&] {
      int passed = -1;
      auto r = ipc::recv_packet(*c, &w, sizeof w, &passed, 0);
      if (passed >= 0) ::close(passed);
      got = r.is_ok() && *r == sizeof w;
      return got || (r.is_ok() && *r == 0);
    }));
    EXPECT_TRUE(got);
    *fd = *c;
    return w;
  }

  // Runs `child` in a forked process (as root: it may change its ids first)
  // while this one serves the daemon; its exit status.
  static int in_child(Daemon& d, const std::function<int()>& child) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(child());
    EXPECT_GT(pid, 0);
    int status = -1;
    EXPECT_TRUE(serve_until(d, [&] { return ::waitpid(pid, &status, WNOHANG) == pid; }));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  }

  std::string dir_, victim_;
};

// ---- files lithosd writes ---------------------------------------------------------

TEST_F(DaemonInProcess, WritesItsStateAndTraceWhereItShould) {
  DaemonOptions o = options();
  o.config.state_dir = dir_ + "/state/gpu0";  // made, 0755
  o.config.trace = dir_ + "/trace.jsonl";
  auto d = Daemon::create(o);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  struct stat st {};
  ASSERT_EQ(::stat(o.config.state_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  (*d)->step(Daemon::now_ns());
  d->reset();  // flushes and closes the trace
  EXPECT_TRUE(contains(read_text(o.config.trace), "lithos.engine-trace/1")) << read_text(o.config.trace);
  // The cache round trip the daemon makes across restarts.
  const std::string cache = predictor_cache_path(o.config.state_dir);
  ASSERT_TRUE(write_predictor_cache(cache, o.device, "entries\n").is_ok());
  auto back = read_predictor_cache(cache, o.device);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, "entries\n");
}

TEST_F(DaemonInProcess, ALinkPlantedAtTheTracePathIsNotFollowed) {
  DaemonOptions o = options();
  o.config.trace = dir_ + "/trace.jsonl";
  ASSERT_EQ(::symlink(victim_.c_str(), o.config.trace.c_str()), 0);
  auto d = Daemon::create(o);
  ASSERT_FALSE(d.is_ok()) << "started, writing its trace through a link";
  EXPECT_TRUE(contains(d.status().message(), "trace: " + o.config.trace + " is a symbolic link"))
      << d.status().message();
  EXPECT_TRUE(contains(d.status().message(), "remove it")) << d.status().message();
  EXPECT_EQ(read_text(victim_), "precious\n");
}

TEST_F(DaemonInProcess, APlantedTemporaryNameOfThePredictorCacheIsNotFollowed) {
  const std::string state = dir_ + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0755), 0);
  // The name the cache's temporary file used to have (predictable: the pid).
  const std::string planted = state + "/predictor.cache.tmp." + std::to_string(::getpid());
  ASSERT_EQ(::symlink(victim_.c_str(), planted.c_str()), 0);
  const std::string cache = predictor_cache_path(state);
  const sched::DeviceShape device = sched::DeviceShape::h100_sxm();
  ASSERT_TRUE(write_predictor_cache(cache, device, "k 1 2\n").is_ok());
  EXPECT_EQ(read_text(victim_), "precious\n");
  auto back = read_predictor_cache(cache, device);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, "k 1 2\n");
  struct stat st {};
  ASSERT_EQ(::lstat(cache.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the cache is a file of its own, not the planted link";
}

TEST_F(DaemonInProcess, APredictorCacheThatIsALinkIsNotRead) {
  const std::string state = dir_ + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), predictor_cache_path(state).c_str()), 0);
  auto r = read_predictor_cache(predictor_cache_path(state), sched::DeviceShape::h100_sxm());
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status().message(), "symbolic link")) << r.status().message();
  EXPECT_FALSE(contains(r.status().message(), "precious")) << "a file it was pointed at is not quoted";
}

TEST_F(DaemonInProcess, AStateFolderOthersCanWriteIsRefused) {
  const std::string open = dir_ + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  DaemonOptions o = options();
  o.config.state_dir = open + "/state";
  auto d = Daemon::create(o);
  ASSERT_FALSE(d.is_ok()) << "started with a state folder anyone could change";
  EXPECT_TRUE(contains(d.status().message(), "state_dir: ")) << d.status().message();
  EXPECT_TRUE(contains(d.status().message(), "the folder " + open + " is writable by every user"))
      << d.status().message();
  // The trace's folder likewise.
  o = options();
  o.config.trace = open + "/trace.jsonl";
  d = Daemon::create(o);
  ASSERT_FALSE(d.is_ok());
  EXPECT_TRUE(contains(d.status().message(), "is writable by every user")) << d.status().message();
  EXPECT_EQ(::access((open + "/trace.jsonl").c_str(), F_OK), -1);
}

TEST_F(DaemonInProcess, AStateFolderLinkPlantedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: plants a link of another uid (lchown)";
  // A sticky folder anyone may write to (as /tmp), where another user made
  // `state` a link to a folder of their choosing.
  const std::string shared = dir_ + "/shared", target = dir_ + "/target";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  const std::string state = shared + "/state";
  ASSERT_EQ(::symlink(target.c_str(), state.c_str()), 0);
  ASSERT_EQ(::lchown(state.c_str(), kOtherUid, kOtherGid), 0);
  DaemonOptions o = options();
  o.config.state_dir = state;
  auto d = Daemon::create(o);
  ASSERT_FALSE(d.is_ok()) << "started with its state behind another user's link";
  EXPECT_TRUE(contains(d.status().message(), "state_dir: " + state + ": " + state + " is a symbolic link of uid 4242"))
      << d.status().message();
  DIR* h = ::opendir(target.c_str());
  ASSERT_NE(h, nullptr);
  int entries = 0;
  while (::readdir(h) != nullptr) ++entries;
  ::closedir(h);
  EXPECT_EQ(entries, 2) << "nothing written where the link points";
}

// ---- supplementary groups -----------------------------------------------------------

constexpr const char* kGroupTenants = R"(
[[tenant]]
name = "by-group"
groups = [4343]

[[tenant]]
name = "other-group"
groups = [4545]
)";

TEST_F(DaemonInProcess, ASupplementaryGroupAdmitsAndAnotherDoesNot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a client of another uid with supplementary groups (setgroups)";
  auto d = Daemon::create(options(kGroupTenants));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  Daemon& daemon = **d;
  // A child of uid 4242, primary group 4444, supplementary group 4343 only:
  // its Welcome's status (and message, on the pipe) for `tenant`.
  const auto ask = [&](const std::string& tenant, std::string* message) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    const int rc = in_child(daemon, [&]() -> int {
      ::close(p[0]);
      const gid_t groups[] = {kGroup};
      if (::setgroups(1, groups) != 0 || ::setgid(kOtherGid) != 0 || ::setuid(kOtherUid) != 0) return 90;
      auto c = ipc::connect_socket(daemon.socket_path(), 5000);
      if (!c.is_ok()) return 91;
      ipc::Hello h;
      set_text(h.tenant, tenant);
      set_text(h.program, "grouped");
      if (!ipc::send_packet(*c, &h, sizeof h).is_ok()) return 92;
      ipc::Welcome w;
      int passed = -1;
      auto r = ipc::recv_packet(*c, &w, sizeof w, &passed, 20000);
      if (!r.is_ok() || *r != sizeof w) return 93;
      (void)!::write(p[1], w.message, std::strlen(w.message));
      return static_cast<int>(w.status);
    });
    ::close(p[1]);
    char buf[256] = {};
    (void)!::read(p[0], buf, sizeof buf - 1);
    ::close(p[0]);
    *message = buf;
    return rc;
  };
  std::string why;
  EXPECT_EQ(ask("by-group", &why), static_cast<int>(ipc::WelcomeStatus::kOk)) << why;
  EXPECT_EQ(ask("other-group", &why), static_cast<int>(ipc::WelcomeStatus::kRefused)) << why;
  EXPECT_TRUE(contains(why, "uid 4242 (gid 4444) may not claim tenant 'other-group'")) << why;
  EXPECT_EQ(daemon.counters().clients_accepted, 1U);
  EXPECT_EQ(daemon.counters().clients_refused, 1U);
}

// ---- what `lithos status` shows to whom ----------------------------------------------

TEST_F(DaemonInProcess, StatusShowsOtherUsersClientsWithoutPidAndProgram) {
  auto d = Daemon::create(options());
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  Daemon& daemon = **d;
  int in_mps = -1, outside = -1;
  // Two clients of this process: one an MPS client, one outside MPS (a
  // warning names it).
  ASSERT_EQ(hello(daemon, "", "secretprog", ipc::kHelloMpsKnown | ipc::kHelloMpsClient, &in_mps).status,
            ipc::WelcomeStatus::kOk);
  ASSERT_EQ(hello(daemon, "", "hiddenprog", ipc::kHelloMpsKnown, &outside).status, ipc::WelcomeStatus::kOk);
  const uid_t me = ::geteuid();
  const uid_t stranger = me + 4242;

  const json full = json::parse(daemon.status_json(Daemon::now_ns()));
  EXPECT_EQ(full["view"], "all");
  ASSERT_EQ(full["clients"].size(), 2U);
  EXPECT_EQ(full["clients"][0]["pid"], ::getpid());
  EXPECT_EQ(full["clients"][0]["uid"], me);
  EXPECT_EQ(full["clients"][0]["program"], "secretprog");
  ASSERT_EQ(full["warnings"].size(), 1U);
  EXPECT_TRUE(contains(full["warnings"][0].get<std::string>(), "hiddenprog")) << full["warnings"];

  // The daemon's own uid (and root) see everything; so does the clients' own.
  for (const uid_t viewer : {me, static_cast<uid_t>(0)}) {
    const json j = json::parse(daemon.status_json(Daemon::now_ns(), viewer));
    EXPECT_EQ(j["view"], "all") << viewer;
    EXPECT_EQ(j["clients"][1]["program"], "hiddenprog") << viewer;
  }

  // Another uid: its own clients in full (it has none here), others' without
  // pid, uid and program; tenants, counters and the rest as before.
  const json other = json::parse(daemon.status_json(Daemon::now_ns(), stranger));
  EXPECT_EQ(other["view"], "own");
  ASSERT_EQ(other["clients"].size(), 2U);
  for (const json& c : other["clients"]) {
    EXPECT_TRUE(c["pid"].is_null()) << c;
    EXPECT_TRUE(c["uid"].is_null()) << c;
    EXPECT_TRUE(c["program"].is_null()) << c;
    EXPECT_EQ(c["tenant"], "default");
    EXPECT_TRUE(c["launches"].is_number());
  }
  EXPECT_EQ(other["tenants"], full["tenants"]);
  EXPECT_EQ(other["counters"]["clients_accepted"], 2);
  ASSERT_EQ(other["warnings"].size(), 1U);
  const std::string warning = other["warnings"][0].get<std::string>();
  EXPECT_TRUE(contains(warning, "another user's")) << warning;
  EXPECT_FALSE(contains(warning, "hiddenprog")) << warning;
  EXPECT_FALSE(contains(warning, "pid ")) << warning;
  const std::string text = other.dump();
  EXPECT_FALSE(contains(text, "secretprog")) << text;
  EXPECT_FALSE(contains(text, "hiddenprog")) << text;
  ::close(in_mps);
  ::close(outside);
}

TEST_F(DaemonInProcess, StatusShowsEverythingToEveryoneWhenConfigured) {
  DaemonOptions o = options();
  o.config.status_shows_all = true;
  auto d = Daemon::create(o);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  int fd = -1;
  ASSERT_EQ(hello(**d, "", "secretprog", 0, &fd).status, ipc::WelcomeStatus::kOk);
  const json j = json::parse((*d)->status_json(Daemon::now_ns(), ::geteuid() + 4242));
  EXPECT_EQ(j["view"], "all");
  EXPECT_EQ(j["clients"][0]["program"], "secretprog");
  EXPECT_EQ(j["clients"][0]["pid"], ::getpid());
  ::close(fd);
}

TEST_F(DaemonInProcess, StatusAskedOverTheSocketByAnotherUidHidesOthersClients) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: asks for the status as another uid (setuid)";
  auto d = Daemon::create(options());
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  Daemon& daemon = **d;
  int fd = -1;
  ASSERT_EQ(hello(daemon, "", "secretprog", 0, &fd).status, ipc::WelcomeStatus::kOk);
  // The status as uid 4242 sees it: on a pipe back to this process.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const int rc = in_child(daemon, [&]() -> int {
    ::close(p[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(kOtherGid) != 0 || ::setuid(kOtherUid) != 0) return 90;
    auto c = ipc::connect_socket(daemon.socket_path(), 5000);
    if (!c.is_ok()) return 91;
    ipc::Hello h;
    h.kind = ipc::HelloKind::kStatus;
    if (!ipc::send_packet(*c, &h, sizeof h).is_ok()) return 92;
    std::string buf(1 << 20, '\0');
    auto r = ipc::recv_packet(*c, buf.data(), buf.size(), nullptr, 20000);
    if (!r.is_ok() || *r == 0) return 93;
    std::size_t done = 0;
    while (done < *r) {
      const ssize_t n = ::write(p[1], buf.data() + done, *r - done);
      if (n <= 0) return 94;
      done += static_cast<std::size_t>(n);
    }
    return 0;
  });
  ::close(p[1]);
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  ASSERT_EQ(rc, 0);
  const json j = json::parse(answer, nullptr, false);
  ASSERT_TRUE(j.is_object()) << answer;
  EXPECT_EQ(j["view"], "own");
  ASSERT_EQ(j["clients"].size(), 1U);
  EXPECT_TRUE(j["clients"][0]["pid"].is_null());
  EXPECT_TRUE(j["clients"][0]["program"].is_null());
  EXPECT_FALSE(contains(answer, "secretprog"));
  // Root, over the socket, sees it all.
  const json root = json::parse(daemon.status_json(Daemon::now_ns(), 0));
  EXPECT_EQ(root["clients"][0]["program"], "secretprog");
  ::close(fd);
}

}  // namespace
// ---- right-sizing of high-priority launches -------------------------------------------

// A high-priority client of a right-sized tenant reports kernels running
// (kSubmitRunning) and sees its table entry appear in its channel; a report
// sized to that entry (its TPC count, ipc::set_running_tpcs) holds only the first TPCs of its
// allocation, and status shows what right-sizing saved.
TEST_F(DaemonInProcess, RightSizedServiceSeesItsTableAndHoldsOnlyWhatItUsed) {
  auto d = Daemon::create(options(R"(
[daemon]
policy = "lithos"
[[tenant]]
name = "svc"
priority = "high"
rightsize = true
rightsize_slip = 1.2
)"));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  Daemon& daemon = **d;
  auto c = ipc::connect_socket(daemon.socket_path(), 1000);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  ipc::Hello h;
  h.pid = ::getpid();
  set_text(h.tenant, "svc");
  set_text(h.program, "svc");
  ASSERT_TRUE(ipc::send_packet(*c, &h, sizeof h).is_ok());
  ipc::Welcome w;
  int channel_fd = -1;
  ASSERT_TRUE(serve_until(daemon, [&] {
    int passed = -1;
    auto r = ipc::recv_packet(*c, &w, sizeof w, &passed, 0);
    if (passed >= 0) channel_fd = passed;
    return r.is_ok() && *r == sizeof w;
  }));
  ASSERT_EQ(w.status, ipc::WelcomeStatus::kOk) << w.message;
  auto ch = ipc::Channel::attach(channel_fd);
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  ipc::ChannelLayout& l = ch->layout();
  std::uint64_t alloc[2] = {0, 0};
  ASSERT_TRUE(serve_until(daemon, [&] { return ch->read_allocation(alloc) && (alloc[0] | alloc[1]) != 0; }));
  const sched::TpcSet all = sched::TpcSet::from_words(alloc[0], alloc[1]);
  ASSERT_GT(all.count(), 2);

  ipc::SubmitMsg open;
  open.type = ipc::SubmitType::kStreamOpen;
  open.stream = 0;
  ASSERT_TRUE(l.submit.push(open));
  // A kernel of 20 blocks of 256 threads fills 2 TPCs (16 blocks a TPC).
  const std::uint32_t grid[3] = {20, 1, 1};
  std::uint64_t seq = 0;
  const auto report = [&](std::uint32_t tpcs) {
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kLaunch;
    m.flags = ipc::kSubmitRunning;
    m.stream = 0;
    m.seq = ++seq;
    m.kernel = 0xfeed;
    m.grid[0] = grid[0];
    m.block[0] = 256;
    m.regs = 32;
    ipc::set_running_tpcs(m, tpcs);
    m.marker = static_cast<std::uint32_t>(seq);
    return l.submit.push(m);
  };
  EXPECT_EQ(ipc::size_lookup(l.sizes, 0xfeed, grid), 0U);  // nothing known yet: the whole allocation
  ASSERT_TRUE(report(0));
  ASSERT_TRUE(serve_until(daemon, [&] { return ipc::size_lookup(l.sizes, 0xfeed, grid) != 0; }));
  EXPECT_EQ(ipc::size_lookup(l.sizes, 0xfeed, grid), 2U);
  const std::uint32_t other[3] = {21, 1, 1};
  EXPECT_EQ(ipc::size_lookup(l.sizes, 0xfeed, other), 0U);
  // It ends (its marker), then runs on the 2 TPCs its entry says.
  l.completed[0].store(1, std::memory_order_release);
  ASSERT_TRUE(serve_until(daemon, [&] { return daemon.engine().state().tenants[0].inflight_atoms == 0; }));
  ASSERT_TRUE(report(2));
  ASSERT_TRUE(serve_until(daemon, [&] { return daemon.engine().state().tenants[0].inflight_atoms == 1; }));
  EXPECT_EQ(daemon.engine().state().held(0), all.take_lowest(2));
  l.completed[0].store(2, std::memory_order_release);
  ASSERT_TRUE(serve_until(daemon, [&] { return daemon.engine().state().tenants[0].inflight_atoms == 0; }));
  const json status = json::parse(daemon.status_json(Daemon::now_ns()));
  const json& r = status["tenants"][0]["rightsize"];
  ASSERT_TRUE(r.is_object()) << status.dump();
  EXPECT_DOUBLE_EQ(r["slip"].get<double>(), 1.2);
  EXPECT_EQ(r["by_occupancy"].get<int>(), 2);
  EXPECT_EQ(r["table_entries"].get<int>(), 1);
  EXPECT_GT(r["saved_tpc_us"].get<double>(), 0.0);
  ::close(*c);
}

}  // namespace lithos::daemon
