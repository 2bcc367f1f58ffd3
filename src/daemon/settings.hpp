// Every lithosd setting, declared once (docs/config.md is generated from
// this table: `lithos daemon --config-reference`).
//
// A row names the setting's [daemon] key (also its key in --print-config's
// JSON and in a trace's header), its type, unit, range, environment
// variable, `lithos daemon` flag, the key of the simulator's [scheduler]
// table that sets the same Engine or policy setting, and its help. An Engine
// or policy setting is declared in sched::scheduler_settings()
// (src/sched/policies/settings_table.hpp) for the simulator and lithosd
// alike: its row here takes type, unit and help from there and adds only
// lithosd's key, range (inside the row's), variable and flag. The
// configuration file's [daemon] table, the LITHOSD_* variables, the flags
// and their help, --print-config and the reference are all driven from it.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace lithos::daemon {

struct DaemonConfig;

enum class SettingType : unsigned char {
  kNumber,   // a number (integers accepted)
  kInteger,  // a whole number
  kBool,     // true or false (environment and flags: also 1/0, yes/no, on/off)
  kString,   // text, checked by the row's own rule
};

struct Setting {
  std::string_view key;  // [daemon] key; --print-config and trace header key
  SettingType type = SettingType::kNumber;
  std::string_view unit;  // "us", "ms", "per s", or "" (a count, a factor, text)
  // Numbers: the accepted range (both ends included).
  double lo = 0;
  double hi = 0;
  std::string_view env;      // LITHOSD_* variable, or "" (none)
  std::string_view flag;     // `lithos daemon` flag, or "" (none)
  std::string_view sim_key;  // the simulator's [scheduler] key of the same setting, or ""
  std::string_view help;
  // The default as the reference shows it where the value depends on the
  // machine (a path); "" : the value of default_config().
  std::string_view default_text;
  // A number that may also be 0 (off) below `lo`.
  bool zero_is_off = false;
  // Written to a trace's header (--print-config's JSON) and read back for
  // its replay and its scenario; `trace_absent` is the value a trace written
  // before the setting existed ran with ("" : every trace has it).
  bool traced = false;
  std::string_view trace_absent;
  // Strings: "" when `value` is acceptable, else what is wrong with it, as
  // a message that names the key or the value (e.g. "unknown policy 'x'
  // (valid: ...)"); bools and numbers: unused.
  std::function<std::string(std::string_view value)> check;
  // Reads the setting's value as text (numbers as --print-config writes
  // them, bools as true/false) and sets it from checked text.
  std::function<std::string(const DaemonConfig&)> get;
  std::function<void(DaemonConfig&, std::string_view)> set;
};

// Every setting, in the order the reference lists them.
const std::vector<Setting>& settings();
const Setting* find_setting(std::string_view key);

// Sets `s` from text (a variable's or a flag's value), checked by its type,
// range and rule. Errors are "<origin>: <what is wrong>".
Status set_setting(DaemonConfig& c, const Setting& s, std::string_view text, std::string_view origin);

// The value of `s` in `c` as a JSON value (numbers, true/false, strings quoted).
std::string setting_json(const DaemonConfig& c, const Setting& s);

// The range or rule a value must meet, as text ("50 to 100000", "true or false").
std::string setting_rule(const Setting& s);

// docs/config.md: every setting with its type, unit, default, range, key,
// variable, flag and help, as Markdown, then the simulator's [scheduler]
// keys (scheduler_reference_markdown).
std::string config_reference_markdown();

// The section of docs/config.md on the simulator's [scheduler] table: every
// row of sched::scheduler_settings() with its type, unit, default, range,
// the field it sets and the lithosd key of the same setting.
std::string scheduler_reference_markdown();

// The LITHOSD_* variables of the table, in its order.
std::vector<std::string_view> setting_env_vars();

// Text helpers shared by config.cpp and settings.cpp.
namespace detail {
std::string json_number(double v);            // the shortest text that reads back as v; null when not finite
std::string json_string(std::string_view s);  // a JSON string literal; bytes that are not UTF-8 become U+FFFD
std::string policy_names();
bool policy_known(std::string_view name);
bool socket_path_fits(const std::string& p);  // with a GPU's UUID in place of every %g
std::string socket_path_rule();
}  // namespace detail

}  // namespace lithos::daemon
