// FaultMonitor (src/daemon/fault.hpp) over a fake process table, and
// XidWatcher over the fake NVML (fake_nvml.cpp). No time passes but the
// `now` the tests give, except in the XidWatcher tests, which wait for an
// event with a deadline that only matters when they fail.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/fault.hpp"
#include "daemon/xid_watch.hpp"
#include "ipc/cuda_faults.hpp"

namespace {

using lithos::daemon::FaultMonitor;
using lithos::daemon::FaultParty;
using lithos::daemon::FaultSettings;
using lithos::daemon::ProcessControl;
using lithos::daemon::XidWatcher;
using nlohmann::json;

constexpr std::uint64_t kMs = 1'000'000;

// Processes by pid: their start time, and what each does with SIGTERM.
struct World {
  struct Proc {
    std::uint64_t start = 1;
    bool alive = true;
    bool exits_on_term = true;
    int refuse = 0;  // errno for every signal
  };
  std::map<int, Proc> procs;
  std::vector<std::pair<int, int>> signals;  // (pid, sig) sent
};

class FakeProcesses final : public ProcessControl {
 public:
  explicit FakeProcesses(World* w) : w_(w) {}
  std::optional<std::uint64_t> start_time(int pid) override {
    const auto it = w_->procs.find(pid);
    if (it == w_->procs.end() || !it->second.alive) return std::nullopt;
    return it->second.start;
  }
  int signal(int pid, int sig) override {
    auto it = w_->procs.find(pid);
    if (it == w_->procs.end() || !it->second.alive) return ESRCH;
    if (it->second.refuse != 0) return it->second.refuse;
    w_->signals.emplace_back(pid, sig);
    if (sig == SIGKILL || (sig == SIGTERM && it->second.exits_on_term)) it->second.alive = false;
    return 0;
  }

 private:
  World* w_;
};

FaultParty party(std::uint32_t client, int pid, const std::string& tenant, bool mps, std::uint64_t inflight,
                 std::uint64_t waiting = 0, unsigned uid = 1000) {
  FaultParty p;
  p.client = client;
  p.pid = pid;
  p.uid = uid;
  p.program = "python3";
  p.tenant = tenant;
  p.mps = mps;
  p.inflight = inflight;
  p.waiting = waiting;
  return p;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

class FaultMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_.procs[101] = {};  // svc: an MPS client
    world_.procs[202] = {};  // train: an MPS client, the one that faults
    world_.procs[303] = {};  // batch: outside MPS
    // The service and the trainer are of two users.
    everyone_ = {party(1, 101, "svc", true, 3, 0, 1000), party(2, 202, "train", true, 2, 5, 2000),
                 party(3, 303, "batch", false, 0, 0, 2000)};
  }
  FaultMonitor make(FaultSettings s = {}) { return FaultMonitor(s, std::make_unique<FakeProcesses>(&world_)); }
  json status(const FaultMonitor& m, std::uint64_t now) { return json::parse(m.status_json(now)); }

  World world_;
  std::vector<FaultParty> everyone_;
};

