// Runs a scenario under several policies side by side, plus every tenant
// alone, and derives what users compare: latency percentiles normalised to
// alone, SLO attainment and goodput, throughput normalised to alone.
//
// "Alone" means the tenant by itself on the whole GPU under the mps policy
// (nothing to share with, so no policy effect), with the same seed and hence
// the same arrivals and kernel durations. A tenant given as `load` runs at
// that fraction of its capacity, where capacity is its closed-loop throughput
// alone (requests back to back).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "sim/scenario.hpp"
#include "sim/simulation.hpp"

namespace lithos::sim {

struct TenantSummary {
  std::string name;
  sched::PriorityClass priority = sched::PriorityClass::kBestEffort;
  std::string unit;
  bool open_loop = false;
  double rate_rps = 0.0;  // offered (open loop)
  std::uint64_t completed = 0;
  std::uint64_t unfinished = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0, mean_ms = 0;
  double throughput = 0;  // per second
  // Ratios to the same tenant alone; nullopt for the alone runs themselves.
  std::optional<double> p50_norm, p99_norm, p999_norm, throughput_norm;
  // SLO in ms (explicit, or slo_factor x alone P99 for high-priority
  // tenants); nullopt when the tenant has none.
  std::optional<double> slo_ms;
  std::optional<double> slo_attainment;            // share of counted requests within the SLO
  std::optional<double> goodput;                   // requests per second within the SLO
  std::optional<sched::RightSizeStats> rightsize;  // TenantResult::rightsize
};

struct PolicySummary {
  std::string policy;
  std::string description;
  std::vector<TenantSummary> tenants;
  double tpc_utilization = 0.0;
  sched::PredictorStats predictor_high;
  sched::PredictorStats predictor_best_effort;
  sched::Engine::Counters counters;
  std::uint64_t gpu_events = 0;
  std::uint64_t time_violations = 0;
  std::uint64_t conservation_violations = 0;
};

struct Comparison {
  std::string scenario;
  std::string description;
  std::string source;
  std::uint64_t seed = 1;
  double duration_s = 0, warmup_s = 0, slo_factor = 0;
  std::vector<TenantSummary> alone;     // one per tenant, scenario order
  std::vector<PolicySummary> policies;  // in the order asked for
};

// Progress callback: called before each run with a short label.
using ProgressFn = std::function<void(const std::string& label)>;

// Resolves a --policy argument: "all" (every policy marked in_all), a
// single name, or a comma-separated list. Unknown names give an error
// listing the valid ones.
Result<std::vector<std::string>> resolve_policies(const std::string& spec);

Result<Comparison> compare_policies(const Scenario& scenario, const std::vector<std::string>& policies,
                                    std::uint64_t seed, const ProgressFn& progress = {});

}  // namespace lithos::sim
