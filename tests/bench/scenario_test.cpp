// Benchmark scenario files: the shipped ones parse, bad ones fail with the
// file, line and field, and the modes configure tenants as documented.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench/modes.hpp"
#include "bench/scenario.hpp"

namespace lithos::bench {
namespace {

constexpr const char* kMinimal = R"(
name = "t"
[[tenant]]
name = "svc"
role = "hp"
kind = "service"
workload = "fake"
load = 0.5
partition = 0.5
[[tenant]]
name = "be"
role = "be"
kind = "training"
workload = "fake"
partition = 0.25
)";

std::string error_of(const std::string& text) {
  auto r = parse_bench_scenario(text, "f.toml");
  return r ? std::string("(parsed)") : r.status().message();
}

TEST(BenchScenario, ShippedScenariosParseAndNameKnownModes) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(LITHOS_BENCH_SCENARIOS)) {
    if (e.path().extension() != ".toml") continue;  // a module workload's folder
    auto sc = load_bench_scenario_file(e.path().string());
    ASSERT_TRUE(sc) << sc.status().message();
    EXPECT_EQ(sc->name, e.path().stem().string());
    EXPECT_FALSE(sc->description.empty());
    for (const auto& m : sc->modes) EXPECT_NE(find_mode(m), nullptr) << m;
    // Every mode the scenario runs can configure its tenants.
    for (const auto& m : sc->modes.empty() ? default_modes() : sc->modes) {
      EXPECT_TRUE(plan_mode(*sc, *find_mode(m), 66)) << sc->name << " " << m;
    }
    ++n;
  }
  EXPECT_GE(n, 4);
}

