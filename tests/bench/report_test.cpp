// The report writer: merged results, normalisation, SLOs and the tables,
// on run records built here with known numbers and on records from a run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/report.hpp"

namespace lithos::bench {
namespace {

using nlohmann::json;

constexpr const char* kScenario = R"(
name = "r"
description = "report test"
reps = 2
window_s = 1.0
slo_factors = [2.0]
[[tenant]]
name = "svc"
role = "hp"
kind = "service"
workload = "fake"
load = 0.5
[[tenant]]
name = "train"
role = "be"
kind = "training"
workload = "fake"
)";

// A rep whose latencies are `n` copies of `ms` (plus one unfinished).
json rep(double ms, int n, int completed, bool one_unfinished = false) {
  json r = {
      {"latencies_ms", json::array()}, {"unfinished_ms", json::array()}, {"completed", completed}, {"window_s", 1.0}};
  for (int i = 0; i < n; ++i) r["latencies_ms"].push_back(ms);
  if (one_unfinished) r["unfinished_ms"].push_back(1000.0);
  return r;
}

json run_record(const std::string& run, const std::string& mode, json tenants, const char* status = "ok") {
  return {{"schema", "lithos.bench.run/1"},
          {"scenario", "r"},
          {"mode", mode},
          {"run", run},
          {"status", status},
          {"alone_of", run.rfind("alone-", 0) == 0       ? json(run.substr(6))
                       : run.rfind("mps-alone-", 0) == 0 ? json(run.substr(10))
                                                         : json(nullptr)},
          {"tenants", tenants},
          {"gpu", {{"phases", {{{"name", "main"}, {"reps", {{{"energy_j", 100.0}}, {{"energy_j", 100.0}}}}}}}}}};
}

json tenant(const std::string& name, json reps) {
  return {{"name", name}, {"phases", {{{"name", "main"}, {"reps", reps}}}}};
}

std::vector<json> recorded_runs() {
  return {
      run_record("alone-svc", "alone", {tenant("svc", {rep(10.0, 100, 100), rep(10.0, 100, 100)})}),
      run_record("alone-train", "alone", {tenant("train", {rep(50.0, 20, 20), rep(50.0, 20, 20)})}),
      run_record("mps", "mps",
                 {tenant("svc", {rep(30.0, 100, 100), rep(10.0, 99, 99, true)}),
                  tenant("train", {rep(60.0, 15, 15), rep(60.0, 15, 15)})}),
      run_record("time-slicing", "time-slicing", json::array(), "failed"),
  };
}

TEST(BenchReport, NormalisesToAloneAndComputesSlos) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  ASSERT_TRUE(sc);
  std::vector<std::string> warnings;
  const json res = build_results(*sc, recorded_runs(), warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(res["schema"], "lithos.bench/1");
  ASSERT_EQ(res["modes"].size(), 3u);  // alone, time-slicing (failed), mps: catalogue order
  EXPECT_EQ(res["modes"][0]["mode"], "alone");
  EXPECT_EQ(res["modes"][1]["mode"], "time-slicing");
  EXPECT_EQ(res["modes"][1]["status"], "failed");
  const json& mps = res["modes"][2];
  EXPECT_EQ(mps["label"], "MPS");
  const json& svc = mps["phases"][0]["tenants"][0];
  EXPECT_EQ(svc["name"], "svc");
  // Rep 1: P99 30 ms (3x); rep 2: 99 x 10 ms + one unfinished 1000 ms ->
  // P99 = 10 + 0.01 * 990 = 19.9 ms (1.99x).
  EXPECT_DOUBLE_EQ(svc["norm"]["p99"]["max"].get<double>(), 3.0);
  EXPECT_NEAR(svc["norm"]["p99"]["min"].get<double>(), 1.99, 1e-9);
  EXPECT_EQ(svc["unfinished"], 1);
  EXPECT_EQ(svc["samples"], 200);
  // SLO 2 x 10 ms: rep 1 none within, rep 2 99 of 100.
  const json& slo = svc["slo"][0];
  EXPECT_DOUBLE_EQ(slo["slo_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(slo["attainment"]["min"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(slo["attainment"]["max"].get<double>(), 0.99);
  // Training: 15/s against 20/s alone.
  const json& train = mps["phases"][0]["tenants"][1];
  EXPECT_DOUBLE_EQ(train["norm"]["throughput"]["median"].get<double>(), 0.75);
  EXPECT_TRUE(train["slo"].empty());  // no SLO for best-effort work
  // Energy, rep 1: x = 1.0 (svc) and 0.75 (train) share 100 J: svc 100/1.75/100.
  EXPECT_NEAR(svc["energy_per_unit_j"]["min"].get<double>(), 100.0 / 1.75 / 100.0, 1e-9);
  // The alone mode normalises to exactly 1 and charges all energy to the tenant.
  const json& alone_svc = res["modes"][0]["phases"][0]["tenants"][0];
  EXPECT_DOUBLE_EQ(alone_svc["norm"]["p99"]["median"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(alone_svc["energy_per_unit_j"]["median"].get<double>(), 1.0);
  EXPECT_EQ(svc["cdf_ms"].size(), 200u);
}

TEST(BenchReport, TablesShowEveryModeAndTheFailure) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  std::vector<std::string> warnings;
  const json res = build_results(*sc, recorded_runs(), warnings);
  const std::string md = markdown_report(res);
  EXPECT_NE(md.find("| MPS | 20.0 | 25.0 | 2.50x (1.99-3.00)"), std::string::npos) << md;
  EXPECT_NE(md.find("failed"), std::string::npos);
  const std::string txt = summary_table(res);
  EXPECT_NE(txt.find("svc P99 vs alone"), std::string::npos) << txt;
  EXPECT_NE(txt.find("0.750x"), std::string::npos) << txt;
}

// Each tenant alone under MPS (mode mps-alone, one run per tenant) is one
// entry after alone, normalised to alone like any mode, and its runs are
// not modes of their own.
TEST(BenchReport, AloneUnderMpsIsOneModeNormalisedToAlone) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  auto runs = recorded_runs();
  runs.push_back(run_record("mps-alone-svc", "mps-alone", {tenant("svc", {rep(13.0, 100, 100), rep(13.0, 100, 100)})}));
  runs.push_back(run_record("mps-alone-train", "mps-alone", {tenant("train", {rep(50.0, 18, 18), rep(50.0, 18, 18)})}));
  std::vector<std::string> warnings;
  const json res = build_results(*sc, runs, warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(res["modes"].size(), 4u);  // alone, mps-alone, time-slicing, mps
  EXPECT_EQ(res["modes"][0]["mode"], "alone");
  const json& floor = res["modes"][1];
  EXPECT_EQ(floor["mode"], "mps-alone");
  EXPECT_EQ(floor["label"], "alone under MPS");
  EXPECT_EQ(floor["status"], "ok");
  const json& t = floor["phases"][0]["tenants"];
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0]["name"], "svc");
  EXPECT_NEAR(t[0]["norm"]["p99"]["median"].get<double>(), 1.3, 1e-9);
  EXPECT_EQ(t[1]["name"], "train");
  EXPECT_NEAR(t[1]["norm"]["throughput"]["median"].get<double>(), 0.9, 1e-9);
  for (const json& m : res["modes"]) EXPECT_EQ(m["mode"].get<std::string>().rfind("mps-alone-", 0), std::string::npos);
  const std::string md = markdown_report(res);
  EXPECT_NE(md.find("| alone under MPS | 13.0 | 13.0 | 1.30x"), std::string::npos) << md;
}

// An alone run whose P99 differs more than 2x between repetitions is
// named in a warning (ratios to it are noise); a steady one is not. The
// report lists the warnings `lithos bench` keeps in results["warnings"].
TEST(BenchReport, AnUnsteadyAloneReferenceIsWarnedAbout) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  std::vector<std::string> warnings;
  (void)build_results(*sc, recorded_runs(), warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();  // 10 ms in both repetitions
  auto runs = recorded_runs();
  runs[0] = run_record("alone-svc", "alone", {tenant("svc", {rep(10.0, 100, 100), rep(25.0, 100, 100)})});
  json res = build_results(*sc, runs, warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("alone-svc, phase main: the alone P99 ranges 10.0-25.0 ms"), std::string::npos)
      << warnings[0];
  warnings.clear();
  runs[0] = run_record("alone-svc", "alone", {tenant("svc", {rep(10.0, 100, 100), rep(19.0, 100, 100)})});
  (void)build_results(*sc, runs, warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();  // 1.9x apart: steady enough
  res["warnings"] = {"alone-svc, phase main: the alone P99 ranges 10.0-25.0 ms"};
  const std::string md = markdown_report(res);
  EXPECT_NE(md.find("## Warnings\n\n- alone-svc, phase main: the alone P99 ranges 10.0-25.0 ms\n"), std::string::npos)
      << md;
  EXPECT_EQ(markdown_report(build_results(*sc, recorded_runs(), warnings)).find("## Warnings"), std::string::npos);
}

TEST(BenchReport, MissingAloneLeavesRatiosUndefined) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  auto runs = recorded_runs();
  runs.erase(runs.begin(), runs.begin() + 2);
  std::vector<std::string> warnings;
  const json res = build_results(*sc, runs, warnings);
  const json& svc = res["modes"][1]["phases"][0]["tenants"][0];
  EXPECT_TRUE(svc["norm"]["p99"].is_null());
  EXPECT_TRUE(svc["slo"].empty());
  EXPECT_NE(summary_table(res).find("-"), std::string::npos);
}

TEST(BenchReport, MalformedRecordsAreWarningsNotCrashes) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  auto runs = recorded_runs();
  runs[2]["tenants"][0]["phases"][0]["reps"][0]["window_s"] = "soon";
  runs.push_back(json::array());
  runs.push_back({{"run", 3}});
  std::vector<std::string> warnings;
  const json res = build_results(*sc, runs, warnings);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.front().find("window_s"), std::string::npos);
  EXPECT_FALSE(markdown_report(res).empty());
}

