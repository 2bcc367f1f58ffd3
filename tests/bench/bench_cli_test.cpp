// `lithos bench` through its binary, with sleep-based tenants
// (scripts/bench/tenant.py, workload "fake") and a stand-in MPS control
// program: the real process orchestration, protocol, merging and report.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

struct Result {
  int status = -1;
  std::string out;
};

Result sh(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

Result bench(const std::string& args) {
  return sh(std::string(LITHOS_BINARY) + " bench " + LITHOS_BENCH_TEST_DATA + "/fake-hybrid.toml --no-plots " + args);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in, nullptr, false);
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const json* mode(const json& res, const std::string& name) {
  for (const json& m : res["modes"]) {
    if (m["mode"] == name) return &m;
  }
  return nullptr;
}

TEST(BenchCli, RunsModesWithItsOwnMpsDaemonAndMergesLaterRuns) {
  const std::string out = testing::TempDir() + "bench-cli-merge";
  std::filesystem::remove_all(out);
  const std::string mps = std::string(" --mps-control ") + LITHOS_FAKE_MPS;
  Result r = bench("--modes time-slicing,mps-priority --out " + out + mps);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "running it first")) << r.out;  // no alone runs yet: added
  EXPECT_TRUE(has(r.out, "starting a private MPS daemon")) << r.out;
  EXPECT_TRUE(has(r.out, "svc P99 vs alone")) << r.out;  // the summary table comes last
  for (const char* f : {"runs/alone-svc.json", "runs/alone-train.json", "runs/time-slicing.json",
                        "runs/mps-priority.json", "results.json", "report.md", "logs/mps-priority/svc.log"}) {
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  }
  // The MPS client environment reached the tenants, the daemon was stopped
  // and its private directory removed.
  const json prio = read_json(out + "/runs/mps-priority.json");
  ASSERT_EQ(prio["status"], "ok") << prio.dump(1);
  EXPECT_EQ(prio["tenants"][0]["env"]["CUDA_MPS_CLIENT_PRIORITY"], "0");
  EXPECT_EQ(prio["tenants"][1]["env"]["CUDA_MPS_CLIENT_PRIORITY"], "1");
  EXPECT_TRUE(std::filesystem::exists(out + "/logs/mps-priority/mps-control.log.d/control.log"));
  // Tenants of a mode without MPS get an empty MPS pipe folder of the run's
  // own, so that they run as plain processes even beside an MPS control
  // daemon of the machine's (the variable set here stands for one); the
  // folder is gone after the run. Those of an MPS mode get the private one.
  {
    const std::string machine = testing::TempDir() + "bench-cli-machine-mps";
    std::filesystem::create_directories(machine);
    Result plain = sh("CUDA_MPS_PIPE_DIRECTORY=" + machine + " " + LITHOS_BINARY + " bench " + LITHOS_BENCH_TEST_DATA +
                      "/fake-hybrid.toml --no-plots --modes time-slicing --out " + out + "-plain" + mps);
    ASSERT_EQ(plain.status, 0) << plain.out;
    const json ts = read_json(out + "-plain/runs/time-slicing.json");
    for (const json& t : ts["tenants"]) {
      const std::string dir = t["info"]["mps_pipe_directory"].get<std::string>();
      EXPECT_EQ(dir.rfind("/tmp/lithos-no-mps-", 0), 0U) << dir;
      EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
    }
    std::filesystem::remove_all(out + "-plain");
    std::filesystem::remove_all(machine);
  }
  for (const json& t : prio["tenants"]) {
    const std::string dir = t["info"]["mps_pipe_directory"].get<std::string>();
    EXPECT_EQ(dir.rfind("/tmp/lithos-mps-", 0), 0U) << dir;
  }
  const std::string ctl_text = sh("cat " + out + "/logs/mps-priority/mps-control.log.d/control.log").out;
  EXPECT_TRUE(has(ctl_text, "started") && has(ctl_text, "quit")) << ctl_text;
  // The service ran at half its alone capacity (fake: 1000/ms = 500/s).
  const json alone = read_json(out + "/runs/alone-svc.json");
  EXPECT_NEAR(alone["tenants"][0]["rate_rps"].get<double>(), 250.0, 25.0);
  EXPECT_NEAR(prio["tenants"][0]["rate_rps"].get<double>(), alone["tenants"][0]["rate_rps"].get<double>(), 1e-9);

  // A second invocation reuses the alone runs and merges; mps-alone runs
  // each tenant by itself under MPS.
  r = bench("--modes mps,mps-alone --out " + out + mps);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(has(r.out, "running it first")) << r.out;
  for (const char* f : {"runs/mps-alone-svc.json", "runs/mps-alone-train.json"}) {
    const json run = read_json(out + "/" + f);
    ASSERT_EQ(run["status"], "ok") << f;
    EXPECT_EQ(run["tenants"].size(), 1u) << f;
  }
  EXPECT_TRUE(std::filesystem::exists(out + "/logs/mps-alone-svc/mps-control.log.d/control.log"));
  const json res = read_json(out + "/results.json");
  ASSERT_EQ(res["schema"], "lithos.bench/1");
  EXPECT_EQ(res["modes"][1]["mode"], "mps-alone");
  // What sleep-based tenants measure depends on how loaded the machine is
  // (on a busy 2-core machine a 2 ms sleep takes 4 ms or more): what is
  // checked is what the harness decides, not how fast the tenants ran.
  const json* alone_mode = mode(res, "alone");
  ASSERT_NE(alone_mode, nullptr);
  const json& alone_svc = (*alone_mode)["phases"][0]["tenants"][0];
  const json& alone_train = (*alone_mode)["phases"][0]["tenants"][1];
  // "vs alone": each repetition's value over the alone median (two
  // repetitions: the median of the ratios is the ratio of the medians).
  const auto expect_norm = [&](const json& t, const json& alone_t, const char* value, const char* norm,
                               const std::string& m) {
    const json& v = t[value]["median"];
    const json& a = alone_t[value]["median"];
    if (!v.is_number() || !a.is_number() || a.get<double>() <= 0) return;  // nothing measured to normalise
    const double want = v.get<double>() / a.get<double>();
    EXPECT_NEAR(t["norm"][norm]["median"].get<double>(), want, 1e-9 * std::max(1.0, want)) << m << " " << norm;
  };
  for (const char* m : {"alone", "mps-alone", "time-slicing", "mps", "mps-priority"}) {
    const json* e = mode(res, m);
    ASSERT_NE(e, nullptr) << m;
    EXPECT_EQ((*e)["status"], "ok") << m;
    const json& svc = (*e)["phases"][0]["tenants"][0];
    EXPECT_EQ(svc["name"], "svc");
    // Every mode offers the service the same seeded arrivals, and each one
    // is a sample, finished or not (a lower bound).
    EXPECT_GT(svc["samples"].get<int>(), 0) << m;
    EXPECT_EQ(svc["samples"], alone_svc["samples"]) << m;
    expect_norm(svc, alone_svc, "p50_ms", "p50", m);
    expect_norm(svc, alone_svc, "p99_ms", "p99", m);
    const json& train = (*e)["phases"][0]["tenants"][1];
    EXPECT_EQ(train["name"], "train");
    expect_norm(train, alone_train, "throughput", "throughput", m);
  }
  // The report can be rebuilt from the runs alone.
  std::filesystem::remove(out + "/report.md");
  r = bench("--report-only --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out + "/report.md"));
  EXPECT_FALSE(read_json(out + "/results.json").contains("simulator")) << "no model of fake-hybrid by default";

  // With a model in the simulator: its prediction beside each measured
  // mode that has a policy, tenants paired by class (svc: the service).
  r = bench("--report-only --sim hybrid-stacking-heavy --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "simulator (hybrid-stacking-heavy) vs hardware")) << r.out;
  const json sim = read_json(out + "/results.json")["simulator"];
  ASSERT_TRUE(sim.is_object());
  EXPECT_EQ(sim["scenario"], "hybrid-stacking-heavy");
  std::set<std::string> seen;
  for (const json& row : sim["rows"]) {
    seen.insert(row["mode"].get<std::string>() + "/" + row["tenant"].get<std::string>());
    EXPECT_EQ(row["policy"], row["mode"]);
    EXPECT_EQ(row["model_tenant"], row["tenant"] == "svc" ? "service" : "training");
    EXPECT_GT(row["throughput_norm"]["sim"].get<double>(), 0.0);
    EXPECT_GT(row["throughput_norm"]["hw"].get<double>(), 0.0);
  }
  for (const char* m : {"time-slicing", "mps", "mps-priority"}) {
    EXPECT_TRUE(seen.count(std::string(m) + "/svc") && seen.count(std::string(m) + "/train")) << m;
  }
  EXPECT_FALSE(seen.count("alone/svc")) << "alone has no policy row";
  EXPECT_TRUE(has(read_text(out + "/report.md"), "## The simulator's prediction"));
  // A lithos run (here the MPS run relabelled: the report only reads it) is
  // predicted as lithosd drives the Engine: the model's service on its
  // bench twin's quota (its partition's share of the TPCs), its launches at
  // once, on a GPU that honours no stream priorities: the same numbers as
  // `lithos sim` gives for the model so changed, and not the built-in
  // model's (whole-GPU quota, queued launches).
  {
    json run = read_json(out + "/runs/mps.json");
    run["mode"] = "lithos";
    run["run"] = "lithos";
    std::ofstream(out + "/runs/lithos.json") << run.dump();
  }
  // The service's cost of being an MPS client, as the GPU's busy share at
  // the same offered rate (the fake machine has no NVML: 0.5 alone and 0.6
  // under MPS alone are written into its runs), goes into the model as its
  // mps_slowdown: 1.2.
  for (const auto& [file, busy] : {std::pair{"alone-svc", 0.5}, std::pair{"mps-alone-svc", 0.6}}) {
    json run = read_json(out + "/runs/" + file + ".json");
    for (json& rep : run["gpu"]["phases"][0]["reps"]) rep["busy"] = busy;
    std::ofstream(out + "/runs/" + file + ".json") << run.dump();
  }
  // The trainer's, a closed loop's, is the inverse of its throughput ratio:
  // the steps it made in each window are written into its runs too (what a
  // sleeping tenant makes depends on the machine's load): 100 alone, 80
  // under MPS alone, so 1.25.
  for (const auto& [file, steps] : {std::pair{"alone-train", 100}, std::pair{"mps-alone-train", 80}}) {
    json run = read_json(out + "/runs/" + file + ".json");
    for (json& rep : run["tenants"][0]["phases"][0]["reps"]) {
      rep["completed"] = steps;
      rep["latencies_ms"] = std::vector<double>(static_cast<std::size_t>(steps), 500.0 / steps);
      rep["unfinished_ms"] = json::array();
    }
    std::ofstream(out + "/runs/" + file + ".json") << run.dump();
  }
  r = bench("--report-only --sim hybrid-stacking-heavy --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  const json with_lithos = read_json(out + "/results.json")["simulator"];
  EXPECT_TRUE(has(with_lithos["note"].get<std::string>(), "lithosd")) << with_lithos.dump();
  ASSERT_TRUE(with_lithos.contains("mps_slowdown")) << with_lithos.dump();
  const json& slow = with_lithos["mps_slowdown"];
  ASSERT_TRUE(slow.contains("svc")) << slow.dump();
  EXPECT_NEAR(slow["svc"].get<double>(), 1.2, 1e-9);
  ASSERT_TRUE(slow.contains("train")) << slow.dump();
  EXPECT_NEAR(slow["train"].get<double>(), 1.25, 1e-9);
  EXPECT_TRUE(has(read_text(out + "/report.md"), "mps_slowdown")) << "the report says where the model's cost came from";
  std::optional<double> lithos_train;
  for (const json& row : with_lithos["rows"]) {
    if (row["mode"] == "lithos" && row["tenant"] == "train") lithos_train = row["throughput_norm"]["sim"].get<double>();
  }
  ASSERT_TRUE(lithos_train.has_value()) << with_lithos.dump();
  const auto sim_train = [&](const std::string& scenario) {
    const Result run =
        sh("(" + std::string(LITHOS_BINARY) + " sim --scenario " + scenario + " --policy lithos --seed " +
           std::to_string(with_lithos["seed"].get<std::uint64_t>()) + " --json 2>/dev/null)");
    EXPECT_EQ(run.status, 0) << run.out;
    return run.status == 0 ? json::parse(run.out)["policies"][0]["tenants"][1]["throughput_norm"].get<double>() : -1.0;
  };
  double svc_share = 0;
  const json results = read_json(out + "/results.json");
  for (const json& t : results.at("scenario").at("tenants"))
    if (t.contains("role") && t.at("role") == "hp") svc_share = t.value("partition", 0.0);
  ASSERT_GT(svc_share, 0.0);
  std::string model = read_text(std::string(LITHOS_SIM_SCENARIOS) + "/hybrid-stacking-heavy.toml");
  const std::string whole = "quota = 66 ";
  ASSERT_NE(model.find(whole), std::string::npos);
  model.replace(model.find(whole), whole.size(), "quota = " + std::to_string(std::lround(svc_share * 66)) + " ");
  const std::string lithosd_model = out + "/lithosd-model.toml";
  const std::string gpu = "[gpu]\n";  // lithosd sets no stream priority: a GPU that honours none
  ASSERT_NE(model.find(gpu), std::string::npos);
  model.replace(model.find(gpu), gpu.size(), gpu + "priorities = false\n");
  // Each model tenant with its bench twin's measured mps_slowdown.
  for (const auto& [bench_name, model_name] : {std::pair{"svc", "service"}, std::pair{"train", "training"}}) {
    const std::string line = std::string("name = \"") + model_name + "\"\n";
    ASSERT_NE(model.find(line), std::string::npos) << model_name;
    char value[64];
    std::snprintf(value, sizeof value, "mps_slowdown = %.17g\n", slow[bench_name].get<double>());
    model.insert(model.find(line) + line.size(), value);
  }
  std::ofstream(lithosd_model) << model << "\n[scheduler]\nimmediate_launches = true\n";
  EXPECT_DOUBLE_EQ(*lithos_train, sim_train(lithosd_model));
  EXPECT_NE(*lithos_train, sim_train("hybrid-stacking-heavy")) << "the queued whole-GPU model";
  std::filesystem::remove(out + "/runs/lithos.json");
  // An unknown model: a warning, no prediction, the report still written.
  r = bench("--report-only --sim no-such-model --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "no simulator prediction (no-such-model)")) << r.out;
  EXPECT_FALSE(read_json(out + "/results.json").contains("simulator"));
}

// The shipped head-of-line-steal has a model in the simulator (its spin
// kernels are synthetic, so the model has them exactly): recorded H100 runs
// of it, rebuilt with --report-only, get the model's prediction by default.
// A copy of the scenario elsewhere is not what the model describes: none.
TEST(BenchCli, HeadOfLineStealIsPredictedByItsTwin) {
  const std::string out = testing::TempDir() + "bench-cli-hol";
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out + "/runs");
  const std::string rec = LITHOS_BENCH_RECORDED_HOL;
  for (const char* f :
       {"/versus-head-of-line-steal-alone/runs/alone-hp.json", "/versus-head-of-line-steal-alone/runs/alone-be.json",
        "/versus-head-of-line-steal-this-1/runs/lithos.json"}) {
    const std::filesystem::path from = rec + f;
    std::filesystem::copy_file(from, out + "/runs/" + from.filename().string());
  }
  Result r = sh(std::string(LITHOS_BINARY) + " bench head-of-line-steal --report-only --no-plots --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  const json sim = read_json(out + "/results.json")["simulator"];
  ASSERT_TRUE(sim.is_object()) << r.out;
  EXPECT_EQ(sim["scenario"], "head-of-line-steal-5ms");
  std::set<std::string> seen;
  for (const json& row : sim["rows"]) {
    seen.insert(row["mode"].get<std::string>() + "/" + row["tenant"].get<std::string>());
    EXPECT_EQ(row["model_tenant"], row["tenant"]);
    if (row["tenant"] == "hp") {
      // The service waits for best-effort atoms on its TPCs, in the model as on the GPU.
      EXPECT_GT(row["p99_norm"]["sim"].get<double>(), 1.2) << row.dump();
      EXPECT_GT(row["p99_norm"]["hw"].get<double>(), 1.2) << row.dump();
    } else {
      EXPECT_GT(row["throughput_norm"]["sim"].get<double>(), 0.5) << row.dump();
      EXPECT_LT(row["throughput_norm"]["sim"].get<double>(), 1.0) << row.dump();
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"lithos/hp", "lithos/be"}));
  EXPECT_TRUE(has(read_text(out + "/report.md"), "`lithos sim` of the model `head-of-line-steal-5ms`"));

  const std::string copy = out + "/copy/head-of-line-steal.toml";
  std::filesystem::create_directories(out + "/copy");
  std::filesystem::copy_file(std::string(LITHOS_BENCH_SCENARIOS) + "/head-of-line-steal.toml", copy);
  r = sh(std::string(LITHOS_BINARY) + " bench " + copy + " --report-only --no-plots --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(read_json(out + "/results.json").contains("simulator")) << "a copy has no model";
}

TEST(BenchCli, AFailingModeIsRecordedAndTheOthersStillRun) {
  const std::string out = testing::TempDir() + "bench-cli-fail";
  std::filesystem::remove_all(out);
  Result r = bench("--modes mps,time-slicing --mps-control /nonexistent/mps-control --out " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "[mps] FAILED")) << r.out;
  EXPECT_TRUE(has(r.out, "/nonexistent/mps-control")) << r.out;
  const json res = read_json(out + "/results.json");
  EXPECT_EQ((*mode(res, "mps"))["status"], "failed");
  EXPECT_EQ((*mode(res, "time-slicing"))["status"], "ok");
}

TEST(BenchCli, StaticPartitionGivesEachTenantItsTpcSet) {
#ifndef LITHOS_HAVE_GPU
  GTEST_SKIP() << "built without the GPU adapters: no `lithos run`";
#else
  // The sets and the `lithos run` command are recorded; on a machine
  // without a GPU the slot-map calibration fails and the mode with it
  // (masks that cannot be verified are never used), clearly.
  const std::string out = testing::TempDir() + "bench-cli-part";
  std::filesystem::remove_all(out);
  Result r = bench("--modes static-partition --mps-control " + std::string(LITHOS_FAKE_MPS) + " --out " + out);
  const json run = read_json(out + "/runs/static-partition.json");
  ASSERT_TRUE(run.is_object()) << r.out;
  EXPECT_EQ(run["tenants"][0]["tpc_set"], "0-39");   // 0.6 x 66
  EXPECT_EQ(run["tenants"][1]["tpc_set"], "40-65");  // 0.4 x 66
  EXPECT_EQ(run["tenants"][0]["argv"][1], "run");
  EXPECT_EQ(run["tenants"][0]["argv"][5], "0-39");
  if (run["status"] != "ok") {
    EXPECT_TRUE(has(run.value("error", ""), "lithos calibrate failed")) << run.dump(1);
  }
#endif
}

// The per-tenant daemon mode runs each tenant by itself under lithosd, and
// --daemon-set reaches lithosd's configuration of every daemon run;
// rightsize-alone's lithosd has right-sizing on.
TEST(BenchCli, DaemonModesTakeTheirSettings) {
#ifndef LITHOS_HAVE_GPU
  GTEST_SKIP() << "built without the GPU adapters: no `lithos run`";
#else
  const std::string out = testing::TempDir() + "bench-cli-daemon-set";
  std::filesystem::remove_all(out);
  Result r = bench("--modes lithos-alone --daemon-set throttle_us=200 --mps-control " + std::string(LITHOS_FAKE_MPS) +
                   " --out " + out);
  for (const char* tenant : {"svc", "train"}) {
    const json run = read_json(out + "/runs/lithos-alone-" + tenant + ".json");
    ASSERT_TRUE(run.is_object()) << r.out;
    EXPECT_EQ(run["mode"], "lithos-alone");
    EXPECT_EQ(run["tenants"].size(), 1u);
    const std::string toml = read_text(out + "/logs/lithos-alone-" + tenant + "/lithosd.toml");
    EXPECT_TRUE(has(toml, "\nthrottle_us = 200\n")) << toml;
    EXPECT_FALSE(has(toml, "rightsize")) << toml;
  }
  EXPECT_TRUE(has(read_json(out + "/runs/lithos-alone-svc.json").value("command", ""), "--daemon-set throttle_us=200"));
  r = bench("--modes rightsize-alone --mps-control " + std::string(LITHOS_FAKE_MPS) + " --out " + out);
  const std::string toml = read_text(out + "/logs/rightsize-alone-svc/lithosd.toml");
  EXPECT_TRUE(has(toml, "\nrightsize = true\n")) << toml << r.out;
#endif
}

TEST(BenchCli, BadInputIsExplainedWithStatusTwo) {
  Result r = sh(std::string(LITHOS_BINARY) + " bench no-such-scenario");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "no scenario 'no-such-scenario'")) << r.out;
  EXPECT_TRUE(has(r.out, "hybrid-stacking")) << r.out;  // the built-in names are listed
  r = bench("--modes mps,warp-drive");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "unknown mode 'warp-drive'") && has(r.out, "mps-priority")) << r.out;
  const std::string bad = testing::TempDir() + "bad-bench.toml";
  std::ofstream(bad) << "name = \"b\"\n[[tenant]]\nname = \"a\"\nrole = \"hp\"\nkind = \"servic\"\nworkload = \"w\"\n";
  r = sh(std::string(LITHOS_BINARY) + " bench " + bad);
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "bad-bench.toml:5:") && has(r.out, "kind 'servic'")) << r.out;
  r = bench("--daemon-set 'Throttle Us=1'");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "is not a setting's key")) << r.out;
  r = bench("--daemon-set throttle_us");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "give KEY=VALUE")) << r.out;
  r = sh(std::string(LITHOS_BINARY) + " bench --list");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "head-of-line") && has(r.out, "static-partition")) << r.out;
}

}  // namespace
