#include "bench/modes.hpp"

#include <algorithm>
#include <cmath>

namespace lithos::bench {

const std::vector<ModeInfo>& mode_catalog() {
  static const std::vector<ModeInfo> modes = {
      {"alone", "alone", "each tenant by itself on the whole GPU (the reference every number is normalised to)", false,
       false, false, true},
      {"mps-alone", "alone under MPS",
       "each tenant by itself as the only client of a private MPS daemon, no lithos: what MPS alone costs it, the "
       "floor of every MPS-based mode (run only when named)",
       true, false, false, true},
      {"time-slicing", "time slicing", "all tenants as plain processes: the driver time-slices their contexts", false,
       false},
      {"mps", "MPS", "all tenants as clients of one MPS daemon: kernels of all clients run concurrently", true, false},
      {"mps-priority", "MPS + priority",
       "MPS with CUDA_MPS_CLIENT_PRIORITY=0 (normal) for hp tenants and 1 (below normal) for be tenants", true, false},
      {"mps-threads", "MPS + thread %",
       "MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = each tenant's thread_pct (a cap, not a reservation)", true, false},
      {"static-partition", "static partition",
       "MPS with disjoint fixed TPC sets (each tenant's partition share) written into every launch by lithos", true,
       true},
      {"lithos-fixed", "lithos fixed sets",
       "MPS; hp tenants on the whole GPU, be tenants confined to their partition's TPCs by lithos", true, true},
      {"lithos", "lithos (lithosd)",
       "MPS; lithosd decides every launch of every tenant with the LithOS policy: hp tenants launch at once on "
       "their allocation (quota = partition share), be tenants under the atomizer wait for each atom's grant",
       true, true, true},
      {"lithos-rightsize", "lithos + right-sizing",
       "mode lithos with right-sizing (lithosd's rightsize = true): each kernel runs on the fewest TPCs that keep it "
       "within its tenant's slip, and the TPCs it leaves go to the other tenants (run only when named)",
       true, true, true, false, true, "rightsize = true\n"},
      {"lithos-alone", "alone under lithosd",
       "each tenant by itself as the only client of lithosd (as in mode lithos): what lithosd costs it, and the "
       "reference of rightsize-alone (run only when named)",
       true, true, true, true, true},
      {"rightsize-alone", "right-sized alone",
       "each tenant by itself under lithosd with right-sizing (rightsize = true): its slowdown against "
       "lithos-alone, and the TPC-time saved, in lithosd's status of the run (run only when named)",
       true, true, true, true, true, "rightsize = true\n"},
  };
  return modes;
}

const ModeInfo* find_mode(std::string_view name) {
  for (const auto& m : mode_catalog()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string mode_names() {
  std::string s;
  for (const auto& m : mode_catalog()) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

std::vector<std::string> default_modes() {
  std::vector<std::string> out;
  for (const auto& m : mode_catalog()) {
    if (!m.per_tenant && !m.named_only) out.emplace_back(m.name);
  }
  return out;
}

Result<std::vector<std::optional<std::string>>> partition_sets(const BenchScenario& sc, int total_tpcs) {
  // Boundaries at round(cumulative share * total), so shares that add up to
  // 1 cover the GPU exactly; every share > 0 gets at least one TPC.
  std::vector<std::optional<std::string>> sets;
  double cumulative = 0.0;
  int next = 0;
  for (const auto& t : sc.tenants) {
    if (!(t.partition > 0.0)) {
      sets.emplace_back(std::nullopt);
      continue;
    }
    cumulative += t.partition;
    const int end = std::max(next + 1, static_cast<int>(std::lround(cumulative * total_tpcs)));
    if (end > total_tpcs) {
      return Status::invalid_argument("the partition shares need more than the GPU's " + std::to_string(total_tpcs) +
                                      " TPCs (tenant '" + t.name + "')");
    }
    sets.emplace_back(end - next == 1 ? std::to_string(next) : std::to_string(next) + "-" + std::to_string(end - 1));
    next = end;
  }
  return sets;
}

Result<std::vector<std::optional<std::string>>> partition_sets_by_group(const BenchScenario& sc,
                                                                        const std::vector<std::vector<int>>& groups) {
  std::vector<std::size_t> members;  // tenants with a share
  for (std::size_t i = 0; i < sc.tenants.size(); ++i) {
    if (sc.tenants[i].partition > 0.0) members.push_back(i);
  }
  std::vector<std::optional<std::string>> sets(sc.tenants.size());
  if (members.empty()) return sets;
  std::vector<std::vector<int>> nonempty;
  int total = 0;
  for (const auto& g : groups) {
    if (g.empty()) continue;
    nonempty.push_back(g);
    total += static_cast<int>(g.size());
  }
  if (nonempty.size() < members.size()) {
    return Status::invalid_argument(std::to_string(members.size()) + " tenants need a partition but the GPU has " +
                                    std::to_string(nonempty.size()) + " TPC groups");
  }
  std::size_t next = 0;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const BenchTenant& t = sc.tenants[members[k]];
    const bool last = k + 1 == members.size();
    const int target = static_cast<int>(std::lround(t.partition * total));
    std::vector<int> tpcs;
    // Leave at least one group for each tenant after this one.
    const std::size_t limit = nonempty.size() - (members.size() - k - 1);
    while (next < limit) {
      const int have = static_cast<int>(tpcs.size());
      const int with = have + static_cast<int>(nonempty[next].size());
      if (!last && have > 0 && std::abs(with - target) > std::abs(have - target)) break;
      tpcs.insert(tpcs.end(), nonempty[next].begin(), nonempty[next].end());
      ++next;
    }
    std::sort(tpcs.begin(), tpcs.end());
    std::string text;
    for (int v : tpcs) text += (text.empty() ? "" : ",") + std::to_string(v);
    sets[members[k]] = text;
  }
  return sets;
}

int quota_of_partition(double partition, int total_tpcs) {
  return std::max(1, static_cast<int>(std::lround(partition * total_tpcs)));
}

Result<std::vector<TenantSetup>> plan_mode(const BenchScenario& sc, const ModeInfo& mode, int total_tpcs) {
  std::vector<TenantSetup> out(sc.tenants.size());
  std::vector<std::optional<std::string>> sets(sc.tenants.size());
  if (mode.lithos) {
    auto s = partition_sets(sc, total_tpcs);
    if (!s) return s.status();
    sets = std::move(*s);
  }
  for (std::size_t i = 0; i < sc.tenants.size(); ++i) {
    const BenchTenant& t = sc.tenants[i];
    TenantSetup& ts = out[i];
    if (mode.name == "mps-priority") {
      ts.env.emplace_back("CUDA_MPS_CLIENT_PRIORITY", t.role == Role::kHighPriority ? "0" : "1");
    } else if (mode.name == "mps-threads") {
      ts.env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(t.thread_pct));
    } else if (mode.name == "static-partition") {
      if (!sets[i]) {
        return Status::invalid_argument("mode static-partition: tenant '" + t.name + "' has no 'partition' share in " +
                                        sc.source);
      }
      ts.tpc_set = sets[i];
    } else if (mode.daemon) {
      ts.daemon_tenant = t.name;
      if (t.role == Role::kBestEffort) {
        ts.atomize = true;
      } else {
        if (!(t.partition > 0.0)) {
          return Status::invalid_argument("mode " + std::string(mode.name) + ": high-priority tenant '" + t.name +
                                          "' has no 'partition' share (its quota) in " + sc.source);
        }
        ts.quota = quota_of_partition(t.partition, total_tpcs);
      }
    } else if (mode.name == "lithos-fixed") {
      if (t.role == Role::kBestEffort) {
        if (!sets[i]) {
          return Status::invalid_argument("mode lithos-fixed: best-effort tenant '" + t.name +
                                          "' has no 'partition' share in " + sc.source);
        }
        ts.tpc_set = sets[i];
      }
    }
  }
  return out;
}

}  // namespace lithos::bench