TEST(BenchReport, SaveAndLoadMergeRunsOfOneScenario) {
  auto sc = parse_bench_scenario(kScenario, "r.toml");
  const std::string dir = testing::TempDir() + "bench-report-merge";
  std::filesystem::remove_all(dir);
  for (json r : recorded_runs()) {
    r["scenario_sha"] = sc->sha;
    ASSERT_TRUE(save_run(dir, r).is_ok());
  }
  json other = recorded_runs()[2];
  other["scenario"] = "another";
  other["run"] = "other";
  ASSERT_TRUE(save_run(dir, other).is_ok());
  std::ofstream(dir + "/runs/junk.json") << "{not json";
  std::vector<std::string> warnings;
  const auto runs = load_runs(dir, *sc, warnings);
  EXPECT_EQ(runs.size(), 4u);
  EXPECT_EQ(warnings.size(), 2u);  // the other scenario and the junk file
}

// Records of a real run (H100, hybrid-stacking, 2026-11-21): the report
// rebuilt here must give the numbers published in docs/results.
TEST(BenchReport, RecordedH100RunGivesThePublishedNumbers) {
  auto sc = load_bench_scenario_file(std::string(LITHOS_BENCH_SCENARIOS) + "/hybrid-stacking.toml");
  ASSERT_TRUE(sc) << sc.status().message();
  std::vector<std::string> warnings;
  const auto runs = load_runs(std::string(LITHOS_BENCH_TEST_DATA) + "/h100-hybrid", *sc, warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(runs.size(), 8u);  // two alone runs and six modes
  const json res = build_results(*sc, runs, warnings);
  std::ifstream in(std::string(LITHOS_BENCH_PUBLISHED) + "/hybrid-stacking/results.json");
  const json published = json::parse(in, nullptr, false);
  ASSERT_TRUE(published.is_object());
  ASSERT_EQ(res["modes"].size(), published["modes"].size());
  for (std::size_t m = 0; m < res["modes"].size(); ++m) {
    const json& a = res["modes"][m];
    const json& b = published["modes"][m];
    EXPECT_EQ(a["mode"], b["mode"]);
    EXPECT_EQ(a["status"], "ok") << a["mode"];
    for (std::size_t t = 0; t < 2; ++t) {
      const json& ea = a["phases"][0]["tenants"][t];
      const json& eb = b["phases"][0]["tenants"][t];
      EXPECT_EQ(ea["norm"], eb["norm"]) << a["mode"] << " " << ea["name"];
      EXPECT_EQ(ea["slo"], eb["slo"]) << a["mode"] << " " << ea["name"];
      EXPECT_EQ(ea["samples"], eb["samples"]);
    }
  }
  // What the harness measured and docs/benchmarks.md states: MPS hurts the
  // service most, thread limits least, and training keeps most under MPS.
  auto p99 = [&](const char* mode) {
    for (const json& m : res["modes"]) {
      if (m["mode"] == mode) return m["phases"][0]["tenants"][0]["norm"]["p99"]["median"].get<double>();
    }
    return -1.0;
  };
  EXPECT_GT(p99("mps"), p99("time-slicing"));
  EXPECT_LT(p99("mps-threads"), p99("static-partition"));
  EXPECT_GT(p99("time-slicing"), 10.0);
}

}  // namespace
}  // namespace lithos::bench