// A scenario file in a folder of its own, with `files` beside it.
class ScenarioDir {
 public:
  ScenarioDir() {
    char tmpl[] = "/tmp/lithos-bench-scenario-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    dir_ = d != nullptr ? d : "/tmp";
  }
  ~ScenarioDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScenarioDir(const ScenarioDir&) = delete;
  ScenarioDir& operator=(const ScenarioDir&) = delete;
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = dir_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  std::filesystem::path dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

std::string module_scenario(const std::string& params, const std::string& phases = "") {
  return "name = \"m\"\n[[tenant]]\nname = \"svc\"\nrole = \"hp\"\nkind = \"service\"\nworkload = \"module\"\n"
         "load = 0.5\nparams = " +
         params + "\n" + phases;
}

TEST(BenchScenario, ModulePathsAreRelativeToTheScenarioFile) {
  ScenarioDir d;
  d.write("mine/w.py", "def build(kind, args, device):\n    return lambda: None\n");
  d.write("mine/w2.py", "def build(kind, args, device):\n    return lambda: None\n");
  const std::string abs = (d.dir() / "mine" / "w.py").string();
  const std::string phases =
      "[[phase]]\nname = \"a\"\n[[phase]]\nname = \"b\"\nparams = { svc = { path = \"./mine/../mine/w2.py\" } }\n";
  auto sc = load_bench_scenario_file(
      d.write("sc.toml", module_scenario("{ path = \"mine/w.py\", args = { batch = 4 } }", phases)));
  ASSERT_TRUE(sc) << sc.status().message();
  EXPECT_EQ(sc->tenants.at(0).params.at("path"), abs);
  EXPECT_EQ(sc->tenants.at(0).params.at("args").at("batch"), 4);
  EXPECT_EQ(sc->phases.at(1).params.at("svc").at("path"), (d.dir() / "mine" / "w2.py").string());
  // An absolute path stays as it is.
  sc = load_bench_scenario_file(d.write("abs.toml", module_scenario("{ path = \"" + abs + "\" }")));
  ASSERT_TRUE(sc) << sc.status().message();
  EXPECT_EQ(sc->tenants.at(0).params.at("path"), abs);
  // Other workloads' params are not touched.
  sc = load_bench_scenario_file(d.write("fake.toml",
                                        "name = \"f\"\n[[tenant]]\nname = \"t\"\nrole = \"be\"\n"
                                        "kind = \"training\"\nworkload = \"fake\"\n"
                                        "params = { path = \"nowhere.py\" }\n"));
  ASSERT_TRUE(sc) << sc.status().message();
  EXPECT_EQ(sc->tenants.at(0).params.at("path"), "nowhere.py");
}

TEST(BenchScenario, ModuleWithoutItsFileIsAnError) {
  ScenarioDir d;
  d.write("w.py", "def build(kind, args, device):\n    return lambda: None\n");
  const auto error = [&](const std::string& name, const std::string& params, const std::string& phases = "") {
    auto sc = load_bench_scenario_file(d.write(name, module_scenario(params, phases)));
    return sc ? std::string("(loaded)") : sc.status().message();
  };
  EXPECT_EQ(error("missing.toml", "{ path = \"nope.py\" }"),
            d.dir().string() + "/missing.toml: tenant 'svc' (workload \"module\"): params.path: no such file: " +
                d.dir().string() + "/nope.py");
  EXPECT_NE(error("folder.toml", "{ path = \".\" }").find("params.path: no such file"), std::string::npos);
  EXPECT_NE(error("empty.toml", "{ path = \"\" }").find("params.path must be a non-empty string"), std::string::npos);
  EXPECT_NE(error("number.toml", "{ path = 3 }").find("params.path must be a non-empty string"), std::string::npos);
  EXPECT_NE(error("none.toml", "{ args = {} }").find("needs params.path, a Python file that defines build"),
            std::string::npos);
  // A phase's own path is checked too, and a phase without one when the
  // tenant has none is named.
  const std::string bad_phase = "[[phase]]\nname = \"a\"\nparams = { svc = { path = \"gone.py\" } }\n";
  EXPECT_NE(
      error("phase.toml", "{ path = \"w.py\" }", bad_phase).find("no such file: " + d.dir().string() + "/gone.py"),
      std::string::npos);
  const std::string one_phase_only =
      "[[phase]]\nname = \"a\"\nparams = { svc = { path = \"w.py\" } }\n"
      "[[phase]]\nname = \"b\"\n";
  EXPECT_NE(error("partial.toml", "{ args = {} }", one_phase_only).find("(phase 'b' has none)"), std::string::npos);
  EXPECT_EQ(error("every.toml", "{ args = {} }", "[[phase]]\nname = \"a\"\nparams = { svc = { path = \"w.py\" } }\n"),
            "(loaded)");
}

TEST(BenchScenario, DefaultsAndDerivedValues) {
  auto sc = parse_bench_scenario(kMinimal, "f.toml");
  ASSERT_TRUE(sc) << sc.status().message();
  ASSERT_EQ(sc->phases.size(), 1u);
  EXPECT_EQ(sc->phases[0].name, "main");
  EXPECT_EQ(sc->reps, 3);
  EXPECT_DOUBLE_EQ(sc->measured_span_s(), 3.0 + 3 * 5.0);
  EXPECT_EQ(sc->tenants[0].thread_pct, 100);
  EXPECT_EQ(sc->sha.size(), 16u);
  auto other = parse_bench_scenario(std::string(kMinimal) + "\n# comment\n", "f.toml");
  EXPECT_NE(other->sha, sc->sha);
}

// An hp tenant's lithosd setting pauses_best_effort (mode lithos writes it
// into the daemon's configuration); refused for a be tenant.
TEST(BenchScenario, AnHpTenantMayPauseBestEffortWork) {
  auto unset = parse_bench_scenario(kMinimal, "f.toml");
  ASSERT_TRUE(unset) << unset.status().message();
  EXPECT_EQ(unset->tenants[0].pauses_best_effort, sched::BestEffortPause::kAuto) << "an hp tenant's default";
  EXPECT_EQ(unset->tenants[1].pauses_best_effort, sched::BestEffortPause::kNever);
  std::string text = kMinimal;
  text.insert(text.find("partition = 0.5") + 15, "\npauses_best_effort = true");
  auto sc = parse_bench_scenario(text, "f.toml");
  ASSERT_TRUE(sc) << sc.status().message();
  EXPECT_EQ(sc->tenants[0].pauses_best_effort, sched::BestEffortPause::kAlways);
  EXPECT_EQ(sc->tenants[1].pauses_best_effort, sched::BestEffortPause::kNever);
  text.replace(text.find("pauses_best_effort = true"), 25, "pauses_best_effort = \"auto\"");
  auto automatic = parse_bench_scenario(text, "f.toml");
  ASSERT_TRUE(automatic) << automatic.status().message();
  EXPECT_EQ(automatic->tenants[0].pauses_best_effort, sched::BestEffortPause::kAuto);
  EXPECT_NE(error_of(std::string(kMinimal) + "pauses_best_effort = true\n").find("is for an hp tenant"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "pauses_best_effort = 1\n").find("must be true, false or \"auto\""),
            std::string::npos);
}

TEST(BenchScenario, PhasesCarryPerTenantParams) {
  constexpr const char* kPhases = R"(
[[phase]]
name = "a"
x = 0.5
params = { be = { ms = 0.5 } }
[[phase]]
name = "b"
x = 2
)";
  auto sc = parse_bench_scenario(std::string(kMinimal) + "phase_axis = \"ms\"\n" + kPhases, "f.toml");
  // phase_axis after the tables belongs to the last [[tenant]]: a clear error.
  EXPECT_FALSE(sc);
  auto ok = parse_bench_scenario(std::string("phase_axis = \"ms\"\n") + kMinimal + kPhases, "f.toml");
  ASSERT_TRUE(ok) << ok.status().message();
  ASSERT_EQ(ok->phases.size(), 2u);
  EXPECT_EQ(ok->phases[0].params["be"]["ms"], 0.5);
  EXPECT_EQ(*ok->phases[1].x, 2.0);
  EXPECT_DOUBLE_EQ(ok->measured_span_s(), 2 * (3.0 + 3 * 5.0));
}

