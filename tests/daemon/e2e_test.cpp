// lithosd and liblithos.so end to end, across real processes, over the FAKE
// driver: `lithos daemon` serves a fake GPU of 4 TPCs in two GPCs (its slot
// map, tests/intercept/data/fake-slot-map-gpcs.txt); clients are
// daemon_client_app processes with liblithos.so preloaded. The test reads
// what each client's launches were given (the descriptor masks it prints)
// and what the daemon says (`lithos status` over the socket).
//
// Tenants (written by the fixture): svc (high, quota 2), train (best
// effort), locked (best effort, claimable only by another uid), default.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "child_process.hpp"
#include "daemon/daemon.hpp"
#include "daemon/trace.hpp"
#include "gpu/slot_map.hpp"
#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"
#include "sched/tpc_set.hpp"

extern char** environ;

namespace {

using lithos::sched::TpcSet;
using nlohmann::json;
namespace fs = std::filesystem;

using lithos::test::read_all;
using lithos::test::since;

// A child process with its stdout in a file, and a client's gates
// (CLIENT_GATES): launch index -> the file that opens it.
struct Proc : lithos::test::Proc {
  std::map<int, std::string> gates;
  static Proc spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                    const std::string& out_path) {
    Proc p;
    static_cast<lithos::test::Proc&>(p) = lithos::test::Proc::spawn(argv, env_add, out_path);
    return p;
  }
};

// Every wait of these tests is for a condition, with a deadline that only
// matters when the test fails: the machine may be loaded (ctest -j, other
// jobs), and nothing here may depend on how fast a process gets the CPU.
constexpr double kDeadlineS = 60;

class DaemonE2E : public ::testing::Test {
 protected:
  // A client that runs free (or as hp) and exits at once may leave its last
  // launches without a marker (the tracker writes it 50 us after a burst):
  // the daemon then reclaims them instead of counting them complete, which
  // is right for a process that exits without synchronising. Tests that
  // count every completion keep such clients at a gate after their last
  // launch (kAfterLast) until the daemon has seen them complete.
  //
  // Gates (CLIENT_GATES, client_app.cpp): a client with gates_ = {i, ...}
  // stops before its launch i (kAfterLast: after its last launch, before
  // its hold and its statistics), prints {"waiting":i} and goes on once the
  // test opens the gate (open_gate): the test decides what has happened
  // before, instead of a sleep that a loaded machine may outlast.
  static constexpr int kAfterLast = -1;

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lithos-e2e-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    sock_ = (dir_ / "lithosd.sock").string();
    config_ = (dir_ / "lithosd.toml").string();
    std::ofstream(config_) << "[daemon]\n"
                              "policy = \"lithos\"\n"
                              "mps = \"off\"\n"
                              "[[tenant]]\nname = \"svc\"\npriority = \"high\"\nquota = 2\n"
                              "[[tenant]]\nname = \"train\"\npriority = \"best-effort\"\n"
                              "[[tenant]]\nname = \"locked\"\npriority = \"best-effort\"\nusers = ["
                           << (::getuid() + 1)
                           << "]\n"
                              "[[tenant]]\nname = \"default\"\npriority = \"best-effort\"\n";
  }
  void TearDown() override {
    for (Proc* p : {&daemon_}) {
      p->signal(SIGKILL);
      p->wait(5);
    }
    // Clients a failed test left (at a gate, say): still our children,
    // not yet waited for.
    for (const pid_t pid : spawned_) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
      }
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void start_daemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {LITHOS_EXE, "daemon",   "--slot-map", slot_map_,     "--config",
                                     config_,    "--socket", sock_,        "--state-dir", (dir_ / "state").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    daemon_ = Proc::spawn(argv, daemon_env_, (dir_ / ("daemon-" + std::to_string(++daemons_) + ".log")).string());
    ASSERT_GT(daemon_.pid, 0);
    const auto t0 = std::chrono::steady_clock::now();
    while (!status().is_object()) {
      ASSERT_LT(since(t0), kDeadlineS) << "lithosd did not come up: " << daemon_.err();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // `lithos status --json`, through the socket; null when no daemon answers.
  json status() const { return lithos::test::lithosd_status(sock_, 5000, static_cast<int>(kDeadlineS * 1000)); }
  json tenant(const json& st, const std::string& name) const {
    for (const json& t : st["tenants"])
      if (t["name"] == name) return t;
    return nullptr;
  }

  Proc client(const std::string& tenant, int launches, int pause_ms, int hold_ms, bool markers_hang = false,
              const std::string& socket = "", int sync_every = 0, int hang_after = -1) {
    // A daemon whose heartbeat is older than the grant timeout is taken for
    // stalled: the clients' launches go on without it. A loaded machine can
    // keep a process off the CPU for a while: the timeout is far beyond
    // that (no test stalls a daemon that long; one that dies closes its
    // sockets, which the clients see at once).
    std::vector<std::string> env = {"LD_PRELOAD=" LITHOS_PRELOAD, "LD_LIBRARY_PATH=" LITHOS_FAKE_DRIVER_DIR,
                                    "LITHOS_LOG=error", "LITHOS_DAEMON=" + (socket.empty() ? sock_ : socket),
                                    "LITHOS_GRANT_TIMEOUT_MS=" + std::to_string(static_cast<int>(kDeadlineS * 1000)),
                                    // Each client's first launch waits for its registration (which
                                    // the client's thread makes), so that every launch is scheduled.
                                    "LITHOS_REGISTER_WAIT_MS=20000",
                                    // Most tests read each launch's set in the launching thread: a
                                    // deferred launch is made in the worker's (deferred.hpp).
                                    std::string("LITHOS_DEFER_LAUNCHES=") + (defer_ ? "1" : "0")};
    if (client_map_) env.emplace_back("LITHOS_SLOT_MAP=" LITHOS_FAKE_MAP);
    if (!tenant.empty()) env.push_back("LITHOS_TENANT=" + tenant);
    if (markers_hang) env.emplace_back("FAKE_MARKERS_HANG=1");
    if (params_) env.emplace_back("CLIENT_PARAMS=1");
    env.insert(env.end(), extra_env_.begin(), extra_env_.end());
    const int n = ++clients_;
    std::map<int, std::string> gates;
    std::string spec;
    for (const int at : gates_) {
      const int i = at == kAfterLast ? launches : at;
      gates[at] = (dir_ / ("gate-" + std::to_string(n) + "-" + std::to_string(i))).string();
      spec += (spec.empty() ? "" : ",") + std::to_string(i) + ":" + gates[at];
    }
    if (!spec.empty()) env.push_back("CLIENT_GATES=" + spec);
    Proc p = Proc::spawn({LITHOS_CLIENT_APP, std::to_string(launches), std::to_string(pause_ms),
                          std::to_string(hold_ms), grid_, std::to_string(sync_every), std::to_string(hang_after)},
                         env, (dir_ / (tenant + "-" + std::to_string(n) + ".out")).string());
    p.gates = std::move(gates);
    EXPECT_GT(p.pid, 0);
    if (p.pid > 0) spawned_.push_back(p.pid);
    return p;
  }
  // Opens gate `at` of client `p` (kAfterLast: the one after its launches).
  static void open_gate(const Proc& p, int at = kAfterLast) {
    const auto g = p.gates.find(at);
    ASSERT_NE(g, p.gates.end()) << "the client has no gate " << at;
    std::ofstream(g->second) << "open\n";
  }
  // Waits until client `p` stands at gate `at`; false after the deadline
  // or when it exited.
  static bool reaches_gate(const Proc& p, int at = kAfterLast) {
    const auto g = p.gates.find(at);
    if (g == p.gates.end()) return false;
    const int i = std::stoi(g->second.substr(g->second.rfind('-') + 1));
    return wait_until(
        [&] {
          for (const json& j : p.lines())
            if (j.contains("waiting") && j["waiting"] == i) return true;
          return false;
        },
        kDeadlineS);
  }

  // Waits until `pred(status)` holds; false after `timeout_s`.
  template <class Pred>
  bool wait_for(Pred pred, double timeout_s = kDeadlineS) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (since(t0) < timeout_s) {
      const json st = status();
      if (st.is_object() && pred(st)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Waits until `pred(status)` holds in two answers in a row: the second is
  // given at a later turn of the daemon's loop than the first, so whatever
  // the daemon publishes to its clients at the end of a turn (allocations,
  // the runs-free flag) is out by then too.
  template <class Pred>
  bool settled(Pred pred) const {
    return wait_for(pred) && wait_for(pred);
  }
  // Client `pid` registered with tenant `name`, which runs free (or not).
  bool runs_free(const json& st, pid_t pid, const std::string& name, bool free) const {
    bool registered = false;
    for (const json& c : st["clients"]) registered = registered || (c["pid"] == pid && c["tenant"] == name);
    return registered && tenant(st, name)["runs_free"] == free;
  }

  // Waits until `pred()` holds; false after `timeout_s`.
  template <class Pred>
  static bool wait_until(Pred pred, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    while (since(t0) < timeout_s) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  static json stats_of(const Proc& p) {
    for (const json& j : p.lines())
      if (j.contains("stats")) return j["stats"];
    return nullptr;
  }
  // The client's synchronisations (SYNC_EVERY), each checked: every launch
  // made before it had reached the (fake) GPU when it returned.
  static int syncs_all_made(const Proc& p) {
    int syncs = 0;
    for (const json& j : p.lines()) {
      if (!j.contains("synced")) continue;
      EXPECT_EQ(j["descriptors"], j["synced"]) << j.dump();
      ++syncs;
    }
    return syncs;
  }
  // The stream operations the fake GPU saw (client_app CLIENT_GRAPH >= 2,
  // CLIENT_STREAM_OPS).
  static std::string ops_of(const Proc& p) {
    for (const json& j : p.lines())
      if (j.contains("ops")) return j["ops"].get<std::string>();
    return "(none)";
  }
  static std::vector<json> launches_of(const Proc& p) {
    std::vector<json> v;
    for (const json& j : p.lines())
      if (j.contains("i")) v.push_back(j);
    return v;
  }
  // The launches that may have written a completion marker of their own: a
  // launch marks its stream itself only when the one before it was 50 us
  // earlier or more, by the library's clock, read inside each launch. The
  // client's clock (t_ns) is read before each launch, so launch i's reading
  // lies between t[i] and t[i + 1] and launch i may have marked only if
  // t[i + 1] - t[i - 1] >= 50 us (40 here), or if it is the first or the
  // last. A preempted client makes more of them; none is left out.
  static int may_mark(const std::vector<json>& launches) {
    int n = 0;
    for (std::size_t i = 0; i < launches.size(); ++i) {
      if (i == 0 || i + 1 == launches.size()) {
        ++n;
        continue;
      }
      n += launches[i + 1]["t_ns"].get<std::uint64_t>() - launches[i - 1]["t_ns"].get<std::uint64_t>() >= 40'000;
    }
    return n;
  }
  // The number a client printed as {"<key>":N} last; -1 when it printed none.
  static int printed(const Proc& p, const char* key) {
    int v = -1;
    for (const json& j : p.lines())
      if (j.contains(key)) v = j[key].get<int>();
    return v;
  }

  fs::path dir_;
  bool defer_ = false;                      // clients queue best-effort launches (LITHOS_DEFER_LAUNCHES)
  bool params_ = false;                     // clients pass a parameter per launch (CLIENT_PARAMS)
  bool client_map_ = true;                  // clients get LITHOS_SLOT_MAP (the fake GPU's map)
  std::string grid_ = "4096";               // the next clients' grid width (client_app GRID)
  std::vector<std::string> extra_env_;      // more NAME=VALUE for the next clients
  std::vector<int> gates_;                  // the next clients' gates (launch indices, kAfterLast)
  std::vector<pid_t> spawned_;              // every client, killed at the end if still running
  std::vector<std::string> daemon_env_;     // more NAME=VALUE for the next daemon
  std::string slot_map_ = LITHOS_FAKE_MAP;  // the next daemon's GPU
  // The fake driver's two GPUs (FAKE_CUDA_DEVICES=2): LITHOS_FAKE_MAP names device 0.
  static constexpr const char* kGpu0 = "GPU-00112233-4455-6677-8899-aabbccddeeff";
  static constexpr const char* kGpu1 = "GPU-00112233-4455-6677-8899-aabbccddeefe";
  // A slot map of the fake driver's device 1 (LITHOS_FAKE_MAP with the
  // other UUID), written under dir_; "" when that cannot be done.
  std::string device1_map() const {
    std::ifstream in(LITHOS_FAKE_MAP);
    std::stringstream text;
    text << in.rdbuf();
    std::string map = text.str();
    const auto at = map.find(kGpu0);
    if (at == std::string::npos) return "";
    map.replace(at, std::string(kGpu0).size(), kGpu1);
    const std::string path = (dir_ / "device1.slot-map").string();
    std::ofstream(path) << map;
    return path;
  }
  // One lithosd per GPU of the fake driver (devices 0 and 1), each at its
  // GPU's path of `pattern` ("%g"); stopped and `dir` removed when the
  // returned object goes. sock_ is left at device 0's socket.
  struct GpuDaemons {
    std::vector<Proc> procs;
    fs::path dir;
    GpuDaemons() = default;
    GpuDaemons(const GpuDaemons&) = delete;
    GpuDaemons& operator=(const GpuDaemons&) = delete;
    ~GpuDaemons() {
      for (Proc& p : procs) {
        p.signal(SIGKILL);
        p.wait(5);
      }
      if (!dir.empty()) fs::remove_all(dir);
    }
  };
  // A short directory for the sockets: a socket path holds 107 bytes, a
  // GPU's UUID 40 of them.
  static fs::path socket_dir() {
    char tmpl[] = "/tmp/lgpuXXXXXX";
    return ::mkdtemp(tmpl) != nullptr ? fs::path(tmpl) : fs::path();
  }
  static std::string gpu_socket(const fs::path& dir, const char* gpu) {
    return (dir / (std::string("lithosd-") + gpu + ".sock")).string();
  }
  // Starts them (at dir/lithosd-%g.sock; `extra`: more flags) and waits
  // until both answer.
  void start_gpu_daemons(GpuDaemons* d, const std::vector<std::string>& extra = {}) {
    const std::string map1 = device1_map();
    ASSERT_FALSE(map1.empty());
    d->dir = socket_dir();
    ASSERT_FALSE(d->dir.empty());
    const std::string pattern = (d->dir / "lithosd-%g.sock").string();
    for (const std::string& map : {std::string(LITHOS_FAKE_MAP), map1}) {
      std::vector<std::string> argv = {LITHOS_EXE,
                                       "daemon",
                                       "--slot-map",
                                       map,
                                       "--config",
                                       config_,
                                       "--socket",
                                       pattern,
                                       "--state-dir",
                                       (dir_ / "state-%g").string(),
                                       "--best-effort-runs-free",
                                       "false"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      d->procs.push_back(
          Proc::spawn(argv, {}, (dir_ / ("daemon-gpu" + std::to_string(d->procs.size()) + ".log")).string()));
      ASSERT_GT(d->procs.back().pid, 0);
    }
    for (const char* gpu : {kGpu1, kGpu0}) {
      sock_ = gpu_socket(d->dir, gpu);
      ASSERT_TRUE(wait_until([&] { return status().is_object(); }, kDeadlineS))
          << sock_ << ": " << d->procs[0].err() << d->procs[1].err();
    }
  }
  std::string sock_, config_;
  Proc daemon_;
  int daemons_ = 0, clients_ = 0;
};

// No daemon: the program runs as without lithos (pass-through), says so once.
TEST_F(DaemonE2E, NoDaemonRunsPassThrough) {
  Proc c = client("train", 5, 0, 0);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const auto l = launches_of(c);
  ASSERT_EQ(l.size(), 5U);
  for (const json& j : l) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], "all");
  }
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["state"], "unreachable");
  EXPECT_EQ(s["daemon"]["registered"], false);
}

// A best-effort client alone: every launch waits for its grant and gets the
// whole GPU (nothing is owed to anyone); the daemon sees every atom end.
// With running free switched off, a best-effort tenant's every launch waits
// for its grant, even with no high-priority tenant to protect.
TEST_F(DaemonE2E, BestEffortAloneIsGrantedTheGpu) {
  start_daemon({"--best-effort-runs-free", "false"});
  Proc c = client("train", 20, 0, 0);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["class"], "best-effort");
  EXPECT_EQ(s["daemon"]["grants"], 20);
  EXPECT_EQ(s["daemon"]["fallbacks"], 0);
  for (const json& j : launches_of(c)) EXPECT_EQ(j["tpcs"], "all");
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 20; }));
  const json st = status();
  EXPECT_EQ(st["counters"]["grants"], 20);
  EXPECT_EQ(st["counters"]["clients_gone"], 1);
}

