// The settings table (src/daemon/settings.hpp) is the one declaration of
// lithosd's settings: these tests fail when a setting is added in one place
// only - a [daemon] key, a LITHOSD_* variable, a --print-config key or a
// bound value that the table does not carry, or the committed reference
// (docs/config.md) that differs from the table's.
#include "daemon/settings.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "daemon/config.hpp"
#include "daemon/trace.hpp"
#include "sched/policies/settings_table.hpp"

namespace lithos::daemon {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

IdResolver no_ids() {
  IdResolver r;
  r.user = [](const std::string& n) -> Result<uid_t> { return Status::not_found("unknown user '" + n + "'"); };
  r.group = [](const std::string& n) -> Result<gid_t> { return Status::not_found("unknown group '" + n + "'"); };
  return r;
}

// A valid value of `s` other than its default, as text; "" when the test
// does not know one (a new string setting: add it here).
std::string other_value(const Setting& s, const DaemonConfig& def) {
  const std::string now = s.get(def);
  switch (s.type) {
    case SettingType::kBool: return now == "true" ? "false" : "true";
    case SettingType::kNumber:
    case SettingType::kInteger: return detail::json_number(now == detail::json_number(s.hi) ? s.lo : s.hi);
    case SettingType::kString: {
      static const std::map<std::string_view, std::string> values = {
          {"socket", "/tmp/lithos-settings-test.sock"},
          {"policy", "mps"},
          {"mps", "off"},
          {"power", "dry-run"},
          {"device", "1"},
          {"state_dir", "/tmp/lithos-settings-test-state"},
          {"trace", "/tmp/lithos-settings-test.jsonl"},
          {"default_tenant", "svc"},
      };
      const auto it = values.find(s.key);
      return it == values.end() ? std::string() : it->second;
    }
  }
  return "";
}

std::string toml_value(const Setting& s, const std::string& text) {
  return s.type == SettingType::kString ? "\"" + text + "\"" : text;
}

// Every setting of the table is read from its [daemon] key and changes that
// setting alone.
TEST(SettingsTable, EveryKeyIsReadFromTheFileAndSetsItsOwnValue) {
  const DaemonConfig def = default_config();
  std::set<std::string_view> keys;
  for (const Setting& s : settings()) {
    EXPECT_TRUE(keys.insert(s.key).second) << "declared twice: " << s.key;
    const std::string v = other_value(s, def);
    ASSERT_FALSE(v.empty()) << "no test value for the string setting '" << s.key << "': add one to other_value()";
    const std::string text =
        "[daemon]\n" + std::string(s.key) + " = " + toml_value(s, v) + "\n\n[[tenant]]\nname = \"svc\"\n";
    auto c = parse_config(text, "f.toml", no_ids());
    ASSERT_TRUE(c.is_ok()) << s.key << ": " << c.status().message();
    EXPECT_EQ(s.get(*c), v) << s.key;
    for (const Setting& o : settings()) {
      if (o.key != s.key) {
        EXPECT_EQ(o.get(*c), o.get(def)) << s.key << " changed " << o.key;
      }
    }
    // Out of range or of the wrong type: an error naming the key and its place.
    const std::string bad =
        s.type == SettingType::kBool ? "\"yes\"" : (s.type == SettingType::kString ? "[1]" : "1e300");
    auto b = parse_config("[daemon]\n" + std::string(s.key) + " = " + bad + "\n", "f.toml", no_ids());
    ASSERT_FALSE(b.is_ok()) << s.key;
    EXPECT_EQ(b.status().message().rfind("f.toml:2:", 0), 0u) << b.status().message();
    EXPECT_NE(b.status().message().find("'" + std::string(s.key) + "'"), std::string::npos) << b.status().message();
  }
  // A key the table does not declare is refused, and the message lists the table's.
  auto unknown = parse_config("[daemon]\nno_such_setting = 1\n", "f.toml", no_ids());
  ASSERT_FALSE(unknown.is_ok());
  for (const Setting& s : settings()) {
    EXPECT_NE(unknown.status().message().find(std::string(s.key)), std::string::npos) << s.key;
  }
}

// Every variable of the table is read; src/ reads no LITHOSD_* variable the
// table does not declare.
TEST(SettingsTable, EveryVariableIsReadAndNoneOutsideTheTable) {
  const DaemonConfig def = default_config();
  std::set<std::string> declared;
  for (const Setting& s : settings()) {
    if (s.env.empty()) continue;
    EXPECT_EQ(s.env.rfind("LITHOSD_", 0), 0u) << s.env;
    EXPECT_TRUE(declared.insert(std::string(s.env)).second) << "declared twice: " << s.env;
    const std::string v = other_value(s, def);
    std::map<std::string, std::string> env = {{std::string(s.env), v}};
    DaemonConfig c = def;
    const Status st = apply_env(c, [&](const char* n) -> const char* {
      const auto it = env.find(n);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    ASSERT_TRUE(st.is_ok()) << s.env << ": " << st.message();
    EXPECT_EQ(s.get(c), v) << s.env;
  }
  // Every LITHOSD_* name in the sources is one of the table's.
  const std::string prefix = "LITHOSD_";
  for (const auto& e : std::filesystem::recursive_directory_iterator(LITHOS_SOURCE_DIR "/src")) {
    if (!e.is_regular_file()) continue;
    const std::string text = read_file(e.path());
    for (std::size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
      std::size_t end = at + prefix.size();
      while (end < text.size() &&
             ((text[end] >= 'A' && text[end] <= 'Z') || (text[end] >= '0' && text[end] <= '9') || text[end] == '_')) {
        ++end;
      }
      if (end == at + prefix.size()) continue;  // "LITHOSD_*"
      const std::string name = text.substr(at, end - at);
      EXPECT_TRUE(declared.contains(name))
          << e.path() << " names " << name << ", which the settings table does not declare";
    }
  }
}

// --print-config's JSON (also a trace's header) carries every setting of the
// table and no other.
TEST(SettingsTable, PrintConfigCarriesExactlyTheTable) {
  DaemonConfig c = default_config();
  const nlohmann::json j = nlohmann::json::parse(config_json(c));
  std::set<std::string> json_keys;
  for (const auto& [k, v] : j.items()) {
    if (k != "schema" && k != "source" && k != "tenants") json_keys.insert(k);
  }
  std::set<std::string> table_keys;
  for (const Setting& s : settings()) table_keys.insert(std::string(s.key));
  EXPECT_EQ(json_keys, table_keys);
  for (const Setting& s : settings()) {
    const nlohmann::json& v = j.at(std::string(s.key));
    switch (s.type) {
      case SettingType::kBool: EXPECT_TRUE(v.is_boolean()) << s.key; break;
      case SettingType::kString: EXPECT_TRUE(v.is_string()) << s.key; break;
      default: EXPECT_TRUE(v.is_number()) << s.key; break;
    }
  }
}

// A trace's header carries every traced setting, and its replay and its
// scenario take them from there; every setting the simulator's [scheduler]
// table takes too is traced (a scenario made from a trace runs as lithosd ran).
TEST(SettingsTable, TracesCarryTheTracedSettings) {
  DaemonConfig c = default_config();
  c.default_tenant = "svc";
  TenantConfig svc;
  svc.name = "svc";
  c.tenants.push_back(svc);
  for (const Setting& s : settings()) {
    if (!s.sim_key.empty()) {
      EXPECT_TRUE(s.traced) << s.key << " has a [scheduler] key but is not traced";
    }
    if (!s.traced || s.key == "default_tenant") continue;
    ASSERT_TRUE(set_setting(c, s, other_value(s, default_config()), "test").is_ok()) << s.key;
  }
  const std::string text = std::string("{\"schema\":\"") + kTraceSchema + "\",\"config\":" + config_json(c) +
                           ",\"device\":{\"name\":\"x\",\"tpcs\":66,\"topology\":\"\"}}\n";
  auto t = parse_trace_file(text, "t.jsonl");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  const DaemonConfig plain;
  for (const Setting& s : settings()) {
    EXPECT_EQ(s.get(t->header.config), s.traced ? s.get(c) : s.get(plain)) << s.key;
  }
}

// The simulator's [scheduler] key a lithosd setting names is a row of the
// Engine's and the policies' settings table, whose type, unit and help it
// takes (declared once, there), with a range inside the row's; and the
// reference lists every row of that table.
TEST(SettingsTable, SchedulerKeysAreRowsOfTheSchedulerTable) {
  int named = 0;
  for (const Setting& s : settings()) {
    if (s.sim_key.empty()) continue;
    ++named;
    const sched::SchedSetting* row = sched::find_scheduler_setting(s.sim_key);
    ASSERT_NE(row, nullptr) << s.key << " names [scheduler] key " << s.sim_key << ", which the table lacks";
    const bool same_type = (s.type == SettingType::kBool && row->type == sched::SchedSettingType::kBool) ||
                           (s.type == SettingType::kInteger && row->type == sched::SchedSettingType::kInteger) ||
                           (s.type == SettingType::kNumber && row->type == sched::SchedSettingType::kNumber);
    EXPECT_TRUE(same_type) << s.key;
    EXPECT_EQ(s.unit, row->unit) << s.key;
    // Declared once: the help is the row's, and lithosd's range lies inside it.
    EXPECT_EQ(s.help, row->help) << s.key;
    if (s.type != SettingType::kBool) {
      EXPECT_TRUE(sched::scheduler_setting_in_range(*row, s.lo)) << s.key << " accepts " << s.lo;
      EXPECT_TRUE(sched::scheduler_setting_in_range(*row, s.hi)) << s.key << " accepts " << s.hi;
    }
  }
  EXPECT_GT(named, 5);
  const std::string md = config_reference_markdown();
  for (const sched::SchedSetting& row : sched::scheduler_settings()) {
    EXPECT_NE(md.find("| `" + std::string(row.key) + "` | "), std::string::npos) << row.key;
  }
}

// Values given as text (variables, flags) are checked by type and range,
// and the error names where the text came from.
TEST(SettingsTable, TextValuesAreCheckedByTheTable) {
  DaemonConfig c = default_config();
  const Setting* atom = find_setting("atom_us");
  ASSERT_NE(atom, nullptr);
  EXPECT_FALSE(set_setting(c, *atom, "10", "--atom-us").is_ok());
  EXPECT_EQ(set_setting(c, *atom, "fast", "--atom-us").message().rfind("--atom-us: 'fast'", 0), 0u);
  EXPECT_TRUE(set_setting(c, *atom, "800", "--atom-us").is_ok());
  EXPECT_DOUBLE_EQ(c.atom_us, 800);
  const Setting* stolen = find_setting("max_stolen_atoms");
  ASSERT_NE(stolen, nullptr);
  EXPECT_FALSE(set_setting(c, *stolen, "1.5", "X").is_ok());
  EXPECT_FALSE(set_setting(c, *stolen, "-1", "X").is_ok());
  EXPECT_TRUE(set_setting(c, *stolen, "3", "X").is_ok());
  EXPECT_EQ(c.max_stolen_atoms, 3u);
  const Setting* timeout = find_setting("client_timeout_ms");
  ASSERT_NE(timeout, nullptr);
  EXPECT_TRUE(set_setting(c, *timeout, "0", "X").is_ok());  // off
  EXPECT_FALSE(set_setting(c, *timeout, "20", "X").is_ok());
  const Setting* policy = find_setting("policy");
  ASSERT_NE(policy, nullptr);
  const Status bad = set_setting(c, *policy, "fifo", "LITHOSD_POLICY");
  EXPECT_NE(bad.message().find("LITHOSD_POLICY: unknown policy 'fifo' (valid: "), std::string::npos) << bad.message();
}

// docs/config.md is the table's reference, as `lithos daemon
// --config-reference` prints it (regenerate it with that command).
TEST(SettingsTable, CommittedReferenceIsTheGeneratedOne) {
  const std::string committed = read_file(LITHOS_SOURCE_DIR "/docs/config.md");
  EXPECT_EQ(committed, config_reference_markdown())
      << "docs/config.md is stale: run `lithos daemon --config-reference > docs/config.md`";
  for (const Setting& s : settings()) {
    EXPECT_NE(committed.find("| `" + std::string(s.key) + "` |"), std::string::npos) << s.key;
    if (!s.env.empty()) {
      EXPECT_NE(committed.find(std::string(s.env)), std::string::npos) << s.env;
    }
  }
}

}  // namespace
}  // namespace lithos::daemon
