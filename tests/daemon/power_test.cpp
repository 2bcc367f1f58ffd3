// Resetting locked clocks without lithosd (docs/daemon.md, "Power"): the
// guardian (`lithos power-reset --guard`) and `lithos power-reset` over the
// fake NVML (fake_nvml.cpp, which logs every Set/ResetGpuLockedClocks), and
// a daemon with power management and no client. No client is preloaded, so
// these run in sanitizer builds too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace {

using lithos::test::lithosd_status;
using lithos::test::Proc;
using lithos::test::wait_until;
using nlohmann::json;
namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class PowerReset : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lithos-power-reset-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "state" / "GPU-1");
    fs::permissions(dir_, fs::perms::owner_all);
    log_ = dir_ / "clocks.log";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // The guardian with a pipe on its input; returns its pid, *fd the write end.
  pid_t guardian(int* fd) const {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[0], 0);
    posix_spawn_file_actions_addopen(&fa, 2, (dir_ / "guardian.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {LITHOS_EXE, "power-reset", "--guard",       "--gpu",
                                     "GPU-1",    "--nvml",      LITHOS_FAKE_NVML};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string env_log = "FAKE_NVML_CLOCKS_LOG=" + log_.string();
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(const_cast<char*>(env_log.c_str()));
    envp.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, LITHOS_EXE, &fa, nullptr, argv.data(), envp.data()) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[0]);
    *fd = p[1];
    return pid;
  }
  static int wait_exit(pid_t pid) {
    int st = 0;
    for (int i = 0; i < 60000; ++i) {  // 60 s at most
      if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      ::usleep(1000);
    }
    ::kill(pid, SIGKILL);
    return -1000;
  }

  fs::path dir_, log_;
};

// The end of its input with a lock last said: the guardian resets, once.
// A SIGTERM (systemd stopping the unit's processes) does not end it first.
TEST_F(PowerReset, TheGuardianResetsWhenItsInputEndsWithALock) {
  int fd = -1;
  const pid_t pid = guardian(&fd);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::write(fd, "LUL", 3), 3);
  // Once it ignores SIGTERM (its SigIgn mask in /proc), SIGTERM it.
  ASSERT_TRUE(wait_until([&] {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("SigIgn:", 0) == 0)
        return (std::stoull(line.substr(7), nullptr, 16) & (1ULL << (SIGTERM - 1))) != 0;
    }
    return false;
  }));
  ::kill(pid, SIGTERM);
  ::close(fd);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(dir_ / "guardian.err");
  EXPECT_EQ(slurp(log_), "pid " + std::to_string(pid) + " reset\n");
  EXPECT_NE(slurp(dir_ / "guardian.err").find("reset"), std::string::npos);
}

// Unlocked last: nothing is reset (only a clock lithosd set is).
TEST_F(PowerReset, TheGuardianResetsNothingThatWasUnlocked) {
  int fd = -1;
  const pid_t pid = guardian(&fd);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::write(fd, "LU", 2), 2);
  ::close(fd);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(dir_ / "guardian.err");
  EXPECT_FALSE(fs::exists(log_)) << slurp(log_);
}