// A client that forks a child which exits normally (Python's os.fork() then
// sys.exit(), a library that daemonises) goes on being scheduled: the child
// never touches the parent's channel or socket, and its exit handlers
// neither unregister the parent nor report its numbers. With deferred
// launches too (the child's queue starts empty).
TEST_F(DaemonE2E, AForkedChildLeavesItsParentScheduled) {
  start_daemon({"--best-effort-runs-free", "false"});
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "deferred launches" : "launches in place");
    defer_ = defer;
    extra_env_ = {"CLIENT_FORK_AT=4"};  // deferred launches may still be queued then
    const json before = status()["counters"];
    Proc c = client("train", 20, 1, 0, false, "", /*sync_every=*/10);
    ASSERT_EQ(c.wait(), 0) << c.err();
    bool forked = false;
    for (const json& j : c.lines()) forked = forked || (j.contains("forked") && j["forked"] == 4);
    EXPECT_TRUE(forked) << c.err();
    for (const json& j : launches_of(c)) EXPECT_EQ(j["rc"], 0);
    const json s = stats_of(c);
    ASSERT_TRUE(s.is_object());
    EXPECT_EQ(s["daemon"]["state"], "connected") << s.dump();
    EXPECT_EQ(s["daemon"]["grants"], 20) << s.dump();
    EXPECT_EQ(s["daemon"]["fallbacks"], 0) << s.dump();
    EXPECT_EQ(s["daemon"]["reconnects"], 0) << s.dump();
    // One registration, gone once (the parent's exit), nothing dropped or reclaimed.
    ASSERT_TRUE(wait_for([&](const json& st) {
      return st["counters"]["clients_gone"].get<int>() == before["clients_gone"].get<int>() + 1;
    }));
    const json after = status()["counters"];
    EXPECT_EQ(after["clients_accepted"].get<int>(), before["clients_accepted"].get<int>() + 1);
    EXPECT_EQ(after["clients_dropped"], before["clients_dropped"]);
    EXPECT_EQ(after["reclaimed_atoms"], before["reclaimed_atoms"]);
    EXPECT_EQ(after["grants"].get<int>(), before["grants"].get<int>() + 20);
  }
}

// A process that sees two GPUs, with a socket that names no GPU: only its
// launches on the GPU that lithosd schedules (the fake driver's device 0,
// whose UUID the daemon's slot map names) go through the daemon. Device 1's
// client meets a daemon of another GPU and leaves: its launches are not
// granted, not reported, not masked, and a synchronisation there reports
// nothing.
TEST_F(DaemonE2E, LaunchesOnAnotherGpuAreNotScheduled) {
  start_daemon({"--best-effort-runs-free", "false"});
  const std::string gpu0 = kGpu0;
  EXPECT_EQ(status()["device"]["uuid"], gpu0);

  extra_env_ = {"FAKE_CUDA_DEVICES=2", "FAKE_CUDA_CTX_DEVICE=1"};
  Proc be1 = client("train", 10, 0, 0, false, "", /*sync_every=*/5);
  ASSERT_EQ(be1.wait(), 0) << be1.err();
  for (const json& j : launches_of(be1)) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], "all");
  }
  json s = stats_of(be1);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["state"], "other_gpu") << s.dump();
  EXPECT_EQ(s["daemon"]["registered"], false) << s.dump();
  EXPECT_EQ(s["daemon"]["device"], 1);
  EXPECT_EQ(s["daemon"]["gpu"], gpu0);
  EXPECT_EQ(s["daemon"]["launches_scheduled"], "none");
  EXPECT_EQ(s["daemon"]["submits"], 0) << s.dump();
  EXPECT_EQ(s["daemon"]["grants"], 0) << s.dump();
  EXPECT_EQ(s["daemon"]["fallbacks"], 0) << s.dump();
  EXPECT_EQ(s["daemon"]["syncs"], 0) << s.dump();

  Proc hp1 = client("svc", 10, 1, 0);
  ASSERT_EQ(hp1.wait(), 0) << hp1.err();
  s = stats_of(hp1);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["state"], "other_gpu") << s.dump();
  EXPECT_EQ(s["daemon"]["reported"], 0) << s.dump();
  for (const json& j : launches_of(hp1)) EXPECT_EQ(j["tpcs"], "all");  // not the tenant's allocation

  // The same programs on device 0: scheduled as always.
  extra_env_ = {"FAKE_CUDA_DEVICES=2"};
  Proc be0 = client("train", 10, 0, 0);
  ASSERT_EQ(be0.wait(), 0) << be0.err();
  s = stats_of(be0);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["grants"], 10) << s.dump();
  Proc hp0 = client("svc", 10, 1, 0);
  ASSERT_EQ(hp0.wait(), 0) << hp0.err();
  EXPECT_EQ(stats_of(hp0)["daemon"]["reported"], 10);

  const json st = status();
  EXPECT_EQ(st["counters"]["grants"], 10);
  EXPECT_TRUE(wait_for([](const json& x) { return x["engine"]["launches"] == 20; })) << status().dump();
  // Device 1's clients came and left at once, unscheduled.
  EXPECT_EQ(st["counters"]["clients_accepted"], 4);
}

// One process on two GPUs, each with its lithosd (a socket path with %g):
// every launch is decided by the daemon of its own GPU. A best-effort
// process's launches alternate between the GPUs: each daemon grants those on
// its GPU and no other. A high-priority process's launches take its
// allocation on each GPU (every TPC but another high-priority tenant's quota),
// masked with that GPU's slot map, and are reported to that GPU's daemon. A
// synchronisation of a stream of the other GPU (with device 0's context
// current) reaches the daemon that knows the stream.
TEST_F(DaemonE2E, AProcessOnTwoGpusIsScheduledOnEach) {
  // A second high-priority tenant owns a TPC: svc's launches may not use it.
  std::ofstream(config_, std::ios::app) << "[[tenant]]\nname = \"other\"\npriority = \"high\"\nquota = 1\n";
  GpuDaemons daemons;
  ASSERT_NO_FATAL_FAILURE(start_gpu_daemons(&daemons));
  const std::string pattern = (daemons.dir / "lithosd-%g.sock").string();
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "deferred launches" : "launches in place");
    defer_ = defer;
    extra_env_ = {"FAKE_CUDA_DEVICES=2", "CLIENT_DEVICES=2", "CLIENT_SYNC_ALL=1"};
    std::map<std::string, json> before;
    for (const char* gpu : {kGpu0, kGpu1}) {
      sock_ = gpu_socket(daemons.dir, gpu);
      before[gpu] = status()["counters"];
    }
    Proc be = client("train", 10, 0, 0, false, pattern);
    ASSERT_EQ(be.wait(), 0) << be.err();
    const auto l = launches_of(be);
    ASSERT_EQ(l.size(), 10U);
    for (const json& j : l) EXPECT_EQ(j["rc"], 0) << j.dump();
    json s = stats_of(be);
    ASSERT_TRUE(s.is_object());
    ASSERT_TRUE(s["daemon"]["gpus"].is_array()) << s.dump();
    ASSERT_EQ(s["daemon"]["gpus"].size(), 2U) << s.dump();
    EXPECT_EQ(s["daemon"]["device"], 0);  // the first launch's GPU
    for (const json& g : s["daemon"]["gpus"]) {
      const int dev = g["device"].get<int>();
      EXPECT_EQ(g["state"], "connected") << g.dump();
      EXPECT_EQ(g["gpu"], dev == 0 ? kGpu0 : kGpu1) << g.dump();
      EXPECT_EQ(g["class"], "best-effort");
      EXPECT_EQ(g["grants"], 5) << g.dump();
      EXPECT_EQ(g["fallbacks"], 0) << g.dump();
      EXPECT_EQ(g["syncs"], 1) << g.dump();  // device 1's stream too, synchronised from device 0's context
      EXPECT_FALSE(g.contains("deferred")) << "process-wide: once, at the top";
    }
    EXPECT_TRUE(s["daemon"]["deferred"].is_object()) << s.dump();
    for (const char* gpu : {kGpu0, kGpu1}) {
      sock_ = gpu_socket(daemons.dir, gpu);
      EXPECT_TRUE(wait_for([&](const json& st) {
        return st["counters"]["grants"].get<int>() == before[gpu]["grants"].get<int>() + 5 &&
               st["counters"]["clients_gone"].get<int>() == before[gpu]["clients_gone"].get<int>() + 1;
      })) << gpu
          << ": " << status()["counters"].dump();
    }
  }

  // High priority (svc, quota 2): its allocation on each GPU, reported
  // there. Device 1's slot map comes from the calibration cache (the
  // configured one is device 0's).
  const fs::path cache = dir_ / "cache";
  fs::create_directories(cache);
  fs::copy_file(device1_map(), lithos::gpu::slot_map_cache_path(cache.string(), kGpu1, "0.0.0"));
  defer_ = false;
  extra_env_ = {"FAKE_CUDA_DEVICES=2", "CLIENT_DEVICES=2", "LITHOS_CACHE_DIR=" + cache.string()};
  std::map<std::string, int> engine_before;
  std::map<int, std::string> allowed;  // by device: every TPC but other's, as the client prints a mask
  for (const char* gpu : {kGpu0, kGpu1}) {
    sock_ = gpu_socket(daemons.dir, gpu);
    const json st = status();
    engine_before[gpu] = st["engine"]["launches"].get<int>();
    const auto other = TpcSet::parse(tenant(st, "other")["owned"].get<std::string>());
    ASSERT_TRUE(other.is_ok() && other->count() == 1) << st.dump();
    std::string& text = allowed[gpu == std::string(kGpu0) ? 0 : 1];
    for (int t = 0; t < 4; ++t)
      if (!other->test(t)) text += (text.empty() ? "" : ",") + std::to_string(t);
  }
  Proc hp = client("svc", 10, 1, 0, false, pattern);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  for (const json& j : launches_of(hp)) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], allowed[j["dev"].get<int>()]) << j.dump();
  }
  const json s = stats_of(hp);
  ASSERT_EQ(s["daemon"]["gpus"].size(), 2U) << s.dump();
  for (const json& g : s["daemon"]["gpus"]) {
    EXPECT_EQ(g["class"], "high") << g.dump();
    EXPECT_EQ(g["reported"], 5) << g.dump();
  }
  for (const char* gpu : {kGpu0, kGpu1}) {
    sock_ = gpu_socket(daemons.dir, gpu);
    EXPECT_TRUE(wait_for([&](const json& st) { return st["engine"]["launches"] == engine_before[gpu] + 5; }))
        << gpu << ": " << status().dump();
  }

  // The same process with no slot map at all (no LITHOS_SLOT_MAP, an empty
  // cache): each GPU's launches are masked with the map its daemon told it.
  client_map_ = false;
  extra_env_ = {"FAKE_CUDA_DEVICES=2", "CLIENT_DEVICES=2", "LITHOS_CACHE_DIR=" + (dir_ / "empty-cache").string()};
  Proc bare = client("svc", 10, 1, 0, false, pattern);
  ASSERT_EQ(bare.wait(), 0) << bare.err();
  for (const json& j : launches_of(bare)) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], allowed[j["dev"].get<int>()]) << j.dump();
  }
}

// A client with no slot map of its own (no LITHOS_SLOT_MAP, nothing in its
// calibration cache: a job started without `lithos run`, another user, a
// container) masks its launches with the map lithosd told it at
// registration (ipc::Welcome::slot_map). Before, they ran on the whole GPU,
// other tenants' quotas included.
TEST_F(DaemonE2E, AClientWithoutASlotMapMasksWithTheDaemons) {
  std::ofstream(config_, std::ios::app) << "[[tenant]]\nname = \"other\"\npriority = \"high\"\nquota = 1\n";
  start_daemon({"--best-effort-runs-free", "false"});
  const json st = status();
  const auto other = TpcSet::parse(tenant(st, "other")["owned"].get<std::string>());
  ASSERT_TRUE(other.is_ok() && other->count() == 1) << st.dump();
  std::string allowed;  // every TPC but other's, as the client prints a mask
  for (int t = 0; t < 4; ++t)
    if (!other->test(t)) allowed += (allowed.empty() ? "" : ",") + std::to_string(t);
  client_map_ = false;
  extra_env_ = {"LITHOS_CACHE_DIR=" + (dir_ / "empty-cache").string()};
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "deferred launches" : "launches in place");
    defer_ = defer;
    Proc hp = client("svc", 6, 1, 0);
    ASSERT_EQ(hp.wait(), 0) << hp.err();
    const auto l = launches_of(hp);
    ASSERT_EQ(l.size(), 6U);
    for (const json& j : l) {
      EXPECT_EQ(j["rc"], 0);
      EXPECT_EQ(j["tpcs"], allowed) << j.dump();
    }
    const json s = stats_of(hp);
    ASSERT_TRUE(s.is_object());
    EXPECT_EQ(s["daemon"]["class"], "high") << s.dump();
    EXPECT_EQ(s["not_applied"].value("other_device", 0), 0) << s.dump();
  }
}

// A daemon that schedules a GPU this process cannot see (another
// CUDA_VISIBLE_DEVICES; here a slot map naming the fake driver's device 1
// while the process sees device 0 only): the client leaves at once, never
// tries again, and its launches run as if no daemon were configured.
TEST_F(DaemonE2E, AProcessThatCannotSeeTheDaemonsGpuRunsWithoutIt) {
  slot_map_ = device1_map();
  ASSERT_FALSE(slot_map_.empty());
  start_daemon({"--best-effort-runs-free", "false"});
  EXPECT_EQ(status()["device"]["uuid"], kGpu1);

  Proc be = client("train", 10, 2, 0);
  ASSERT_EQ(be.wait(), 0) << be.err();
  for (const json& j : launches_of(be)) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], "all");
  }
  const json s = stats_of(be);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["state"], "other_gpu") << s.dump();
  EXPECT_EQ(s["daemon"]["registered"], false);
  EXPECT_EQ(s["daemon"]["gpu"], kGpu1);
  EXPECT_EQ(s["daemon"]["launches_scheduled"], "none");
  EXPECT_EQ(s["daemon"]["submits"], 0);
  EXPECT_EQ(s["daemon"]["fallbacks"], 0);
  // It came once (10 launches 2 ms apart would have retried after a failure
  // each second otherwise) and left; nothing was granted.
  ASSERT_TRUE(wait_for([](const json& x) { return x["counters"]["clients_gone"] == 1; }));
  const json st = status();
  EXPECT_EQ(st["counters"]["clients_accepted"], 1);
  EXPECT_EQ(st["counters"]["grants"], 0);
}

