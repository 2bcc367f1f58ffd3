// The Engine's and the built-in policies' settings, declared once: the
// simulator's [scheduler] table is read from this table, docs/config.md
// lists it (`lithos daemon --config-reference`), and lithosd's own table
// (src/daemon/settings.cpp) names the row of each Engine or policy setting
// it also sets. Pure: no parsing, no I/O; readers check the type and range
// a row gives and set the field through it.
#pragma once

#include <string_view>
#include <vector>

#include "sched/engine.hpp"
#include "sched/policies/catalog.hpp"

namespace lithos::sched {

// What a row sets: the Engine's configuration, the policies' settings and
// how the simulator drives the Engine (immediate_launches).
struct SchedulerTarget {
  EngineConfig* engine = nullptr;
  PolicySettings* policies = nullptr;
  bool* immediate_launches = nullptr;
};

enum class SchedSettingType : unsigned char {
  kNumber,   // a number (integers accepted)
  kInteger,  // a whole number
  kBool,     // true or false
};

struct SchedSetting {
  std::string_view key;  // the simulator's [scheduler] key
  SchedSettingType type = SchedSettingType::kNumber;
  std::string_view unit;  // "us", "ms" or "" (a count, a factor)
  // Numbers and integers: the accepted interval, and its text as error
  // messages give it after "must be " (e.g. "a positive number"); when
  // `range_text_has_hi` is false a value above `hi` is told "at most <hi>".
  double lo = 0;
  bool lo_open = false;
  double hi = 0;
  bool hi_open = false;
  std::string_view range_text;
  bool range_text_has_hi = false;
  std::string_view field;  // the C++ field it sets, e.g. "EngineConfig::throttle"
  std::string_view help;
  // The value in the row's unit (bools: 0 or 1), and setting it from a
  // checked value.
  double (*get)(const SchedulerTarget&) = nullptr;
  void (*set)(SchedulerTarget&, double) = nullptr;
};

// Every row, in the order the reference lists them.
const std::vector<SchedSetting>& scheduler_settings();
const SchedSetting* find_scheduler_setting(std::string_view key);

// Whether `v` lies in the row's interval (numbers and integers).
bool scheduler_setting_in_range(const SchedSetting& s, double v);

}  // namespace lithos::sched
