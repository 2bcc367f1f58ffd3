#include "sim/compare.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include "common/stats.hpp"
#include "sched/policies/catalog.hpp"

namespace lithos::sim {

namespace {

TenantSummary summarise(const TenantResult& r) {
  TenantSummary s;
  s.name = r.name;
  s.priority = r.priority;
  s.unit = r.unit;
  s.open_loop = r.open_loop;
  s.rate_rps = r.rate_rps;
  s.completed = r.completed;
  s.unfinished = r.unfinished;
  s.rightsize = r.rightsize;
  std::vector<double> all;
  all.reserve(r.latencies_ms.size() + r.unfinished_ms.size());
  std::merge(r.latencies_ms.begin(), r.latencies_ms.end(), r.unfinished_ms.begin(), r.unfinished_ms.end(),
             std::back_inserter(all));
  s.p50_ms = percentile_sorted(all, 50);
  s.p99_ms = percentile_sorted(all, 99);
  s.p999_ms = percentile_sorted(all, 99.9);
  s.mean_ms = mean(all);
  s.throughput = r.throughput;
  return s;
}

std::optional<double> ratio(double a, double b) {
  if (!(b > 0.0)) return std::nullopt;
  return a / b;
}

// SLO attainment over every counted request; unfinished requests count as
// missed (they were not served within the run).
void apply_slo(TenantSummary& s, const TenantResult& r, double slo_ms, double window_s) {
  s.slo_ms = slo_ms;
  const std::size_t counted = r.latencies_ms.size() + r.unfinished_ms.size();
  if (counted == 0) return;
  const auto met = static_cast<std::size_t>(std::upper_bound(r.latencies_ms.begin(), r.latencies_ms.end(), slo_ms) -
                                            r.latencies_ms.begin());
  s.slo_attainment = static_cast<double>(met) / static_cast<double>(counted);
  s.goodput = static_cast<double>(met) / window_s;
}

}  // namespace

Result<std::vector<std::string>> resolve_policies(const std::string& spec) {
  const auto catalog = sched::policy_catalog();
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name == "all") {
      for (const auto& p : catalog) {
        if (p.in_all) add(p.name);
      }
      continue;
    }
    const bool known = std::any_of(catalog.begin(), catalog.end(), [&](const auto& p) { return p.name == name; });
    if (!known) {
      std::string error;
      (void)sched::make_policy(name, sched::PolicySettings{}, &error);
      return Status::invalid_argument(error);
    }
    add(name);
  }
  if (out.empty()) return Status::invalid_argument("no policy given");
  return out;
}

Result<Comparison> compare_policies(const Scenario& scenario, const std::vector<std::string>& policies,
                                    std::uint64_t seed, const ProgressFn& progress) {
  Comparison cmp;
  cmp.scenario = scenario.name;
  cmp.description = scenario.description;
  cmp.source = scenario.source;
  cmp.seed = seed;
  cmp.duration_s = scenario.duration_s;
  cmp.warmup_s = scenario.warmup_s;
  cmp.slo_factor = scenario.slo_factor;
  const double window_s = scenario.duration_s - scenario.warmup_s;
  const std::size_t n = scenario.tenants.size();

  RunOptions base;
  base.seed = seed;
  base.rate_rps.assign(n, std::nullopt);
  base.force_closed.assign(n, false);

  // 1. Capacity of `load` tenants: closed loop, alone.
  for (std::size_t i = 0; i < n; ++i) {
    const TenantConfig& t = scenario.tenants[i];
    if (t.arrival != Arrival::kPoisson || t.rate_rps || !t.load) continue;
    if (progress) progress("capacity of " + t.name);
    RunOptions o = base;
    o.policy = "mps";
    o.mps_clients = false;  // a plain process, as the bench calibrates its loads
    o.only = {i};
    o.force_closed[i] = true;
    auto r = run_simulation(scenario, o);
    if (!r) return r.status().with_context("measuring the capacity of tenant '" + t.name + "'");
    const double capacity = r->tenants.front().throughput;
    if (!(capacity > 0.0)) {
      return Status::failed_precondition("tenant '" + t.name + "' completed no request alone in " +
                                         std::to_string(window_s) + " s: lengthen the scenario");
    }
    base.rate_rps[i] = *t.load * capacity;
  }

  // 2. Each tenant alone.
  std::vector<TenantResult> alone_raw;
  for (std::size_t i = 0; i < n; ++i) {
    if (progress) progress("alone: " + scenario.tenants[i].name);
    RunOptions o = base;
    o.policy = "mps";
    o.mps_clients = false;  // alone is a plain process, as the bench's
    o.only = {i};
    auto r = run_simulation(scenario, o);
    if (!r) return r.status().with_context("running tenant '" + scenario.tenants[i].name + "' alone");
    alone_raw.push_back(r->tenants.front());
    cmp.alone.push_back(summarise(r->tenants.front()));
  }
  std::vector<std::optional<double>> slo(n);
  for (std::size_t i = 0; i < n; ++i) {
    const TenantConfig& t = scenario.tenants[i];
    if (t.slo_ms) {
      slo[i] = *t.slo_ms;
    } else if (t.priority == sched::PriorityClass::kHigh) {
      slo[i] = scenario.slo_factor * cmp.alone[i].p99_ms;
    }
    if (slo[i]) apply_slo(cmp.alone[i], alone_raw[i], *slo[i], window_s);
  }

  // 3. Every policy with all tenants.
  const auto catalog = sched::policy_catalog();
  for (const std::string& name : policies) {
    if (progress) progress("policy: " + name);
    RunOptions o = base;
    o.policy = name;
    auto r = run_simulation(scenario, o);
    if (!r) return r.status().with_context("policy '" + name + "'");
    PolicySummary ps;
    ps.policy = r->policy;
    for (const auto& info : catalog) {
      if (info.name == name) ps.description = info.description;
    }
    for (std::size_t i = 0; i < n; ++i) {
      TenantSummary s = summarise(r->tenants[i]);
      const TenantSummary& a = cmp.alone[i];
      s.p50_norm = ratio(s.p50_ms, a.p50_ms);
      s.p99_norm = ratio(s.p99_ms, a.p99_ms);
      s.p999_norm = ratio(s.p999_ms, a.p999_ms);
      s.throughput_norm = ratio(s.throughput, a.throughput);
      if (slo[i]) apply_slo(s, r->tenants[i], *slo[i], window_s);
      ps.tenants.push_back(std::move(s));
    }
    ps.tpc_utilization = r->tpc_utilization;
    ps.predictor_high = r->predictor_high;
    ps.predictor_best_effort = r->predictor_best_effort;
    ps.counters = r->counters;
    ps.gpu_events = r->gpu_events;
    ps.time_violations = r->time_violations;
    ps.conservation_violations = r->conservation_violations;
    cmp.policies.push_back(std::move(ps));
  }
  return cmp;
}

}  // namespace lithos::sim