// One lithosd per GPU from one setting: with "%g" in the socket path each
// daemon listens at its GPU's path, and each process registers with the
// daemon of the GPU of its first launch. `lithos status` with the pattern
// asks every daemon that matches.
TEST_F(DaemonE2E, OneSocketPathGivesEveryGpuItsDaemon) {
  GpuDaemons daemons;
  ASSERT_NO_FATAL_FAILURE(start_gpu_daemons(&daemons));
  const fs::path sockets = daemons.dir;
  const std::string pattern = (sockets / "lithosd-%g.sock").string();
  const std::string sock0 = gpu_socket(sockets, kGpu0);
  const std::string sock1 = gpu_socket(sockets, kGpu1);

  extra_env_ = {"FAKE_CUDA_DEVICES=2", "FAKE_CUDA_CTX_DEVICE=1"};
  Proc on1 = client("train", 6, 0, 0, false, pattern);
  extra_env_ = {"FAKE_CUDA_DEVICES=2", "FAKE_CUDA_CTX_DEVICE=0"};
  Proc on0 = client("train", 4, 0, 0, false, pattern);
  ASSERT_EQ(on1.wait(), 0) << on1.err();
  ASSERT_EQ(on0.wait(), 0) << on0.err();
  EXPECT_EQ(stats_of(on1)["daemon"]["gpu"], kGpu1);
  EXPECT_EQ(stats_of(on1)["daemon"]["grants"], 6);
  EXPECT_EQ(stats_of(on0)["daemon"]["gpu"], kGpu0);
  EXPECT_EQ(stats_of(on0)["daemon"]["grants"], 4);
  // Each daemon keeps its predictor cache in its own state directory.
  for (const auto& [sock, gpu, grants] : {std::tuple{sock0, kGpu0, 4}, std::tuple{sock1, kGpu1, 6}}) {
    sock_ = sock;
    const json st = status();
    EXPECT_EQ(st["counters"]["grants"], grants) << gpu;
    EXPECT_EQ(st["predictor"]["cache"]["path"].get<std::string>().find((dir_ / (std::string("state-") + gpu)).string()),
              0U)
        << st["predictor"].dump();
  }

  // Every daemon of the pattern, in path order (device 1's UUID sorts first).
  Proc st = Proc::spawn({LITHOS_EXE, "status", "--socket", pattern, "--json"}, {}, (dir_ / "status-all.txt").string());
  ASSERT_EQ(st.wait(), 0) << st.err();
  const std::vector<json> lines = st.lines();
  ASSERT_EQ(lines.size(), 2U) << read_all(st.out);
  EXPECT_EQ(lines[0]["device"]["uuid"], kGpu1);
  EXPECT_EQ(lines[1]["device"]["uuid"], kGpu0);
  Proc table = Proc::spawn({LITHOS_EXE, "status", "--socket", pattern}, {}, (dir_ / "status-table.txt").string());
  ASSERT_EQ(table.wait(), 0) << table.err();
  const std::string text = read_all(table.out);
  EXPECT_NE(text.find(std::string("device ") + kGpu0), std::string::npos) << text;
  EXPECT_NE(text.find(std::string("device ") + kGpu1), std::string::npos) << text;
  // Prometheus text is one daemon's: several matches are a usage error.
  Proc prom =
      Proc::spawn({LITHOS_EXE, "status", "--socket", pattern, "--prometheus"}, {}, (dir_ / "status-prom.txt").string());
  EXPECT_EQ(prom.wait(), 2);
  EXPECT_NE(prom.err().find("2 lithosd sockets match"), std::string::npos) << prom.err();
  // No daemon at all for the pattern: said, exit 1.
  Proc none = Proc::spawn({LITHOS_EXE, "status", "--socket", (sockets / "none-%g.sock").string()}, {},
                          (dir_ / "status-none.txt").string());
  EXPECT_EQ(none.wait(), 1);
  EXPECT_NE(none.err().find("no lithosd socket matches"), std::string::npos) << none.err();

  // A daemon that does not know its GPU cannot take the pattern.
  Proc blind = Proc::spawn({LITHOS_EXE, "daemon", "--no-gpu", "--config", config_, "--socket", pattern}, {},
                           (dir_ / "daemon-blind.log").string());
  EXPECT_EQ(blind.wait(), 2);
  EXPECT_NE(blind.err().find("names the GPU (%g)"), std::string::npos) << blind.err();
}

// One lithosd process for every GPU of a node (`--device all`): an Engine, a
// socket and a state folder per GPU, one MPS setting and one process; SIGTERM
// stops every GPU's loop and removes every socket. The GPUs are those of the
// fake H100 driver (tests/gpu), which calibrates like the real one.
TEST_F(DaemonE2E, OneProcessServesEveryGpu) {
  char tmpl[] = "/tmp/lnodeXXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path sockets = tmpl;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{sockets};
  const std::string pattern = (sockets / "lithosd-%g.sock").string();
  const std::vector<std::string> env = {"LITHOS_CUDA_LIBRARY=" LITHOS_FAKE_H100, "FAKE_GPU_DEVICES=2",
                                        "LITHOS_CACHE_DIR=" + (dir_ / "cache").string()};
  Proc d = Proc::spawn({LITHOS_EXE, "daemon", "--device", "all", "--config", config_, "--socket", pattern,
                        "--state-dir", (dir_ / "state").string()},
                       env, (dir_ / "daemon-node.log").string());
  ASSERT_GT(d.pid, 0);
  const std::vector<std::string> gpus = {"GPU-10111213-1415-1617-1819-1a1b1c1d1e1f",
                                         "GPU-10111213-1415-1617-1819-1a1b1c1d1e20"};
  for (const std::string& gpu : gpus) {
    sock_ = (sockets / ("lithosd-" + gpu + ".sock")).string();
    ASSERT_TRUE(wait_until([&] { return status().is_object(); }, kDeadlineS)) << gpu << ": " << d.err();
    const json st = status();
    EXPECT_EQ(st["device"]["uuid"], gpu);
    EXPECT_EQ(st["device"]["tpcs"], 66);
    EXPECT_EQ(st["pid"], d.pid) << "one process";
    // A state folder per GPU under the one given.
    EXPECT_EQ(st["predictor"]["cache"]["path"].get<std::string>().find((dir_ / "state" / gpu).string()), 0U)
        << st["predictor"].dump();
  }
  Proc all = Proc::spawn({LITHOS_EXE, "status", "--socket", pattern, "--json"}, {}, (dir_ / "node-status").string());
  ASSERT_EQ(all.wait(), 0) << all.err();
  EXPECT_EQ(all.lines().size(), 2U);

  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(), 0) << d.err();
  for (const std::string& gpu : gpus) EXPECT_FALSE(fs::exists(sockets / ("lithosd-" + gpu + ".sock"))) << gpu;
  EXPECT_NE(d.err().find("stopping " + gpus[1]), std::string::npos) << d.err();

  // Several GPUs need a socket each.
  Proc one = Proc::spawn(
      {LITHOS_EXE, "daemon", "--device", "0,1", "--config", config_, "--socket", (sockets / "one.sock").string()}, env,
      (dir_ / "daemon-one-socket.log").string());
  EXPECT_EQ(one.wait(), 2);
  EXPECT_NE(one.err().find("must hold %g"), std::string::npos) << one.err();
  // A GPU the driver does not have: said, exit 1.
  Proc missing = Proc::spawn({LITHOS_EXE, "daemon", "--device", "0,5", "--config", config_, "--socket", pattern}, env,
                             (dir_ / "daemon-missing.log").string());
  EXPECT_EQ(missing.wait(), 1);
  EXPECT_NE(missing.err().find("no slot map for GPU 5"), std::string::npos) << missing.err();
}

// A high-priority client's launches never wait: they are reported after the
// fact and accounted; the GPU's markers close them.
TEST_F(DaemonE2E, HighPriorityLaunchesAreAccounted) {
  start_daemon();
  Proc c = client("svc", 30, 1, 0);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["class"], "high");
  EXPECT_EQ(s["daemon"]["reported"], 30);
  EXPECT_EQ(s["daemon"]["grants"], 0);
  for (const json& j : launches_of(c)) EXPECT_EQ(j["rc"], 0);
  EXPECT_TRUE(wait_for(
      [](const json& st) { return st["counters"]["running_launches"] == 30 && st["engine"]["launches"] == 30; }));
}

// A high-priority service's launches are timed one by one on a sample:
// the first LITHOS_HP_SAMPLE_FIRST of its kernel, each with a timing event
// before and after it; the client's thread sends each run time (the fake
// GPU's FAKE_EVENT_US) and lithosd's predictor learns it, counted apart
// from the burst-shared completions.
TEST_F(DaemonE2E, HighPriorityLaunchesAreTimedOneByOne) {
  start_daemon();
  extra_env_ = {"FAKE_EVENT_US=300", "LITHOS_HP_SAMPLE_FIRST=5", "LITHOS_HP_SAMPLE_EVERY=0"};
  gates_ = {kAfterLast};  // alive until its samples are in
  Proc c = client("svc", 30, 0, 0);
  gates_.clear();
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["hp_samples"] == 5; }));
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json t = stats_of(c)["daemon"]["timing"];
  EXPECT_EQ(t["timed"], 5) << t.dump();
  EXPECT_EQ(t["sent"], 5) << t.dump();
  EXPECT_EQ(t["failed"], 0) << t.dump();
  const json st = status();
  EXPECT_EQ(st["counters"]["hp_samples_unmatched"], 0);
  const json& ht = st["predictor"]["high_timed"];
  EXPECT_EQ(ht["samples"], 5) << ht.dump();
  EXPECT_NEAR(ht["mean_sample_us"].get<double>(), 300.0, 0.5) << ht.dump();
  // The status table and the metrics say it too.
  Proc human = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_}, {}, (dir_ / "status-timed.txt").string());
  ASSERT_EQ(human.wait(), 0) << human.err();
  const std::string text = read_all(human.out);
  EXPECT_NE(text.find("predictor (high, timed launches): 5 samples (mean 300.0 us)"), std::string::npos) << text;
  Proc prom = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus"}, {},
                          (dir_ / "status-timed-prom.txt").string());
  ASSERT_EQ(prom.wait(), 0) << prom.err();
  EXPECT_NE(read_all(prom.out).find("\nlithos_predictor_hp_samples_total 5\n"), std::string::npos)
      << read_all(prom.out);
}

// The bound on timing: the first FIRST launches of a kernel, then one in
// EVERY; and never more than PER_S in one second of the client's clock.
TEST_F(DaemonE2E, TimingHighPriorityLaunchesIsBounded) {
  start_daemon();
  extra_env_ = {"LITHOS_HP_SAMPLE_FIRST=3", "LITHOS_HP_SAMPLE_EVERY=10"};
  Proc a = client("svc", 40, 0, 0);
  ASSERT_EQ(a.wait(), 0) << a.err();
  EXPECT_EQ(stats_of(a)["daemon"]["timing"]["timed"], 6);  // launches 1, 2, 3, 13, 23, 33
  extra_env_ = {"LITHOS_HP_SAMPLE_FIRST=1000", "LITHOS_HP_SAMPLE_PER_S=4"};
  Proc b = client("svc", 40, 0, 0);
  ASSERT_EQ(b.wait(), 0) << b.err();
  const json t = stats_of(b)["daemon"]["timing"];
  const auto l = launches_of(b);
  ASSERT_EQ(l.size(), 40U);
  // Seconds of CLOCK_MONOTONIC the launches spanned (the cap's windows).
  const std::uint64_t windows = l.back()["t_ns"].get<std::uint64_t>() / 1'000'000'000ULL -
                                l.front()["t_ns"].get<std::uint64_t>() / 1'000'000'000ULL + 1;
  EXPECT_LE(t["timed"].get<std::uint64_t>(), 4 * (windows + 1)) << t.dump();
  EXPECT_GE(t["timed"].get<std::uint64_t>(), 1U) << t.dump();
  EXPECT_EQ(t["timed"].get<std::uint64_t>() + t["capped"].get<std::uint64_t>(), 40U) << t.dump();
}

// A launch into a stream being captured is never timed: no event is
// recorded while the capture runs (it would become a node of the graph).
TEST_F(DaemonE2E, CapturedHighPriorityLaunchesAreNeverTimed) {
  start_daemon();
  extra_env_ = {"CLIENT_CAPTURE=1", "CLIENT_CAPTURE_AFTER=2", "LITHOS_HP_SAMPLE_FIRST=1000"};
  Proc hp = client("svc", 6, 0, 0);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  EXPECT_EQ(printed(hp, "captured_event_records"), 0);
  const json t = stats_of(hp)["daemon"]["timing"];
  EXPECT_EQ(t["timed"], 2) << t.dump();  // the two launches before the capture
  EXPECT_EQ(t["captured"], 4) << t.dump();
}

// A service with pauses_best_effort = "auto": its setting and how its
// automatic pause stands are in `lithos status` (JSON and table), and its
// launches beside a trainer's still go out and are accounted.
TEST_F(DaemonE2E, StatusShowsAnAutomaticPause) {
  std::string cfg = read_all(config_);
  cfg.replace(cfg.find("quota = 2\n"), 10, "quota = 2\npauses_best_effort = \"auto\"\n");
  std::ofstream(config_) << cfg;
  start_daemon();
  gates_ = {kAfterLast};  // the service stays until the trainer is done
  Proc svc = client("svc", 30, 1, 0);
  gates_.clear();
  Proc train = client("train", 30, 1, 0);
  ASSERT_EQ(train.wait(), 0) << train.err();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  EXPECT_EQ(stats_of(svc)["daemon"]["reported"], 30);
  const json t = tenant(status(), "svc");
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["pauses_best_effort"], "auto");
  ASSERT_TRUE(t.contains("pause")) << t.dump();
  const std::string phase = t["pause"]["phase"].get<std::string>();
  EXPECT_TRUE(phase == "sharing" || phase == "probing" || phase == "paused") << phase;
  EXPECT_TRUE(t["pause"].contains("verdicts")) << t.dump();
  EXPECT_FALSE(tenant(status(), "train").contains("pause"));
  Proc table = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_}, {}, (dir_ / "status-table.txt").string());
  ASSERT_EQ(table.wait(), 0) << table.err();
  EXPECT_NE(read_all(table.out).find("svc pauses best effort (auto): "), std::string::npos) << read_all(table.out);
}

// Whether each client's contexts are MPS clients, as its driver says
// (CU_DEVICE_ATTRIBUTE_MPS_ENABLED; the fake's FAKE_CUDA_MPS=1): a process
// that the node's MPS does not serve (measured on the H100: another uid's,
// beside root's clients) time-slices with the MPS clients, and `lithos
// status` says so, in JSON and in the table.
TEST_F(DaemonE2E, AClientOutsideMpsBesideMpsClientsIsShown) {
  start_daemon();
  gates_ = {kAfterLast};  // both stay registered until the test has looked
  extra_env_ = {"FAKE_CUDA_MPS=1"};
  Proc inside = client("svc", 4, 0, 0);
  extra_env_.clear();
  Proc outside = client("train", 4, 0, 0);
  gates_.clear();
  json seen;
  EXPECT_TRUE(wait_for([&](const json& st) {
    if (st["clients"].size() != 2 || st["warnings"].empty()) return false;
    seen = st;
    return true;
  })) << status().dump();
  ASSERT_TRUE(seen.is_object());
  for (const json& c : seen["clients"]) {
    EXPECT_EQ(c["mps"], c["tenant"] == "svc") << c.dump();
  }
  ASSERT_EQ(seen["warnings"].size(), 1U) << seen["warnings"].dump();
  const std::string w = seen["warnings"][0].get<std::string>();
  EXPECT_NE(w.find("tenant train) runs outside MPS beside 1 MPS client(s)"), std::string::npos) << w;
  Proc table = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_}, {}, (dir_ / "status-mps.txt").string());
  ASSERT_EQ(table.wait(), 0) << table.err();
  const std::string text = read_all(table.out);
  EXPECT_NE(text.find("warning: client "), std::string::npos) << text;
  EXPECT_NE(text.find(" MPS "), std::string::npos) << text;
  open_gate(inside);
  open_gate(outside);
  ASSERT_EQ(inside.wait(), 0) << inside.err();
  ASSERT_EQ(outside.wait(), 0) << outside.err();
  EXPECT_TRUE(wait_for([](const json& st) { return st["clients"].empty() && st["warnings"].empty(); }));
  EXPECT_NE(daemon_.err().find("runs outside MPS beside"), std::string::npos) << daemon_.err();
}

// A high-priority client's tracker (the thread that closes a burst of
// launches with a completion marker) naps while its streams are quiet, and
// the launch that leaves a stream without a marker wakes it: bursts of
// twenty launches 30 ms apart go on until one has woken it (tracker_wakes;
// how soon the tracker naps after a burst depends on the machine's load,
// so not every pause need show it), and every burst is still closed, so the
// daemon sees all of the service's work end. How often an idle client's
// threads wake (about 1000 times a second rather than ~5000) is measured by
// scripts/daemon/idle_cpu.py.
TEST_F(DaemonE2E, AnIdleClientsTrackerNapsAndABurstWakesIt) {
  start_daemon();
  extra_env_ = {"CLIENT_BURST=20", "CLIENT_UNTIL=tracker_wakes"};
  gates_ = {kAfterLast};
  Proc c = client("svc", 20 * 1000, 30, 0);  // at most a thousand bursts
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  const int launched = static_cast<int>(launches_of(c).size());
  EXPECT_LT(launched, 20 * 1000) << "no burst ever woke the tracker";
  EXPECT_EQ(launched % 20, 0);
  EXPECT_TRUE(wait_for([&](const json& st) { return st["counters"]["completions"] == launched; }))
      << status()["counters"].dump();
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["reported"], launched);
  EXPECT_GE(s["daemon"]["tracker_wakes"].get<int>(), 1) << s["daemon"].dump();
}