TEST(CudaFaults, StickyErrorsAreTheContextLosingOnes) {
  EXPECT_TRUE(lithos::ipc::is_sticky_cuda_error(700));  // illegal address
  EXPECT_TRUE(lithos::ipc::is_sticky_cuda_error(710));  // device-side assert
  EXPECT_TRUE(lithos::ipc::is_sticky_cuda_error(719));  // launch failed
  EXPECT_TRUE(lithos::ipc::is_sticky_cuda_error(810));  // MPS client terminated
  EXPECT_FALSE(lithos::ipc::is_sticky_cuda_error(0));
  EXPECT_FALSE(lithos::ipc::is_sticky_cuda_error(2));    // out of memory: the context lives on
  EXPECT_FALSE(lithos::ipc::is_sticky_cuda_error(701));  // launch out of resources
  EXPECT_FALSE(lithos::ipc::is_sticky_cuda_error(807));  // MPS server not ready: no context yet
  EXPECT_EQ(lithos::ipc::cuda_error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(lithos::ipc::cuda_error_name(12345), "CUresult 12345");
}

TEST_F(FaultMonitorTest, AnMpsClientsFaultConfirmedByAnXidIsTheGpusAndNamesWhatWasInFlight) {
  FaultMonitor m = make();
  (void)m.xid(10 * kMs, 31, everyone_);
  const auto log = m.client_fault(10 * kMs, everyone_[1], 700, everyone_);
  EXPECT_TRUE(m.gpu_faulted());
  EXPECT_TRUE(m.affected(1));   // the service: an MPS client too
  EXPECT_TRUE(m.affected(2));   // the faulting trainer
  EXPECT_FALSE(m.affected(3));  // outside MPS: untouched
  const std::string text = joined(log);
  EXPECT_NE(text.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << text;
  EXPECT_NE(text.find("Xid 31"), std::string::npos) << text;
  EXPECT_NE(text.find("pid 202"), std::string::npos) << text;
  EXPECT_NE(text.find("every MPS client"), std::string::npos) << text;
  const json st = status(m, 11 * kMs);
  EXPECT_EQ(st["state"], "gpu_faulted");
  EXPECT_EQ(st["current"]["xid"], 31);
  EXPECT_EQ(st["current"]["error"], 700);
  EXPECT_EQ(st["current"]["reported_by"][0]["tenant"], "train");
  ASSERT_EQ(st["current"]["in_flight"].size(), 2u) << st.dump(1);
  EXPECT_EQ(st["current"]["in_flight"][0]["tenant"], "svc");
  EXPECT_EQ(st["current"]["in_flight"][1]["waiting"], 5);
  EXPECT_EQ(st["current"]["affected"].size(), 2u);
}

TEST_F(FaultMonitorTest, ALoneReportActsOnItsOwnProcessOnly) {
  // Any local user can write a fault into its channel: alone, it says
  // nothing of other processes.
  FaultSettings s;
  s.exit_grace_ns = 10 * kMs;
  FaultMonitor m = make(s);
  const auto log = m.client_fault(0, everyone_[1], 700, everyone_);
  EXPECT_FALSE(m.gpu_faulted());
  EXPECT_TRUE(m.affected(2));
  EXPECT_FALSE(m.affected(1));
  EXPECT_NE(joined(log).find("once NVML's Xid or a process of another user confirms"), std::string::npos)
      << joined(log);
  EXPECT_EQ(status(m, 0)["state"], "process_fault");
  (void)m.tick(20 * kMs);
  ASSERT_EQ(world_.signals.size(), 1u);  // it lingers, holding the MPS server: itself only
  EXPECT_EQ(world_.signals[0], std::make_pair(202, SIGTERM));
  EXPECT_TRUE(world_.procs[101].alive);
}

TEST_F(FaultMonitorTest, ReportsOfTwoUsersOrAnXidAfterwardsConfirmIt) {
  {
    FaultMonitor m = make();
    (void)m.client_fault(0, everyone_[1], 700, everyone_);
    EXPECT_FALSE(m.gpu_faulted());
    (void)m.client_fault(1 * kMs, everyone_[0], 700, everyone_);  // the service, another user
    EXPECT_TRUE(m.gpu_faulted());
  }
  {
    FaultMonitor m = make();
    (void)m.client_fault(0, everyone_[1], 700, everyone_);
    const auto log = m.xid(2 * kMs, 31, everyone_);
    EXPECT_TRUE(m.gpu_faulted());
    EXPECT_TRUE(m.affected(1));
    EXPECT_NE(joined(log).find("Xid 31"), std::string::npos);
  }
  {
    // Two processes of one user confirm nothing.
    FaultMonitor m = make();
    FaultParty again = everyone_[1];
    again.client = 9;
    again.pid = 909;
    (void)m.client_fault(0, everyone_[1], 700, everyone_);
    (void)m.client_fault(0, again, 700, everyone_);
    EXPECT_FALSE(m.gpu_faulted());
  }
}

TEST_F(FaultMonitorTest, ProcessesThatExitOnTheirOwnAreNeverSignalled) {
  FaultMonitor m = make();
  (void)m.client_fault(0, everyone_[1], 700, everyone_);
  (void)m.client_fault(1 * kMs, everyone_[0], 700, everyone_);  // the service sees it too
  world_.procs[202].alive = false;
  EXPECT_TRUE(m.tick(100 * kMs).empty());
  EXPECT_TRUE(m.gpu_faulted());  // the service is still there
  world_.procs[101].alive = false;
  const auto log = m.tick(200 * kMs);
  EXPECT_FALSE(m.gpu_faulted());
  EXPECT_FALSE(m.open());
  EXPECT_NE(joined(log).find("back in service"), std::string::npos) << joined(log);
  EXPECT_TRUE(world_.signals.empty());
  const json st = status(m, 300 * kMs);
  EXPECT_EQ(st["state"], "ok");
  EXPECT_EQ(st["last"]["outcome"], "recovered");
  EXPECT_DOUBLE_EQ(st["last"]["closed_after_ms"].get<double>(), 200.0);
  EXPECT_EQ(st["last"]["reported_by"].size(), 2u);
}

TEST_F(FaultMonitorTest, ALingeringProcessIsToldToGoThenKilled) {
  FaultSettings s;
  s.exit_grace_ns = 1000 * kMs;
  s.term_grace_ns = 500 * kMs;
  FaultMonitor m = make(s);
  world_.procs[101].exits_on_term = false;  // the service catches SIGTERM and stays
  (void)m.xid(0, 31, everyone_);
  (void)m.client_fault(0, everyone_[1], 700, everyone_);
  world_.procs[202].alive = false;  // the trainer exits at once
  EXPECT_TRUE(m.tick(999 * kMs).empty());
  EXPECT_TRUE(world_.signals.empty());
  auto log = m.tick(1000 * kMs);
  ASSERT_EQ(world_.signals.size(), 1u);
  EXPECT_EQ(world_.signals[0], std::make_pair(101, SIGTERM));
  EXPECT_NE(joined(log).find("SIGTERM to pid 101"), std::string::npos) << joined(log);
  EXPECT_TRUE(m.tick(1200 * kMs).empty());  // told once
  EXPECT_EQ(world_.signals.size(), 1u);
  log = m.tick(1500 * kMs);
  ASSERT_EQ(world_.signals.size(), 2u);
  EXPECT_EQ(world_.signals[1], std::make_pair(101, SIGKILL));
  log = m.tick(1501 * kMs);
  EXPECT_FALSE(m.gpu_faulted());
  const json st = status(m, 1600 * kMs);
  EXPECT_EQ(st["processes_signalled"], 2);
  for (const json& a : st["last"]["affected"]) EXPECT_EQ(a["sigkill"], a["pid"] == 101) << a.dump();
}

TEST_F(FaultMonitorTest, APidUsedAgainIsNeverSignalled) {
  FaultSettings s;
  s.exit_grace_ns = 10 * kMs;
  FaultMonitor m = make(s);
  (void)m.xid(0, 31, everyone_);
  (void)m.client_fault(0, everyone_[1], 700, everyone_);
  world_.procs[202].alive = false;
  world_.procs[101].start = 999;  // 101 exited and another process got its pid
  (void)m.tick(20 * kMs);
  EXPECT_TRUE(world_.signals.empty());
  EXPECT_FALSE(m.gpu_faulted());
}

TEST_F(FaultMonitorTest, AProcessThatCannotBeSignalledKeepsTheGpuFaultedAndIsNamedOnce) {
  FaultSettings s;
  s.exit_grace_ns = 10 * kMs;
  s.term_grace_ns = 10 * kMs;
  FaultMonitor m = make(s);
  world_.procs[101].refuse = EPERM;
  world_.procs[202].refuse = EPERM;
  (void)m.xid(0, 31, everyone_);
  (void)m.client_fault(0, everyone_[1], 700, everyone_);
  const auto first = m.tick(10 * kMs);
  EXPECT_EQ(first.size(), 2u) << joined(first);
  EXPECT_NE(joined(first).find("cannot end pid 101"), std::string::npos) << joined(first);
  EXPECT_TRUE(m.tick(30 * kMs).empty());  // said once
  EXPECT_TRUE(m.gpu_faulted());
}

TEST_F(FaultMonitorTest, WithoutEndingProcessesItWaits) {
  FaultSettings s;
  s.end_processes = false;
  s.exit_grace_ns = 1 * kMs;
  FaultMonitor m = make(s);
  (void)m.xid(0, 31, everyone_);
  (void)m.client_fault(0, everyone_[1], 700, everyone_);
  (void)m.tick(60'000 * kMs);
  EXPECT_TRUE(world_.signals.empty());
  EXPECT_TRUE(m.gpu_faulted());
}

TEST_F(FaultMonitorTest, AFaultOutsideMpsStaysItsOwn) {
  FaultMonitor m = make();
  const auto log = m.client_fault(0, everyone_[2], 719, everyone_);
  EXPECT_FALSE(m.gpu_faulted());
  EXPECT_TRUE(m.open());
  EXPECT_TRUE(m.affected(3));
  EXPECT_FALSE(m.affected(1));
  EXPECT_FALSE(m.affected(2));
  EXPECT_NE(joined(log).find("outside MPS"), std::string::npos) << joined(log);
  EXPECT_EQ(status(m, 0)["state"], "process_fault");
  (void)m.tick(60'000 * kMs);
  EXPECT_TRUE(world_.signals.empty());  // its own process decides
  world_.procs[303].alive = false;
  (void)m.tick(60'001 * kMs);
  EXPECT_FALSE(m.open());
  EXPECT_EQ(status(m, 60'002 * kMs)["last"]["outcome"], "contained");
}

TEST_F(FaultMonitorTest, MpsProcessesLithosDoesNotServeAreWaitedFor) {
  world_.procs[404] = {};
  FaultMonitor m = make();
  (void)m.xid(0, 31, everyone_);
  (void)m.client_fault(0, everyone_[1], 700, everyone_);
  m.add_mps_processes({404, 101});
  world_.procs[101].alive = world_.procs[202].alive = false;
  (void)m.tick(1 * kMs);
  EXPECT_TRUE(m.gpu_faulted());
  world_.procs[404].alive = false;
  (void)m.tick(2 * kMs);
  EXPECT_FALSE(m.gpu_faulted());
}

TEST_F(FaultMonitorTest, AnXidAloneNamesWhatWasInFlightAndEndsNothing) {
  FaultMonitor m = make();
  const auto log = m.xid(0, 31, everyone_);
  EXPECT_TRUE(m.open());
  EXPECT_FALSE(m.gpu_faulted());
  EXPECT_NE(joined(log).find("Xid 31"), std::string::npos);
  EXPECT_EQ(status(m, 0)["state"], "xid");
  (void)m.tick(999 * kMs);
  EXPECT_TRUE(m.open());
  (void)m.tick(1000 * kMs);
  EXPECT_FALSE(m.open());
  EXPECT_TRUE(world_.signals.empty());
  EXPECT_EQ(status(m, 1000 * kMs)["last"]["outcome"], "xid only");
}

TEST_F(FaultMonitorTest, AnXidThenAClientReportIsOneGpuFault) {
  FaultMonitor m = make();
  (void)m.xid(0, 31, everyone_);
  (void)m.client_fault(2 * kMs, everyone_[0], 700, everyone_);
  EXPECT_TRUE(m.gpu_faulted());
  const json st = status(m, 3 * kMs);
  EXPECT_EQ(st["current"]["xid"], 31);
  EXPECT_EQ(st["current"]["error_name"], "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_DOUBLE_EQ(st["current"]["age_s"].get<double>(), 0.003);  // detected at the Xid
  EXPECT_EQ(st["episodes"], 1);
}

// ---- XidWatcher over the fake NVML

class XidWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::filesystem::temp_directory_path() / ("lithos-xid-" + std::to_string(::getpid()));
    std::filesystem::remove(file_);
    ::setenv("FAKE_NVML_XID_FILE", file_.c_str(), 1);
    ::unsetenv("FAKE_NVML_FAIL");
  }
  void TearDown() override {
    std::filesystem::remove(file_);
    ::unsetenv("FAKE_NVML_XID_FILE");
    ::unsetenv("FAKE_NVML_FAIL");
    ::unsetenv("FAKE_NVML_XID");
  }
  std::filesystem::path file_;
};

TEST_F(XidWatcherTest, ReportsEachXidOnce) {
  std::string why;
  auto w = XidWatcher::start(LITHOS_FAKE_NVML, "GPU-00000000-0000-0000-0000-000000000000", &why);
  ASSERT_NE(w, nullptr) << why;
  EXPECT_TRUE(w->take().empty());
  ::setenv("FAKE_NVML_XID", "43", 1);
  std::ofstream(file_) << "fault\n";
  std::vector<std::uint64_t> got;
  const auto t0 = std::chrono::steady_clock::now();
  while (got.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    got = w->take();
  }
  ASSERT_EQ(got, std::vector<std::uint64_t>{43});
  EXPECT_EQ(w->events(), 1u);
}

TEST_F(XidWatcherTest, SaysWhyWhenEventsCannotBeHad) {
  std::string why;
  ::setenv("FAKE_NVML_FAIL", "register", 1);
  EXPECT_EQ(XidWatcher::start(LITHOS_FAKE_NVML, "", &why), nullptr);
  EXPECT_NE(why.find("Not Supported"), std::string::npos) << why;
  EXPECT_EQ(XidWatcher::start("/nonexistent/libnvidia-ml.so.1", "", &why), nullptr);
  EXPECT_NE(why.find("cannot load"), std::string::npos) << why;
}

}  // namespace
