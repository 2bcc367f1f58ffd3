// Power management end to end (docs/daemon.md, "Power"): the real `lithos
// daemon` over the fake driver, a client through liblithos.so, and the fake
// NVML (fake_nvml.cpp) whose SM clock the test moves through a file (as a
// GPU's clock moves by itself under power load) and which records every
// Set/ResetGpuLockedClocks in a log. Nothing waits for time to pass but for
// conditions, each with a bound that only matters when a test fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace {

using lithos::test::lithosd_status;
using lithos::test::Proc;
using lithos::test::wait_until;
using nlohmann::json;
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class DaemonPower : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lithos-power-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    sock_ = (dir_ / "lithosd.sock").string();
    clock_ = (dir_ / "clock").string();
    log_ = (dir_ / "clocks.log").string();
    state_ = (dir_ / "state").string();
    set_clock(1980);
  }
  void TearDown() override {
    client_.signal(SIGKILL);
    client_.wait(10);
    daemon_.signal(SIGKILL);
    daemon_.wait(10);
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void set_clock(int mhz) const { std::ofstream(clock_) << mhz << "\n"; }
  std::string clocks_log() const { return slurp(log_); }

  void start_daemon(const std::string& mode, const std::vector<std::string>& extra_env = {},
                    const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> env = {"LITHOS_NVML_LIBRARY=" LITHOS_FAKE_NVML, "FAKE_NVML_CLOCK_FILE=" + clock_,
                                    "FAKE_NVML_CLOCKS_LOG=" + log_};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<std::string> argv = {LITHOS_EXE, "daemon", "--slot-map",  LITHOS_FAKE_MAP, "--mps",   "off",
                                     "--socket", sock_,    "--state-dir", state_,          "--power", mode};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    daemon_ = Proc::spawn(argv, env, (dir_ / "daemon.log").string());
    ASSERT_GT(daemon_.pid, 0);
    ASSERT_TRUE(wait_until([&] { return status().is_object(); })) << daemon_.err();
  }
  json status() const { return lithosd_status(sock_); }
  json power() const {
    const json s = status();
    return s.is_object() && s.contains("power") ? s["power"] : json(nullptr);
  }
  int completions() const {
    const json s = status();
    return s.is_object() && s["counters"].is_object() ? s["counters"].value("completions", 0) : 0;
  }

  // A client launching without end, 1 ms apart.
  void start_client() {
    client_ =
        Proc::spawn({LITHOS_CLIENT_APP, "1000000", "1", "0"},
                    {"LD_PRELOAD=" LITHOS_PRELOAD, "LD_LIBRARY_PATH=" LITHOS_FAKE_DRIVER_DIR,
                     "LITHOS_SLOT_MAP=" LITHOS_FAKE_MAP, "LITHOS_DAEMON=" + sock_, "LITHOS_REGISTER_WAIT_MS=60000"},
                    (dir_ / "client.out").string());
    ASSERT_GT(client_.pid, 0);
  }

  // The client's kernels run at 1980 MHz, then at 1500 (the GPU's clock
  // moved by itself), 40 completions each at least: enough samples over a
  // spread of 480 MHz for the governor to learn them.
  void teach() {
    start_client();
    for (const int mhz : {1980, 1500, 1980, 1500}) {
      set_clock(mhz);
      const int before = completions();
      ASSERT_TRUE(wait_until([&] { return completions() >= before + 40; })) << status().dump(1) << daemon_.err();
    }
    ASSERT_TRUE(wait_until([&] {
      const json p = power();
      return p.is_object() && p.value("kernels_learned", 0) >= 1 && p.value("chosen_mhz", 1980) < 1980;
    })) << power().dump(1)
        << daemon_.err();
  }

  fs::path dir_;
  std::string sock_, clock_, log_, state_;
  Proc daemon_, client_;
};

// dry-run: the governor learns from the clock's own variation and chooses
// a clock below f_max for the client's work, reports it (status, metrics),
// and never sets anything.
TEST_F(DaemonPower, DryRunReportsAWouldSetClockAndNeverSetsOne) {
  const std::string trace = (dir_ / "trace.jsonl").string();
  start_daemon("dry-run", {}, {"--trace", trace});
  teach();
  const json p = power();
  EXPECT_EQ(p["mode"], "dry-run") << p.dump(1);
  EXPECT_FALSE(p["sets_clocks"].get<bool>());
  EXPECT_GE(p["changes"].get<int>(), 1);
  EXPECT_GT(p["power_w"].get<double>(), 0.0);
  EXPECT_GT(p["energy_j"].get<double>(), 0.0);
  EXPECT_EQ(p["sets"], 0);
  EXPECT_FALSE(p["locked"].get<bool>());
  EXPECT_NE(daemon_.err().find("would set"), std::string::npos) << daemon_.err();
  // The metrics say it too.
  Proc prom = Proc::spawn({LITHOS_EXE, "status", "--socket", sock_, "--prometheus"}, {}, (dir_ / "prom").string());
  ASSERT_EQ(prom.wait(), 0) << prom.err();
  const std::string text = slurp((dir_ / "prom").string());
  EXPECT_NE(text.find("lithos_power_chosen_mhz"), std::string::npos) << text;
  EXPECT_NE(text.find("lithos_power_changes_total"), std::string::npos) << text;
  daemon_.signal(SIGTERM);
  EXPECT_EQ(daemon_.wait(), 0) << daemon_.err();
  EXPECT_FALSE(fs::exists(log_)) << clocks_log();  // no Set, no Reset
  // Every decision is in the trace, the change below f_max among them, and
  // the trace still replays (the power records are skipped).
  std::size_t records = 0, below = 0;
  std::ifstream in(trace);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("{\"e\":\"power\"", 0) != 0) continue;
    const json r = json::parse(line);
    ++records;
    if (r["changed"].get<bool>() && r["chosen_mhz"].get<int>() < 1980) ++below;
  }
  EXPECT_GE(records, p["decisions"].get<std::size_t>());  // it decided on until it stopped
  EXPECT_GE(records, 3u);
  EXPECT_GE(below, 1u);
  Proc replay = Proc::spawn({LITHOS_EXE, "daemon", "--replay", trace}, {}, (dir_ / "replay").string());
  EXPECT_EQ(replay.wait(), 0) << replay.err() << slurp((dir_ / "replay").string());
}