// A high-priority service that launches CUDA graphs back to back pays the
// completion marker (~1.7 us of host time on the H100) only where the
// stream's last one has landed and is 50 us old, as eager launches do; the
// tracker closes each burst, so the daemon still sees all of the work end.
TEST_F(DaemonE2E, GraphLaunchesBackToBackShareTheirMarkers) {
  start_daemon();
  extra_env_ = {"CLIENT_GRAPH=1", "CLIENT_BURST=20"};
  gates_ = {kAfterLast};
  Proc c = client("svc", 80, 30, 0);  // four bursts of twenty graph launches, 30 ms apart
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 80; }))
      << status()["counters"].dump();
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["reported"], 80);
  const auto launches = launches_of(c);
  ASSERT_EQ(launches.size(), 80U);
  const int inline_markers = s["daemon"]["markers"].get<int>() - s["daemon"]["tracker_markers"].get<int>();
  const int quiet = may_mark(launches);
  EXPECT_LE(inline_markers, quiet) << s["daemon"].dump() << " (" << quiet << " launches after a pause)";
}

// Mid-burst markers are the tracker's too: the application's thread writes
// one only for the first launch after its stream was quiet for 50 us, so
// that a long burst of eager launches pays for almost none (before, one
// every 50 us of launching), and the daemon still sees every launch end.
TEST_F(DaemonE2E, LaunchesInABurstLeaveTheirMarkersToTheTracker) {
  start_daemon();
  // Untimed (LITHOS_HP_SAMPLE_PER_S=0): the shared completions alone teach.
  extra_env_ = {"CLIENT_BURST=200", "LITHOS_HP_SAMPLE_PER_S=0"};
  gates_ = {kAfterLast};
  Proc c = client("svc", 400, 30, 0);  // two bursts of two hundred launches
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  // Every launch ends: the application's thread left most streams dirty,
  // so the tracker closed them.
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 400; }))
      << status()["counters"].dump();
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  const auto launches = launches_of(c);
  ASSERT_EQ(launches.size(), 400U);
  // A launch more than 50 us after the one before (a preempted client) may
  // write one too (may_mark).
  const int markers = s["daemon"]["markers"].get<int>();
  const int inline_markers = markers - s["daemon"]["tracker_markers"].get<int>();
  const int quiet = may_mark(launches);
  EXPECT_LE(inline_markers, quiet) << s["daemon"].dump() << " (" << quiet << " launches after a pause)";
  // Launches closed together by one marker share the time it covered
  // (busy_share.hpp): fewer markers than launches, so the daemon saw some;
  // and every launch was a sample.
  const json st = status();
  if (markers < 400) {
    EXPECT_GT(st["counters"]["shared_completions"].get<int>(), 0) << st["counters"].dump();
  }
  EXPECT_EQ(st["predictor"]["high"]["observations"].get<int>(), 400) << st["predictor"].dump();
}

// With only high-priority work in flight no one waits for a grant: by
// default (hp_poll_us = 50) the daemon sleeps briefly between turns instead
// of spinning (it spun a whole core for a service alone), and still sees
// every launch end. How much of a core it uses is a measurement, not a
// test on a shared machine: scripts/daemon/idle_cpu.py.
TEST_F(DaemonE2E, TheDaemonSleepsWhileOnlyHighPriorityWorkIsInFlight) {
  start_daemon();
  EXPECT_EQ(status()["settings"]["hp_poll_us"], 50) << status()["settings"].dump();
  gates_ = {kAfterLast};
  Proc c = client("svc", 500, 1, 0);  // a launch every millisecond: seldom 2 ms without an event
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 500; }))
      << status()["counters"].dump();
  const json st = status();
  EXPECT_EQ(st["counters"]["running_launches"], 500) << st["counters"].dump();
  EXPECT_EQ(st["counters"]["reclaimed_atoms"], 0) << st["counters"].dump();
  std::printf("daemon CPU over the run: %.3f s\n", st["cpu_s"].get<double>());
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
}

// After 2 ms without work the daemon sleeps in poll(), which sees sockets
// but not the shared-memory rings, for up to 1 ms at a time. A client whose
// launch waits for a grant rings it awake through its socket
// (ipc::kChannelDaemonIdle) rather than leaving it to the end of the poll.
// Launches 10 ms apart, until one has found the daemon asleep (whether the
// daemon got the CPU to fall asleep in a given pause depends on the load);
// how many do, and how long they wait, is measured by
// scripts/daemon/doorbell_cpu.py.
TEST_F(DaemonE2E, AClientWakesASleepingDaemon) {
  daemon_env_ = {"LITHOSD_BEST_EFFORT_RUNS_FREE=false"};
  start_daemon();
  constexpr int kMost = 3000;
  extra_env_ = {"CLIENT_UNTIL=doorbells"};
  Proc c = client("train", kMost, 10, 0);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  const int launched = static_cast<int>(launches_of(c).size());
  EXPECT_LT(launched, kMost) << "no launch ever rang";
  EXPECT_EQ(s["daemon"]["grants"], launched) << s["daemon"].dump();  // each woke it or found it awake
  EXPECT_EQ(s["daemon"]["fallbacks"], 0) << s["daemon"].dump();
  EXPECT_GE(s["daemon"]["doorbells"].get<int>(), 1) << s["daemon"].dump();
  // The daemon heard the ring(s) (read from the socket at its next turn,
  // the last ones at the latest when it saw the client go).
  EXPECT_TRUE(wait_for([](const json& x) {
    return x["counters"]["clients_gone"] == 1 && x["counters"]["doorbells"].get<int>() >= 1;
  })) << status()["counters"].dump();
  const json st = status();
  std::printf("doorbells: client %s, daemon %s; grant wait mean %s us, p50 <= %s us, max %s us\n",
              s["daemon"]["doorbells"].dump().c_str(), st["counters"]["doorbells"].dump().c_str(),
              s["daemon"]["grant_wait_mean_us"].dump().c_str(), s["daemon"]["grant_wait_p50_us_at_most"].dump().c_str(),
              s["daemon"]["grant_wait_max_us"].dump().c_str());
  // `lithos status` says so, beside the loop's other counters.
  Proc human = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_}, {}, (dir_ / "status-loop.txt").string());
  ASSERT_EQ(human.wait(), 0) << human.err();
  const std::string text = read_all(human.out);
  EXPECT_NE(text.find("loop: longest gap between spinning turns "), std::string::npos) << text;
  EXPECT_NE(text.find("doorbells " + st["counters"]["doorbells"].dump() + "\n"), std::string::npos) << text;
  // The same numbers for a Prometheus collector.
  Proc prom =
      Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus"}, {}, (dir_ / "status-prom.txt").string());
  ASSERT_EQ(prom.wait(), 0) << prom.err();
  const std::string metrics = read_all(prom.out);
  EXPECT_NE(metrics.find("\nlithos_up 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nlithos_tenant_quota_tpcs{tenant=\"svc\",class=\"high\"} "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nlithos_doorbells_total "), std::string::npos) << metrics;
  // No daemon there: lithos_up 0, exit 1.
  Proc down = Proc::spawn({LITHOS_EXE, "status", "--socket", (dir_ / "none.sock").string(), "--prometheus"}, {},
                          (dir_ / "status-down.txt").string());
  EXPECT_EQ(down.wait(), 1);
  EXPECT_NE(read_all(down.out).find("\nlithos_up 0\n"), std::string::npos) << read_all(down.out);
}

// `lithos status` as a collector's feeder: --out writes the file whole (a
// temporary file renamed over it), --every repeats until SIGTERM (exit 0),
// and a daemon that is down is said once on stderr while the file says
// lithos_up 0 every round.
TEST_F(DaemonE2E, StatusFeedsAFileEveryFewSeconds) {
  start_daemon();
  const std::filesystem::path prom_dir = dir_ / "textfile";
  std::filesystem::create_directories(prom_dir);
  const std::string prom = (prom_dir / "lithos.prom").string();
  Proc once = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus", "--out", prom}, {},
                          (dir_ / "status-once.txt").string());
  ASSERT_EQ(once.wait(), 0) << once.err();
  EXPECT_EQ(read_all(once.out), "") << "--out: nothing on stdout";
  EXPECT_NE(read_all(prom).find("\nlithos_up 1\n"), std::string::npos) << read_all(prom);
  EXPECT_NE(read_all(prom).find("\nlithos_tenant_quota_tpcs{tenant=\"svc\",class=\"high\"} "), std::string::npos);

  // JSON lines, one per round, until SIGTERM.
  Proc json_rounds = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--json", "--every", "0.1"}, {},
                                 (dir_ / "status-rounds.txt").string());
  ASSERT_TRUE(wait_until([&] { return json_rounds.lines().size() >= 3; }, kDeadlineS)) << json_rounds.err();
  json_rounds.signal(SIGTERM);
  ASSERT_EQ(json_rounds.wait(), 0) << json_rounds.err();
  for (const json& j : json_rounds.lines()) EXPECT_EQ(j.value("schema", ""), "lithos.status/1");

  // The daemon goes away: every round rewrites the file with lithos_up 0,
  // and stderr says so once.
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  Proc feeder = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus", "--out", prom, "--every", "0.1"},
                            {}, (dir_ / "status-feeder.txt").string());
  ASSERT_TRUE(wait_until([&] { return read_all(prom).find("\nlithos_up 0\n") != std::string::npos; }, kDeadlineS));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a few more rounds
  feeder.signal(SIGTERM);
  ASSERT_EQ(feeder.wait(), 0) << feeder.err();
  const std::string err = feeder.err();
  EXPECT_NE(err.find("lithos status: no lithosd at " + sock_), std::string::npos) << err;
  EXPECT_EQ(err.find("lithos status: no lithosd at "), err.rfind("lithos status: no lithosd at ")) << err;
  // Only the file itself is left: no temporary file of a round.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(prom_dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"lithos.prom"});
  // A file that cannot be written ends the command: exit 1.
  Proc unwritable = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus", "--out",
                                 (dir_ / "no-such-dir" / "x.prom").string(), "--every", "0.1"},
                                {}, (dir_ / "status-unwritable.txt").string());
  EXPECT_EQ(unwritable.wait(), 1);
  EXPECT_NE(unwritable.err().find("cannot write "), std::string::npos) << unwritable.err();
}

// `lithos status` run by another uid: the clients' table shows other
// users' clients without pid and program ("-"), and says why; root's shows
// them. Needs root (setpriv runs the command as uid 4242).
TEST_F(DaemonE2E, StatusTableOfAnotherUidHidesOthersPidsAndPrograms) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: runs `lithos status` as another uid";
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs setpriv (util-linux)";
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  start_daemon();
  Proc c = client("train", 1000, 2, 0);  // registered for a few seconds
  ASSERT_TRUE(wait_for([](const json& st) { return st["clients"].size() == 1; }, 20));
  const std::string program = status()["clients"][0]["program"].get<std::string>();
  ASSERT_FALSE(program.empty());
  Proc root = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_}, {}, (dir_ / "status-root.txt").string());
  ASSERT_EQ(root.wait(), 0) << root.err();
  EXPECT_NE(read_all(root.out).find(program), std::string::npos) << read_all(root.out);
  Proc other = Proc::spawn(
      {"/usr/bin/setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", LITHOS_EXE, "status", "--socket", sock_},
      {}, (dir_ / "status-other.txt").string());
  ASSERT_EQ(other.wait(), 0) << other.err();
  const std::string table = read_all(other.out);
  EXPECT_EQ(table.find(program), std::string::npos) << table;
  EXPECT_NE(table.find("train"), std::string::npos) << table;
  EXPECT_NE(table.find("other users' clients without pid and program"), std::string::npos) << table;
  // The client's row: its id, then "-" for pid and program.
  EXPECT_NE(table.find("\n1      -        -                train "), std::string::npos) << table;
  Proc js = Proc::spawn({"/usr/bin/setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", LITHOS_EXE, "status",
                         "--socket", sock_, "--json"},
                        {}, (dir_ / "status-other.json").string());
  ASSERT_EQ(js.wait(), 0) << js.err();
  const json j = json::parse(read_all(js.out));
  EXPECT_EQ(j["view"], "own");
  EXPECT_TRUE(j["clients"][0]["pid"].is_null());
  c.signal(SIGKILL);
  c.wait();
}

// An hp launch never waits for the daemon, even a stalled one: once the
// submit ring is full, its reports queue in the client (they waited 1 ms
// each and were then dropped) and reach the daemon in order when it reads
// again, so that all of the service's work is accounted.
TEST_F(DaemonE2E, ReportsWaitInTheClientWhileTheDaemonIsStalled) {
  start_daemon();
  extra_env_ = {"CLIENT_BURST=50"};
  gates_ = {100, kAfterLast};
  Proc c = client("svc", 3000, 1, 0);  // bursts of fifty launches, 1 ms apart
  ASSERT_TRUE(reaches_gate(c, 100)) << c.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"].get<int>() >= 100; }));
  // Stalled while the client makes 1500 launches more: nothing empties the
  // ring (1024) meanwhile, so reports must wait in the client, and none of
  // those launches waited for the daemon (it would never have come back).
  daemon_.signal(SIGSTOP);
  open_gate(c, 100);
  const bool went_on = wait_until([&] { return launches_of(c).size() >= 100 + 1500; }, kDeadlineS);
  daemon_.signal(SIGCONT);
  ASSERT_TRUE(went_on) << launches_of(c).size() << " launches made: the client waited for the stalled daemon";
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  // Everything reaches the daemon, in order, while the client is still there.
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] == 3000; }))
      << status()["counters"].dump();
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["reported"], 3000) << s["daemon"].dump();
  EXPECT_EQ(s["daemon"]["dropped_reports"], 0) << s["daemon"].dump();
  EXPECT_GT(s["daemon"]["spilled"].get<int>(), 0) << s["daemon"].dump();
  EXPECT_EQ(launches_of(c).size(), 3000U);
}

// The tracker cannot write a marker onto another thread's per-thread
// default stream, so launches there write their own, every one: a burst on
// it is closed by its last launch rather than left open until the next.
TEST_F(DaemonE2E, LaunchesOnAPerThreadDefaultStreamAreEachMarked) {
  start_daemon();
  extra_env_ = {"CLIENT_PTSZ=1", "CLIENT_BURST=20"};
  Proc c = client("svc", 40, 30, 300);
  ASSERT_EQ(c.wait(), 0) << c.err();
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 40; }))
      << status()["counters"].dump();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["reported"], 40);
  EXPECT_EQ(s["daemon"]["markers"], 40) << s["daemon"].dump();
}

// A best-effort tenant running free has nothing to protect: its rewritten
// kernels go out whole (the whole grid in one launch), neither split nor
// paced by the atomizer's own heuristics (LITHOS_ATOMS=4 would cut each
// into four atoms, each waiting for the one before).
TEST_F(DaemonE2E, KernelsOfATenantRunningFreeAreNotSplit) {
#ifndef LITHOS_CUBIN_FIXTURES
  GTEST_SKIP() << "no cubin fixtures (built with nvcc)";
#else
  start_daemon();
  extra_env_ = {"CLIENT_CUBIN=" LITHOS_CUBIN_FIXTURES "/corpus_kernels.sm90.cubin", "LITHOS_ATOMIZE=1",
                "LITHOS_ATOMS=4"};
  // The second launch waits until the daemon has published that the
  // tenant runs free (the first registers the client).
  gates_ = {1};
  Proc c = client("train", 6, 0, 0);
  ASSERT_TRUE(reaches_gate(c, 1)) << c.err();
  ASSERT_TRUE(settled([&](const json& st) { return runs_free(st, c.pid, "train", true); })) << status().dump();
  open_gate(c, 1);
  ASSERT_EQ(c.wait(), 0) << c.err();
  json params;
  for (const json& j : c.lines())
    if (j.contains("params")) params = j["params"];
  ASSERT_TRUE(params.is_array()) << c.err();
  ASSERT_EQ(params.size(), 6U) << params.dump();  // one launch each
  // The first launch may come before the daemon has published that the
  // tenant runs free (it registers at that launch): then it is granted, as
  // one piece (no prediction yet), and carries the grid's 4096 x 3 blocks.
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  const int granted = s["daemon"]["grants"].get<int>();
  EXPECT_LE(granted, 1) << s.dump();
  EXPECT_EQ(s["daemon"]["reported"], 6 - granted) << s.dump();
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i][0], 0) << params.dump();
    EXPECT_EQ(params[i][1], i < static_cast<std::size_t>(granted) ? 4096U * 3U : 0xffffffffU) << params.dump();
  }
