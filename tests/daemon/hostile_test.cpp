// lithosd against hostile clients (docs/daemon.md, "Hostile clients"): the
// real `lithos daemon` over the fake GPU's slot map, attacked by raw-protocol
// clients (hostile_client.cpp, one mode per attack), beside well-behaved
// clients (the raw "victim", and where liblithos.so can be preloaded a
// daemon_client_app over the fake driver). Every test asserts that the
// daemon survives and answers, that the attacker is held to its bounds and
// dropped or refused with the reason logged and counted, and that the
// others finish without being dropped.
//
// Bounds in the fixture's configuration are small, so that each attack
// reaches them at once (the defaults are for real machines); its timeouts
// are seconds, so that a well-behaved client that the loaded machine does
// not run for a while is not taken for a stopped one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"

extern char** environ;

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using lithos::test::Proc;
using lithos::test::read_all;
using lithos::test::since;
using lithos::test::wait_until;

class DaemonHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lithos-hostile-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Another uid's clients must reach the socket.
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec |
                              fs::perms::group_read | fs::perms::others_read);
    sock_ = (dir_ / "lithosd.sock").string();
    config_ = (dir_ / "lithosd.toml").string();
  }
  void TearDown() override {
    for (Proc* p : procs_) {
      p->signal(SIGCONT);
      p->signal(SIGKILL);
      p->wait(5);
    }
    daemon_.signal(SIGKILL);
    daemon_.wait(5);
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // The fixture's configuration, with `extra` lines in [daemon] (which
  // override the ones here: TOML refuses a key twice, so they replace it).
  void write_config(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> keys = {"policy = \"lithos\"",           "mps = \"off\"",
                                     "best_effort_runs_free = false", "max_clients = 64",
                                     "max_clients_per_uid = 16",      "max_connecting_per_uid = 8",
                                     "max_pending_launches = 64",     "max_inflight = 256",
                                     "max_queued_grants = 64",        "client_timeout_ms = 3000",
                                     "progress_timeout_ms = 5000"};
    for (const std::string& e : extra) {
      const std::string name = e.substr(0, e.find(' '));
      std::erase_if(keys, [&](const std::string& k) { return k.rfind(name + " ", 0) == 0; });
      keys.push_back(e);
    }
    std::ofstream f(config_);
    f << "[daemon]\n";
    for (const std::string& k : keys) f << k << "\n";
    f << "[[tenant]]\nname = \"svc\"\npriority = \"high\"\nquota = 2\n"
         "[[tenant]]\nname = \"train\"\npriority = \"best-effort\"\n"
         "[[tenant]]\nname = \"flood\"\npriority = \"best-effort\"\n"
         "[[tenant]]\nname = \"default\"\npriority = \"best-effort\"\n";
  }

  // `lithos daemon` on this configuration; `nofile`: under that descriptor
  // limit (soft and hard).
  void start_daemon(int nofile = 0) {
    if (!fs::exists(config_)) write_config();
    std::vector<std::string> argv = {LITHOS_EXE, "daemon",   "--slot-map", LITHOS_FAKE_MAP, "--config",
                                     config_,    "--socket", sock_,        "--state-dir",   (dir_ / "state").string()};
    if (nofile > 0) {
      std::vector<std::string> sh = {"/bin/sh", "-c", "ulimit -n " + std::to_string(nofile) + " && exec \"$@\"", "sh"};
      sh.insert(sh.end(), argv.begin(), argv.end());
      argv = sh;
    }
    daemon_ = Proc::spawn(argv, {}, (dir_ / "daemon.log").string());
    ASSERT_GT(daemon_.pid, 0);
    ASSERT_TRUE(wait_until([&] { return status().is_object(); }, 20)) << "lithosd did not come up: " << daemon_.err();
  }

  // `lithos status --json`, through the socket; null when no daemon answers
  // (or its answer is not JSON).
  json status() const { return lithos::test::lithosd_status(sock_, 200, 2000); }
  // Waits until `pred(status)` holds.
  template <class Pred>
  bool wait_status(Pred pred, double timeout_s = 30) const {
    return wait_until(
        [&] {
          const json st = status();
          return st.is_object() && pred(st);
        },
        timeout_s);
  }
  static std::uint64_t reason(const json& st, const char* r) {
    return st["counters"]["drop_reasons"].value(r, std::uint64_t{0});
  }
  static json tenant(const json& st, const std::string& name) {
    for (const json& t : st["tenants"])
      if (t["name"] == name) return t;
    return nullptr;
  }

  // A hostile_client; kept until the test ends (killed then).
  Proc& hostile(const std::string& mode, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {LITHOS_HOSTILE, sock_, mode};
    argv.insert(argv.end(), args.begin(), args.end());
    owned_.push_back(std::make_unique<Proc>(
        Proc::spawn(argv, {}, (dir_ / (mode + "-" + std::to_string(owned_.size()) + ".out")).string())));
    procs_.push_back(owned_.back().get());
    EXPECT_GT(owned_.back()->pid, 0);
    return *owned_.back();
  }
  // The raw victim: `launches` best-effort launches of tenant train, each
  // waiting for its grant; its result line.
  json victim(int launches, int pause_us, const std::vector<std::string>& more = {}) {
    std::vector<std::string> args = {"tenant=train", "launches=" + std::to_string(launches),
                                     "pause_us=" + std::to_string(pause_us)};
    args.insert(args.end(), more.begin(), more.end());
    Proc& v = hostile("victim", args);
    const int rc = v.wait(120);
    EXPECT_EQ(rc, 0) << v.err() << read_all(v.out);
    const json r = v.printed("victim");
    return r.is_object() ? r["victim"] : json(nullptr);
  }
  static bool root() { return ::geteuid() == 0; }
  // Another uid for attackers when this test runs as root, else none.
  static std::vector<std::string> other_uid() {
    return root() ? std::vector<std::string>{"uid=65534"} : std::vector<std::string>{};
  }

#ifdef LITHOS_CLIENT_APP
  // A liblithos.so client over the fake driver (tests/daemon/client_app.cpp).
  Proc& app(const std::string& tenant, int launches, int pause_ms, int hold_ms = 0) {
    const std::vector<std::string> env = {"LD_PRELOAD=" LITHOS_PRELOAD, "LD_LIBRARY_PATH=" LITHOS_FAKE_DRIVER_DIR,
                                          "LITHOS_LOG=error", "LITHOS_DAEMON=" + sock_, "LITHOS_TENANT=" + tenant,
                                          "LITHOS_SLOT_MAP=" LITHOS_FAKE_MAP,
                                          // No test here stops the daemon: a loaded machine must not
                                          // make a client take it for gone, or launch before it is
                                          // registered.
                                          "LITHOS_GRANT_TIMEOUT_MS=60000", "LITHOS_REGISTER_WAIT_MS=20000",
                                          // Each launch made (and granted) in the launching thread: its
                                          // statistics then count every grant before it prints them.
                                          "LITHOS_DEFER_LAUNCHES=0"};
    owned_.push_back(std::make_unique<Proc>(Proc::spawn(
        {LITHOS_CLIENT_APP, std::to_string(launches), std::to_string(pause_ms), std::to_string(hold_ms), "4096"}, env,
        (dir_ / ("app-" + tenant + "-" + std::to_string(owned_.size()) + ".out")).string())));
    procs_.push_back(owned_.back().get());
    return *owned_.back();
  }
  // Its statistics (lithos_stats_json's `daemon` member), after it exited 0.
  static json app_stats(Proc& p) {
    const int rc = p.wait(120);
    EXPECT_EQ(rc, 0) << p.err();
    const json s = p.printed("stats");
    return s.is_object() ? s["stats"]["daemon"] : json(nullptr);
  }
#endif

  // What every test checks at its end: the daemon still runs and answers.
  // (How long its turns took is the benchmark's to say,
  // scripts/daemon/hostile_bench.py: on a loaded machine a turn's wall time
  // includes the time the thread did not run.)
  void expect_alive() {
    EXPECT_TRUE(daemon_.running()) << daemon_.err();
    EXPECT_TRUE(status().is_object()) << daemon_.err();
  }

  fs::path dir_;
  std::string sock_, config_;
  Proc daemon_;
  std::vector<std::unique_ptr<Proc>> owned_;
  std::vector<Proc*> procs_;
};

