// The rows of the Engine's and the policies' settings (settings_table.hpp).
#include "sched/policies/settings_table.hpp"

#include <cmath>

namespace lithos::sched {

namespace {

constexpr double kMaxUs = 1e9;     // any time in microseconds: 1000 s
constexpr double kMaxMs = 1e6;     // any time in milliseconds: 1000 s
constexpr double kMaxCount = 1e6;  // atoms
constexpr double kMaxFactor = 1e3;

using T = SchedSettingType;

struct Range {
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;
  std::string_view text;
  bool text_has_hi;
};

constexpr Range kPositiveUs{0.0, true, kMaxUs, false, "a positive number", false};
constexpr Range kNonNegativeUs{0.0, false, kMaxUs, false, "a number >= 0", false};
constexpr Range kNone{0, false, 0, false, "", false};

SchedSetting row(std::string_view key, SchedSettingType type, std::string_view unit, const Range& r,
                 std::string_view field, std::string_view help, double (*get)(const SchedulerTarget&),
                 void (*set)(SchedulerTarget&, double)) {
  SchedSetting s;
  s.key = key;
  s.type = type;
  s.unit = unit;
  s.lo = r.lo;
  s.lo_open = r.lo_open;
  s.hi = r.hi;
  s.hi_open = r.hi_open;
  s.range_text = r.text;
  s.range_text_has_hi = r.text_has_hi;
  s.field = field;
  s.help = help;
  s.get = get;
  s.set = set;
  return s;
}

// Accessors of one field: a Duration read and written in microseconds or
// milliseconds, a number, a count or a bool (0 or 1).
#define LITHOS_US(path) \
  [](const SchedulerTarget& t) { return to_us(t.path); }, [](SchedulerTarget& t, double x) { t.path = us(x); }
#define LITHOS_MS(path) \
  [](const SchedulerTarget& t) { return to_ms(t.path); }, [](SchedulerTarget& t, double x) { t.path = ms(x); }
#define LITHOS_NUM(path)                                                \
  [](const SchedulerTarget& t) { return static_cast<double>(t.path); }, \
      [](SchedulerTarget& t, double x) { t.path = static_cast<decltype(t.path)>(x); }
#define LITHOS_BOOL(path) \
  [](const SchedulerTarget& t) { return t.path ? 1.0 : 0.0; }, [](SchedulerTarget& t, double x) { t.path = x != 0; }

std::vector<SchedSetting> build() {
  std::vector<SchedSetting> v;
  v.push_back(row("throttle_us", T::kNumber, "us", kPositiveUs, "EngineConfig::throttle",
                  "The outstanding-work throttle: predicted work one queue may have in flight before its next "
                  "atom waits. Larger: more best-effort throughput, longer waits for an owner taking its TPCs back",
                  LITHOS_US(engine->throttle)));
  v.push_back(row("throttle_unborrowed_us", T::kNumber, "us", kNonNegativeUs, "EngineConfig::throttle_unborrowed",
                  "The same bound for a best-effort atom on TPCs no one owns (lithos policy; borrowed work stays "
                  "at throttle_us); unset (0, the default) or below throttle_us: throttle_us",
                  LITHOS_US(engine->throttle_unborrowed)));
  v.push_back(row("atom_target_us", T::kNumber, "us", kPositiveUs, "AtomConfig::target",
                  "The duration an atom (a slice of a best-effort launch) aims at: the engine gives an atom the "
                  "whole waves of its TPCs whose predicted time is nearest to it",
                  LITHOS_US(engine->atoms.target)));
  v.push_back(row("per_atom_cost_us", T::kNumber, "us", kNonNegativeUs, "AtomConfig::per_atom_cost",
                  "What the scheduler assumes one more atom costs (the simulator's default: gpu.per_atom_cost_us)",
                  LITHOS_US(engine->atoms.per_atom_cost)));
  v.push_back(row("tolerated_overhead", T::kNumber, "", {0.0, true, 1.0, true, "a number in (0, 1)", true},
                  "AtomConfig::tolerated_overhead",
                  "The share of a launch's time its atoms' extra cost may take when the engine splits it",
                  LITHOS_NUM(engine->atoms.tolerated_overhead)));
  v.push_back(row("max_atoms", T::kInteger, "", {1, false, kMaxCount, false, "", false}, "AtomConfig::max_atoms",
                  "Atoms one launch is split into at most", LITHOS_NUM(engine->atoms.max_atoms)));
  v.push_back(row("max_stolen_atoms", T::kInteger, "", {0, false, kMaxCount, false, "", false},
                  "LithosConfig::max_stolen_atoms",
                  "Lithos policy: the atoms one tenant may have in flight on TPCs it borrowed (the throttle "
                  "bounds their predicted work). 1: an owner that comes back waits for at most the one atom "
                  "running on its TPCs; 0: no borrowing of owned TPCs",
                  LITHOS_NUM(policies->lithos.max_stolen_atoms)));
  v.push_back(row("pause_slowdown", T::kNumber, "", {1.0, false, 100.0, false, "a number in [1, 100]", true},
                  "LithosConfig::pause_slowdown",
                  "Lithos policy: a high-priority tenant with pauses_best_effort = \"auto\" pauses best effort "
                  "while its work beside best-effort atoms takes more than this many times as long as without "
                  "them",
                  LITHOS_NUM(policies->lithos.pause_slowdown)));
  v.push_back(row("steal_lookahead_us", T::kNumber, "us", kNonNegativeUs, "LithosConfig::steal_lookahead",
                  "Lithos policy: a TPC whose atom ends within this long counts as free",
                  LITHOS_US(policies->lithos.steal_lookahead)));
  v.push_back(row("idle_grace_us", T::kNumber, "us", kNonNegativeUs, "EngineConfig::idle_grace",
                  "How long a tenant counts as active after its work on the GPU drained: a high-priority "
                  "tenant's TPCs stay its own that long before best-effort atoms may borrow them. A service "
                  "whose kernels leave longer gaps lends its TPCs in each",
                  LITHOS_US(engine->idle_grace)));
  v.push_back(row("burst_gap_us", T::kNumber, "us", kNonNegativeUs, "LithosConfig::burst_gap",
                  "Lithos policy: a high-priority tenant most of whose last 32 idle gaps are at most this long "
                  "(an eager service, launching kernel by kernel) stays active after it drains for the longest "
                  "of those short gaps, instead of lending its TPCs in each; 0: off",
                  LITHOS_US(policies->lithos.burst_gap)));
  v.push_back(row("lend_surplus", T::kBool, "", kNone, "LithosConfig::lend_surplus",
                  "Lithos policy: lend an active owner's TPCs beyond its peak demand",
                  LITHOS_BOOL(policies->lithos.lend_surplus)));
  v.push_back(row("share_unowned", T::kBool, "", kNone, "LithosConfig::share_unowned",
                  "Lithos policy: true: a high-priority tenant's launches, which never wait, may use every TPC no "
                  "quota holds, also under a best-effort atom (the two share those SMs); false: only those no "
                  "other tenant's atom holds at the moment (its CUDA graphs keep the first set)",
                  LITHOS_BOOL(policies->lithos.share_unowned)));
  v.push_back(row("hp_holds_unowned", T::kBool, "", kNone, "LithosConfig::hp_holds_unowned",
                  "Lithos policy: true: a high-priority launch on TPCs no quota holds keeps new best-effort "
                  "atoms off them until it ends; false: only its quota does, and best-effort atoms run beside "
                  "it there",
                  LITHOS_BOOL(policies->lithos.hp_holds_unowned)));
  v.push_back(row("immediate_launches", T::kBool, "", kNone, "sim::Scenario::immediate_launches",
                  "Drive the Engine as lithosd does: a high-priority tenant's launches (and a best-effort one's "
                  "while it runs free) go out at once on the policy's immediate set; false: every launch waits for "
                  "its dispatch",
                  LITHOS_BOOL(immediate_launches[0])));
  v.push_back(row("timeslice_ms", T::kNumber, "ms", {0.0, true, kMaxMs, false, "a positive number", false},
                  "TimeSlicingConfig::timeslice", "Time-slicing baseline: the slice each tenant gets in turn",
                  LITHOS_MS(policies->time_slicing.timeslice)));
  v.push_back(row("context_switch_us", T::kNumber, "us", kNonNegativeUs, "TimeSlicingConfig::context_switch",
                  "Time-slicing baseline: what switching tenants costs",
                  LITHOS_US(policies->time_slicing.context_switch)));
  v.push_back(row("rightsize_slip", T::kNumber, "", {1.0, false, kMaxFactor, false, "a number >= 1", false},
                  "RightSizeConfig::slip",
                  "The latency ratio right-sizing tolerates: a kernel gets the fewest TPCs predicted to keep it "
                  "within this factor of its time on what it can use (a tenant's rightsize_slip overrides it)",
                  LITHOS_NUM(engine->rightsize.slip)));
  v.push_back(row("rightsize", T::kBool, "", kNone, "LithosConfig::rightsize",
                  "Lithos policy: right-size every tenant's kernels that does not set its own rightsize (the "
                  "lithos-rightsize policy has it on)",
                  LITHOS_BOOL(policies->lithos.rightsize)));
  v.push_back(row("rightsize_probe_after", T::kInteger, "", {0, false, kMaxCount, false, "", false},
                  "RightSizeConfig::probe_after",
                  "Right-sizing: executions of a kernel on what it can use before its first probe",
                  LITHOS_NUM(engine->rightsize.probe_after)));
  v.push_back(row("rightsize_probe_every", T::kInteger, "", {1, false, kMaxCount, false, "", false},
                  "RightSizeConfig::probe_every", "Right-sizing: at most one probe per kernel per this many executions",
                  LITHOS_NUM(engine->rightsize.probe_every)));
  v.push_back(row("rightsize_probe_budget", T::kNumber, "", {0.0, false, 1.0, false, "a number in [0, 1]", true},
                  "RightSizeConfig::probe_budget",
                  "Right-sizing: a tenant's probes' predicted extra time stays within this share of its busy time; "
                  "0: no probes",
                  LITHOS_NUM(engine->rightsize.probe_budget)));
  return v;
}

#undef LITHOS_US
#undef LITHOS_MS
#undef LITHOS_NUM
#undef LITHOS_BOOL

}  // namespace

const std::vector<SchedSetting>& scheduler_settings() {
  static const std::vector<SchedSetting> table = build();
  return table;
}

const SchedSetting* find_scheduler_setting(std::string_view key) {
  for (const SchedSetting& s : scheduler_settings()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

bool scheduler_setting_in_range(const SchedSetting& s, double v) {
  if (!std::isfinite(v)) return false;
  const bool lo_ok = s.lo_open ? v > s.lo : v >= s.lo;
  const bool hi_ok = s.hi_open ? v < s.hi : v <= s.hi;
  return lo_ok && hi_ok;
}

}  // namespace lithos::sched