#endif
}

// A best-effort tenant runs free while no high-priority tenant has a stream
// open: its launches go out at once on the allocation (the whole GPU here)
// and are reported, as a high-priority tenant's; once a service process has
// a stream open, they wait for grants again; when it is gone, they run free
// again. The trace of it all replays to the same decisions.
TEST_F(DaemonE2E, BestEffortRunsFreeWhileNoServiceIsThere) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace});
  // The first launch registers the client; the rest wait until the daemon
  // has published that its tenant runs free (a daemon step after the
  // registration), then stay until every one is seen complete.
  gates_ = {1, kAfterLast};
  Proc alone = client("train", 20, 1, 0);
  ASSERT_TRUE(reaches_gate(alone, 1)) << alone.err();
  ASSERT_TRUE(settled([&](const json& st) { return runs_free(st, alone.pid, "train", true); })) << status().dump();
  open_gate(alone, 1);
  ASSERT_TRUE(reaches_gate(alone)) << alone.err();
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 20; })) << status().dump();
  open_gate(alone);
  ASSERT_EQ(alone.wait(), 0) << alone.err();
  json s = stats_of(alone);
  ASSERT_TRUE(s.is_object());
  // The first launch may have come before the flag was raised.
  EXPECT_GE(s["daemon"]["reported"], 19) << s.dump();
  EXPECT_EQ(s["daemon"]["reported"].get<int>() + s["daemon"]["grants"].get<int>(), 20) << s.dump();
  EXPECT_EQ(s["daemon"]["fallbacks"], 0);
  for (const json& j : launches_of(alone)) EXPECT_EQ(j["tpcs"], "all");
  EXPECT_EQ(tenant(status(), "train")["runs_free"], true);

  // A service with a stream open (one launch, then idle until released).
  gates_ = {kAfterLast};
  Proc svc = client("svc", 1, 0, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  ASSERT_TRUE(wait_for([this](const json& st) { return tenant(st, "train")["runs_free"] == false; }))
      << status().dump();
  Proc waits = client("train", 10, 1, 0);
  ASSERT_EQ(waits.wait(), 0) << waits.err();
  s = stats_of(waits);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["grants"], 10) << s.dump();
  EXPECT_EQ(s["daemon"]["reported"], 0) << s.dump();
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  ASSERT_TRUE(wait_for([this](const json& st) { return tenant(st, "train")["runs_free"] == true; })) << status().dump();

  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  auto t = lithos::daemon::parse_trace_file(read_all(trace), trace);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_TRUE(t->header.config.best_effort_runs_free);
  auto r = lithos::daemon::replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;
}

// Quotas across processes: while the high-priority tenant has work on the
// GPU (its markers never land), best-effort launches of another process
// never get its TPCs; before it woke they had the whole GPU (stealing), and
// they give its TPCs back at the next atom once it has work.
TEST_F(DaemonE2E, QuotaHeldAcrossProcessesAndGivenBack) {
  start_daemon();
  // The trainer makes five launches alone, then waits (gate 5) until the
  // service has work on the GPU, then makes the rest.
  gates_ = {5};
  Proc be = client("train", 40, 1, 0);
  ASSERT_TRUE(reaches_gate(be, 5)) << be.err();
  gates_ = {kAfterLast};
  Proc hp = client("svc", 3, 0, 0, /*markers_hang=*/true);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(hp)) << hp.err();
  ASSERT_TRUE(settled([this](const json& st) {
    return tenant(st, "svc")["inflight_atoms"] == 3 && tenant(st, "train")["runs_free"] == false;
  })) << status().dump();
  open_gate(be, 5);
  ASSERT_EQ(be.wait(), 0) << be.err();
  const json st = status();
  const auto owned = TpcSet::parse(tenant(st, "svc")["owned"].get<std::string>());
  ASSERT_TRUE(owned.is_ok());
  ASSERT_EQ(owned->count(), 2);
  const auto l = launches_of(be);
  ASSERT_EQ(l.size(), 40U);
  for (const json& j : l) {
    EXPECT_EQ(j["rc"], 0);
    const std::string tp = j["tpcs"];
    if (j["i"].get<int>() < 5) {
      EXPECT_EQ(tp, "all") << "launch " << j["i"] << " before the owner woke";
      continue;
    }
    // The owner has work in flight for the rest of the run.
    ASSERT_NE(tp, "all") << "launch " << j["i"] << " ran on the owner's TPCs";
    const auto got = TpcSet::parse(tp);
    ASSERT_TRUE(got.is_ok()) << tp;
    EXPECT_TRUE((*got & *owned).empty()) << "launch " << j["i"] << " on " << tp << ", svc owns " << owned->to_string();
  }
  open_gate(hp);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
}

// A client killed with SIGKILL while its atoms are on the GPU: everything it
// held is reclaimed, and it is gone from the daemon's clients. How soon
// (within a second, usually milliseconds) is measured by
// scripts/daemon/idle_cpu.py; here the deadline only catches a daemon that
// never notices.
TEST_F(DaemonE2E, SigkillReclaimsEverythingItHeld) {
  start_daemon();
  gates_ = {kAfterLast};
  Proc c = client("train", 3, 0, 0, /*markers_hang=*/true);
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  ASSERT_TRUE(wait_for([&](const json& st) { return tenant(st, "train")["inflight_atoms"] > 0; })) << c.err();
  c.signal(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.wait(), -SIGKILL);
  ASSERT_TRUE(wait_for([&](const json& st) {
    return tenant(st, "train")["inflight_atoms"] == 0 && st["counters"]["clients_gone"] == 1 && st["clients"].empty();
  })) << status().dump();
  std::printf("reclaimed %.3f s after the SIGKILL\n", since(t0));
  EXPECT_GE(status()["counters"]["reclaimed_atoms"], 1);
}

// lithosd that starts MPS starts it in multi-user mode (-M) by default, so
// that clients of several user ids share its server (on the H100 a second
// uid's job otherwise waited for the first's to finish); where the control
// program has no such mode it starts MPS without and says so; with
// --mps-multiuser false it asks for none. A stand-in nvidia-cuda-mps-control
// on PATH records what it was asked.
TEST_F(DaemonE2E, StartedMpsIsMultiUser) {
  const fs::path bin = dir_ / "fake-mps-bin";
  fs::create_directories(bin);
  const fs::path calls = dir_ / "mps-calls.txt";
  {
    std::ofstream f(bin / "nvidia-cuda-mps-control");
    f << "#!/bin/sh\n"
         "# records its arguments and its commands; no control daemon ever answers\n"
         "echo \"args: $*\" >> \"$FAKE_MPS_CALLS\"\n"
         "case \" $* \" in *\" -M \"*) [ -n \"$FAKE_MPS_NO_MULTIUSER\" ] && exit 2;; esac\n"
         "[ $# -gt 0 ] && [ -n \"$FAKE_MPS_SLOW_S\" ] && sleep \"$FAKE_MPS_SLOW_S\"\n"
         "[ $# -gt 0 ] && exit 0\n"
         "while read -r cmd; do [ -n \"$cmd\" ] && echo \"cmd: $cmd\" >> \"$FAKE_MPS_CALLS\"; done\n"
         "exit 1\n";
  }
  fs::permissions(bin / "nvidia-cuda-mps-control", fs::perms::owner_all);
  const std::string path = "PATH=" + bin.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "");
  const std::string record = "FAKE_MPS_CALLS=" + calls.string();
  struct Case {
    std::vector<std::string> flags, env;
    const char* args;
    const char* said;
  };
  const Case cases[] = {
      {{"--mps", "start"}, {}, "args: -d -M\n", "MPS started (multi-user)"},
      {{"--mps", "start"}, {"FAKE_MPS_NO_MULTIUSER=1"}, "args: -d -M\nargs: -d\n", "did not start in multi-user mode"},
      {{"--mps", "start", "--mps-multiuser", "false"}, {}, "args: -d\n", "MPS started"},
      // A start that takes 4 s: lithosd says what it waits for, then comes up.
      {{"--mps", "start"}, {"FAKE_MPS_SLOW_S=4"}, "args: -d -M\n", "lithosd: still starting MPS"},
  };
  for (const Case& c : cases) {
    fs::remove(calls);
    daemon_env_ = {path, record};
    daemon_env_.insert(daemon_env_.end(), c.env.begin(), c.env.end());
    start_daemon(c.flags);
    daemon_.signal(SIGTERM);
    EXPECT_EQ(daemon_.wait(), 0) << daemon_.err();
    const std::string got = read_all(calls.string());
    // The check for a running daemon, the start, then the quit at exit.
    EXPECT_EQ(got.rfind("args: \ncmd: get_server_list\n", 0), 0U) << got;
    EXPECT_NE(got.find(std::string("cmd: get_server_list\n") + c.args), std::string::npos) << got;
    EXPECT_NE(got.find("cmd: quit"), std::string::npos) << got;
    EXPECT_NE(daemon_.err().find(c.said), std::string::npos) << daemon_.err();
  }
  daemon_env_.clear();
}

// An MPS pipe folder that is a link (another user could have made it in
// /tmp before MPS ran): lithosd does not start MPS there.
TEST_F(DaemonE2E, MpsIsNotStartedInAFolderThatIsALink) {
  const fs::path bin = dir_ / "fake-mps-bin";
  fs::create_directories(bin);
  const fs::path calls = dir_ / "mps-calls.txt";
  std::ofstream(bin / "nvidia-cuda-mps-control") << "#!/bin/sh\n"
                                                    "echo \"args: $*\" >> \"$FAKE_MPS_CALLS\"\n"
                                                    "[ $# -gt 0 ] && exit 0\n"
                                                    "while read -r cmd; do :; done\n"
                                                    "exit 1\n";
  fs::permissions(bin / "nvidia-cuda-mps-control", fs::perms::owner_all);
  fs::create_directories(dir_ / "elsewhere");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "mps-pipe");
  const std::vector<std::string> env = {"PATH=" + bin.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : ""),
                                        "FAKE_MPS_CALLS=" + calls.string(),
                                        "CUDA_MPS_PIPE_DIRECTORY=" + (dir_ / "mps-pipe").string()};
  Proc d = Proc::spawn({LITHOS_EXE, "daemon", "--slot-map", slot_map_, "--config", config_, "--socket", sock_,
                        "--state-dir", (dir_ / "state").string(), "--mps", "start"},
                       env, (dir_ / "daemon-mps-link.log").string());
  EXPECT_EQ(d.wait(20), 1) << d.err();
  EXPECT_NE(d.err().find("cannot start MPS: MPS's folder (CUDA_MPS_PIPE_DIRECTORY): " + (dir_ / "mps-pipe").string() +
                         " is a symbolic link"),
            std::string::npos)
      << d.err();
  EXPECT_EQ(read_all(calls.string()).find("args: -d"), std::string::npos) << read_all(calls.string());
}

// A tenant this uid may not claim: refused; the program runs pass-through.
TEST_F(DaemonE2E, OtherUidRefused) {
  start_daemon();
  Proc c = client("locked", 4, 0, 0);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["registered"], false);
  for (const json& j : launches_of(c)) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], "all");
  }
  EXPECT_EQ(status()["counters"]["clients_refused"], 1);
  EXPECT_EQ(status()["counters"]["clients_accepted"], 0);
}

// The daemon restarts under a running best-effort client: meanwhile its
// launches run on the fallback set (never the whole GPU once it knew the
// daemon), then it registers again and is granted again.
TEST_F(DaemonE2E, DaemonRestart) {
  start_daemon({"--best-effort-runs-free", "false"});
  const json st0 = status();
  const auto fallback = TpcSet::parse(tenant(st0, "train")["fallback"].get<std::string>());
  ASSERT_TRUE(fallback.is_ok());
  // Ten launches granted; the daemon stops; ten launches without it; it
  // starts again; then launches 10 ms apart for at least 3 s, in which the
  // client tries to register again (once a second) and is granted.
  gates_ = {10, 20};
  Proc c = client("train", 320, 10, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(c, 10)) << c.err();
  EXPECT_EQ(status()["counters"]["grants"], 10);
  daemon_.signal(SIGTERM);
  EXPECT_EQ(daemon_.wait(), 0);
  open_gate(c, 10);
  ASSERT_TRUE(reaches_gate(c, 20)) << c.err();
  start_daemon({"--best-effort-runs-free", "false"});
  open_gate(c, 20);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_GE(s["daemon"]["reconnects"], 1);
  EXPECT_EQ(s["daemon"]["state"], "connected");
  int on_fallback = 0;
  for (const json& j : launches_of(c)) {
    EXPECT_EQ(j["rc"], 0);
    if (j["tpcs"] != "all") {
      const auto got = TpcSet::parse(j["tpcs"].get<std::string>());
      ASSERT_TRUE(got.is_ok());
      EXPECT_EQ(*got, *fallback) << got->to_string();
      ++on_fallback;
    } else {
      EXPECT_TRUE(j["i"] < 10 || j["i"] >= 20) << "launch " << j["i"] << " on the whole GPU without a daemon";
    }
  }
  EXPECT_GE(on_fallback, 10);
  EXPECT_GT(status()["counters"]["grants"], 5);  // the new daemon granted too
}

// A hostile client: garbage in its submit ring drops it (and only it); the
// daemon keeps serving.
TEST_F(DaemonE2E, MalformedMessageDropsOnlyThatClient) {
  start_daemon({"--best-effort-runs-free", "false"});
  Proc good = client("train", 40, 10, 0);
  auto fd = lithos::ipc::connect_socket(sock_, 1000);
  ASSERT_TRUE(fd.is_ok());
  lithos::ipc::Hello h;
  std::strncpy(h.tenant, "train", sizeof h.tenant - 1);
  ASSERT_TRUE(lithos::ipc::send_packet(fd.value(), &h, sizeof h).is_ok());
  lithos::ipc::Welcome w;
  int chfd = -1;
  auto got = lithos::ipc::recv_packet(fd.value(), &w, sizeof w, &chfd, static_cast<int>(kDeadlineS * 1000));
  ASSERT_TRUE(got.is_ok());
  ASSERT_EQ(w.status, lithos::ipc::WelcomeStatus::kOk);
  auto ch = lithos::ipc::Channel::attach(chfd);
  ASSERT_TRUE(ch.is_ok());
  lithos::ipc::SubmitMsg bad;
  bad.type = lithos::ipc::SubmitType::kLaunch;
  bad.stream = 7;  // never opened
  bad.seq = 1;
  bad.grid[0] = 0;  // and an empty grid
  ASSERT_TRUE(ch->layout().submit.push(bad));
  EXPECT_TRUE(wait_for([](const json& st) { return st["counters"]["clients_dropped"] == 1; }));
  ::close(fd.value());
  ASSERT_EQ(good.wait(), 0) << good.err();
  const json s = stats_of(good);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["grants"], 40);
  EXPECT_EQ(s["daemon"]["fallbacks"], 0);
}

// A sample that names no launch reported on its stream is malformed: its
// client is dropped, and the rejection counted.
TEST_F(DaemonE2E, AHostileSampleIsRejectedAndCounted) {
  start_daemon();
  auto fd = lithos::ipc::connect_socket(sock_, 1000);
  ASSERT_TRUE(fd.is_ok());
  lithos::ipc::Hello h;
  std::strncpy(h.tenant, "svc", sizeof h.tenant - 1);
  ASSERT_TRUE(lithos::ipc::send_packet(fd.value(), &h, sizeof h).is_ok());
  lithos::ipc::Welcome w;
  int chfd = -1;
  auto got = lithos::ipc::recv_packet(fd.value(), &w, sizeof w, &chfd, static_cast<int>(kDeadlineS * 1000));
  ASSERT_TRUE(got.is_ok());
  ASSERT_EQ(w.status, lithos::ipc::WelcomeStatus::kOk);
  auto ch = lithos::ipc::Channel::attach(chfd);
  ASSERT_TRUE(ch.is_ok());
  lithos::ipc::SubmitMsg open;
  open.type = lithos::ipc::SubmitType::kStreamOpen;
  open.stream = 3;
  lithos::ipc::SubmitMsg launch;
  launch.type = lithos::ipc::SubmitType::kLaunch;
  launch.flags = lithos::ipc::kSubmitRunning | lithos::ipc::kSubmitTimed;
  launch.stream = 3;
  launch.seq = 1;
  launch.kernel = 0x1234;
  lithos::ipc::SubmitMsg good;  // names the launch: learnt
  good.type = lithos::ipc::SubmitType::kSample;
  good.stream = 3;
  good.seq = 1;
  good.kernel = 0x1234;
  lithos::ipc::set_sample_ns(good, 40'000);
  lithos::ipc::SubmitMsg bad = good;  // a launch never reported
  bad.seq = 99;
  ASSERT_TRUE(ch->layout().submit.push(open));
  ASSERT_TRUE(ch->layout().submit.push(launch));
  ASSERT_TRUE(ch->layout().submit.push(good));
  ASSERT_TRUE(ch->layout().submit.push(bad));
  EXPECT_TRUE(wait_for([](const json& st) {
    return st["counters"]["clients_dropped"] == 1 && st["counters"]["hp_samples_rejected"] == 1;
  }));
  const json st = status();
  EXPECT_EQ(st["counters"]["hp_samples"], 1);
  EXPECT_EQ(st["counters"]["drop_reasons"]["malformed"], 1);
  ::close(fd.value());
}

}  // namespace