TEST(BenchScenario, ErrorsNameFileLineAndField) {
  EXPECT_NE(error_of("name = \"x\"\n[[tenant]\n").find("f.toml:2:"), std::string::npos);
  EXPECT_NE(error_of("name = \"x\"\n").find("at least one [[tenant]]"), std::string::npos);
  const std::string t = "name = \"x\"\n[[tenant]]\nname = \"a\"\nrole = \"hp\"\nkind = \"service\"\nworkload = \"w\"\n";
  EXPECT_NE(error_of(t).find("needs 'load' > 0"), std::string::npos);
  EXPECT_NE(error_of(t + "load = 0.5\nbogus = 1\n").find("unknown key 'bogus'"), std::string::npos);
  EXPECT_NE(error_of(t + "load = 0.5\nthread_pct = 0\n").find("f.toml:8:"), std::string::npos);
  EXPECT_NE(error_of(t + "load = 0.5\nthread_pct = 0\n").find("out of range"), std::string::npos);
  const std::string bad_role =
      "name = \"x\"\n[[tenant]]\nname = \"a\"\nrole = \"vip\"\nkind = \"closed\"\nworkload = \"w\"\n";
  EXPECT_NE(error_of(bad_role).find("role 'vip' is not one of hp, be"), std::string::npos);
  const std::string closed =
      "name = \"x\"\n[[tenant]]\nname = \"a\"\nrole = \"hp\"\nkind = \"closed\"\nworkload = \"w\"\n";
  EXPECT_NE(error_of(closed + "load = 0.3\n").find("only to kind = \"service\""), std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "[[phase]]\nname = \"p\"\nparams = { nobody = { ms = 1 } }\n")
                .find("no tenant of this scenario"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("reps = 0\n") + kMinimal).find("'reps'"), std::string::npos);
  // Two tenants with one name; shares over the whole GPU.
  EXPECT_NE(error_of(closed + closed.substr(closed.find("[[tenant]]"))).find("defined twice"), std::string::npos);
  std::string over = kMinimal;
  over.replace(over.find("partition = 0.25"), 16, "partition = 0.75");
  EXPECT_NE(error_of(over).find("add up to more than 1"), std::string::npos);
}

TEST(BenchModes, EnvironmentAndTpcSetsPerMode) {
  auto sc = parse_bench_scenario(std::string(kMinimal), "f.toml");
  ASSERT_TRUE(sc);
  auto prio = plan_mode(*sc, *find_mode("mps-priority"), 66);
  ASSERT_TRUE(prio);
  EXPECT_EQ((*prio)[0].env.at(0), (std::pair<std::string, std::string>{"CUDA_MPS_CLIENT_PRIORITY", "0"}));
  EXPECT_EQ((*prio)[1].env.at(0).second, "1");
  auto thr = plan_mode(*sc, *find_mode("mps-threads"), 66);
  EXPECT_EQ((*thr)[0].env.at(0), (std::pair<std::string, std::string>{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}));
  auto part = plan_mode(*sc, *find_mode("static-partition"), 66);
  ASSERT_TRUE(part);
  EXPECT_EQ((*part)[0].tpc_set, "0-32");   // round(0.5 * 66) = 33 TPCs
  EXPECT_EQ((*part)[1].tpc_set, "33-49");  // round(0.25 * 66) = 17 (16.5 rounds up)
  auto fixed = plan_mode(*sc, *find_mode("lithos-fixed"), 66);
  EXPECT_FALSE((*fixed)[0].tpc_set.has_value());  // hp: the whole GPU
  EXPECT_EQ((*fixed)[1].tpc_set, "33-49");
  // The activity board's modes were a second policy beside lithosd's Engine
  // and are gone, with the atomizer-without-a-scheduler mode.
  for (const char* m : {"lithos-steal", "lithos-steal-whole", "mps-atoms"}) EXPECT_EQ(find_mode(m), nullptr) << m;
  for (const char* m : {"alone", "mps-alone", "time-slicing", "mps"}) {
    auto p = plan_mode(*sc, *find_mode(m), 66);
    ASSERT_TRUE(p);
    EXPECT_TRUE((*p)[0].env.empty() && !(*p)[0].tpc_set && !(*p)[0].atomize) << m;
  }
  EXPECT_TRUE(find_mode("mps")->mps);
  EXPECT_FALSE(find_mode("time-slicing")->mps);
  EXPECT_EQ(find_mode("nonsense"), nullptr);
  EXPECT_TRUE(find_mode("mps-alone")->mps);
  EXPECT_TRUE(find_mode("mps-alone")->per_tenant && find_mode("alone")->per_tenant);
  // Not alone, mps-alone, lithos-alone, rightsize-alone (per tenant) nor
  // lithos-rightsize (run only when named).
  EXPECT_EQ(default_modes().size(), mode_catalog().size() - 5);
  for (const auto& m : default_modes()) EXPECT_FALSE(find_mode(m)->per_tenant || find_mode(m)->named_only) << m;
  EXPECT_TRUE(find_mode("rightsize-alone")->per_tenant && find_mode("rightsize-alone")->daemon);
  EXPECT_EQ(find_mode("rightsize-alone")->daemon_toml, "rightsize = true\n");
  EXPECT_EQ(find_mode("lithos-rightsize")->daemon_toml, "rightsize = true\n");
  EXPECT_TRUE(find_mode("lithos-alone")->daemon_toml.empty());
}

