#include "intercept/config.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

namespace lithos::intercept {
namespace {

Config parse(const std::map<std::string, std::string>& env) {
  return config_from_env([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Config, DefaultsAskForNothing) {
  const Config c = parse({});
  EXPECT_EQ(c.request, MaskRequest::kNone);
  EXPECT_FALSE(c.stats);
  EXPECT_TRUE(c.stats_file.empty());
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  EXPECT_EQ(c.backend, BackendChoice::kAuto);
  EXPECT_TRUE(c.problems.empty());
  EXPECT_EQ(c.describe_request(), "the whole GPU");
}

TEST(Config, AtomizerSettings) {
  const Config off = parse({});
  EXPECT_FALSE(off.atomize);
  EXPECT_EQ(off.atom_us, 500.0);
  EXPECT_EQ(off.atoms_forced, 0u);
  const Config c = parse({{"LITHOS_ATOMIZE", "1"},
                          {"LITHOS_ATOM_US", "250"},
                          {"LITHOS_ATOM_COST_US", "12.5"},
                          {"LITHOS_ATOMS", "7"},
                          {"LITHOS_ATOM_TIME", "1"},
                          {"LITHOS_ATOM_REPORT", "/tmp/a-%p.json"}});
  EXPECT_TRUE(c.problems.empty());
  EXPECT_TRUE(c.atomize);
  EXPECT_EQ(c.atom_us, 250.0);
  EXPECT_EQ(c.atom_cost_us, 12.5);
  EXPECT_EQ(c.atoms_forced, 7u);
  EXPECT_TRUE(c.atom_time_all);
  EXPECT_EQ(c.atom_report, "/tmp/a-%p.json");
}

// The activity board's and the atom pacer's variables were a second policy
// beside lithosd's Engine and are gone: a process that still sets them is
// told so (and where the decisions are made now), and runs on.
TEST(Config, RetiredBoardAndPacerVariablesAreNamed) {
  const Config c = parse({{"LITHOS_ROLE", "be"},
                          {"LITHOS_BOARD", "/dev/shm/b"},
                          {"LITHOS_HP_HOLD_US", "2500"},
                          {"LITHOS_STEAL_ATOM", "0.25"},
                          {"LITHOS_ATOM_INFLIGHT", "1"}});
  ASSERT_EQ(c.problems.size(), 5u);
  for (const char* name :
       {"LITHOS_ROLE='be'", "LITHOS_BOARD='/dev/shm/b'", "LITHOS_HP_HOLD_US='2500'", "LITHOS_STEAL_ATOM='0.25'"}) {
    const bool named = std::any_of(c.problems.begin(), c.problems.end(), [&](const std::string& p) {
      return p.rfind(name, 0) == 0 &&
             p.find("the activity board was removed: lithosd decides every launch") != std::string::npos;
    });
    EXPECT_TRUE(named) << name;
  }
  EXPECT_EQ(c.problems.back().rfind("LITHOS_ATOM_INFLIGHT='1': the atom pacer was removed", 0), 0u)
      << c.problems.back();
  EXPECT_TRUE(parse({}).problems.empty());
}

TEST(Config, MalformedAtomizerSettingsAreReportedAndIgnored) {
  const Config c = parse({{"LITHOS_ATOMIZE", "yes please"},
                          {"LITHOS_ATOM_US", "0"},
                          {"LITHOS_ATOM_COST_US", "fast"},
                          {"LITHOS_ATOMS", "0"}});
  EXPECT_EQ(c.problems.size(), 4u);
  EXPECT_FALSE(c.atomize);
  EXPECT_EQ(c.atom_us, 500.0);
  EXPECT_EQ(c.atom_cost_us, 20.0);
  EXPECT_EQ(c.atoms_forced, 0u);
  EXPECT_EQ(parse({{"LITHOS_ATOMS", "5000"}}).problems.size(), 1u);
}

TEST(Config, DisableSwitch) {
  auto lookup = [](const char* value) {
    return [value](const char* name) -> const char* { return std::string(name) == "LITHOS_DISABLE" ? value : nullptr; };
  };
  EXPECT_FALSE(disabled_from_env(lookup(nullptr)));
  EXPECT_TRUE(disabled_from_env(lookup("1")));
  EXPECT_FALSE(disabled_from_env(lookup("0")));
  EXPECT_FALSE(disabled_from_env(lookup("")));
}

TEST(Config, ReadsEveryVariable) {
  const Config c = parse({{"LITHOS_TPCS", "8"},
                          {"LITHOS_SLOT_MAP", "/x/map.txt"},
                          {"LITHOS_STATS", "1"},
                          {"LITHOS_STATS_FILE", "/tmp/s-%p.json"},
                          {"LITHOS_LOG", "debug"},
                          {"LITHOS_BACKEND", "green"},
                          {"LITHOS_TEST_FAULT", "launch"}});
  EXPECT_EQ(c.request, MaskRequest::kFirstN);
  EXPECT_EQ(c.first_n, 8);
  EXPECT_EQ(c.slot_map_path, "/x/map.txt");
  EXPECT_TRUE(c.stats);
  EXPECT_EQ(c.stats_file, "/tmp/s-%p.json");
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.backend, BackendChoice::kGreen);
  EXPECT_TRUE(c.fault_launch);
  EXPECT_TRUE(c.problems.empty());
  EXPECT_EQ(c.describe_request(), "the first 8 live TPCs");
}

TEST(Config, TpcSetIsParsed) {
  const Config c = parse({{"LITHOS_TPC_SET", "0-3, 10"}});
  EXPECT_EQ(c.request, MaskRequest::kSet);
  EXPECT_EQ(c.tpc_set.to_string(), "0-3,10");
  EXPECT_EQ(c.describe_request(), "TPCs 0-3,10");
}

TEST(Config, MalformedValuesAreReportedAndIgnored) {
  for (const auto& [name, value] : std::map<std::string, std::string>{{"LITHOS_TPCS", "eight"},
                                                                      {"LITHOS_TPCS", "0"},
                                                                      {"LITHOS_TPCS", "129"},
                                                                      {"LITHOS_TPCS", "8x"},
                                                                      {"LITHOS_TPC_SET", "7-3"},
                                                                      {"LITHOS_TPC_SET", "a,b"},
                                                                      {"LITHOS_TPC_SET", "200"}}) {
    const Config c = parse({{name, value}});
    EXPECT_EQ(c.request, MaskRequest::kNone) << name << "=" << value;
    ASSERT_EQ(c.problems.size(), 1U) << name << "=" << value;
    EXPECT_NE(c.problems[0].find(name), std::string::npos);
  }
  EXPECT_EQ(parse({{"LITHOS_LOG", "loud"}}).problems.size(), 1U);
  EXPECT_EQ(parse({{"LITHOS_BACKEND", "magic"}}).backend, BackendChoice::kAuto);
  EXPECT_EQ(parse({{"LITHOS_STATS", "maybe"}}).problems.size(), 1U);
  EXPECT_EQ(parse({{"LITHOS_TEST_FAULT", "x"}}).problems.size(), 1U);
}

TEST(Config, BothSetsAreRefused) {
  const Config c = parse({{"LITHOS_TPCS", "4"}, {"LITHOS_TPC_SET", "0-3"}});
  EXPECT_EQ(c.request, MaskRequest::kNone);
  EXPECT_EQ(c.problems.size(), 1U);
}

TEST(Config, EmptyValuesAreUnset) {
  const Config c = parse({{"LITHOS_TPCS", ""}, {"LITHOS_STATS", "0"}, {"LITHOS_LOG", ""}});
  EXPECT_EQ(c.request, MaskRequest::kNone);
  EXPECT_FALSE(c.stats);
  EXPECT_TRUE(c.problems.empty());
}

TEST(Config, StatsPathExpandsPid) {
  EXPECT_EQ(expand_stats_path("/tmp/s-%p.json", 42), "/tmp/s-42.json");
  EXPECT_EQ(expand_stats_path("/tmp/s.json", 42), "/tmp/s.json");
  EXPECT_EQ(expand_stats_path("%p%p%", 7), "77%");
}

}  // namespace
}  // namespace lithos::intercept

namespace lithos::intercept {
namespace {

TEST(Config, DeferredLaunchSettings) {
  const Config d = parse({});
  EXPECT_TRUE(d.defer_launches);  // on by default (it only acts under lithosd, for best effort)
  EXPECT_EQ(d.defer_depth, 1024u);
  const Config off = parse({{"LITHOS_DEFER_LAUNCHES", "0"}, {"LITHOS_DEFER_DEPTH", "16"}});
  EXPECT_FALSE(off.defer_launches);
  EXPECT_EQ(off.defer_depth, 16u);
  EXPECT_TRUE(off.problems.empty());
  const Config bad = parse({{"LITHOS_DEFER_LAUNCHES", "maybe"}, {"LITHOS_DEFER_DEPTH", "0"}});
  EXPECT_TRUE(bad.defer_launches);
  EXPECT_EQ(bad.defer_depth, 1024u);
  EXPECT_EQ(bad.problems.size(), 2u);
}

TEST(Config, HighPriorityTimingSettings) {
  const Config d = parse({});
  EXPECT_EQ(d.hp_sample_first, 8u);
  EXPECT_EQ(d.hp_sample_every, 64u);
  EXPECT_EQ(d.hp_sample_per_s, 200u);
  EXPECT_EQ(d.hp_sample_max_ms, 1000u);
  const Config set = parse({{"LITHOS_HP_SAMPLE_FIRST", "0"},
                            {"LITHOS_HP_SAMPLE_EVERY", "10"},
                            {"LITHOS_HP_SAMPLE_PER_S", "0"},
                            {"LITHOS_HP_SAMPLE_MAX_MS", "50"}});
  EXPECT_EQ(set.hp_sample_first, 0u);
  EXPECT_EQ(set.hp_sample_every, 10u);
  EXPECT_EQ(set.hp_sample_per_s, 0u);
  EXPECT_EQ(set.hp_sample_max_ms, 50u);
  EXPECT_TRUE(set.problems.empty());
  const Config bad = parse({{"LITHOS_HP_SAMPLE_FIRST", "-1"},
                            {"LITHOS_HP_SAMPLE_EVERY", "x"},
                            {"LITHOS_HP_SAMPLE_PER_S", "100001"},
                            {"LITHOS_HP_SAMPLE_MAX_MS", "0"}});
  EXPECT_EQ(bad.hp_sample_first, 8u);
  EXPECT_EQ(bad.hp_sample_every, 64u);
  EXPECT_EQ(bad.hp_sample_per_s, 200u);
  EXPECT_EQ(bad.hp_sample_max_ms, 1000u);
  EXPECT_EQ(bad.problems.size(), 4u);
}

TEST(Config, HardwarePrioritySwitch) {
  EXPECT_TRUE(parse({}).hw_priority);  // on by default (it only acts under lithosd)
  EXPECT_TRUE(parse({{"LITHOS_HW_PRIORITY", ""}}).hw_priority);
  const Config off = parse({{"LITHOS_HW_PRIORITY", "0"}});
  EXPECT_FALSE(off.hw_priority);
  EXPECT_TRUE(off.problems.empty());
  const Config bad = parse({{"LITHOS_HW_PRIORITY", "high"}});
  EXPECT_TRUE(bad.hw_priority);
  ASSERT_EQ(bad.problems.size(), 1u);
  EXPECT_NE(bad.problems[0].find("LITHOS_HW_PRIORITY"), std::string::npos);
}

TEST(Config, DaemonTrustAndRegistrationWait) {
  const Config d = parse({});
  EXPECT_EQ(d.daemon_uid, -1);  // only root and the process's own uid
  EXPECT_EQ(d.register_wait_ms, 5.0);
  const Config set = parse({{"LITHOS_DAEMON_UID", "991"}, {"LITHOS_REGISTER_WAIT_MS", "0"}});
  EXPECT_EQ(set.daemon_uid, 991);
  EXPECT_EQ(set.register_wait_ms, 0.0);
  EXPECT_TRUE(set.problems.empty());
  const Config bad = parse({{"LITHOS_DAEMON_UID", "lithos"}, {"LITHOS_REGISTER_WAIT_MS", "-1"}});
  EXPECT_EQ(bad.daemon_uid, -1);
  EXPECT_EQ(bad.register_wait_ms, 5.0);
  EXPECT_EQ(bad.problems.size(), 2u);
  EXPECT_EQ(parse({{"LITHOS_DAEMON_UID", "4294967295"}}).daemon_uid, -1);  // (uid_t)-1 names no one
  EXPECT_EQ(parse({{"LITHOS_DAEMON_UID", "-3"}}).problems.size(), 1u);
}

}  // namespace
}  // namespace lithos::intercept