// A client whose executable name is not UTF-8 (Latin-1 "été"): the name is
// made valid UTF-8 at its Hello ("?t?"), and `lithos status` (JSON, the
// table, Prometheus) goes on answering. Before, the status request made
// lithosd exit (nlohmann's type_error.316) and every client fell back.
TEST_F(DaemonHostile, ANameThatIsNotUtf8IsMadeValid) {
  start_daemon();
  Proc& h = hostile("hello", {"program=latin1", "tenant=train", "seconds=30"});
  ASSERT_TRUE(wait_status([](const json& st) { return st["clients"].size() == 1; })) << daemon_.err();
  const json st = status();
  EXPECT_EQ(st["clients"][0]["program"], "?t?");
  for (const std::vector<std::string>& form : std::vector<std::vector<std::string>>{{}, {"--json"}, {"--prometheus"}}) {
    std::vector<std::string> argv = {LITHOS_EXE, "status", "--socket", sock_};
    argv.insert(argv.end(), form.begin(), form.end());
    Proc s = Proc::spawn(argv, {}, (dir_ / ("status" + std::to_string(form.size()) + ".txt")).string());
    EXPECT_EQ(s.wait(), 0) << s.err();
  }
  // Still registered: not dropped for its name.
  EXPECT_TRUE(h.running());
  EXPECT_EQ(status()["counters"]["clients_dropped"], 0);
  expect_alive();
}

