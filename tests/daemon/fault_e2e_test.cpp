// Fatal GPU faults end to end, over the fake driver (docs/daemon.md, "GPU
// faults"): the real `lithos daemon`, clients through liblithos.so, a fatal
// fault made by the fake driver (FAKE_CUDA_FAULT_FILE: once the file exists
// every launch, synchronisation and stream write of the processes that share
// it returns CUDA_ERROR_ILLEGAL_ADDRESS, as MPS spreads a fault to every MPS
// client; FAKE_CUDA_FAULT_AT: the launch of one client that makes it) and
// NVML's Xid event from the fake NVML (fake_nvml.cpp, the same file).
// Nothing here waits for time to pass but for conditions, each with a
// bound that only matters when a test fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace {

using lithos::test::lithosd_status;
using lithos::test::Proc;
using lithos::test::wait_until;
using nlohmann::json;
namespace fs = std::filesystem;

class DaemonFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lithos-faults-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    sock_ = (dir_ / "lithosd.sock").string();
    fault_ = (dir_ / "fault").string();
    config_ = (dir_ / "lithosd.toml").string();
    std::ofstream(config_) << "[daemon]\npolicy = \"lithos\"\nmps = \"off\"\n"
                              "fault_exit_grace_ms = 300\nfault_term_grace_ms = 300\n"
                              "[[tenant]]\nname = \"svc\"\npriority = \"high\"\nquota = 2\n"
                              "[[tenant]]\nname = \"train\"\npriority = \"best-effort\"\n"
                              "[[tenant]]\nname = \"untrusted\"\npriority = \"best-effort\"\nmps = false\n"
                              "[[tenant]]\nname = \"default\"\npriority = \"best-effort\"\n";
  }
  void TearDown() override {
    for (Proc* p : {&daemon_}) {
      p->signal(SIGKILL);
      p->wait(10);
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // `nvml`: with the fake NVML, which reports Xid 31 once the fault file exists.
  void start_daemon(bool nvml) {
    std::vector<std::string> env;
    if (nvml) env = {"LITHOS_NVML_LIBRARY=" LITHOS_FAKE_NVML, "FAKE_NVML_XID_FILE=" + fault_};
    daemon_ = Proc::spawn({LITHOS_EXE, "daemon", "--slot-map", LITHOS_FAKE_MAP, "--config", config_, "--socket", sock_,
                           "--state-dir", (dir_ / "state").string()},
                          env, (dir_ / "daemon.log").string());
    ASSERT_GT(daemon_.pid, 0);
    ASSERT_TRUE(wait_until([&] { return status().is_object(); })) << daemon_.err();
  }
  json status() const { return lithosd_status(sock_); }
  json fault() const {
    const json s = status();
    return s.is_object() && s.contains("fault") ? s["fault"] : json(nullptr);
  }

  // A client of `tenant`: LAUNCHES launches PAUSE_MS apart, then it stays
  // HOLD_MS (a process that lingers after its error). `mps`: its contexts
  // are MPS clients. `shared`: it sees the fault file (it shares the GPU's
  // fate under MPS); `fault_at`: its launch that faults (0: none).
  Proc client(const std::string& tenant, int launches, int pause_ms, int hold_ms, bool mps, bool shared,
              int fault_at = 0, const std::string& fault_file = {}, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> env = {
        "LD_PRELOAD=" LITHOS_PRELOAD,
        "LD_LIBRARY_PATH=" LITHOS_FAKE_DRIVER_DIR,
        "LITHOS_SLOT_MAP=" LITHOS_FAKE_MAP,
        "LITHOS_DAEMON=" + sock_,
        "LITHOS_TENANT=" + tenant,
        "LITHOS_REGISTER_WAIT_MS=60000",
        "LITHOS_STATS_FILE=" + (dir_ / (tenant + std::to_string(++clients_) + ".stats")).string()};
    if (mps) env.emplace_back("FAKE_CUDA_MPS=1");
    if (shared) env.emplace_back("FAKE_CUDA_FAULT_FILE=" + (fault_file.empty() ? fault_ : fault_file));
    if (fault_at > 0) env.emplace_back("FAKE_CUDA_FAULT_AT=" + std::to_string(fault_at));
    env.insert(env.end(), extra.begin(), extra.end());
    Proc p =
        Proc::spawn({LITHOS_CLIENT_APP, std::to_string(launches), std::to_string(pause_ms), std::to_string(hold_ms)},
                    env, (dir_ / ("client-" + tenant + "-" + std::to_string(clients_) + ".out")).string());
    EXPECT_GT(p.pid, 0);
    return p;
  }
  static json stats_of(const Proc& p) {
    const json s = p.printed("stats");
    return s.is_object() ? s["stats"]["daemon"] : json(nullptr);
  }
  static std::vector<int> pids(const json& list) {
    std::vector<int> out;
    for (const json& p : list) out.push_back(p["pid"].is_number() ? p["pid"].get<int>() : 0);
    return out;
  }
  static bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

  fs::path dir_;
  std::string sock_, fault_, config_;
  Proc daemon_;
  int clients_ = 0;
};

// Under MPS (both clients are MPS clients, and share the fault), a trainer's
// kernel faults; NVML's Xid confirms it. lithosd names the error, the Xid,
// the reporter and the work in flight; the service, which lingers after its
// error, is told to go (SIGTERM) after fault_exit_grace_ms; once both are
// gone the GPU is back in service and a new client is scheduled.
TEST_F(DaemonFaults, AnMpsFaultIsNamedLingerersAreEndedAndNewClientsScheduled) {
  start_daemon(/*nvml=*/true);
  Proc svc = client("svc", 100000, 2, 0, /*mps=*/true, /*shared=*/true);
  ASSERT_TRUE(wait_until([&] {
    const json s = status();
    return s.is_object() && !s["clients"].empty() && s["clients"][0]["launches"].get<int>() > 5;
  }));
  Proc train = client("train", 60, 2, 60000, /*mps=*/true, /*shared=*/true, /*fault_at=*/20);
  const int train_pid = train.pid, svc_pid = svc.pid;
  ASSERT_TRUE(wait_until([&] {
    const json f = fault();
    return f.is_object() && f["last"].is_object() && f["last"]["outcome"] == "recovered";
  })) << fault().dump(1)
      << "\n"
      << daemon_.err();
  // Both lingered (the service launches on, the trainer holds): ended.
  EXPECT_EQ(svc.wait(), -SIGTERM) << svc.err();
  EXPECT_EQ(train.wait(), -SIGTERM) << train.err();
  const json f = fault();
  const json& ep = f["last"];
  EXPECT_EQ(ep["error_name"], "CUDA_ERROR_ILLEGAL_ADDRESS") << ep.dump(1);
  EXPECT_EQ(ep["xid"], 31);
  EXPECT_TRUE(has(pids(ep["reported_by"]), train_pid)) << ep.dump(1);
  std::vector<int> affected;
  for (const json& a : ep["affected"]) {
    affected.push_back(a["pid"].get<int>());
    EXPECT_TRUE(a["gone"].get<bool>()) << a.dump();
    EXPECT_TRUE(a["sigterm"].get<bool>()) << a.dump();
    EXPECT_FALSE(a["sigkill"].get<bool>()) << a.dump();  // SIGTERM sufficed
  }
  EXPECT_TRUE(has(affected, svc_pid) && has(affected, train_pid)) << ep.dump(1);
  EXPECT_EQ(f["gpu_faults"], 1);
  EXPECT_EQ(f["faulted_clients"], 2);
  EXPECT_EQ(f["xid_events_source"], "on");
  // Each said once why, and named what to do.
  EXPECT_NE(svc.err().find("CUDA context on device 0 is lost"), std::string::npos) << svc.err();
  EXPECT_NE(daemon_.err().find("GPU back in service"), std::string::npos) << daemon_.err();
  // The GPU works again (the fault is gone with its processes): a new
  // best-effort client registers, and every launch of it goes through the
  // daemon (running free, no service being there: reported).
  fs::remove(fault_);
  Proc fresh = client("train", 20, 0, 0, /*mps=*/true, /*shared=*/true, 0, {}, {"LITHOS_DEFER_LAUNCHES=0"});
  ASSERT_EQ(fresh.wait(), 0) << fresh.err();
  const json st = stats_of(fresh);
  EXPECT_EQ(st["registered"], true) << st.dump();
  EXPECT_EQ(st["state"], "connected") << st.dump();
  EXPECT_EQ(st["launches_unregistered"], 0) << st.dump();
  EXPECT_EQ(st["reported"].get<int>() + st["submits"].get<int>(), 20) << st.dump();
  EXPECT_TRUE(status().is_object());  // lithosd lives on
  // The metrics say it too.
  EXPECT_EQ(status()["fault"]["state"], "ok");
}

// A process's report alone is its own word, about itself: with no Xid and
// no report from another user, lithosd ends no other process, and the
// other clients are scheduled as before.
TEST_F(DaemonFaults, ALoneReportActsOnItsOwnProcessOnly) {
  start_daemon(/*nvml=*/false);
  Proc svc = client("svc", 100000, 2, 0, /*mps=*/true, /*shared=*/false);
  ASSERT_TRUE(wait_until([&] {
    const json s = status();
    return s.is_object() && !s["clients"].empty() && s["clients"][0]["launches"].get<int>() > 5;
  }));
  Proc train = client("train", 60, 2, 60000, /*mps=*/true, /*shared=*/true, /*fault_at=*/20);
  const int train_pid = train.pid;
  EXPECT_EQ(train.wait(), -SIGTERM) << train.err();  // it holds the MPS server: ended after the bounds
  ASSERT_TRUE(wait_until([&] {
    const json f = fault();
    return f.is_object() && f["last"].is_object();
  })) << fault().dump(1);
  const json f = fault();
  EXPECT_EQ(f["gpu_faults"], 0) << f.dump(1);
  EXPECT_EQ(f["faulted_clients"], 1);
  ASSERT_EQ(f["last"]["affected"].size(), 1u) << f.dump(1);
  EXPECT_EQ(f["last"]["affected"][0]["pid"], train_pid);
  // The service was never touched and is still scheduled.
  const json s = status();
  ASSERT_EQ(s["clients"].size(), 1u) << s.dump(1);
  EXPECT_EQ(s["clients"][0]["faulted"], false);
  const int before = s["clients"][0]["launches"].get<int>();
  ASSERT_TRUE(wait_until([&] { return status()["clients"][0]["launches"].get<int>() > before + 5; }));
  svc.signal(SIGKILL);
  svc.wait();
}

// A tenant outside MPS (mps = false): its fault stays its own, Xid or not;
// the service (an MPS client) goes on. lithos run starts such a tenant's
// program outside MPS.
TEST_F(DaemonFaults, AFaultOutsideMpsStaysItsOwn) {
  start_daemon(/*nvml=*/true);
  Proc svc = client("svc", 100000, 2, 0, /*mps=*/true, /*shared=*/false);
  ASSERT_TRUE(wait_until([&] {
    const json s = status();
    return s.is_object() && !s["clients"].empty() && s["clients"][0]["launches"].get<int>() > 5;
  }));
  Proc bad = client("untrusted", 40, 2, 0, /*mps=*/false, /*shared=*/true, /*fault_at=*/10);
  EXPECT_EQ(bad.wait(), 0) << bad.err();  // not ended: outside MPS it holds no one up
  ASSERT_TRUE(wait_until([&] {
    const json f = fault();
    return f.is_object() && f["last"].is_object() && f["last"]["outcome"] == "contained";
  })) << fault().dump(1);
  const json f = fault();
  EXPECT_EQ(f["gpu_faults"], 0) << f.dump(1);
  EXPECT_EQ(f["last"]["xid"], 31);  // NVML saw it; the reporter was outside MPS
  EXPECT_EQ(stats_of(bad)["state"], "faulted");
  const json s = status();
  EXPECT_EQ(s["clients"][0]["faulted"], false) << s.dump(1);
  svc.signal(SIGKILL);
  svc.wait();

  // lithos run --tenant untrusted: outside MPS, through an empty folder of
  // the user's as the MPS pipe folder; svc: as it is.
  const auto env_of = [&](const std::string& tenant) {
    Proc p = Proc::spawn({LITHOS_EXE, "run", "--daemon", sock_, "--tenant", tenant, "--print-env"},
                         {"LITHOS_SLOT_MAP=" LITHOS_FAKE_MAP, "LD_LIBRARY_PATH=" LITHOS_FAKE_DRIVER_DIR,
                          "XDG_RUNTIME_DIR=" + dir_.string()},
                         (dir_ / ("env-" + tenant + ".out")).string());
    EXPECT_EQ(p.wait(), 0) << p.err();
    return lithos::test::read_all(p.out);
  };
  const std::string untrusted = env_of("untrusted");
  EXPECT_NE(untrusted.find("CUDA_MPS_PIPE_DIRECTORY=" + (dir_ / "lithos-no-mps").string()), std::string::npos)
      << untrusted;
  EXPECT_TRUE(fs::is_directory(dir_ / "lithos-no-mps"));
  EXPECT_EQ((fs::status(dir_ / "lithos-no-mps").permissions() & fs::perms::others_all), fs::perms::none);
  EXPECT_EQ(env_of("svc").find("CUDA_MPS_PIPE_DIRECTORY"), std::string::npos);
}

// A failed call whose result loses no context (out of memory) is no fault:
// the client reports nothing and nothing is named.
TEST_F(DaemonFaults, AResultThatLosesNoContextIsNoFault) {
  start_daemon(/*nvml=*/false);
  // The fake driver's fault file holds CUDA_ERROR_OUT_OF_MEMORY (2): launches
  // fail with it, which liblithos does not report; nothing opens.
  std::ofstream(fault_) << "2\n";
  Proc c = client("train", 30, 1, 0, /*mps=*/true, /*shared=*/true);
  ASSERT_EQ(c.wait(), 0) << c.err();
  const json f = fault();
  EXPECT_EQ(f["episodes"], 0) << f.dump(1);
  EXPECT_NE(stats_of(c)["state"], "faulted");
}

}  // namespace
