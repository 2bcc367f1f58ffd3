#include "sched/policy.hpp"

#include "sched/engine.hpp"
#include "sched/policies/baselines.hpp"
#include "sched/policies/lithos.hpp"

namespace lithos::sched {

int Policy::rank(const EngineState& state, TenantId tenant) const {
  return state.tenants[static_cast<std::size_t>(tenant)].is_high() ? 0 : 1;
}

TpcSet Policy::immediate_set(const EngineState& state, TenantId tenant, Time now, bool lasting) const {
  (void)now;
  (void)lasting;
  const TpcSet& owned = state.tenants[static_cast<std::size_t>(tenant)].owned;
  return owned.empty() ? state.device_tpcs : owned;
}

HwPriority Policy::immediate_priority(const EngineState& state, TenantId tenant) const {
  (void)state;
  (void)tenant;
  return HwPriority::kNormal;
}

bool Policy::runs_free(const EngineState& state, TenantId tenant) const {
  (void)state;
  (void)tenant;
  return false;
}

std::vector<PolicyInfo> policy_catalog() {
  return {
      {"time-slicing",
       "the driver's default: one tenant's kernels at a time, switching slices when others wait; "
       "running blocks are not preempted",
       true},
      {"mps", "MPS: every kernel may use every TPC; the hardware serves kernels in arrival order", true},
      {"mps-priority",
       "MPS with client priority: high-priority kernels are served before best-effort ones at block boundaries", true},
      {"static-partition",
       "fixed TPC partitions (quotas without stealing), as MIG, MPS thread limits or green contexts give", true},
      {"lithos", "LithOS: quotas as guarantees, TPC stealing and lending, atoms, outstanding-work throttle", true},
      {"lithos-no-atoms", "ablation: lithos without the atomizer (kernels run whole)", false},
      {"lithos-rightsize", "lithos with hardware right-sizing of high-priority kernels", false},
  };
}

std::unique_ptr<Policy> make_policy(std::string_view name, std::string* error) {
  if (name == "time-slicing") return std::make_unique<TimeSlicingPolicy>();
  if (name == "mps") return std::make_unique<MpsPolicy>(false);
  if (name == "mps-priority") return std::make_unique<MpsPolicy>(true);
  if (name == "static-partition") return std::make_unique<StaticPartitionPolicy>();
  if (name == "lithos") return std::make_unique<LithosPolicy>(LithosPolicy::Variant::kFull);
  if (name == "lithos-no-atoms") return std::make_unique<LithosPolicy>(LithosPolicy::Variant::kNoAtoms);
  if (name == "lithos-rightsize") return std::make_unique<LithosPolicy>(LithosPolicy::Variant::kRightsize);
  if (error != nullptr) {
    std::string names;
    for (const PolicyInfo& p : policy_catalog()) names += (names.empty() ? "" : ", ") + p.name;
    *error = "unknown policy '" + std::string(name) + "'; valid policies: all, " + names;
  }
  return nullptr;
}

}  // namespace lithos::sched