// lithosd's trace: every scheduling event of a run with a high-priority and
// a best-effort process, written as it happens; replayed through the Engine
// the trace's header describes, it gives the daemon's decisions again (here
// and through `lithos daemon --replay`), and a changed decision is caught.
TEST_F(DaemonE2E, TraceReplaysToTheSameDecisions) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace, "--best-effort-runs-free", "false"});
  Proc be = client("train", 40, 2, 0);
  gates_ = {kAfterLast};  // registered until its last launch is seen to end
  Proc hp = client("svc", 20, 3, 0);
  gates_.clear();
  ASSERT_EQ(be.wait(), 0) << be.err();
  ASSERT_TRUE(reaches_gate(hp)) << hp.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 60; })) << status().dump();
  open_gate(hp);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  EXPECT_EQ(status()["trace"]["open"], true);
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();

  const std::string text = read_all(trace);
  auto t = lithos::daemon::parse_trace_file(text, trace);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->header.config.policy, "lithos");
  EXPECT_EQ(t->header.device.tpcs, 4);  // the fake GPU
  int submits = 0, running = 0, finished = 0;
  for (const auto& e : t->events) {
    submits += e.kind == lithos::sched::EngineEvent::Kind::kSubmit ? 1 : 0;
    running += e.kind == lithos::sched::EngineEvent::Kind::kSubmitRunning ? 1 : 0;
    finished += e.kind == lithos::sched::EngineEvent::Kind::kAtomFinished ? 1 : 0;
  }
  EXPECT_EQ(submits, 40);
  EXPECT_EQ(running, 20);
  EXPECT_EQ(finished, 60);
  auto r = lithos::daemon::replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;
  EXPECT_EQ(r->atoms, 60U);

  // The same through the command line.
  Proc cli = Proc::spawn({LITHOS_EXE, "daemon", "--replay", trace}, {}, (dir_ / "replay.out").string());
  EXPECT_EQ(cli.wait(), 0) << cli.err();
  EXPECT_NE(read_all(cli.out).find("the same decisions"), std::string::npos) << read_all(cli.out);

  // A decision changed in the trace: the replay names it.
  for (auto& e : t->events) {
    if (e.kind == lithos::sched::EngineEvent::Kind::kDispatch && !e.decided.empty()) {
      e.decided.front().tpcs = lithos::sched::TpcSet::range(0, 1);
      break;
    }
  }
  auto changed = lithos::daemon::replay_trace(*t);
  ASSERT_TRUE(changed.is_ok());
  EXPECT_FALSE(changed->same);
  EXPECT_NE(changed->difference.find("dispatch"), std::string::npos) << changed->difference;
}

// The predictor's cache: what one daemon learnt is written to
// <state_dir>/predictor.cache when it stops and loaded by the next one, whose
// trace carries it, so that its run still replays to the same decisions. A
// cache of another GPU is not loaded (and is replaced).
TEST_F(DaemonE2E, PredictorCacheKeptAcrossRestarts) {
  const fs::path cache = dir_ / "state" / "predictor.cache";
  start_daemon();
  EXPECT_EQ(status()["predictor"]["cache"]["loaded_entries"], 0);
  gates_ = {kAfterLast};  // each client stays until its launches are seen to end
  Proc c = client("train", 30, 1, 0);
  ASSERT_TRUE(reaches_gate(c)) << c.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 30; })) << status().dump();
  open_gate(c);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const auto learnt = status()["predictor"]["entries"].get<std::size_t>();
  EXPECT_GE(learnt, 1U);
  // Idle, the daemon writes what it learnt (in a thread of its own) without
  // stopping.
  ASSERT_TRUE(wait_for([](const json& st) { return st["predictor"]["cache"]["saves"].get<int>() >= 1; }))
      << status()["predictor"].dump();
  EXPECT_EQ(read_all(cache.string()).rfind("# lithos.predictor-cache/1 tpcs=4 ", 0), 0U);
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  const std::string text = read_all(cache.string());
  ASSERT_EQ(text.rfind("# lithos.predictor-cache/1 tpcs=4 ", 0), 0U) << text;

  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace, "--best-effort-runs-free", "false"});
  json st = status();
  EXPECT_EQ(st["predictor"]["cache"]["loaded_entries"].get<std::size_t>(), learnt) << st.dump();
  EXPECT_EQ(st["predictor"]["entries"].get<std::size_t>(), learnt);
  EXPECT_EQ(st["predictor"]["cache"]["error"], "");
  // The human form says the same.
  Proc human = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_}, {}, (dir_ / "status.txt").string());
  ASSERT_EQ(human.wait(), 0) << human.err();
  EXPECT_NE(read_all(human.out).find("predictor: " + std::to_string(learnt) + " entries; cache " + cache.string() +
                                     ": " + std::to_string(learnt) + " loaded at start"),
            std::string::npos)
      << read_all(human.out);
  EXPECT_NE(read_all(human.out).find("best_effort_runs_free false"), std::string::npos) << read_all(human.out);
  EXPECT_NE(read_all(human.out).find("hp_holds_unowned true"), std::string::npos) << read_all(human.out);
  Proc again = client("train", 20, 1, 0);
  ASSERT_TRUE(reaches_gate(again)) << again.err();
  ASSERT_TRUE(wait_for([](const json& s) { return s["counters"]["completions"] == 20; })) << status().dump();
  open_gate(again);
  ASSERT_EQ(again.wait(), 0) << again.err();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  auto t = lithos::daemon::parse_trace_file(read_all(trace), trace);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_FALSE(t->header.predictions.empty());
  auto r = lithos::daemon::replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;

  // Another GPU's cache: reported, not loaded, replaced when this one stops.
  { std::ofstream(cache) << "# lithos.predictor-cache/1 tpcs=132 device=B200\nK 10 1p+10 3\n"; }
  start_daemon();
  st = status();
  EXPECT_EQ(st["predictor"]["cache"]["loaded_entries"], 0);
  EXPECT_NE(st["predictor"]["cache"]["error"].get<std::string>().find("another GPU"), std::string::npos) << st.dump();
  Proc third = client("train", 5, 1, 0);
  ASSERT_TRUE(reaches_gate(third)) << third.err();
  ASSERT_TRUE(wait_for([](const json& s) { return s["counters"]["completions"] == 5; })) << status().dump();
  open_gate(third);
  ASSERT_EQ(third.wait(), 0) << third.err();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  EXPECT_EQ(read_all(cache.string()).rfind("# lithos.predictor-cache/1 tpcs=4 ", 0), 0U);
}

// The host synchronising a stream (cuStreamSynchronize) reaches the daemon:
// the stream's launch ordinals restart, so the predictor keeps one entry per
// position in the step (kernel + ordinal since the last synchronisation),
// not one per launch ever made; the trace carries the syncs and replays.
TEST_F(DaemonE2E, SynchronisationRestartsLaunchOrdinals) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace});
  Proc c = client("train", 20, 1, 0, false, "", /*sync_every=*/5);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["daemon"]["syncs"], 4) << s.dump();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 20; })) << status().dump();
  // One kernel at ordinals 0-4 since each sync: five keys, not twenty.
  EXPECT_EQ(status()["predictor"]["entries"], 5) << status().dump();
  EXPECT_GE(status()["cpu_s"].get<double>(), 0.0);
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  // Its CPU use, said when it stops.
  EXPECT_NE(daemon_.err().find("lithosd: CPU "), std::string::npos) << daemon_.err();
  auto t = lithos::daemon::parse_trace_file(read_all(trace), trace);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  int syncs = 0;
  for (const auto& e : t->events) syncs += e.kind == lithos::sched::EngineEvent::Kind::kSync ? 1 : 0;
  EXPECT_EQ(syncs, 4);
  auto r = lithos::daemon::replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;
}

// A trace becomes a `lithos sim` scenario: one tenant per traced tenant that
// replays the requests it made (launches between two synchronisations) with
// the measured durations; the simulator runs it.
TEST_F(DaemonE2E, TraceBecomesASimulatorScenario) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace});
  // Both stay registered after their last launch until the daemon has seen
  // every one end.
  gates_ = {kAfterLast};
  Proc hp = client("svc", 20, 2, 0, false, "", /*sync_every=*/5);
  Proc be = client("train", 40, 1, 0, false, "", /*sync_every=*/10);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(hp)) << hp.err();
  ASSERT_TRUE(reaches_gate(be)) << be.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 60; })) << status().dump();
  open_gate(hp);
  open_gate(be);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  ASSERT_EQ(be.wait(), 0) << be.err();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();

  const fs::path out = dir_ / "sc";
  Proc conv = Proc::spawn({LITHOS_EXE, "daemon", "--scenario-from-trace", trace, "--scenario-out", out.string()}, {},
                          (dir_ / "conv.out").string());
  ASSERT_EQ(conv.wait(), 0) << conv.err();
  EXPECT_NE(read_all(conv.out).find("2 tenants, 8 requests, 60 launches"), std::string::npos) << read_all(conv.out);
  const std::string toml = read_all((out / "scenario.toml").string());
  EXPECT_NE(toml.find("name = \"svc\"\nclass = \"high\"\nquota = 2\narrival = \"poisson\""), std::string::npos) << toml;
  EXPECT_NE(toml.find("name = \"train\"\nclass = \"best-effort\"\narrival = \"closed\""), std::string::npos) << toml;
  EXPECT_NE(toml.find("tpcs = 4"), std::string::npos) << toml;
  EXPECT_NE(toml.find("immediate_launches = true"), std::string::npos) << toml;
  EXPECT_NE(toml.find("hp_holds_unowned = true"), std::string::npos) << toml;
  const std::string svc_trace = read_all((out / "trace-svc.jsonl").string());
  EXPECT_NE(svc_trace.find("{\"block\":[256,1,1],\"duration_us\":"), std::string::npos) << svc_trace;

  Proc sim = Proc::spawn(
      {LITHOS_EXE, "sim", "--scenario", (out / "scenario.toml").string(), "--policy", "lithos,mps", "--json"}, {},
      (dir_ / "sim.out").string());
  ASSERT_EQ(sim.wait(), 0) << sim.err();
  const json r = json::parse(read_all(sim.out), nullptr, false);
  ASSERT_TRUE(r.is_object()) << read_all(sim.out);
  EXPECT_EQ(r["alone"].size(), 2U) << r.dump().substr(0, 500);

  // A trace without synchronisations has no complete request: a clear error.
  const std::string bare = (dir_ / "bare.jsonl").string();
  start_daemon({"--trace", bare});
  Proc nosync = client("train", 5, 1, 0);
  ASSERT_EQ(nosync.wait(), 0) << nosync.err();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  Proc none = Proc::spawn({LITHOS_EXE, "daemon", "--scenario-from-trace", bare, "--scenario-out", out.string()}, {},
                          (dir_ / "none.out").string());
  EXPECT_EQ(none.wait(), 2);
  EXPECT_NE(none.err().find("no complete request"), std::string::npos) << none.err();
}

// A stream that ran free (its launches reported, numbered by the client) and
// then waits for grants (markers numbered by the daemon) keeps one
// increasing sequence: a granted atom is never taken for finished because an
// earlier, larger running marker already landed. Here the fake GPU stops
// writing markers at launch 50, after the service connected: the trainer's
// atoms must then stay in flight.
TEST_F(DaemonE2E, AStreamThatStopsRunningFreeKeepsItsAtomsInFlight) {
  start_daemon();
  // Forty launches running free (markers land), then, once the service is
  // connected, twenty granted ones, whose markers stop landing at launch 50.
  gates_ = {40, kAfterLast};  // and it stays registered to the end
  Proc be = client("train", 60, 0, 0, false, "", 0, /*hang_after=*/50);
  ASSERT_TRUE(reaches_gate(be, 40)) << be.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] >= 30; })) << status().dump();
  gates_ = {kAfterLast};
  Proc svc = client("svc", 1, 0, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  ASSERT_TRUE(settled([this](const json& st) { return tenant(st, "train")["runs_free"] == false; })) << status().dump();
  open_gate(be, 40);
  ASSERT_TRUE(wait_until([&] { return launches_of(be).size() >= 51; }, kDeadlineS)) << be.err();
  EXPECT_TRUE(wait_for([this](const json& st) { return tenant(st, "train")["inflight_atoms"] >= 1; }))
      << "granted atoms whose markers never land must stay in flight: " << status().dump();
  be.signal(SIGKILL);
  svc.signal(SIGKILL);
  be.wait();
  svc.wait();
}

// Deferred launches: a best-effort client's launches return at once and a
// worker thread makes them as granted; every synchronisation returns only
// after every launch queued before it was made (the fake GPU had built its
// descriptor), and nothing is lost or doubled. Also with LITHOS_SUBMIT_AHEAD
// (each launch submitted when it is queued; the worker's launch takes that
// ticket).
TEST_F(DaemonE2E, DeferredLaunchesAreAllMadeBeforeASynchronisationReturns) {
  defer_ = true;
  params_ = true;
  start_daemon({"--best-effort-runs-free", "false"});
  for (const bool ahead : {false, true}) {
    SCOPED_TRACE(ahead ? "submitted ahead" : "submitted by the worker");
    extra_env_ = {std::string("LITHOS_SUBMIT_AHEAD=") + (ahead ? "1" : "0")};
    const int completions_before = status()["counters"]["completions"].get<int>();
    gates_ = {kAfterLast};
    Proc c = client("train", 60, 0, 0, false, "", /*sync_every=*/15);
    gates_.clear();
    ASSERT_TRUE(reaches_gate(c)) << c.err();
    EXPECT_TRUE(wait_for([&](const json& st) { return st["counters"]["completions"] == completions_before + 60; }))
        << status().dump();
    open_gate(c);
    ASSERT_EQ(c.wait(), 0) << c.err();
    EXPECT_EQ(syncs_all_made(c), 4);
    for (const json& j : launches_of(c)) EXPECT_EQ(j["rc"], 0);
    // Each launch's parameter was copied when it was queued: the GPU saw
    // {i, i + 1000}, in order, although the caller overwrote it at once.
    json params;
    for (const json& j : c.lines())
      if (j.contains("params")) params = j["params"];
    ASSERT_TRUE(params.is_array()) << c.err();
    ASSERT_EQ(params.size(), 60U) << params.dump();
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i][0], i) << params.dump();
      EXPECT_EQ(params[i][1], i + 1000) << params.dump();
    }
    const json s = stats_of(c);
    ASSERT_TRUE(s.is_object());
    const json& d = s["daemon"]["deferred"];
    EXPECT_EQ(d["enabled"], true) << s.dump();
    EXPECT_EQ(d["deferred"], 60) << s.dump();
    EXPECT_EQ(d["in_place"], 0) << s.dump();
    EXPECT_EQ(d["errors"], 0) << s.dump();
    EXPECT_GE(d["max_depth"], 1) << s.dump();
    // Every drain that waited is counted under the call that drained: here
    // only the synchronisations.
    const json& by = d.at("drained_by");
    ASSERT_TRUE(by.is_object()) << s.dump();
    if (d["drains"] == 0) {
      EXPECT_TRUE(by.empty()) << s.dump();
    } else {
      EXPECT_EQ(by.size(), 1U) << s.dump();
      EXPECT_EQ(by.at("cuStreamSynchronize").at("n"), d["drains"]) << s.dump();
    }
    EXPECT_EQ(s["daemon"]["grants"], 60) << s.dump();
    EXPECT_EQ(s["daemon"]["submits"], 60) << s.dump();  // once each, ahead or not
    EXPECT_EQ(s["daemon"]["fallbacks"], 0) << s.dump();
    const json& a = s["daemon"]["submit_ahead"];
    EXPECT_EQ(a["enabled"], ahead) << s.dump();
    EXPECT_EQ(a["submitted"], ahead ? 60 : 0) << s.dump();
    EXPECT_EQ(a["taken"], ahead ? 60 : 0) << s.dump();
  }
}

