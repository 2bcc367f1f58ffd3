// The safe-mask rule (sched/launch_fit.hpp) and the topology it reads, on
// fake topologies and on the one measured on the H100.
#include "sched/launch_fit.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "sched/topology.hpp"

namespace lithos::sched {
namespace {

TpcSet S(const char* text) { return TpcSet::parse(text).value(); }

Topology topo(std::vector<const char*> gpcs) {
  std::vector<TpcSet> sets;
  for (const char* g : gpcs) sets.push_back(S(g));
  return Topology::from_gpcs(sets.data(), static_cast<int>(sets.size())).value();
}

// The H100 of docs/gpu.md: eight GPCs (slot groups 0-7) and four TPCs that
// are cluster domains of their own (measured 2026-11-24, docs/safe-masks.md).
Topology h100() {
  return topo({"0,8,16,24", "1,9,17,25,32,39,46,53", "2,10,18,26,33,40,47,54", "3,11,19,27,34,41,48,55",
               "4,12,20,28,35,42,49,56", "5,13,21,29,36,43,50,57", "6,14,22,30,37,44,51,58,60",
               "7,15,23,31,38,45,52,59,61", "62", "63", "64", "65"});
}

// Whether a launch with `needs` can run on `set` on the hardware as measured:
// one GPC holds cluster_sms SMs of the set, and the set holds resident_sms.
bool runs(const Topology& t, const LaunchNeeds& n, const TpcSet& set) {
  if (n.cluster_sms > 1 && static_cast<std::uint32_t>(2 * t.max_in_one_gpc(set)) < n.cluster_sms) return false;
  if (n.resident_sms > 0 && static_cast<std::uint64_t>(2 * set.count()) < n.resident_sms) return false;
  return true;
}

TEST(Topology, ParseRoundTripsAndRejectsOverlaps) {
  const Topology t = h100();
  EXPECT_EQ(t.count(), 12);
  EXPECT_EQ(t.tpcs(), TpcSet::range(0, 66));
  EXPECT_EQ(Topology::parse(t.to_string()).value(), t);
  EXPECT_EQ(t.gpc_of(60), 6);
  EXPECT_EQ(t.gpc_of(65), 11);
  EXPECT_EQ(t.gpc_of(66), -1);
  EXPECT_FALSE(Topology::parse("0-3;3-5").is_ok());
  EXPECT_FALSE(Topology::parse("0-3;").is_ok());
  EXPECT_FALSE(Topology::parse("0-3;;4").is_ok());
  EXPECT_FALSE(Topology::parse("0-3;70", 66).is_ok());
  EXPECT_FALSE(Topology::parse("").value().known());
  EXPECT_EQ(t.max_in_one_gpc(S("0-15")), 2);
  EXPECT_EQ(t.max_in_one_gpc(S("62-65")), 1);
}

TEST(LaunchNeeds, FromLaunches) {
  LaunchDesc d;
  d.grid = {264, 1, 1};
  d.cluster = {2, 2, 1};
  EXPECT_EQ(needs_of(d, 2).cluster_sms, 4U);
  EXPECT_EQ(needs_of(d, 2).resident_sms, 0U);
  d.cooperative = true;
  EXPECT_EQ(needs_of(d, 2).resident_sms, 132U);
  EXPECT_EQ(needs_of(d, 5).resident_sms, 53U);  // ceil(264 / 5)
  EXPECT_EQ(needs_of(d, 0).resident_sms, LaunchNeeds::kAllSms);
  EXPECT_FALSE(cluster_needs({1, 1, 1}).any());
  LaunchNeeds g = cluster_needs({8, 1, 1});
  g |= cooperative_needs(100, 4);
  EXPECT_EQ(g.cluster_sms, 8U);
  EXPECT_EQ(g.resident_sms, 25U);
}

TEST(LaunchFit, PlainLaunchesKeepTheirSet) {
  const TpcSet live = TpcSet::range(0, 66);
  const Fit f = fit_tpcs(h100(), {}, S("0-7"), live);
  EXPECT_EQ(f.action, FitAction::kAsIs);
  EXPECT_EQ(f.tpcs, S("0-7"));
  EXPECT_EQ(fit_tpcs(h100(), cluster_needs({16, 1, 1}), live, live).action, FitAction::kWhole);
  EXPECT_EQ(fit_tpcs(h100(), cluster_needs({16, 1, 1}), {}, live).action, FitAction::kWhole);
}

// A launch pinned to TPCs it runs on anyway (a graph built earlier): the set
// takes them in; all of them live means the whole GPU.
TEST(LaunchFit, PinnedTpcsAreAlwaysInTheSet) {
  const TpcSet live = TpcSet::range(0, 66);
  LaunchNeeds n;
  n.pinned = S("40-45");
  EXPECT_TRUE(n.any());
  EXPECT_EQ(fit_tpcs(h100(), n, S("30-49"), live).action, FitAction::kAsIs);
  const Fit f = fit_tpcs(h100(), n, S("0-41"), live);
  EXPECT_EQ(f.action, FitAction::kWidened);
  EXPECT_EQ(f.reason, FitReason::kPinned);
  EXPECT_EQ(f.tpcs, S("0-45"));
  EXPECT_EQ(f.added, 4);
  n.pinned = live;
  EXPECT_EQ(fit_tpcs(h100(), n, S("0-7"), live).action, FitAction::kWhole);
  n.pinned = S("70-71");  // none live: nothing to add
  EXPECT_EQ(fit_tpcs(h100(), n, S("0-7"), live).action, FitAction::kAsIs);
  LaunchDesc d;
  d.pinned = S("3");
  EXPECT_EQ(needs_of(d, 8).pinned, S("3"));
  EXPECT_STREQ(fit_reason_name(FitReason::kPinned), "pinned");
}

// A 4-TPC, an 8-TPC and a 9-TPC GPC: the smallest set of each that a
// cluster fits, and the widening from one TPC fewer.
TEST(LaunchFit, ClusterNeedsHalfItsSizeInOneGpc) {
  const Topology t = topo({"0-3", "4-11", "12-20"});
  const TpcSet live = TpcSet::range(0, 21);
  for (std::uint32_t c : {2U, 4U, 6U, 8U, 16U}) {
    const int need = static_cast<int>((c + 1) / 2);
    for (const char* g : {"0-3", "4-11", "12-20"}) {
      const TpcSet gpc = S(g);
      if (gpc.count() < need) continue;
      const TpcSet enough = gpc.take_lowest(need);
      EXPECT_EQ(fit_tpcs(t, cluster_needs({c, 1, 1}), enough, live).action, FitAction::kAsIs) << c << " " << g;
      const TpcSet short_by_one = gpc.take_lowest(need - 1) | S("0");  // plus a TPC of GPC 0
      const Fit f = fit_tpcs(t, cluster_needs({c, 1, 1}), short_by_one, live);
      EXPECT_TRUE(runs(t, cluster_needs({c, 1, 1}), f.tpcs)) << c << " " << g;
      EXPECT_TRUE(f.tpcs.contains(short_by_one));
    }
  }
}

TEST(LaunchFit, ClusterWidensInsideTheGpcHoldingMost) {
  const Topology t = h100();
  const TpcSet live = TpcSet::range(0, 66);
  // 0-7: one TPC in each of GPCs 0-7. A 4-CTA cluster needs 2 TPCs of one
  // GPC: GPC 0 (the first with the most) gets its next TPC, 8.
  Fit f = fit_tpcs(t, cluster_needs({4, 1, 1}), S("0-7"), live);
  EXPECT_EQ(f.action, FitAction::kWidened);
  EXPECT_EQ(f.reason, FitReason::kCluster);
  EXPECT_EQ(f.tpcs, S("0-8"));
  EXPECT_EQ(f.added, 1);
  // 0-15 already has two TPCs in every GPC: 4 fits, 8 needs two more in one.
  EXPECT_EQ(fit_tpcs(t, cluster_needs({4, 1, 1}), S("0-15"), live).action, FitAction::kAsIs);
  f = fit_tpcs(t, cluster_needs({8, 1, 1}), S("0-15"), live);
  EXPECT_EQ(f.tpcs, S("0-16,24"));  // GPC 0 is 0,8,16,24
  // Prefer the GPC that holds the most of the set.
  f = fit_tpcs(t, cluster_needs({8, 1, 1}), S("1,9,17,0"), live);
  EXPECT_EQ(f.tpcs, S("0,1,9,17,25"));
  EXPECT_EQ(f.added, 1);
  // 16 CTAs need 8 TPCs: GPC 0 (4) and the lone TPCs cannot, GPC 1 can.
  f = fit_tpcs(t, cluster_needs({16, 1, 1}), S("0,8,16,24,62-65"), live);
  EXPECT_EQ(f.action, FitAction::kWidened);
  EXPECT_EQ(t.max_in_one_gpc(f.tpcs), 8);
  EXPECT_EQ((f.tpcs - S("0,8,16,24,62-65")), t.gpc(1));
}

TEST(LaunchFit, ClusterLargerThanEveryGpcRunsWhole) {
  const Topology t = topo({"0-3", "4-7"});
  const TpcSet live = TpcSet::range(0, 8);
  const Fit f = fit_tpcs(t, cluster_needs({16, 1, 1}), S("0-1"), live);
  EXPECT_EQ(f.action, FitAction::kWhole);
  EXPECT_EQ(f.reason, FitReason::kClusterNoGpc);
  EXPECT_EQ(f.tpcs, live);
  EXPECT_EQ(f.added, 6);
}

TEST(LaunchFit, UnknownTopologyRunsClustersWhole) {
  const TpcSet live = TpcSet::range(0, 66);
  const Fit f = fit_tpcs(Topology{}, cluster_needs({2, 1, 1}), S("0-31"), live);
  EXPECT_EQ(f.action, FitAction::kWhole);
  EXPECT_EQ(f.reason, FitReason::kTopologyUnknown);
  EXPECT_EQ(fit_tpcs(Topology{}, {}, S("0-31"), live).action, FitAction::kAsIs);
}

// Floor-swept groups: TPCs that exist in the topology but are not live are
// never used, and a GPC whose live part is too small is skipped.
TEST(LaunchFit, FloorSweptGpcsCountOnlyLiveTpcs) {
  const Topology t = topo({"0-8", "9-17"});
  const TpcSet live = S("0-3,9-17");                                     // GPC 0 swept to 4 TPCs
  const Fit f = fit_tpcs(t, cluster_needs({10, 1, 1}), S("0-3"), live);  // needs 5 TPCs
  EXPECT_EQ(f.action, FitAction::kWidened);
  EXPECT_TRUE(live.contains(f.tpcs));
  EXPECT_EQ(t.max_in_one_gpc(f.tpcs & S("9-17")), 5);
  EXPECT_TRUE(runs(t, cluster_needs({10, 1, 1}), f.tpcs));
}

TEST(LaunchFit, CooperativeAtAndBeyondCapacity) {
  const Topology t = h100();
  const TpcSet live = TpcSet::range(0, 66);
  const TpcSet gpc6 = t.gpc(6);  // 9 TPCs, 18 SMs
  // 16 blocks per SM: capacity 288; measured: 288 ran, 289 hung.
  EXPECT_EQ(fit_tpcs(t, cooperative_needs(288, 16), gpc6, live).action, FitAction::kAsIs);
  Fit f = fit_tpcs(t, cooperative_needs(289, 16), gpc6, live);
  EXPECT_EQ(f.action, FitAction::kWidened);
  EXPECT_EQ(f.reason, FitReason::kCooperative);
  EXPECT_EQ(f.tpcs.count(), 10);
  EXPECT_TRUE(f.tpcs.contains(gpc6));
  // Sized for the whole device (occupancy x 132 SMs): whole GPU.
  f = fit_tpcs(t, cooperative_needs(16 * 132, 16), S("0-7"), live);
  EXPECT_EQ(f.action, FitAction::kWhole);
  EXPECT_EQ(f.reason, FitReason::kCooperativeWhole);
  // Unknown occupancy: whole GPU.
  EXPECT_EQ(fit_tpcs(t, cooperative_needs(10, 0), S("0-7"), live).action, FitAction::kWhole);
}

TEST(LaunchFit, BothNeedsTogether) {
  const Topology t = h100();
  const TpcSet live = TpcSet::range(0, 66);
  LaunchNeeds n = cluster_needs({4, 1, 1});
  n |= cooperative_needs(40, 2);  // 20 SMs = 10 TPCs
  const Fit f = fit_tpcs(t, n, S("0-7"), live);
  EXPECT_TRUE(runs(t, n, f.tpcs));
  EXPECT_TRUE(f.tpcs.contains(S("0-7")));
}

// Every request, every cluster size and occupancy, on three topologies:
// the answer always runs on the hardware model, contains the request (or is
// the whole GPU), and stays inside the live TPCs.
TEST(LaunchFit, NeverHangsOnRandomSets) {
  const Topology topos[] = {h100(), topo({"0-3", "4-11", "12-20"}), topo({"0-8", "9-17", "18-26", "27-30"})};
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (const Topology& t : topos) {
    const TpcSet live = t.tpcs();
    for (int i = 0; i < 2000; ++i) {
      TpcSet req;
      const int n = 1 + static_cast<int>(next() % static_cast<std::uint64_t>(live.count()));
      live.for_each([&](int tpc) {
        if (static_cast<int>(next() % static_cast<std::uint64_t>(live.count())) < n) req.set(tpc);
      });
      if (req.empty()) continue;
      LaunchNeeds needs;
      const std::uint32_t c = 1U << (next() % 5);  // 1..16
      needs = cluster_needs({c, 1, 1});
      if (next() % 3 == 0) needs |= cooperative_needs(1 + next() % 600, 1 + static_cast<int>(next() % 16));
      const Fit f = fit_tpcs(t, needs, req, live);
      ASSERT_TRUE(live.contains(f.tpcs));
      ASSERT_TRUE(f.action == FitAction::kWhole || f.tpcs.contains(req));
      if (f.action != FitAction::kWhole) {
        ASSERT_TRUE(runs(t, needs, f.tpcs)) << req.to_string() << " c=" << c << " -> " << f.tpcs.to_string();
      }
    }
  }
}

}  // namespace
}  // namespace lithos::sched
