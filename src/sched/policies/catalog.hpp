// The built-in policies: their names, descriptions and settings, and the
// one place that makes a policy by name.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sched/policies/baselines.hpp"
#include "sched/policies/lithos.hpp"
#include "sched/policy.hpp"

namespace lithos::sched {

// The settings of every built-in policy; each policy takes its own part.
struct PolicySettings {
  TimeSlicingConfig time_slicing;
  LithosConfig lithos;  // lithos, lithos-no-atoms, lithos-rightsize
};

struct PolicyInfo {
  std::string name;
  std::string description;
  bool in_all = true;  // part of `--policy all` (ablations are not)
};

// Every built-in policy, in the order reports list them.
std::vector<PolicyInfo> policy_catalog();
// nullptr with a message listing valid names in *error when `name` is unknown.
std::unique_ptr<Policy> make_policy(std::string_view name, const PolicySettings& settings, std::string* error);

}  // namespace lithos::sched