// A best-effort client that pushes launches as fast as its ring takes them
// and never takes a grant: the daemon holds at most max_pending_launches of
// them, then stops reading its ring (throttled), and drops it once it made
// no progress for progress_timeout_ms, with the reason logged and counted.
// Before, it took every launch (a million in 4.5 s, RSS 5 MB -> 558 MB, turns
// of seconds) and a victim beside it reconnected 5 times. Victims here
// finish every launch, never dropped, never falling back.
TEST_F(DaemonHostile, ASubmitFloodIsThrottledThenDropped) {
  start_daemon();
  Proc& attacker = hostile("submit-flood", {"tenant=flood", "streams=8", "seconds=60"});
  ASSERT_TRUE(wait_status([](const json& st) { return st["counters"]["throttles"] >= 1; })) << daemon_.err();
  // Held to the bound while it floods, the client's own and its tenant's.
  json st = status();
  EXPECT_LE(tenant(st, "flood")["pending_launches"].get<int>(), 64) << st.dump();
  const json v = victim(200, 1000);
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["grants"], 200);
  EXPECT_EQ(v["dropped"], false);
#ifdef LITHOS_CLIENT_APP
  Proc& a = app("train", 100, 2);
  const json s = app_stats(a);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["grants"], 100);
  EXPECT_EQ(s["fallbacks"], 0);
  EXPECT_EQ(s["reconnects"], 0);
#endif
  ASSERT_TRUE(wait_status([](const json& s2) { return reason(s2, "flood") == 1; })) << daemon_.err();
  st = status();
  EXPECT_LE(st["counters"]["max_client_pending_launches"].get<int>(), 64) << st["counters"].dump();
  EXPECT_LE(st["counters"]["max_client_queued_grants"].get<int>(), 64) << st["counters"].dump();
  EXPECT_EQ(tenant(st, "flood")["pending_launches"], 0);
  EXPECT_EQ(tenant(st, "flood")["inflight_atoms"], 0);
  EXPECT_EQ(st["counters"]["clients_dropped"], 1);
  EXPECT_EQ(reason(st, "flood"), 1);
  ASSERT_TRUE(wait_until([&] { return attacker.printed("closed_after_s").is_object(); })) << read_all(attacker.out);
  // Logged with who it was and why.
  const std::string log = daemon_.err();
  EXPECT_NE(log.find("dropped a client (pid " + std::to_string(attacker.pid) + ", uid " + std::to_string(::geteuid()) +
                     ", program hostile, tenant flood): flood: client "),
            std::string::npos)
      << log;
  // And counted for a collector.
  Proc prom = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus"}, {}, (dir_ / "prom.txt").string());
  ASSERT_EQ(prom.wait(), 0) << prom.err();
  EXPECT_NE(read_all(prom.out).find("\nlithos_client_drops_total{reason=\"flood\"} 1\n"), std::string::npos)
      << read_all(prom.out);
  expect_alive();
}

