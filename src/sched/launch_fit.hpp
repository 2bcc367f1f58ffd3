// The rule that keeps every TPC mask lithos writes from hanging a launch.
//
// Two kinds of launch can wait forever on a set that is too small or shaped
// wrong (measured on the H100, docs/safe-masks.md):
//
//  - Thread-block clusters. A cluster's CTAs run at the same time inside one
//    GPC, each on its own SM: a cluster of c CTAs needs c SMs, i.e.
//    ceil(c / sms_per_tpc) TPCs of the set, in one GPC. Occupancy does not
//    help (two or more CTAs per SM by occupancy still hung on one TPC), and
//    TPCs spread over GPCs do not add up. One such GPC is enough: clusters
//    then run one after another.
//  - Cooperative launches (grid-synchronising). Every block must be resident
//    at once: the set's SMs x blocks per SM must hold the whole grid (a grid
//    one block larger hung).
//
// fit_tpcs() is the one function every path that produces a mask goes
// through (the interposer's descriptor masks, graph launches, atoms and
// green-context routes; the Engine's placements, and so the simulator and
// the daemon): given a requested set it returns a set that cannot hang the
// launch, widened as little as possible, or the whole GPU.
#pragma once

#include <cstdint>

#include "sched/topology.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct LaunchNeeds {
  // SMs of ONE GPC that one cluster occupies: its CTA count. 0 or 1: not a
  // cluster launch.
  std::uint32_t cluster_sms = 0;
  // SMs the set must hold so that the whole grid is resident at once
  // (cooperative launches): ceil(grid / blocks per SM). 0: no such need;
  // kAllSms: the occupancy is unknown, only the whole GPU is safe.
  std::uint32_t resident_sms = 0;
  static constexpr std::uint32_t kAllSms = UINT32_MAX;
  // TPCs the launch runs on whatever the set (LaunchDesc::pinned): the set
  // must hold them. Empty: none.
  TpcSet pinned;

  bool any() const { return cluster_sms > 1 || resident_sms > 0 || !pinned.empty(); }
  // The needs of launches that share one mask (the kernels of a graph): the
  // larger of each.
  LaunchNeeds& operator|=(const LaunchNeeds& o) {
    if (o.cluster_sms > cluster_sms) cluster_sms = o.cluster_sms;
    if (o.resident_sms > resident_sms) resident_sms = o.resident_sms;
    pinned |= o.pinned;
    return *this;
  }
  friend bool operator==(const LaunchNeeds&, const LaunchNeeds&) = default;
};

// A cluster launch of `cluster` CTAs per cluster ({1,1,1}: none).
LaunchNeeds cluster_needs(const Dim3& cluster);
// A cooperative launch of `grid_blocks` blocks with `blocks_per_sm`
// resident per SM (<= 0: unknown, so the whole GPU).
LaunchNeeds cooperative_needs(std::uint64_t grid_blocks, int blocks_per_sm);
// All three, from a scheduler launch (LaunchDesc::cluster, ::cooperative,
// ::pinned).
LaunchNeeds needs_of(const LaunchDesc& launch, int blocks_per_sm);

enum class FitAction : std::uint8_t {
  kAsIs,     // the requested set is safe
  kWidened,  // TPCs were added
  kWhole,    // only the whole GPU is safe (or the request was already every live TPC)
};
enum class FitReason : std::uint8_t {
  kNone,
  kCluster,           // widened inside one GPC for a cluster
  kClusterNoGpc,      // no GPC can hold one cluster: whole GPU
  kTopologyUnknown,   // a cluster launch without a measured topology: whole GPU
  kCooperative,       // widened until the grid is resident
  kCooperativeWhole,  // the grid needs every SM (or its occupancy is unknown)
  kPinned,            // widened to the TPCs the launch runs on anyway (LaunchNeeds::pinned)
};
const char* fit_action_name(FitAction a);
const char* fit_reason_name(FitReason r);

struct Fit {
  TpcSet tpcs;  // the set to use; == live for kWhole
  FitAction action = FitAction::kAsIs;
  FitReason reason = FitReason::kNone;  // the last widening applied
  int added = 0;                        // TPCs added to the request
};

// The smallest widening of `requested` (within `live`, the TPCs that exist)
// that cannot hang a launch with `needs`:
//  - pinned TPCs first: the set gets every live one it lacks (the launch
//    runs there whatever it is given, so the set must say so);
//  - resident SMs first: TPCs are added (lowest numbers first) until the set
//    holds ceil(resident_sms / sms_per_tpc) TPCs;
//  - then clusters: if no GPC holds ceil(cluster_sms / sms_per_tpc) TPCs of
//    the set, the GPC that already holds the most of them (among those large
//    enough; lowest index on ties) gets the missing ones, lowest first;
//  - a result equal to `live`, a cluster no GPC can hold, an unknown
//    topology for a cluster launch, or an unknown occupancy for a
//    cooperative one give kWhole with tpcs = live.
// An empty request means "no mask" and is returned as kWhole with live.
// Pure and allocation-free: the interposer calls it inside the driver's
// launch-descriptor callback.
Fit fit_tpcs(const Topology& topology, const LaunchNeeds& needs, const TpcSet& requested, const TpcSet& live,
             int sms_per_tpc = 2);

// The largest cluster (in CTAs = SMs) that `set` can host: sms_per_tpc x the
// most TPCs of it in one GPC (0 for an unknown topology).
std::uint32_t max_cluster_sms(const Topology& topology, const TpcSet& set, int sms_per_tpc = 2);

}  // namespace lithos::sched