// Stream operations between deferred launches (memsets, device copies,
// event records and waits) are queued behind them instead of draining the
// queue, and are made in the application's order: each memset after the
// launch before it, and no event record after the event's destruction
// (cuEventDestroy drains). Measured on the H100: the memsets of ResNet-50
// training had drained the queue ~36 times a step (docs/daemon.md).
TEST_F(DaemonE2E, StreamOperationsAreQueuedBehindDeferredLaunchesInOrder) {
  defer_ = true;
  start_daemon({"--best-effort-runs-free", "false"});
  extra_env_ = {"CLIENT_STREAM_OPS=1"};
  Proc c = client("train", 30, 0, 0, false, "", /*sync_every=*/10);
  ASSERT_EQ(c.wait(), 0) << c.err();
  EXPECT_EQ(syncs_all_made(c), 3);
  std::string want;
  for (int i = 0; i < 30; ++i) want += (i == 0 ? "S" : ",S") + std::to_string(i) + "@" + std::to_string(i + 1);
  EXPECT_EQ(ops_of(c), want);
  const json s = stats_of(c);
  ASSERT_TRUE(s.is_object());
  const json& d = s["daemon"]["deferred"];
  EXPECT_EQ(d["stream_ops"], 60) << s.dump();  // 30 memsets, 30 event records
  EXPECT_EQ(d["deferred"], 90) << s.dump();
  EXPECT_EQ(d["errors"], 0) << s.dump();
  EXPECT_FALSE(d["drained_by"].contains("cuMemsetD8Async")) << s.dump();
  EXPECT_FALSE(d["drained_by"].contains("cuEventRecord")) << s.dump();
}

// Submits describe the kernel as the daemon's occupancy bound needs it:
// registers per thread and static plus dynamic shared memory, from the
// kernel's attributes (the fake's function 0x14: 128 registers, 4 KiB
// static), for best-effort submits and high-priority reports alike. With
// 32 registers assumed a heavy kernel's blocks per TPC came out several
// times too many and its grants too narrow.
TEST_F(DaemonE2E, SubmitsCarryTheKernelsRegistersAndSharedMemory) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace, "--best-effort-runs-free", "false"});
  extra_env_ = {"CLIENT_FUNCTION=0x14", "CLIENT_SMEM=1000"};
  Proc be = client("train", 5, 0, 0);
  gates_ = {kAfterLast};  // registered until its reports are read
  Proc hp = client("svc", 5, 0, 0);
  gates_.clear();
  ASSERT_EQ(be.wait(), 0) << be.err();
  ASSERT_TRUE(reaches_gate(hp)) << hp.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] >= 5; })) << status().dump();
  open_gate(hp);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  extra_env_ = {};
  Proc plain = client("train", 5, 0, 0);
  ASSERT_EQ(plain.wait(), 0) << plain.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["grants"] >= 10; })) << status().dump();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  int heavy = 0, light = 0;
  std::istringstream lines(read_all(trace));
  for (std::string line; std::getline(lines, line);) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_object() || !e.contains("l")) continue;
    if (e["l"]["regs"] == 128) {
      EXPECT_EQ(e["l"]["smem"], 4096 + 1000) << line;
      ++heavy;
    } else {
      EXPECT_EQ(e["l"]["regs"], 32) << line;  // unknown: the daemon's default
      EXPECT_EQ(e["l"]["smem"], 0) << line;
      ++light;
    }
  }
  EXPECT_EQ(heavy, 10);  // 5 granted (submit) + 5 reported running (submit_running)
  EXPECT_EQ(light, 5);
}

// lithos_report_now: a program that ends with _exit() (tenant.py does, to
// skip CUDA teardown) still leaves its LITHOS_STATS_FILE report, and one that
// asked for it and then exits normally leaves one report, not two.
TEST_F(DaemonE2E, TheExitReportCanBeWrittenBeforeAnUnderscoreExit) {
  defer_ = true;
  start_daemon({"--best-effort-runs-free", "false"});
  for (const char* how : {"1", "2"}) {
    SCOPED_TRACE(std::string("CLIENT_REPORT_NOW=") + how);
    const fs::path file = dir_ / (std::string("report-") + how + ".json");
    extra_env_ = {std::string("CLIENT_REPORT_NOW=") + how, "LITHOS_STATS_FILE=" + file.string()};
    Proc c = client("train", 20, 0, 0, false, "", /*sync_every=*/5);
    ASSERT_EQ(c.wait(), 0) << c.err();
    const json r = json::parse(read_all(file.string()), nullptr, false);  // one object: written once
    ASSERT_TRUE(r.is_object()) << read_all(file.string());
    EXPECT_EQ(r["daemon"]["deferred"]["deferred"], 20) << r.dump();
    EXPECT_TRUE(r["daemon"]["deferred"]["drained_by"].is_object()) << r.dump();
  }
}

// Deferred launches when the daemon dies: queued launches wait at most the
// grant timeout, run on the fallback set, and the program ends normally
// (with tickets submitted ahead too).
TEST_F(DaemonE2E, DeferredLaunchesSurviveTheDaemonDying) {
  defer_ = true;
  for (const bool ahead : {false, true}) {
    SCOPED_TRACE(ahead ? "submitted ahead" : "submitted by the worker");
    extra_env_ = {std::string("LITHOS_SUBMIT_AHEAD=") + (ahead ? "1" : "0")};
    start_daemon({"--best-effort-runs-free", "false"});
    // Registered and granted some before the daemon dies, with launches
    // still to come (gate 20).
    gates_ = {20};
    Proc c = client("train", 200, 1, 0, false, "", /*sync_every=*/50);
    gates_.clear();
    ASSERT_TRUE(reaches_gate(c, 20)) << c.err();
    ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["grants"] >= 5; })) << status().dump();
    daemon_.signal(SIGKILL);
    daemon_.wait();
    open_gate(c, 20);
    ASSERT_EQ(c.wait(), 0) << c.err();
    EXPECT_EQ(syncs_all_made(c), 4);
    const json s = stats_of(c);
    ASSERT_TRUE(s.is_object());
    EXPECT_EQ(s["daemon"]["deferred"]["deferred"], 200) << s.dump();
    EXPECT_EQ(s["daemon"]["state"], "gone") << s.dump();
  }
}

// Stream priorities follow the engine (docs/daemon.md, "Hardware priority"):
// with --stream-priorities, under the lithos policy a high-priority tenant's
// launches go out at the context's greatest stream priority (the fake's -5)
// and a best-effort tenant's granted atoms at the least (0), each stream set
// once; LITHOS_HW_PRIORITY=0 leaves every stream as the application made it.
TEST_F(DaemonE2E, StreamPrioritiesFollowTheEngine) {
  start_daemon({"--best-effort-runs-free", "false", "--stream-priorities", "true"});
  gates_ = {kAfterLast};  // the service stays until the trainer is done
  Proc svc = client("svc", 10, 0, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  Proc be = client("train", 10, 0, 0);
  ASSERT_EQ(be.wait(), 0) << be.err();
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  ASSERT_EQ(launches_of(svc).size(), 10U);
  for (const json& j : launches_of(svc)) EXPECT_EQ(j["prio"], -5) << j.dump();
  ASSERT_EQ(launches_of(be).size(), 10U);
  for (const json& j : launches_of(be)) EXPECT_EQ(j["prio"], 0) << j.dump();
  const json hp = stats_of(svc)["daemon"]["stream_priority"];
  EXPECT_EQ(hp["immediate"], "highest") << hp.dump();
  EXPECT_EQ(hp["set"], 1) << hp.dump();  // once per stream, not per launch
  EXPECT_EQ(hp["failed"], 0) << hp.dump();
  EXPECT_EQ(stats_of(be)["daemon"]["stream_priority"]["set"], 1);

  extra_env_ = {"LITHOS_HW_PRIORITY=0"};
  Proc off = client("svc", 5, 0, 0);
  ASSERT_EQ(off.wait(), 0) << off.err();
  ASSERT_EQ(launches_of(off).size(), 5U);
  for (const json& j : launches_of(off)) EXPECT_TRUE(j["prio"].is_null()) << j.dump();
  EXPECT_EQ(stats_of(off)["daemon"]["stream_priority"]["set"], 0);
}

// A baseline policy runs the applications' own priorities: under
// mps-priority the service's stream is left alone (kNormal) and only the
// best-effort tenant's atoms go at the least priority.
TEST_F(DaemonE2E, BaselinePolicyKeepsTheServicesStreamPriority) {
  start_daemon({"--policy", "mps-priority", "--stream-priorities", "true"});
  gates_ = {kAfterLast};  // the service stays until the trainer is done
  Proc svc = client("svc", 10, 0, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  Proc be = client("train", 10, 0, 0);
  ASSERT_EQ(be.wait(), 0) << be.err();
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  ASSERT_EQ(launches_of(svc).size(), 10U);
  for (const json& j : launches_of(svc)) EXPECT_TRUE(j["prio"].is_null()) << j.dump();
  EXPECT_EQ(stats_of(svc)["daemon"]["stream_priority"]["immediate"], "application's own");
  ASSERT_EQ(launches_of(be).size(), 10U);
  for (const json& j : launches_of(be)) EXPECT_EQ(j["prio"], 0) << j.dump();
}

// By default (stream_priorities off) the daemon asks for no priority: every
// stream keeps the application's own.
TEST_F(DaemonE2E, StreamPrioritiesAreOffByDefault) {
  start_daemon({"--best-effort-runs-free", "false"});
  gates_ = {kAfterLast};  // the service stays until the trainer is done
  Proc svc = client("svc", 5, 0, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  Proc be = client("train", 5, 0, 0);
  ASSERT_EQ(be.wait(), 0) << be.err();
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  ASSERT_EQ(launches_of(svc).size(), 5U);
  ASSERT_EQ(launches_of(be).size(), 5U);
  for (const Proc* p : {&svc, &be}) {
    for (const json& j : launches_of(*p)) EXPECT_TRUE(j["prio"].is_null()) << j.dump();
    EXPECT_EQ(stats_of(*p)["daemon"]["stream_priority"]["set"], 0);
  }
}

// A best-effort CUDA graph whose descriptors were built before (here at
// instantiation, with no mask: every TPC) runs there whatever it is granted.
// The client says so (kSubmitPinned) and the engine grants it a set holding
// those TPCs only when no active high-priority tenant owns any of them: with
// a service whose launches stay in flight, the first graph waits until the
// service is gone, then runs on the whole GPU (and the rest run free).
TEST_F(DaemonE2E, BestEffortGraphsWaitForTheOwnersOfTheTpcsTheyRunOn) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace});
  gates_ = {kAfterLast};  // the service leaves once the graph is seen waiting
  Proc svc = client("svc", 3, 0, 0, /*markers_hang=*/true);
  gates_.clear();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] == 3; }));
  extra_env_ = {"CLIENT_GRAPH=1"};
  Proc be = client("train", 4, 0, 0);
  ASSERT_TRUE(wait_for([](const json& st) { return st["engine"]["deferred"].get<int>() >= 1; })) << status().dump();
  ASSERT_TRUE(reaches_gate(svc)) << svc.err();
  open_gate(svc);
  ASSERT_EQ(be.wait(), 0) << be.err();
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  const auto l = launches_of(be);
  ASSERT_EQ(l.size(), 4U);
  for (const json& j : l) {
    EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(j["tpcs"], "all");  // built unmasked
  }
  const json s = stats_of(be);
  const int grants = s["daemon"]["grants"].get<int>();
  EXPECT_GE(grants, 1) << s.dump();
  EXPECT_EQ(grants + s["daemon"]["reported"].get<int>(), 4) << s.dump();  // then it ran free
  EXPECT_EQ(s["daemon"]["fallbacks"], 0) << s.dump();
  EXPECT_GE(status()["engine"]["deferred"], 1) << status().dump();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  // In the trace: the graphs' submits carry the pinned set, and each was
  // dispatched on the whole GPU after the service's queue closed.
  std::ifstream f(trace);
  std::string line;
  std::int64_t svc_closed = -1;
  int pinned = 0, dispatched = 0;
  while (std::getline(f, line)) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.contains("e")) continue;
    if (e["e"] == "submit" && e.contains("l") && e["l"].contains("pinned")) {
      EXPECT_EQ(e["l"]["pinned"], "0-3");
      ++pinned;
    }
    if (e["e"] == "close_queue" && svc_closed < 0) svc_closed = e["t"].get<std::int64_t>();
    if (e["e"] == "dispatch") {
      for (const json& a : e["atoms"]) {
        EXPECT_EQ(a["tpcs"], "0-3") << a.dump();
        EXPECT_GE(e["t"].get<std::int64_t>(), svc_closed) << "dispatched while the service was active";
        ++dispatched;
      }
    }
  }
  EXPECT_EQ(pinned, grants);
  EXPECT_EQ(dispatched, grants);
  EXPECT_GE(svc_closed, 0);
  // The pinned sets are in the trace: it replays to the same decisions.
  auto t = lithos::daemon::parse_trace_file(read_all(trace), trace);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto r = lithos::daemon::replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;
}

// A best-effort CUDA graph is replayed node by node beside a busy service
// (graph_replay.hpp): each kernel node is a granted launch of its own, the
// memset and the child graph's kernel go in the graph's order (a topological
// order of the edges, not the driver's node list), the empty node is dropped,
// and the exec itself is never launched. With and without deferred launches.
TEST_F(DaemonE2E, BestEffortGraphsReplayNodeByNode) {
  start_daemon({});
  // One service, busy throughout (its launches never complete), so that the
  // best-effort client never runs free.
  gates_ = {kAfterLast};
  Proc svc = client("svc", 3, 0, 0, /*markers_hang=*/true);
  gates_.clear();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] == 3; }));
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "deferred" : "in place");
    defer_ = defer;
    extra_env_ = {"CLIENT_GRAPH=2"};
    Proc be = client("train", 2, 0, 0);
    ASSERT_EQ(be.wait(), 0) << be.err();
    for (const json& j : launches_of(be)) EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(ops_of(be), "K16,M,K32,K8,K16,M,K32,K8");
    const json s = stats_of(be);
    const json& r = s["daemon"]["graph_replay"];
    EXPECT_EQ(r["plans"], 1) << r.dump();
    EXPECT_EQ(r["replays"], 2) << r.dump();
    EXPECT_EQ(r["steps"], 8) << r.dump();  // 3 kernels + 1 memset per replay
    EXPECT_EQ(r["whole"], 0) << r.dump();
    EXPECT_EQ(s["daemon"]["grants"], 6) << s.dump();  // one per kernel node
    EXPECT_EQ(s["daemon"]["fallbacks"], 0) << s.dump();
  }
  svc.signal(SIGKILL);
  svc.wait();
}