TEST(BenchModes, StaticPartitionNeedsEveryShare) {
  std::string text = kMinimal;
  text.replace(text.find("partition = 0.25"), 16, "");
  auto sc = parse_bench_scenario(text, "f.toml");
  ASSERT_TRUE(sc);
  auto p = plan_mode(*sc, *find_mode("static-partition"), 66);
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("tenant 'be' has no 'partition'"), std::string::npos);
  // A share too small for one TPC still gets one; too many TPCs is refused.
  auto tiny = partition_sets(*parse_bench_scenario(kMinimal, "f.toml"), 2);
  ASSERT_TRUE(tiny);
  EXPECT_EQ((*tiny)[0], "0");
  EXPECT_EQ((*tiny)[1], "1");
  EXPECT_FALSE(partition_sets(*parse_bench_scenario(kMinimal, "f.toml"), 1));
}

TEST(BenchModes, PartitionsInWholeSlotGroups) {
  // The H100's groups (docs/gpu.md): 4, 8, 8, 8, 8, 8, 9, 9, 2, 2 TPCs.
  const std::vector<std::vector<int>> h100 = {{0, 8, 16, 24},
                                              {1, 9, 17, 25, 32, 39, 46, 53},
                                              {2, 10, 18, 26, 33, 40, 47, 54},
                                              {3, 11, 19, 27, 34, 41, 48, 55},
                                              {4, 12, 20, 28, 35, 42, 49, 56},
                                              {5, 13, 21, 29, 36, 43, 50, 57},
                                              {6, 14, 22, 30, 37, 44, 51, 58, 60},
                                              {7, 15, 23, 31, 38, 45, 52, 59, 61},
                                              {62, 63},
                                              {64, 65},
                                              {}};
  auto count = [](const std::string& s) { return std::count(s.begin(), s.end(), ',') + 1; };
  auto sc = parse_bench_scenario(kMinimal, "f.toml");  // shares 0.5 and 0.25
  auto sets = partition_sets_by_group(*sc, h100);
  ASSERT_TRUE(sets) << sets.status().message();
  // 0.5 x 66 = 33: groups 0-3 give 28, a fifth 36 (nearer), a sixth 44.
  EXPECT_EQ(count(*(*sets)[0]), 36);
  EXPECT_EQ((*sets)[0]->substr(0, 8), "0,1,2,3,");
  // The last tenant takes every remaining group.
  EXPECT_EQ(count(*(*sets)[1]), 66 - 36);
  // Three tenants on two groups cannot each get a whole group.
  EXPECT_FALSE(partition_sets_by_group(*sc, {{0, 1}}));
  // Every group at least: three tenants with tiny shares still get one each.
  auto three = parse_bench_scenario(std::string(kMinimal) + R"(
[[tenant]]
name = "c"
role = "be"
kind = "closed"
workload = "fake"
partition = 0.01
)",
                                    "f.toml");
  ASSERT_TRUE(three) << three.status().message();
  auto s3 = partition_sets_by_group(*three, {{0}, {1}, {2}});
  ASSERT_TRUE(s3) << s3.status().message();
  EXPECT_EQ(*(*s3)[0], "0");
  EXPECT_EQ(*(*s3)[1], "1");
  EXPECT_EQ(*(*s3)[2], "2");
}

}  // namespace
}  // namespace lithos::bench