// A high-priority client that reports launches as running and never marks
// one: at most max_inflight are accounted, then it is not read, and it is
// dropped for making no progress; everything it held is given back. A tight
// hp launch loop of the same tenant beside it loses no report and is not
// dropped.
TEST_F(DaemonHostile, RunningReportsWithoutMarkersAreBounded) {
  start_daemon();
  Proc& attacker = hostile("running-flood", {"tenant=svc", "streams=4", "seconds=60"});
  ASSERT_TRUE(wait_status([](const json& st) { return st["counters"]["throttles"] >= 1; })) << daemon_.err();
  json st = status();
  EXPECT_LE(tenant(st, "svc")["inflight_atoms"].get<int>(), 256) << st.dump();
#ifdef LITHOS_CLIENT_APP
  Proc& a = app("svc", 3000, 0, 200);
#endif
  ASSERT_TRUE(wait_status([](const json& s2) { return reason(s2, "flood") + reason(s2, "no_progress") == 1; }))
      << daemon_.err();
  st = status();
  EXPECT_LE(st["counters"]["max_client_inflight"].get<int>(), 256) << st["counters"].dump();
  EXPECT_GE(st["counters"]["reclaimed_atoms"].get<int>(), 256) << st["counters"].dump();
  EXPECT_TRUE(wait_until([&] { return attacker.printed("closed_after_s").is_object(); }));
#ifdef LITHOS_CLIENT_APP
  const json s = app_stats(a);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["reported"], 3000) << s.dump();
  EXPECT_EQ(s["dropped_reports"], 0) << s.dump();
  EXPECT_EQ(s["reconnects"], 0) << s.dump();
  EXPECT_EQ(status()["counters"]["clients_dropped"], 1);
#endif
  ASSERT_TRUE(wait_status([](const json& s2) { return tenant(s2, "svc")["inflight_atoms"] == 0; }));
  expect_alive();
}

// A client that writes bytes to its socket nonstop (doorbells without
// launches): the daemon reads a bounded batch, then does not read that
// socket for a while (kBellMuteNs), so the flood cannot keep its idle loop
// awake (before, 94% of a core); it still sees the client hang up at once.
TEST_F(DaemonHostile, ADoorbellFloodIsMutedAndItsHangUpSeen) {
  start_daemon();
  const auto t0 = std::chrono::steady_clock::now();
  Proc& attacker = hostile("doorbell", {"tenant=train", "seconds=2"});
  ASSERT_EQ(attacker.wait(), 0) << attacker.err();
  const double flood_s = since(t0);
  ASSERT_TRUE(wait_status([](const json& st) { return st["counters"]["clients_gone"] == 1 && st["clients"].empty(); }))
      << daemon_.err();
  const json st = status();
  EXPECT_GE(st["counters"]["doorbell_mutes"].get<int>(), 1) << st["counters"].dump();
  // At most one batch (64 packets) per mute period of 100 ms, and a batch
  // before the first: however fast the attacker rang (it says how much).
  const double bound = 64.0 * (flood_s * 10.0 + 3.0);
  EXPECT_LE(st["counters"]["doorbells"].get<double>(), bound)
      << st["counters"].dump() << " rang " << read_all(attacker.out);
  EXPECT_EQ(st["counters"]["clients_dropped"], 0);
  expect_alive();
}

