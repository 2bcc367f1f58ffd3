// `lithos sim`: run a scenario through the scheduling core on the GPU model,
// under every policy side by side.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "sched/policies/catalog.hpp"
#include "sim/compare.hpp"
#include "sim/report.hpp"
#include "sim/scenario.hpp"

namespace lithos::cli {

namespace {

struct SimArgs {
  std::string scenario = "hybrid-stacking";
  std::string policy = "all";
  std::uint64_t seed = 1;
  bool json = false;
  std::string out;
  double duration_s = 0.0;
  bool list = false;
  bool quiet = false;
};

void print_catalog() {
  std::printf("Built-in scenarios (lithos sim --scenario NAME):\n");
  for (const std::string& name : sim::builtin_scenario_names()) {
    auto sc = sim::load_scenario(name);
    std::printf("  %-22s %s\n", name.c_str(), sc ? sc->description.c_str() : sc.status().to_string().c_str());
  }
  std::printf("\nPolicies (lithos sim --policy NAME[,NAME...]; 'all' runs those marked *):\n");
  for (const auto& p : sched::policy_catalog()) {
    std::printf("  %-18s %s %s\n", p.name.c_str(), p.in_all ? "*" : " ", p.description.c_str());
  }
}

int run_sim(const SimArgs& a) {
  if (a.list) {
    print_catalog();
    return 0;
  }
  auto scenario = sim::load_scenario(a.scenario);
  if (!scenario) {
    std::fprintf(stderr, "lithos sim: %s\n", scenario.status().message().c_str());
    return 2;
  }
  if (a.duration_s > 0.0) {
    if (a.duration_s <= scenario->warmup_s) {
      std::fprintf(stderr, "lithos sim: --duration %g must exceed the scenario's warm-up of %g s\n", a.duration_s,
                   scenario->warmup_s);
      return 2;
    }
    scenario->duration_s = a.duration_s;
  }
  auto policies = sim::resolve_policies(a.policy);
  if (!policies) {
    std::fprintf(stderr, "lithos sim: %s\n", policies.status().message().c_str());
    return 2;
  }

  // Capacity runs + one alone run per tenant + one run per policy.
  std::size_t total = scenario->tenants.size() + policies->size();
  for (const auto& t : scenario->tenants)
    if (t.arrival == sim::Arrival::kPoisson && t.load && !t.rate_rps) ++total;
  std::size_t step = 0;
  const auto started = std::chrono::steady_clock::now();
  sim::ProgressFn progress;
  if (!a.quiet) {
    progress = [&](const std::string& label) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::fprintf(stderr, "[%zu/%zu %5.1fs] %s\n", ++step, total, s, label.c_str());
    };
  }
  auto cmp = sim::compare_policies(*scenario, *policies, a.seed, progress);
  if (!cmp) {
    std::fprintf(stderr, "lithos sim: %s\n", cmp.status().message().c_str());
    return cmp.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string json = sim::to_json(*cmp).dump(2) + "\n";
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    if (!(f << json)) {
      std::fprintf(stderr, "lithos sim: cannot write %s\n", a.out.c_str());
      return 1;
    }
  }
  if (a.json) {
    std::fputs(json.c_str(), stdout);
  } else {
    std::fputs(sim::format_table(*cmp).c_str(), stdout);
  }
  return 0;
}

}  // namespace

CommandRunner add_sim_command(CLI::App& app) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* sub = app.add_subcommand(
      "sim",
      "Run a scenario on the simulated GPU under every policy side by side (no GPU needed).\n"
      "Prints per-tenant P50/P99 latency, the same normalised to the tenant alone, SLO attainment, goodput, "
      "throughput, and TPC utilisation.");
  sub->add_option("--scenario,-s", args->scenario,
                  "Built-in scenario name (see --list) or path to a scenario TOML file")
      ->default_val("hybrid-stacking");
  sub->add_option("--policy,-p", args->policy, "Policies to run: all, one name, or a comma-separated list")
      ->default_val("all");
  sub->add_option("--seed", args->seed, "Random seed; the same seed gives the same result")->default_val(1);
  sub->add_flag("--json", args->json, "Print JSON (schema lithos.sim/1, docs/sim-json.md) instead of the table");
  sub->add_option("--out,-o", args->out, "Also write the JSON result to this file");
  sub->add_option("--duration", args->duration_s, "Override the scenario's simulated duration, in seconds");
  sub->add_flag("--list", args->list, "List built-in scenarios and policies, then exit");
  sub->add_flag("--quiet,-q", args->quiet, "No progress lines on stderr");
  return [args] { return run_sim(*args); };
}

}  // namespace lithos::cli