// `lithos power-reset`: a marker of a lithosd that is gone is reset and
// removed; one of a lithos that still runs is left alone; a marker that
// does not hold a UUID is refused.
TEST_F(PowerReset, MarkersOfGoneDaemonsAreResetAndRemoved) {
  const fs::path state = dir_ / "state";
  std::ofstream(state / "GPU-1" / "clocks-locked") << "GPU-1 999999999\n";  // no such pid
  Proc alive = Proc::spawn({LITHOS_EXE, "status", "--socket", (dir_ / "none.sock").string(), "--every", "1", "--out",
                            (dir_ / "status.out").string()},
                           {}, (dir_ / "alive").string());
  ASSERT_GT(alive.pid, 0);
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir_ / "status.out"); }));  // running as "lithos"
  std::ofstream(state / "clocks-locked") << "GPU-2 " << alive.pid << "\n";
  std::vector<std::string> env = {"LITHOS_NVML_LIBRARY=" LITHOS_FAKE_NVML, "FAKE_NVML_CLOCKS_LOG=" + log_.string()};
  Proc reset = Proc::spawn({LITHOS_EXE, "power-reset", "--state-dir", state.string()}, env, (dir_ / "reset").string());
  const pid_t reset_pid = reset.pid;
  EXPECT_EQ(reset.wait(), 0) << reset.err();
  EXPECT_EQ(slurp(log_), "pid " + std::to_string(reset_pid) + " reset\n");  // GPU-1's only
  EXPECT_FALSE(fs::exists(state / "GPU-1" / "clocks-locked"));
  EXPECT_TRUE(fs::exists(state / "clocks-locked"));  // its lithos still runs
  EXPECT_NE(reset.err().find("still runs"), std::string::npos) << reset.err();
  alive.signal(SIGTERM);
  EXPECT_EQ(alive.wait(), 0);
  // Not a UUID: left alone, and said.
  std::ofstream(state / "GPU-1" / "clocks-locked") << "../../etc 1\n";
  Proc bad = Proc::spawn({LITHOS_EXE, "power-reset", "--state-dir", state.string()}, env, (dir_ / "bad").string());
  EXPECT_EQ(bad.wait(), 1);
  EXPECT_NE(bad.err().find("does not hold a GPU UUID"), std::string::npos) << bad.err();
}

// A daemon with power management and no work: it reads the fake NVML's
// clocks, power and energy, chooses f_max (nothing to slow down) and sets
// nothing; an unknown mode is refused naming the valid ones.
TEST_F(PowerReset, ADaemonWithoutWorkChoosesFmaxAndReportsPower) {
  const std::string sock = (dir_ / "lithosd.sock").string();
  Proc d = Proc::spawn(
      {LITHOS_EXE, "daemon", "--slot-map", LITHOS_FAKE_MAP, "--mps", "off", "--socket", sock, "--state-dir",
       (dir_ / "state").string(), "--power", "on"},
      {"LITHOS_NVML_LIBRARY=" LITHOS_FAKE_NVML, "FAKE_NVML_CLOCKS_LOG=" + log_.string(), "FAKE_NVML_POWER_MW=123000"},
      (dir_ / "daemon.log").string());
  ASSERT_GT(d.pid, 0);
  ASSERT_TRUE(wait_until([&] {
    const json s = lithosd_status(sock);
    return s.is_object() && s["power"].value("decisions", 0) >= 3 && s["power"].value("energy_j", 0.0) > 0.0;
  })) << d.err();
  const json p = lithosd_status(sock)["power"];
  EXPECT_EQ(p["mode"], "on");
  EXPECT_EQ(p["chosen_mhz"], 1980);
  EXPECT_EQ(p["f_max_mhz"], 1980);
  EXPECT_EQ(p["sm_clock_mhz"], 1980);
  EXPECT_DOUBLE_EQ(p["power_w"].get<double>(), 123.0);
  EXPECT_EQ(p["changes"], 0);
  EXPECT_TRUE(p["guardian"].get<bool>());
  EXPECT_DOUBLE_EQ(p["modelled_saving_j"].get<double>(), 0.0);  // no cap: as measured
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(), 0) << d.err();
  EXPECT_FALSE(fs::exists(log_)) << slurp(log_);

  Proc bad = Proc::spawn({LITHOS_EXE, "daemon", "--slot-map", LITHOS_FAKE_MAP, "--socket", sock, "--power", "max"}, {},
                         (dir_ / "bad").string());
  EXPECT_EQ(bad.wait(), 2);
  EXPECT_NE(bad.err().find("not one of off, dry-run, on"), std::string::npos) << bad.err();
}

}  // namespace