// Connections that never say Hello: one uid holds at most
// max_connecting_per_uid of them (the rest are refused at once, told why),
// each is closed after the Hello timeout, and clients of other uids
// register meanwhile. Before, 512 such connections locked every client out.
TEST_F(DaemonHostile, SilentConnectionsOfOneUidLeaveRoomForOthers) {
  start_daemon();
  Proc& attacker = hostile("silent", [] {
    std::vector<std::string> a = {"count=30", "seconds=10"};
    for (const std::string& u : other_uid()) a.push_back(u);
    return a;
  }());
  ASSERT_TRUE(wait_until([&] { return attacker.printed("refused").is_object(); })) << attacker.err();
  const json r = attacker.printed("refused");
  EXPECT_EQ(r["connected"], 30) << r.dump();
  EXPECT_EQ(r["refused"], 22) << r.dump();
  bool told = false;
  for (const auto& [message, n] : r["messages"].items())
    told = told || message.find("connections waiting for their Hello (max_connecting_per_uid)") != std::string::npos;
  EXPECT_TRUE(told) << r.dump();
  if (root()) {
    // Another uid registers and is served while they are held.
    const json v = victim(20, 0);
    ASSERT_TRUE(v.is_object());
    EXPECT_EQ(v["grants"], 20);
  }
  ASSERT_TRUE(wait_status([](const json& st) { return reason(st, "hello_timeout") == 8; })) << daemon_.err();
  const json st = status();
  EXPECT_EQ(reason(st, "uid_connecting"), 22) << st["counters"].dump();
  EXPECT_EQ(st["counters"]["connecting"], 0);
  EXPECT_NE(daemon_.err().find("refused a connection (pid " + std::to_string(attacker.pid)), std::string::npos)
      << daemon_.err();
  expect_alive();
}

// Registered clients: one uid holds at most max_clients_per_uid, and others
// register beside them.
TEST_F(DaemonHostile, ManyClientsOfOneUidLeaveRoomForOthers) {
  start_daemon();
  Proc& attacker = hostile("many", [] {
    std::vector<std::string> a = {"count=30", "seconds=30", "tenant=default"};
    for (const std::string& u : other_uid()) a.push_back(u);
    return a;
  }());
  ASSERT_TRUE(wait_until([&] { return attacker.printed("registered").is_object(); })) << attacker.err();
  const json r = attacker.printed("registered");
  EXPECT_EQ(r["registered"], 16) << r.dump();
  const std::string uid = root() ? "65534" : std::to_string(::geteuid());
  EXPECT_EQ(r["welcomes"].value("4: uid " + uid + " has 16 clients registered (max_clients_per_uid)", 0), 14)
      << r.dump();
  if (root()) {
    const json v = victim(20, 0);
    ASSERT_TRUE(v.is_object());
    EXPECT_EQ(v["grants"], 20);
  }
  const json st = status();
  EXPECT_EQ(reason(st, "uid_clients"), 14) << st["counters"].dump();
  expect_alive();
}

// A client that holds atoms and stops (SIGSTOP, here): its heartbeat stands
// still, and after client_timeout_ms it is dropped and its atoms are given
// back; it finds its connection closed when it runs again. Before, a
// stopped client's atoms stayed in flight for ever.
TEST_F(DaemonHostile, AStoppedClientsAtomsAreReclaimed) {
  write_config({"progress_timeout_ms = 600000"});  // the heartbeat alone decides
  start_daemon();
  Proc& held = hostile("hold", {"tenant=train", "count=2", "beat=1", "seconds=60"});
  ASSERT_TRUE(wait_until([&] { return held.printed("granted").is_object(); })) << held.err();
  ASSERT_TRUE(wait_status([](const json& st) { return tenant(st, "train")["inflight_atoms"] == 2; }));
  held.signal(SIGSTOP);
  ASSERT_TRUE(wait_status([](const json& st) {
    return reason(st, "stopped") == 1 && tenant(st, "train")["inflight_atoms"] == 0;
  })) << daemon_.err();
  const json st = status();
  EXPECT_GE(st["counters"]["reclaimed_atoms"].get<int>(), 2);
  EXPECT_EQ(reason(st, "no_progress"), 0);
  held.signal(SIGCONT);
  EXPECT_TRUE(wait_until([&] { return held.printed("closed_after_s").is_object(); })) << read_all(held.out);
  EXPECT_NE(daemon_.err().find("tenant train): stopped: client "), std::string::npos) << daemon_.err();
  // The others go on.
  const json v = victim(20, 0);
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["grants"], 20);
  expect_alive();
}

