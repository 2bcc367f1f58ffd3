#include "sched/policies/catalog.hpp"

namespace lithos::sched {

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

std::unique_ptr<Policy> make_policy(std::string_view name, const PolicySettings& settings, std::string* error) {
  if (name == "time-slicing") return std::make_unique<TimeSlicingPolicy>(settings.time_slicing);
  if (name == "mps") return std::make_unique<MpsPolicy>(false);
  if (name == "mps-priority") return std::make_unique<MpsPolicy>(true);
  if (name == "static-partition") return std::make_unique<StaticPartitionPolicy>();
  if (name == "lithos") return std::make_unique<LithosPolicy>(LithosPolicy::Variant::kFull, settings.lithos);
  if (name == "lithos-no-atoms") {
    return std::make_unique<LithosPolicy>(LithosPolicy::Variant::kNoAtoms, settings.lithos);
  }
  if (name == "lithos-rightsize") {
    return std::make_unique<LithosPolicy>(LithosPolicy::Variant::kRightsize, settings.lithos);
  }
  if (error != nullptr) {
    std::string names;
    for (const PolicyInfo& p : policy_catalog()) names += (names.empty() ? "" : ", ") + p.name;
    *error = "unknown policy '" + std::string(name) + "'; valid policies: all, " + names;
  }
  return nullptr;
}

}  // namespace lithos::sched
