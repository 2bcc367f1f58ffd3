// One simulated run: a scenario's tenants generating requests, the real
// scheduling core (sched::Engine with one policy) deciding, and the GPU model
// executing. Deterministic for a seed: every tenant draws its arrivals and
// kernel durations from its own random streams, so the k-th request of a
// tenant is the same under every policy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "sched/engine.hpp"
#include "sched/engine_log.hpp"
#include "sched/predictor.hpp"
#include "sim/scenario.hpp"

namespace lithos::sim {

struct RunOptions {
  std::string policy = "lithos";
  std::uint64_t seed = 1;
  // Run only these tenants (indices into Scenario::tenants); empty: all.
  std::vector<std::size_t> only;
  // Per-tenant overrides of how requests arrive (index -> value), used for
  // the alone runs: a Poisson tenant's resolved rate, or a closed loop.
  std::vector<std::optional<double>> rate_rps;  // resolved Poisson rates (required for `load` tenants)
  std::vector<bool> force_closed;               // run this tenant closed-loop with no think time
  // Whether the tenants run as MPS clients, so that their
  // TenantConfig::mps_slowdown applies (not under time slicing, which runs
  // them as plain processes). false: plain processes (the alone and
  // capacity runs of a comparison).
  bool mps_clients = true;
  // When set: every call the run made into its Engine, with the decisions
  // (sched::EngineLog), for replaying through another Engine.
  std::vector<sched::EngineEvent>* record = nullptr;
};

struct TenantResult {
  std::string name;
  sched::PriorityClass priority = sched::PriorityClass::kBestEffort;
  std::string unit;
  bool open_loop = false;
  double rate_rps = 0.0;         // open loop: offered rate
  std::uint64_t completed = 0;   // requests counted (started in the window, finished)
  std::uint64_t unfinished = 0;  // started in the window, not finished at the end
  // Latency of every finished counted request, in ms, ascending.
  std::vector<double> latencies_ms;
  // Requests counted but unfinished at the end: end - arrival (a lower
  // bound of their latency), ascending. Percentiles include them, so that
  // overload shows instead of hiding in requests that never finish.
  std::vector<double> unfinished_ms;
  double throughput = 0.0;  // requests finished in the window per second
  // What right-sizing did for it over the whole run (warm-up included);
  // nullopt when the policy does not right-size it.
  std::optional<sched::RightSizeStats> rightsize;
};

struct RunResult {
  std::string policy;
  std::vector<TenantResult> tenants;  // in scenario order (only the tenants run)
  double tpc_utilization = 0.0;       // busy TPC-time / (TPCs x window)
  sched::PredictorStats predictor_high;
  sched::PredictorStats predictor_best_effort;
  sched::Engine::Counters counters;
  std::uint64_t gpu_events = 0;
  std::uint64_t time_violations = 0;          // must be 0
  std::uint64_t conservation_violations = 0;  // must be 0
};

// Runs one policy on a scenario. Errors: unknown policy, a tenant set the
// policy rejects (e.g. quotas over the device), a `load` tenant without a
// resolved rate in options.rate_rps.
Result<RunResult> run_simulation(const Scenario& scenario, const RunOptions& options);

}  // namespace lithos::sim
