// Benchmark scenarios for `lithos bench`: which real tenants run, how long
// they are measured, and how each sharing mode configures them. Files, not
// code: scenarios/bench/*.toml; the format is in docs/benchmarks.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "sched/types.hpp"

namespace lithos::bench {

enum class Role { kHighPriority, kBestEffort };
enum class Kind { kService, kClosed, kTraining };

const char* role_name(Role r);  // "hp", "be"
const char* kind_name(Kind k);  // "service", "closed", "training"

struct BenchTenant {
  std::string name;
  Role role = Role::kHighPriority;
  Kind kind = Kind::kService;
  std::string workload;
  nlohmann::json params = nlohmann::json::object();  // handed to the tenant (module: path made absolute)
  double load = 0.0;                                 // service: fraction of alone capacity
  int thread_pct = 100;                              // mode mps-threads: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
  double partition = 0.0;                            // modes static-partition, lithos-fixed: share of the TPCs
  // mode lithos, hp: its lithosd tenant's pauses_best_effort (true, false or "auto", the default)
  sched::BestEffortPause pauses_best_effort = sched::BestEffortPause::kNever;
};

struct BenchPhase {
  std::string name;
  std::optional<double> x;                           // value on the scenario's phase axis
  nlohmann::json params = nlohmann::json::object();  // tenant name -> parameter overrides
};

struct BenchScenario {
  std::string name;
  std::string description;
  std::string source;  // file path it was read from
  std::string sha;     // FNV-1a of the file text, hex: runs of different files never merge silently
  std::uint64_t seed = 1;
  double warmup_s = 3.0;
  double window_s = 5.0;
  int reps = 3;
  double drain_s = 1.0;
  std::vector<double> slo_factors{1.5, 2.0};
  std::vector<std::string> modes;  // the default matrix; empty -> every baseline mode
  std::optional<std::string> phase_axis;
  std::vector<BenchTenant> tenants;
  std::vector<BenchPhase> phases;  // at least one ("main" when the file has none)

  // Seconds from the start instant to the end of the last window.
  double measured_span_s() const;
  const BenchTenant* tenant(std::string_view name) const;
};

// Parses a scenario; errors name `source`, line and column, and the field.
Result<BenchScenario> parse_bench_scenario(std::string_view toml_text, std::string_view source);

// Reads the file `path`. A tenant of the `module` workload gets its
// params.path (and every phase's) made absolute, relative to the file's
// folder; a path that names no file is an error here.
Result<BenchScenario> load_bench_scenario_file(const std::string& path);

}  // namespace lithos::bench