// Clients that take their grants and never write a completion marker: one
// that beats (alive) and one that never beat (its heartbeat is 0: judged by
// its progress alone) are both dropped for no progress after
// progress_timeout_ms, never as stopped.
TEST_F(DaemonHostile, AClientThatNeverMarksIsDroppedForNoProgress) {
  start_daemon();
  Proc& beating = hostile("hold", {"tenant=train", "count=2", "beat=1", "seconds=60"});
  Proc& silent = hostile("hold", {"tenant=flood", "count=2", "seconds=60"});
  ASSERT_TRUE(wait_status([](const json& st) { return reason(st, "no_progress") == 2; })) << daemon_.err();
  const json st = status();
  EXPECT_EQ(reason(st, "stopped"), 0) << st["counters"].dump();
  EXPECT_EQ(tenant(st, "train")["inflight_atoms"], 0);
  EXPECT_EQ(tenant(st, "flood")["inflight_atoms"], 0);
  EXPECT_TRUE(wait_until([&] { return beating.printed("closed_after_s").is_object(); }));
  EXPECT_TRUE(wait_until([&] { return silent.printed("closed_after_s").is_object(); }));
  expect_alive();
}

// Out of file descriptors (the daemon under `ulimit -n 48`, max_clients
// far beyond what fits): it says so at start, and a connection accept()
// cannot take is taken with the spare descriptor and refused with a message
// saying why, instead of the loop spinning on a listening socket that stays
// readable (before: 100% of a core, and no answer).
TEST_F(DaemonHostile, OutOfDescriptorsRefusesWithAMessage) {
  write_config({"max_connecting_per_uid = 4096", "max_clients = 1024"});
  start_daemon(48);
  EXPECT_NE(daemon_.err().find("lithosd: warning: max_clients (1024) needs about "), std::string::npos)
      << daemon_.err();
  const json before = status();
  ASSERT_TRUE(before.is_object());
  const auto t0 = std::chrono::steady_clock::now();
  Proc& attacker = hostile("silent", {"count=60", "seconds=3"});
  const pid_t attacker_pid = attacker.pid;
  ASSERT_TRUE(wait_until([&] { return attacker.printed("refused").is_object(); })) << attacker.err();
  const json r = attacker.printed("refused");
  EXPECT_GE(r["refused"].get<int>(), 1) << r.dump();
  bool told = false;
  for (const auto& [message, n] : r["messages"].items())
    told = told || message.find("lithosd is out of file descriptors") != std::string::npos;
  EXPECT_TRUE(told) << r.dump();
  ASSERT_EQ(attacker.wait(), 0);
  // Once they are gone, it answers again; meanwhile its loop slept (a
  // spinning loop turns hundreds of thousands of times a second, one that
  // sleeps in poll() about a thousand).
  ASSERT_TRUE(wait_status([](const json& st) { return st["counters"]["connecting"] == 0; })) << daemon_.err();
  const json after = status();
  const double turns_per_s =
      (after["counters"]["loops"].get<double>() - before["counters"]["loops"].get<double>()) / since(t0);
  EXPECT_LT(turns_per_s, 10000) << after["counters"].dump();
  EXPECT_GE(after["counters"]["accept_errors"].get<int>(), 1);
  EXPECT_GE(reason(after, "descriptors"), 1);
  EXPECT_NE(daemon_.err().find("refused a connection (pid " + std::to_string(attacker_pid) + ", uid " +
                               std::to_string(::geteuid()) + "): descriptors: lithosd is out of file "),
            std::string::npos)
      << daemon_.err();
  // And a client registers and is served.
  const json v = victim(20, 0);
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["grants"], 20);
  expect_alive();
}

}  // namespace
