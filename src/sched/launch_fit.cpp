#include "sched/launch_fit.hpp"

namespace lithos::sched {

namespace {

std::uint32_t ceil_div(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t q = (a + b - 1) / b;
  return q > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(q);
}

Fit whole(const TpcSet& live, const TpcSet& requested, FitReason why) {
  Fit f;
  f.tpcs = live;
  f.action = FitAction::kWhole;
  f.reason = why;
  f.added = (live - requested).count();
  return f;
}

}  // namespace

const char* fit_action_name(FitAction a) {
  switch (a) {
    case FitAction::kAsIs: return "as-is";
    case FitAction::kWidened: return "widened";
    case FitAction::kWhole: return "whole";
  }
  return "?";
}

const char* fit_reason_name(FitReason r) {
  switch (r) {
    case FitReason::kNone: return "none";
    case FitReason::kCluster: return "cluster";
    case FitReason::kClusterNoGpc: return "cluster-no-gpc";
    case FitReason::kTopologyUnknown: return "topology-unknown";
    case FitReason::kCooperative: return "cooperative";
    case FitReason::kCooperativeWhole: return "cooperative-whole";
    case FitReason::kPinned: return "pinned";
  }
  return "?";
}

LaunchNeeds cluster_needs(const Dim3& cluster) {
  LaunchNeeds n;
  const std::uint64_t c = cluster.count();
  n.cluster_sms = c > 1 ? (c > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(c)) : 0;
  return n;
}

LaunchNeeds cooperative_needs(std::uint64_t grid_blocks, int blocks_per_sm) {
  LaunchNeeds n;
  if (grid_blocks == 0) return n;
  n.resident_sms =
      blocks_per_sm <= 0 ? LaunchNeeds::kAllSms : ceil_div(grid_blocks, static_cast<std::uint64_t>(blocks_per_sm));
  return n;
}

LaunchNeeds needs_of(const LaunchDesc& launch, int blocks_per_sm) {
  LaunchNeeds n = cluster_needs(launch.cluster);
  if (launch.cooperative) n |= cooperative_needs(launch.grid.count(), blocks_per_sm);
  n.pinned = launch.pinned;
  return n;
}

std::uint32_t max_cluster_sms(const Topology& topology, const TpcSet& set, int sms_per_tpc) {
  return static_cast<std::uint32_t>(topology.max_in_one_gpc(set) * (sms_per_tpc > 0 ? sms_per_tpc : 1));
}

Fit fit_tpcs(const Topology& topology, const LaunchNeeds& needs, const TpcSet& requested, const TpcSet& live,
             int sms_per_tpc) {
  if (sms_per_tpc <= 0) sms_per_tpc = 1;
  TpcSet set = requested & live;
  if (set.empty() || set == live) return whole(live, requested, FitReason::kNone);
  Fit fit;
  fit.reason = FitReason::kNone;

  // Pinned: the TPCs it runs on anyway.
  if (const TpcSet missing = (needs.pinned & live) - set; !missing.empty()) {
    set |= missing;
    fit.reason = FitReason::kPinned;
  }

  // Cooperative: enough SMs for the whole grid at once.
  if (needs.resident_sms > 0) {
    if (needs.resident_sms == LaunchNeeds::kAllSms) return whole(live, requested, FitReason::kCooperativeWhole);
    const int need = static_cast<int>(ceil_div(needs.resident_sms, static_cast<std::uint64_t>(sms_per_tpc)));
    if (need >= live.count()) return whole(live, requested, FitReason::kCooperativeWhole);
    if (set.count() < need) {
      set |= (live - set).take_lowest(need - set.count());
      fit.reason = FitReason::kCooperative;
    }
  }

  // Clusters: one GPC with enough of the set's TPCs.
  if (needs.cluster_sms > 1) {
    if (!topology.known()) return whole(live, requested, FitReason::kTopologyUnknown);
    const int need = static_cast<int>(ceil_div(needs.cluster_sms, static_cast<std::uint64_t>(sms_per_tpc)));
    if (topology.max_in_one_gpc(set) < need) {
      int best = -1;
      int best_have = -1;
      for (int g = 0; g < topology.count(); ++g) {
        const TpcSet gl = topology.gpc(g) & live;
        if (gl.count() < need) continue;
        const int have = (gl & set).count();
        if (have > best_have) {
          best = g;
          best_have = have;
        }
      }
      if (best < 0) return whole(live, requested, FitReason::kClusterNoGpc);
      const TpcSet gl = topology.gpc(best) & live;
      set |= (gl - set).take_lowest(need - best_have);
      fit.reason = FitReason::kCluster;
    }
  }

  if (set == live) return whole(live, requested, fit.reason);
  fit.tpcs = set;
  fit.added = (set - requested).count();
  fit.action = fit.added > 0 ? FitAction::kWidened : FitAction::kAsIs;
  if (fit.action == FitAction::kAsIs) fit.reason = FitReason::kNone;
  return fit;
}

}  // namespace lithos::sched
