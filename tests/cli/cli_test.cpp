// The `lithos` program as a user runs it: exit codes, messages, output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <set>

#include "daemon/config.hpp"
#include "daemon/settings.hpp"

namespace {

struct Run {
  int status = -1;
  std::string out;  // stdout and stderr together unless split
};

// Runs `lithos ARGS` through the shell; stderr is merged unless `stdout_only`.
Run lithos(const std::string& args, bool stdout_only = false) {
  const std::string cmd = std::string(LITHOS_BINARY) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, HelpAndVersion) {
  auto r = lithos("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "sim"));
  r = lithos("sim --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "--scenario"));
  EXPECT_TRUE(has(r.out, "--policy"));
  EXPECT_TRUE(has(r.out, "--json"));
  EXPECT_TRUE(has(r.out, "--seed"));
  r = lithos("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "lithos"));
}

TEST(Cli, NoSubcommandIsAnError) {
  auto r = lithos("");
  EXPECT_EQ(r.status, 2);
}

TEST(Cli, UnknownScenarioListsBuiltins) {
  auto r = lithos("sim --scenario no-such-scenario");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "unknown scenario 'no-such-scenario'")) << r.out;
  EXPECT_TRUE(has(r.out, "hybrid-stacking")) << r.out;
  EXPECT_TRUE(has(r.out, "inference-stacking")) << r.out;
}

TEST(Cli, UnknownPolicyListsPolicies) {
  auto r = lithos("sim --policy fifo");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "unknown policy 'fifo'")) << r.out;
  for (const char* p : {"time-slicing", "mps", "mps-priority", "static-partition", "lithos"}) {
    EXPECT_TRUE(has(r.out, p)) << p;
  }
}

TEST(Cli, MalformedScenarioNamesFileLineAndField) {
  const std::string path = temp_file("bad.toml", R"([scenario]
name = "bad"

[[kernel]]
name = "k"
duration_us = -5.0
blocks = 10

[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
)");
  auto r = lithos("sim --scenario " + path);
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, path + ":6:")) << r.out;
  EXPECT_TRUE(has(r.out, "duration_us")) << r.out;
  EXPECT_TRUE(has(r.out, "kernel 'k'")) << r.out;

  const std::string typo = temp_file("typo.toml", "[scenario]\nname = \"x\"\nduraton_s = 3\n");
  r = lithos("sim --scenario " + typo);
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, typo + ":3:")) << r.out;
  EXPECT_TRUE(has(r.out, "duraton_s")) << r.out;
}

TEST(Cli, BadDurationIsRefused) {
  auto r = lithos("sim --duration 1");  // default scenario's warm-up is 2 s
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "warm-up")) << r.out;
}

TEST(Cli, ListShowsScenariosAndPolicies) {
  auto r = lithos("sim --list");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"hybrid-stacking", "inference-stacking", "head-of-line", "lithos", "mps-priority"}) {
    EXPECT_TRUE(has(r.out, s)) << s;
  }
}

TEST(Cli, JsonOnStdoutIsCleanAndDeterministic) {
  const std::string args = "sim --scenario head-of-line --policy mps,lithos --duration 1.5 --seed 3 --json";
  auto a = lithos(args, true);
  ASSERT_EQ(a.status, 0) << a.out;
  const auto j = nlohmann::json::parse(a.out);  // nothing but JSON on stdout
  EXPECT_EQ(j["schema"], "lithos.sim/1");
  EXPECT_EQ(j["scenario"]["seed"], 3);
  ASSERT_EQ(j["policies"].size(), 2U);
  auto b = lithos(args, true);
  EXPECT_EQ(a.out, b.out);
}

TEST(Cli, TableAndOutFile) {
  const std::string out = testing::TempDir() + "result.json";
  auto r = lithos("sim --scenario head-of-line --policy lithos --duration 1.5 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "P99 / alone"));
  EXPECT_TRUE(has(r.out, "[1/"));  // progress on stderr
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["policies"][0]["policy"], "lithos");
}

