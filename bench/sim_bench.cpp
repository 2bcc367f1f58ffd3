// Simulator speed: simulated kernel launches per second of host time, on one
// core. Target (issue 2): at least a million launches per second.
//
//   build/release/bin/sim_bench [--benchmark_filter=...]
//
// items_per_second in the output is launches per second.
#include <benchmark/benchmark.h>

#include <string>

#include "sched/engine.hpp"
#include "sched/policies/catalog.hpp"
#include "sim/scenario.hpp"
#include "sim/simulation.hpp"

namespace {

using namespace lithos;

// One whole simulated run of a built-in scenario under one policy.
void BM_Scenario(benchmark::State& state, const std::string& scenario, const std::string& policy, double seconds) {
  auto sc = sim::load_scenario(scenario);
  if (!sc) {
    state.SkipWithError(sc.status().to_string().c_str());
    return;
  }
  sc->duration_s = seconds;
  sc->warmup_s = 0.0;
  sim::RunOptions opt;
  opt.policy = policy;
  opt.rate_rps.assign(sc->tenants.size(), std::nullopt);
  opt.force_closed.assign(sc->tenants.size(), false);
  // Fixed rates instead of `load` (which needs a capacity run first).
  for (std::size_t i = 0; i < sc->tenants.size(); ++i) {
    if (sc->tenants[i].load) opt.rate_rps[i] = 100.0;
  }
  std::uint64_t launches = 0;
  for (auto _ : state) {
    auto r = sim::run_simulation(*sc, opt);
    if (!r) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    launches += r->counters.launches;
    benchmark::DoNotOptimize(r->tpc_utilization);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(launches));
  state.counters["launches_per_run"] =
      benchmark::Counter(static_cast<double>(launches) / static_cast<double>(state.iterations()));
}

BENCHMARK_CAPTURE(BM_Scenario, hybrid_lithos, "hybrid-stacking", "lithos", 2.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Scenario, hybrid_mps, "hybrid-stacking", "mps", 2.0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Scenario, hybrid_time_slicing, "hybrid-stacking", "time-slicing", 2.0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Scenario, inference_lithos, "inference-stacking", "lithos", 1.0)->Unit(benchmark::kMillisecond);

// The core alone: submit, dispatch and finish one small launch at a time
// (no GPU model), the per-launch cost the runtime will pay too.
void BM_EngineLaunchCycle(benchmark::State& state) {
  std::string err;
  sched::Engine engine(sched::EngineConfig{}, sched::make_policy("lithos", sched::PolicySettings{}, &err));
  sched::TenantSpec hp;
  hp.name = "hp";
  hp.priority = sched::PriorityClass::kHigh;
  hp.quota = 40;
  const auto q = *engine.add_queue(*engine.add_tenant(hp));
  sched::TenantSpec be;
  be.name = "be";
  const auto qb = *engine.add_queue(*engine.add_tenant(be));
  sched::LaunchDesc l;
  l.grid = sched::Dim3{264, 1, 1};
  l.block = sched::Dim3{256, 1, 1};
  std::vector<sched::AtomDispatch> out;
  Time now{};
  std::uint64_t n = 0;
  for (auto _ : state) {
    l.kernel = n % 16;
    (void)engine.submit((n & 1) != 0 ? q : qb, l, now);
    out.clear();
    engine.dispatch(now, out);
    now += us(5);
    for (const auto& d : out) engine.atom_finished(d.atom, now - us(5), now);
    if (n % 64 == 0) {
      engine.sync(q);
      engine.sync(qb);
    }
    ++n;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(n));
}
BENCHMARK(BM_EngineLaunchCycle);

}  // namespace

BENCHMARK_MAIN();
