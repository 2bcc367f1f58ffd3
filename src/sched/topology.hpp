// Topology: which logical TPCs share a GPC, the domain a thread-block
// cluster must fit in.
//
// A cluster's CTAs are co-scheduled inside one GPC, each on its own SM
// (measured on the H100, docs/safe-masks.md: a cluster of c CTAs never runs
// on fewer than c SMs of one GPC, whatever the occupancy). A TPC set that
// leaves too few SMs of the cluster's size in every GPC therefore hangs the
// launch forever; launch_fit.hpp turns this into a rule.
//
// The GPCs here are *cluster domains* as measured: the H100 this project
// targets has eight GPCs of 4-9 TPCs (slot groups 0-7) and four TPCs that
// never share a cluster with any other TPC, so each is a domain of its own.
// Measured by gpu/topology_probe.hpp from cluster launches; cached with the
// slot map. An unknown topology (no GPCs) makes every cluster launch run on
// the whole GPU.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::sched {

inline constexpr int kMaxGpcs = 32;

class Topology {
 public:
  constexpr Topology() = default;

  // Builds a topology from disjoint, non-empty sets (kInvalidArgument
  // otherwise, or for more than kMaxGpcs).
  static Result<Topology> from_gpcs(const TpcSet* gpcs, int count);
  // "0,8,16,24;1,9,17,25,32,39,46,53;..." (TpcSet::to_string per GPC, ';'
  // between GPCs); "" is the unknown topology. Rejects TPCs >= limit.
  static Result<Topology> parse(std::string_view text, int limit = kMaxTpcs);
  std::string to_string() const;

  bool known() const { return count_ > 0; }
  int count() const { return count_; }
  const TpcSet& gpc(int i) const { return gpcs_[static_cast<std::size_t>(i)]; }
  // Every TPC of every GPC.
  TpcSet tpcs() const;
  // The GPC holding `tpc`, or -1.
  int gpc_of(int tpc) const;
  // The most TPCs of `set` that lie in one GPC (0 for an unknown topology).
  int max_in_one_gpc(const TpcSet& set) const;

  friend bool operator==(const Topology&, const Topology&) = default;

 private:
  std::array<TpcSet, kMaxGpcs> gpcs_{};
  int count_ = 0;
};

}  // namespace lithos::sched