// on: the cap is set (locked [345, chosen]) and reset when lithosd stops.
TEST_F(DaemonPower, OnSetsTheClockAndResetsItOnSigterm) {
  start_daemon("on");
  teach();
  ASSERT_TRUE(wait_until([&] { return count_of(clocks_log(), " set 345 ") >= 1; })) << clocks_log() << daemon_.err();
  ASSERT_TRUE(wait_until([&] { return power().value("locked", false); })) << power().dump(1);
  EXPECT_TRUE(fs::exists(fs::path(state_) / "clocks-locked"));
  EXPECT_EQ(power()["mode"], "on");
  EXPECT_TRUE(power()["guardian"].get<bool>());
  const int pid = daemon_.pid;
  daemon_.signal(SIGTERM);
  EXPECT_EQ(daemon_.wait(), 0) << daemon_.err();
  const std::string log = clocks_log();
  EXPECT_NE(log.find("pid " + std::to_string(pid) + " reset"), std::string::npos) << log;
  EXPECT_EQ(log.substr(log.rfind("pid ")).find("reset"), log.substr(log.rfind("pid ")).size() - 6) << log;
  EXPECT_FALSE(fs::exists(fs::path(state_) / "clocks-locked"));
  // The guardian saw nothing locked at the end: it reset nothing more.
  EXPECT_EQ(count_of(log, "reset"), 1u) << log;
}

// A lithosd killed outright leaves its lock to the guardian, which resets
// it (a process other than lithosd).
TEST_F(DaemonPower, TheGuardianResetsTheClockWhenTheDaemonIsKilled) {
  start_daemon("on");
  teach();
  ASSERT_TRUE(wait_until([&] { return power().value("locked", false); })) << power().dump(1);
  const int pid = daemon_.pid;
  daemon_.signal(SIGKILL);
  EXPECT_EQ(daemon_.wait(), -SIGKILL);
  ASSERT_TRUE(wait_until([&] {
    const std::string log = clocks_log();
    const std::size_t last = log.rfind("pid ");
    return last != std::string::npos && log.find("reset", last) != std::string::npos &&
           log.find("pid " + std::to_string(pid) + " reset", last) == std::string::npos;
  })) << clocks_log();
  // The marker stays for `lithos power-reset` (systemd's ExecStopPost),
  // which resets once more and removes it.
  ASSERT_TRUE(fs::exists(fs::path(state_) / "clocks-locked"));
  Proc reset = Proc::spawn({LITHOS_EXE, "power-reset", "--state-dir", state_},
                           {"LITHOS_NVML_LIBRARY=" LITHOS_FAKE_NVML, "FAKE_NVML_CLOCKS_LOG=" + log_},
                           (dir_ / "reset.out").string());
  EXPECT_EQ(reset.wait(), 0) << reset.err();
  EXPECT_FALSE(fs::exists(fs::path(state_) / "clocks-locked"));
}

// Without the permission to lock clocks: said once, and lithosd goes on
// in dry-run, deciding and serving.
TEST_F(DaemonPower, APermissionErrorIsReportedOnceAndTheDaemonGoesOnInDryRun) {
  start_daemon("on", {"FAKE_NVML_FAIL=perm"});
  teach();
  ASSERT_TRUE(wait_until([&] { return power().value("mode", "") == "dry-run"; })) << power().dump(1);
  const json p = power();
  EXPECT_EQ(p["configured"], "on");
  EXPECT_NE(p["dry_run_because"].get<std::string>().find("Insufficient Permissions"), std::string::npos);
  EXPECT_EQ(p["sets"], 0);
  // It goes on deciding, and serving.
  const int decisions = p["decisions"].get<int>(), done = completions();
  ASSERT_TRUE(wait_until([&] { return power().value("decisions", 0) > decisions + 5 && completions() > done + 20; }));
  EXPECT_EQ(count_of(daemon_.err(), "cannot lock GPU"), 1u) << daemon_.err();
  EXPECT_FALSE(fs::exists(log_)) << clocks_log();
  EXPECT_FALSE(fs::exists(fs::path(state_) / "clocks-locked"));
  daemon_.signal(SIGTERM);
  EXPECT_EQ(daemon_.wait(), 0) << daemon_.err();
}

}  // namespace
