// The sharing modes `lithos bench` compares: what users pick today (time
// slicing, MPS and its knobs, static partitions) and lithos configurations.
// A mode decides which tenants run together, whether an MPS daemon runs, and
// each tenant's environment and TPC set.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/scenario.hpp"
#include "common/status.hpp"

namespace lithos::bench {

struct ModeInfo {
  std::string_view name;
  std::string_view label;        // for tables and plots
  std::string_view description;  // one line, for --help and --list-modes
  bool mps = false;              // clients of a private MPS daemon
  bool lithos = false;           // tenants run under `lithos run` with TPC sets
  bool daemon = false;           // the run starts lithosd; every tenant is its client (`lithos run --tenant`)
  // Each tenant runs by itself, one run per tenant ("<mode>-<tenant>"):
  // alone and mps-alone. Not among the defaults; reported as one mode.
  bool per_tenant = false;
  // Run only when named (not among a scenario's default modes).
  bool named_only = false;
  // Lines the mode adds to lithosd's [daemon] table (daemon modes).
  std::string_view daemon_toml{};
};

// In report order; "alone" first.
const std::vector<ModeInfo>& mode_catalog();
const ModeInfo* find_mode(std::string_view name);
// The names, comma-separated, for error messages.
std::string mode_names();
// Every mode but the per-tenant ones (alone, mps-alone): what a scenario
// runs when it names none.
std::vector<std::string> default_modes();

struct TenantSetup {
  std::vector<std::pair<std::string, std::string>> env;  // added to the tenant's environment
  std::optional<std::string> tpc_set;                    // logical TPCs ("0-39"), via `lithos run --tpc-set`
  bool atomize = false;                                  // via `lithos run --atomize` (kernel atomizer)
  // lithosd (mode "lithos"): the tenant's name in the daemon's config; its
  // class follows its role, a high-priority tenant's quota is `quota` TPCs.
  std::string daemon_tenant;
  int quota = 0;
};

// How `mode` configures each tenant of `sc` (same order as sc.tenants).
// `total_tpcs` is the GPU's TPC count (66 on an H100 SXM). Fails when the
// scenario lacks what the mode needs (a partition share for a static
// partition), naming the tenant and the field.
Result<std::vector<TenantSetup>> plan_mode(const BenchScenario& sc, const ModeInfo& mode, int total_tpcs);

// A high-priority tenant's lithosd quota in the daemon modes: its partition
// share of `total_tpcs`, rounded, at least one TPC.
int quota_of_partition(double partition, int total_tpcs);

// The logical TPC ranges a static partition gives each tenant: contiguous,
// in tenant order, round(share * total) each (at least 1 for a share > 0).
Result<std::vector<std::optional<std::string>>> partition_sets(const BenchScenario& sc, int total_tpcs);

// The same shares in whole slot groups (GPCs, as `lithos calibrate --json`
// lists them: each group's logical TPCs): tenants in order take consecutive
// groups while that brings them closer to round(share * total); the last
// tenant with a share takes the rest. Sets of a few TPCs from every GPC hung
// PyTorch kernels on the H100 and H200 (docs/benchmarks.md), whole groups
// did not.
Result<std::vector<std::optional<std::string>>> partition_sets_by_group(const BenchScenario& sc,
                                                                        const std::vector<std::vector<int>>& groups);

}  // namespace lithos::bench