// Graphs that cannot be replayed node by node run whole, one grant each: a
// memory allocation node, an exec changed after instantiation, a graph
// instantiated for device launch, and any graph of a high-priority tenant
// (its replay keeps its allocation).
TEST_F(DaemonE2E, GraphsNotReplayableRunWhole) {
  start_daemon({});
  // A service, busy (its launches never complete) until the first graph
  // waits for its TPCs: the trainer does not run free at its first launch.
  gates_ = {kAfterLast};
  Proc svc = client("svc", 3, 0, 0, /*markers_hang=*/true);
  gates_.clear();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] == 3; }));
  extra_env_ = {"CLIENT_GRAPH=3"};
  Proc alloc = client("train", 2, 0, 0);
  ASSERT_TRUE(wait_for([this](const json& st) { return tenant(st, "train")["pending_launches"].get<int>() >= 1; }))
      << status().dump();
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  ASSERT_EQ(alloc.wait(), 0) << alloc.err();
  EXPECT_EQ(ops_of(alloc), "G,G");
  json r = stats_of(alloc)["daemon"]["graph_replay"];
  EXPECT_EQ(r["plans"], 0) << r.dump();
  EXPECT_EQ(r["whole"], 2) << r.dump();
  EXPECT_EQ(r["refused"]["a memory allocation node"], 1) << r.dump();

  extra_env_ = {"CLIENT_GRAPH=2", "CLIENT_GRAPH_EDIT=1"};
  Proc edited = client("train", 2, 0, 0);
  ASSERT_EQ(edited.wait(), 0) << edited.err();
  EXPECT_EQ(ops_of(edited), "G,G");
  r = stats_of(edited)["daemon"]["graph_replay"];
  EXPECT_EQ(r["plans"], 1) << r.dump();
  EXPECT_EQ(r["edited"], 1) << r.dump();
  EXPECT_EQ(r["replays"], 0) << r.dump();
  EXPECT_EQ(r["whole"], 2) << r.dump();
  extra_env_ = {"CLIENT_GRAPH=2", "CLIENT_GRAPH_FLAGS=4"};  // CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
  Proc device = client("train", 2, 0, 0);
  ASSERT_EQ(device.wait(), 0) << device.err();
  EXPECT_EQ(ops_of(device), "G,G");
  r = stats_of(device)["daemon"]["graph_replay"];
  EXPECT_EQ(r["plans"], 0) << r.dump();
  EXPECT_EQ(r["refused"]["instantiated for device launch"], 1) << r.dump();

  extra_env_ = {"CLIENT_GRAPH=2"};
  Proc hp = client("svc", 2, 0, 0);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  EXPECT_EQ(ops_of(hp), "G,G");
  r = stats_of(hp)["daemon"]["graph_replay"];
  EXPECT_EQ(r["plans"], 0) << r.dump();
  EXPECT_EQ(r["replays"], 0) << r.dump();
}

// A best-effort graph launched whole before its descriptors exist (they are
// built at its first launch and keep that launch's set for every replay) is
// granted every TPC its tenant may use, not the one TPC a one-block launch
// would get: its kernels are not described to the daemon.
TEST_F(DaemonE2E, UnbuiltBestEffortGraphsAreGrantedAWholeSet) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon({"--trace", trace});
  gates_ = {kAfterLast};
  Proc svc = client("svc", 3, 0, 0, /*markers_hang=*/true);  // busy throughout
  gates_.clear();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] == 3; }));
  extra_env_ = {"CLIENT_GRAPH=1", "FAKE_GRAPH_BUILD_AT_LAUNCH=1"};
  Proc be = client("train", 2, 0, 0);
  ASSERT_EQ(be.wait(), 0) << be.err();
  svc.signal(SIGKILL);
  svc.wait();
  const auto l = launches_of(be);
  ASSERT_EQ(l.size(), 2U);
  EXPECT_EQ(l[0]["tpcs"], "2,3");  // built at the first launch, on the TPCs svc does not own
  EXPECT_EQ(l[1]["tpcs"], "2,3");  // and replayed with them
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  std::ifstream f(trace);
  std::string line;
  int unpinned = 0;
  while (std::getline(f, line)) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || e.value("e", "") != "submit" || !e.contains("l") || e["l"].contains("pinned")) continue;
    if (e["l"]["indivisible"] == true) ++unpinned;
  }
  EXPECT_EQ(unpinned, 1);  // the first launch; the second is pinned to what the first was built with
}

// The same graph while no service has a stream open (the best-effort tenant
// runs free) and while the service is connected but idle: its first launch
// still waits for a grant, and the Engine builds it on the TPCs no quota
// holds, not on the idle service's too, since the set lasts for every replay
// (before: built on the whole GPU, so every later replay beside the service
// waited for it to be idle and then held its quota). The same when the
// graph is uploaded before its first launch (as PyTorch does): the upload
// builds the descriptors and takes the grant.
TEST_F(DaemonE2E, UnbuiltBestEffortGraphsAreBuiltOnTpcsTheyMayKeep) {
  start_daemon({});
  for (const auto& [svc_idle, upload] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
    SCOPED_TRACE(std::string(svc_idle ? "service connected, idle" : "no service: runs free") +
                 (upload ? ", uploaded first" : ""));
    std::optional<Proc> svc;
    if (svc_idle) {
      extra_env_ = {};
      const json before = status()["counters"];
      gates_ = {kAfterLast};
      svc.emplace(client("svc", 1, 0, 0));  // one launch, then idle with its stream open
      gates_.clear();
      // Its launch reported and seen complete: idle from then on.
      ASSERT_TRUE(wait_for([&](const json& st) {
        return st["counters"]["running_launches"] > before["running_launches"] &&
               st["counters"]["completions"] > before["completions"];
      })) << svc->err();
    }
    extra_env_ = {"CLIENT_GRAPH=1", "FAKE_GRAPH_BUILD_AT_LAUNCH=1"};
    if (upload) extra_env_.emplace_back("CLIENT_GRAPH_UPLOAD=1");
    Proc be = client("train", 2, 0, 0);
    ASSERT_EQ(be.wait(), 0) << be.err();
    const auto l = launches_of(be);
    ASSERT_EQ(l.size(), 2U);
    EXPECT_EQ(l[0]["tpcs"], "2,3");
    EXPECT_EQ(l[1]["tpcs"], "2,3");
    const json st = stats_of(be);
    EXPECT_GE(st["daemon"]["grants"].get<int>(), 1) << "the first build took its set from the daemon";
    // Later launches while running free are given the set it was built with.
    EXPECT_EQ(st["graph_stale"], 0) << st.dump();
    if (svc) {
      svc->signal(SIGKILL);
      svc->wait();
    }
  }
}

// Best-effort launches into a stream being captured are recorded, not run:
// they wait for no grant and write no completion marker (a marker would be
// captured into the graph and replayed with it), with and without deferred
// launches.
TEST_F(DaemonE2E, BestEffortLaunchesUnderCaptureTakeNoGrant) {
  start_daemon({});
  gates_ = {kAfterLast};  // busy while the captures run
  Proc svc = client("svc", 3, 0, 0, /*markers_hang=*/true);
  gates_.clear();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["running_launches"] == 3; }));
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "deferred" : "in place");
    defer_ = defer;
    extra_env_ = {"CLIENT_CAPTURE=1"};
    Proc be = client("train", 5, 0, 0);
    ASSERT_EQ(be.wait(), 0) << be.err();
    const auto l = launches_of(be);
    ASSERT_EQ(l.size(), 5U);
    for (const json& j : l) EXPECT_EQ(j["rc"], 0);
    EXPECT_EQ(printed(be, "value_writes"), 0);
    const json s = stats_of(be);
    EXPECT_EQ(s["daemon"]["grants"], 0) << s.dump();
    EXPECT_EQ(s["daemon"]["submits"], 0) << s.dump();
  }
  open_gate(svc);
  ASSERT_EQ(svc.wait(), 0) << svc.err();
  // A high-priority process whose first launches are captured: it registers
  // inside the capture too (relaxed), its capture ends, and no completion
  // marker is captured into the graph.
  extra_env_ = {"CLIENT_CAPTURE=1"};
  Proc hp = client("svc", 5, 0, 0);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  EXPECT_EQ(printed(hp, "value_writes"), 0);
  EXPECT_EQ(stats_of(hp)["daemon"]["state"], "connected") << stats_of(hp).dump();
}

// The tracker's marker and a capture the application begins at that moment:
// the tracker looks whether the stream is being captured, then writes, and a
// capture begun in between would take the marker into its graph. Two quick
// launches leave the stream dirty, the capture begins 1 ms later, and the
// fake driver takes 2 ms to answer whether a stream is captured, so that
// the capture begins while the tracker is between its look and its write:
// the capture's beginning waits for the tracker (hold_markers), and no
// marker is written while the capture runs.
TEST_F(DaemonE2E, ACaptureNeverBeginsBetweenTheTrackersLookAndItsMarker) {
  start_daemon({});
  extra_env_ = {"CLIENT_CAPTURE=1", "CLIENT_CAPTURE_AFTER=2", "CLIENT_CAPTURE_GAP_US=1000",
                "FAKE_ISCAPTURING_DELAY_US=2000"};
  // Held 50 ms after the capture ends: the tracker marks the stream by then
  // whatever the machine's load did to its timing.
  Proc hp = client("svc", 4, 0, 50);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  EXPECT_EQ(printed(hp, "captured_value_writes"), 0);
  // On a loaded machine the second launch may come over 50 us after the
  // first: it then writes its own marker, and the tracker has nothing to do.
  if (stats_of(hp)["daemon"]["tracker_markers"] == 0) GTEST_SKIP() << "the tracker had no marker to write";
}

// With share_unowned = false a high-priority tenant's launches made now go
// on its quota and on the unowned TPCs no other tenant's atom holds, but
// its CUDA graphs keep the set they are built with for every replay, so
// they are built on the lasting set (every TPC no other high-priority
// tenant owns), whatever runs at that moment. A best-effort atom is kept in
// flight on the unowned TPCs for seconds (a predictor cache that says its
// kernel's waves take 8.6 s, and completion markers that never land), and
// one eager and one graph client of the service run beside it.
TEST_F(DaemonE2E, HighPriorityGraphsAreBuiltOnTheLastingSet) {
  const fs::path cache = dir_ / "state" / "predictor.cache";
  start_daemon();
  gates_ = {kAfterLast};  // until its launches are seen to end
  Proc learn = client("train", 5, 1, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(learn)) << learn.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["completions"] == 5; })) << status().dump();
  open_gate(learn);
  ASSERT_EQ(learn.wait(), 0) << learn.err();
  daemon_.signal(SIGTERM);
  ASSERT_EQ(daemon_.wait(), 0) << daemon_.err();
  // Every entry's wave time becomes 2^33 ns.
  std::stringstream slow;
  {
    std::ifstream in(cache);
    std::string line;
    int entries = 0;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::vector<std::string> w{std::istream_iterator<std::string>(f), std::istream_iterator<std::string>()};
      if (!w.empty() && (w[0] == "k" || w[0] == "K")) {
        w[w.size() - 2] = "1p+33";
        ++entries;
        line.clear();
        for (const std::string& s : w) line += (line.empty() ? "" : " ") + s;
      }
      slow << line << '\n';
    }
    ASSERT_GE(entries, 1) << read_all(cache.string());
  }
  std::ofstream(cache) << slow.str();

  // A second high-priority tenant owns one TPC: the lasting set is the
  // other three, which a descriptor shows as a mask (the whole GPU shows
  // as no mask at all, as a launch lithos left alone would).
  std::ofstream(config_, std::ios::app) << "[[tenant]]\nname = \"other\"\npriority = \"high\"\nquota = 1\n";
  start_daemon({"--share-unowned", "false", "--best-effort-runs-free", "false"});
  ASSERT_GE(status()["predictor"]["cache"]["loaded_entries"], 1) << status().dump();
  // The settings it runs with, flags included.
  EXPECT_EQ(status()["settings"]["share_unowned"], false) << status().dump();
  EXPECT_EQ(status()["settings"]["hp_holds_unowned"], true) << status().dump();
  EXPECT_EQ(status()["settings"]["best_effort_runs_free"], false) << status().dump();
  gates_ = {kAfterLast};  // its atom in flight until the end
  Proc be = client("train", 1, 0, 0, /*markers_hang=*/true);
  gates_.clear();
  ASSERT_TRUE(wait_for([&](const json& st) { return tenant(st, "train")["inflight_atoms"].get<int>() >= 1; }))
      << status().dump();
  const json train = tenant(status(), "train");
  const auto held = TpcSet::parse(train["held"].get<std::string>());
  ASSERT_TRUE(held.is_ok()) << train.dump();
  ASSERT_EQ(held->count(), 4) << train.dump();  // borrowed and unowned TPCs alike

  Proc eager = client("svc", 2, 0, 0);
  extra_env_ = {"CLIENT_GRAPH=1"};
  Proc graph = client("svc", 2, 0, 0);
  ASSERT_EQ(eager.wait(), 0) << eager.err();
  ASSERT_EQ(graph.wait(), 0) << graph.err();
  const json st = status();
  ASSERT_EQ(tenant(st, "svc")["owned"], "0-1") << st.dump();
  const auto other = TpcSet::parse(tenant(st, "other")["owned"].get<std::string>());
  ASSERT_TRUE(other.is_ok() && other->count() == 1) << st.dump();
  std::string lasting;  // as the client prints a mask: "0,1,3"
  for (int t = 0; t < 4; ++t)
    if (!other->test(t)) lasting += (lasting.empty() ? "" : ",") + std::to_string(t);
  const auto e = launches_of(eager);
  const auto g = launches_of(graph);
  ASSERT_EQ(e.size(), 2U);
  ASSERT_EQ(g.size(), 2U);
  for (const json& j : e) EXPECT_EQ(j["tpcs"], "0,1") << j.dump();    // now: the quota, the atom's TPC left out
  for (const json& j : g) EXPECT_EQ(j["tpcs"], lasting) << j.dump();  // lasting: every TPC no other hp tenant owns
  EXPECT_EQ(stats_of(graph)["graph_launches"], 2) << stats_of(graph).dump();
  be.signal(SIGKILL);
  be.wait(5);
}

// Right-sizing of a high-priority tenant's eager launches: once lithosd has
// published a size for a kernel (here its test hook, standing in for the
// Engine's choice, after the first launch's report), the next launches of
// that kernel go out on that many TPCs of the allocation, lowest first, and
// their reports say so.
TEST_F(DaemonE2E, RightSizedHighPriorityLaunchesGoOutOnFewerTpcs) {
  daemon_env_ = {"LITHOS_TEST_RIGHT_SIZE=4096:1"};
  start_daemon();
  gates_ = {1};
  Proc hp = client("svc", 3, 0, 0);
  gates_.clear();
  ASSERT_TRUE(reaches_gate(hp, 1)) << hp.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["right_sizes_published"] == 1; })) << status().dump();
  open_gate(hp, 1);
  ASSERT_EQ(hp.wait(), 0) << hp.err();
  const auto l = launches_of(hp);
  ASSERT_EQ(l.size(), 3U);
  EXPECT_EQ(l[0]["tpcs"], "all") << l[0].dump();  // the allocation: every TPC (no other hp tenant)
  EXPECT_EQ(l[1]["tpcs"], "0") << l[1].dump();    // one TPC: the allocation's lowest
  EXPECT_EQ(l[2]["tpcs"], "0") << l[2].dump();
  EXPECT_EQ(stats_of(hp)["right_size"]["launches"], 2) << stats_of(hp).dump();
  EXPECT_TRUE(wait_for([](const json& st) {
    return st["counters"]["running_launches"] == 3 && st["counters"]["narrowed_reports"] == 2;
  })) << status().dump();
}

// Right-sizing of a high-priority tenant's CUDA graph, per kernel node: the
// fake driver builds one descriptor per kernel node (grid widths 32, 8 in a
// child graph, 16); the nodes whose kernel and grid have a size get their
// own masks, the one without keeps the lasting set (the whole GPU here).
TEST_F(DaemonE2E, RightSizedHighPriorityGraphNodesGetMasksOfTheirOwn) {
  daemon_env_ = {"LITHOS_TEST_RIGHT_SIZE=16:1,32:2"};
  start_daemon();
  // Eager launches of the graph's kernel at its nodes' grids: the hook
  // publishes their sizes for the tenant, which later clients get too.
  grid_ = "16";
  Proc a = client("svc", 1, 0, 0);
  ASSERT_EQ(a.wait(), 0) << a.err();
  grid_ = "32";
  Proc b = client("svc", 1, 0, 0);
  ASSERT_EQ(b.wait(), 0) << b.err();
  ASSERT_TRUE(wait_for([](const json& st) { return st["counters"]["right_sizes_published"] == 2; })) << status().dump();
  grid_ = "4096";
  extra_env_ = {"CLIENT_GRAPH=2", "FAKE_GRAPH_NODE_DESCRIPTORS=1"};
  Proc g = client("svc", 1, 0, 0);
  ASSERT_EQ(g.wait(), 0) << g.err();
  json nodes;
  for (const json& j : g.lines())
    if (j.contains("node_tpcs")) nodes = j["node_tpcs"];
  EXPECT_EQ(nodes, json::array({"0,1", "all", "0"})) << nodes.dump();
  const json rs = stats_of(g)["right_size"];
  EXPECT_EQ(rs["graph_nodes_matched"], 3) << rs.dump();
  EXPECT_EQ(rs["graph_nodes_unmatched"], 0) << rs.dump();
  EXPECT_EQ(rs["graph_nodes_rightsized"], 2) << rs.dump();
}