TEST(Cli, UnwritableOutFileFails) {
  auto r = lithos("sim --scenario head-of-line --policy lithos --duration 1.5 -q --out /nonexistent/dir/x.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "cannot write")) << r.out;
}

// lithosd's policy switches as a user sets them: the flag over the
// environment over the file (--print-config, checked without a GPU).
TEST(Cli, DaemonSwitchesTakeFlagOverEnvironmentOverFile) {
  const std::string file = temp_file("lithosd-switches.toml", "[daemon]\nhp_holds_unowned = false\n");
  const std::string print = "daemon --print-config --no-gpu --config " + file;
  auto r = lithos(print, true);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["hp_holds_unowned"], false) << r.out;
  r = lithos("daemon --print-config --no-gpu", true);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["hp_holds_unowned"], true) << "the default";
  ::setenv("LITHOSD_HP_HOLDS_UNOWNED", "on", 1);
  r = lithos(print, true);
  const auto flag = lithos(print + " --hp-holds-unowned off", true);
  ::unsetenv("LITHOSD_HP_HOLDS_UNOWNED");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["hp_holds_unowned"], true) << "the environment over the file";
  ASSERT_EQ(flag.status, 0) << flag.out;
  EXPECT_EQ(nlohmann::json::parse(flag.out)["hp_holds_unowned"], false) << "the flag over the environment";
  r = lithos(print + " --hp-holds-unowned maybe");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "--hp-holds-unowned")) << r.out;
}

// `lithos daemon --help` names every LITHOSD_* variable and every flag of
// the settings table, and offers no flag that sets a setting outside it;
// every flag sets its setting (--print-config shows it).
TEST(Cli, DaemonHelpAndFlagsFollowTheSettingsTable) {
  using lithos::daemon::Setting;
  const auto help = lithos("daemon --help", true);
  ASSERT_EQ(help.status, 0) << help.out;
  std::set<std::string> flags = {"--help",
                                 "--config",
                                 "--no-gpu",
                                 "--slot-map",
                                 "--print-config",
                                 "--config-reference",
                                 "--scenario-from-trace",
                                 "--scenario-out",
                                 "--replay"};
  const lithos::daemon::DaemonConfig def = lithos::daemon::default_config();
  for (const Setting& s : lithos::daemon::settings()) {
    if (!s.env.empty()) {
      EXPECT_TRUE(has(help.out, std::string(s.env))) << s.env << " missing from --help";
    }
    if (s.flag.empty()) continue;
    flags.insert(std::string(s.flag));
    EXPECT_TRUE(has(help.out, std::string(s.flag) + " ")) << s.flag << " missing from --help";
    // A value other than the default, through the flag.
    std::string v;
    switch (s.type) {
      case lithos::daemon::SettingType::kBool: v = s.get(def) == "true" ? "false" : "true"; break;
      case lithos::daemon::SettingType::kString:
        v = s.key == "policy"   ? "mps"
            : s.key == "mps"    ? "off"
            : s.key == "device" ? "0"
            : s.key == "power"  ? "dry-run"
                                : "/tmp/lithos-cli-" + std::string(s.key);
        break;
      default: v = lithos::daemon::detail::json_number(s.hi); break;
    }
    const auto r = lithos("daemon --print-config --no-gpu " + std::string(s.flag) + " " + v, true);
    ASSERT_EQ(r.status, 0) << s.flag << ": " << r.out;
    const auto j = nlohmann::json::parse(r.out)[std::string(s.key)];
    EXPECT_EQ(j.is_string() ? j.get<std::string>() : j.dump(), v) << s.flag;
  }
  // Every flag the help offers: the first word of each option line ("  -h,--help ...").
  std::size_t begin = 0;
  while (begin < help.out.size()) {
    std::size_t end = help.out.find('\n', begin);
    if (end == std::string::npos) end = help.out.size();
    const std::string line = help.out.substr(begin, end - begin);
    begin = end + 1;
    const std::size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || first == 0 || line[first] != '-') continue;
    const std::string word = line.substr(first, line.find(' ', first) - first);
    for (std::size_t at = 0; at < word.size();) {
      std::size_t comma = word.find(',', at);
      if (comma == std::string::npos) comma = word.size();
      const std::string name = word.substr(at, comma - at);
      if (name.rfind("--", 0) == 0) {
        EXPECT_TRUE(flags.contains(name)) << name << " is a flag outside the settings table";
      }
      at = comma + 1;
    }
  }
}

}  // namespace
