// The topology discovery (gpu/topology_probe.hpp) against simulated cluster
// placement: the H100 as measured, a floor-swept GPU, placements that never
// link some TPCs of a GPC, and probes that answer nonsense.
#include "gpu/topology_probe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "h100_fixture.hpp"

namespace lithos::gpu {
namespace {

using sched::Topology;
using sched::TpcSet;
using testing::h100_slot_map;
using testing::kH100TopologyText;

// SM lists of the cluster domains of a map whose 9-slot groups below slot 72
// are GPCs and whose TPCs at slots >= 72 are domains of their own.
std::vector<std::vector<int>> domains_of(const SlotMap& map) {
  std::vector<std::vector<int>> out(8);
  for (int s = 0; s < kMaxSlots; ++s) {
    const int t = map.tpc_of_slot[static_cast<std::size_t>(s)];
    if (t < 0) continue;
    if (s >= 72) out.emplace_back();
    auto& d = s < 72 ? out[static_cast<std::size_t>(s / 9)] : out.back();
    d.push_back(2 * t);
    d.push_back(2 * t + 1);
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& d) { return d.empty(); }), out.end());
  return out;
}

// Simulated hardware. `gpcs` are the true GPCs (the driver's occupancy
// answer comes from them); `pools` are where the placement puts clusters
// (each cluster on distinct SMs of one pool): equal to `gpcs` for a faithful
// GPU, finer to model a placement that never links some TPCs.
class FakeClusterProbe final : public ClusterProbe {
 public:
  FakeClusterProbe(int sm_count, std::vector<std::vector<int>> gpcs, unsigned seed = 1)
      : sm_count_(sm_count), gpcs_(gpcs), pools_(std::move(gpcs)), rng_(seed) {}

  ProbeInfo info() const override {
    ProbeInfo i;
    i.gpu_uuid = "GPU-fake";
    i.sm_count = sm_count_;
    return i;
  }

  Result<int> max_active_clusters(int c) override {
    if (auto it = mac_override.find(c); it != mac_override.end()) return it->second;
    int n = 0;
    for (const auto& g : gpcs_) n += static_cast<int>(g.size()) / c;
    return n;
  }

  Result<std::vector<std::vector<int>>> clusters_seen(int c, int clusters, std::int64_t spin, bool vary) override {
    ++calls;
    sizes.push_back(c);
    grids.push_back(clusters);
    spins.push_back(spin);
    varied.push_back(vary);
    if (fail_call == calls) return Status::unavailable("fake launch failed");
    std::vector<const std::vector<int>*> fit;
    for (const auto& p : pools_) {
      if (static_cast<int>(p.size()) >= c) fit.push_back(&p);
    }
    if (fit.empty()) return Status::unavailable("fake: no pool holds a cluster (the launch would hang)");
    std::vector<std::vector<int>> out;
    for (int i = 0; i < clusters; ++i) {
      std::vector<int> pool = *fit[rng_() % fit.size()];
      std::shuffle(pool.begin(), pool.end(), rng_);
      pool.resize(static_cast<std::size_t>(c));
      out.push_back(pool);
    }
    if (tamper) tamper(calls, out);
    return out;
  }

  void set_pools(std::vector<std::vector<int>> p) { pools_ = std::move(p); }

  int calls = 0;
  int fail_call = 0;
  std::vector<int> sizes, grids;
  std::vector<std::int64_t> spins;
  std::vector<bool> varied;
  std::map<int, int> mac_override;
  std::function<void(int, std::vector<std::vector<int>>&)> tamper;

 private:
  int sm_count_;
  std::vector<std::vector<int>> gpcs_, pools_;
  std::mt19937 rng_;
};

TEST(DiscoverTopology, FindsTheH100Topology) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(132, domains_of(map));
  TopologyStats stats;
  auto t = discover_topology(probe, map, TopologyOptions{}, &stats);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->to_string(), kH100TopologyText);
  EXPECT_EQ(t->count(), 12);
  EXPECT_EQ(stats.launches, 48);
  EXPECT_EQ(probe.calls, 48);
  EXPECT_EQ(stats.max_active_clusters, (std::map<int, int>{{2, 66}, {4, 30}, {8, 15}, {16, 7}}));
  EXPECT_GE(stats.seconds, 0.0);
  for (int c : {2, 4, 8, 16}) EXPECT_EQ(clusters_that_fit(*t, c), stats.max_active_clusters[c]) << c;
}

TEST(DiscoverTopology, LaunchesFollowTheOptions) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(132, domains_of(map));
  ASSERT_TRUE(discover_topology(probe, map, TopologyOptions{}).is_ok());
  ASSERT_EQ(probe.calls, 48);
  // Round r: sizes 2, 4, 8, 16; 1-3 times the max active clusters, capped at
  // 1024 CTAs; spin 20000 + 5000 r; varied spin on odd rounds.
  EXPECT_EQ(probe.sizes[0], 2);
  EXPECT_EQ(probe.sizes[3], 16);
  EXPECT_EQ(probe.grids[0], 66);
  EXPECT_EQ(probe.grids[4], 132);  // round 1, size 2
  EXPECT_EQ(probe.grids[8], 198);  // round 2, size 2
  EXPECT_EQ(probe.grids[11], 21);  // round 2, size 16: 3 x 7
  EXPECT_EQ(probe.spins[0], 20000);
  EXPECT_EQ(probe.spins[47], 20000 + 5000 * 11);
  EXPECT_FALSE(probe.varied[0]);
  EXPECT_TRUE(probe.varied[4]);
  for (std::size_t i = 0; i < probe.grids.size(); ++i) EXPECT_LE(probe.grids[i] * probe.sizes[i], 1024);
}

TEST(DiscoverTopology, OrdersGpcsByTheirLowestSlot) {
  // Slots 0-3 hold TPCs 10-13, slots 9-18 hold TPCs 0-9: slot order puts the
  // GPC of TPCs 10-13 first although its TPC numbers are higher.
  SlotMap map;
  map.gpu_uuid = "GPU-fake";
  map.sm_count = 28;
  map.slot_count = 128;
  for (int i = 0; i < 4; ++i) map.tpc_of_slot[static_cast<std::size_t>(i)] = static_cast<std::int16_t>(10 + i);
  for (int i = 0; i < 9; ++i) map.tpc_of_slot[static_cast<std::size_t>(9 + i)] = static_cast<std::int16_t>(i);
  map.tpc_of_slot[18] = 9;  // a second group's first slot, but the same GPC below
  std::vector<std::vector<int>> gpcs(2);
  for (int sm = 0; sm < 28; ++sm) gpcs[sm >= 20 ? 0 : 1].push_back(sm);
  FakeClusterProbe probe(28, gpcs);
  auto t = discover_topology(probe, map, TopologyOptions{});
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->to_string(), "10-13;0-9");
}

// A floor-swept GPU: seven GPCs of 9, 8, 4, 9, 8, 8 and 4 TPCs in 9-slot
// groups, TPCs dealt round-robin over the groups (as on the H100).
SlotMap floor_swept_map(const std::vector<int>& live) {
  SlotMap m;
  m.gpu_uuid = "GPU-floor-swept";
  m.slot_count = 128;
  std::vector<int> used(live.size(), 0);
  int tpc = 0, total = 0;
  for (int n : live) total += n;
  while (tpc < total) {
    for (std::size_t g = 0; g < live.size() && tpc < total; ++g) {
      if (used[g] == live[g]) continue;
      m.tpc_of_slot[9 * g + static_cast<std::size_t>(used[g]++)] = static_cast<std::int16_t>(tpc++);
    }
  }
  m.sm_count = 2 * total;
  return m;
}

TEST(DiscoverTopology, FindsAFloorSweptGpu) {
  const SlotMap map = floor_swept_map({9, 8, 4, 9, 8, 8, 4});
  const auto gpcs = domains_of(map);
  ASSERT_EQ(gpcs.size(), 7U);
  FakeClusterProbe probe(map.sm_count, gpcs, 7);
  TopologyStats stats;
  auto t = discover_topology(probe, map, TopologyOptions{}, &stats);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(t->count(), 7);
  const int sizes[] = {9, 8, 4, 9, 8, 8, 4};
  for (int g = 0; g < 7; ++g) EXPECT_EQ(t->gpc(g).count(), sizes[g]) << g;
  EXPECT_EQ(t->gpc(2).to_string(), "2,9,16,23");  // round-robin over the 7 groups
  EXPECT_EQ(stats.max_active_clusters[16], 5);    // the GPCs of 8 and 9 TPCs
  SlotMap with = map;
  with.topology = *t;
  EXPECT_TRUE(groups_are_gpcs(with, 9));
}

TEST(DiscoverTopology, GroupsAreGpcsOnlyWhenEachGroupIsOneGpc) {
  SlotMap m = h100_slot_map();
  EXPECT_FALSE(groups_are_gpcs(m, 9));  // unknown topology
  m.topology = Topology::parse(kH100TopologyText).value();
  EXPECT_FALSE(groups_are_gpcs(m, 9));  // groups 8 and 9 hold two one-TPC domains each
  // Were 62-63 and 64-65 one GPC each, the groups would be the GPCs.
  std::string joined = kH100TopologyText;
  joined.replace(joined.find("62;63;64;65"), std::string("62;63;64;65").size(), "62,63;64,65");
  m.topology = Topology::parse(joined).value();
  EXPECT_TRUE(groups_are_gpcs(m, 9));
  // A GPC spanning two groups (0 and 1), every TPC still in some GPC.
  std::string spanning = joined;
  spanning.replace(spanning.find("24;1,"), 5, "24,1,");
  m.topology = Topology::parse(spanning).value();
  EXPECT_EQ(m.topology.tpcs(), m.live_set());
  EXPECT_FALSE(groups_are_gpcs(m, 9));
}

TEST(DiscoverTopology, AnUnlinkedPartOfAGpcFailsTheCrossCheck) {
  // The placement never puts TPCs 1,9,17,25 and 32,39,46,53 (both halves of
  // GPC 1, 8 SMs each) into one cluster: two components of 8 SMs hold no
  // cluster of 16, the driver counts one there.
  const SlotMap map = h100_slot_map();
  auto gpcs = domains_of(map);
  FakeClusterProbe probe(132, gpcs);
  auto pools = gpcs;
  std::vector<int> a(pools[1].begin(), pools[1].begin() + 8), b(pools[1].begin() + 8, pools[1].end());
  pools[1] = a;
  pools.push_back(b);
  probe.set_pools(pools);
  auto t = discover_topology(probe, map, TopologyOptions{});
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  const std::string m = t.status().message();
  EXPECT_NE(m.find("cross-check"), std::string::npos) << m;
  EXPECT_NE(m.find("clusters of 16: the GPCs found hold 6 at once, the driver says 7"), std::string::npos) << m;
  EXPECT_NE(m.find("after 48 cluster launches"), std::string::npos) << m;
}

TEST(DiscoverTopology, ADriverCountThatDisagreesIsReportedWithBothNumbers) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(132, domains_of(map));
  probe.mac_override[4] = 31;
  auto t = discover_topology(probe, map, TopologyOptions{});
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("clusters of 4: the GPCs found hold 30 at once, the driver says 31"),
            std::string::npos)
      << t.status().message();
}

TEST(DiscoverTopology, SizesTheDriverRefusesAreSkipped) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(132, domains_of(map));
  probe.mac_override[16] = 0;  // no non-portable cluster sizes
  TopologyStats stats;
  auto t = discover_topology(probe, map, TopologyOptions{}, &stats);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->to_string(), kH100TopologyText);
  EXPECT_EQ(stats.launches, 36);
  EXPECT_EQ(std::count(probe.sizes.begin(), probe.sizes.end(), 16), 0);
  EXPECT_EQ(stats.max_active_clusters[16], 0);
}

TEST(DiscoverTopology, NoRoomForTheSmallestClusterIsUnavailable) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(132, domains_of(map));
  probe.mac_override[2] = 0;
  auto t = discover_topology(probe, map, TopologyOptions{});
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(probe.calls, 0);
}

TEST(DiscoverTopology, AClusterSpanningHalfATpcIsAnError) {
  // SM 1 (TPC 0) is placed with GPC 1, SM 0 stays in GPC 0: TPC 0 is split.
  const SlotMap map = h100_slot_map();
  auto gpcs = domains_of(map);
  FakeClusterProbe probe(132, gpcs);
  auto pools = gpcs;
  pools[0].erase(std::find(pools[0].begin(), pools[0].end(), 1));
  pools[1].push_back(1);
  probe.set_pools(pools);
  auto t = discover_topology(probe, map, TopologyOptions{});
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("TPC 0 is split"), std::string::npos) << t.status().message();
}

TEST(DiscoverTopology, UnknownSmsAreErrors) {
  const SlotMap map = h100_slot_map();
  {
    FakeClusterProbe probe(132, domains_of(map));
    probe.tamper = [](int call, std::vector<std::vector<int>>& out) {
      if (call == 3) out[1][0] = 140;
    };
    auto t = discover_topology(probe, map, TopologyOptions{});
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find("ran on SM 140, outside 0-131"), std::string::npos) << t.status().message();
  }
  {
    // TPC 65 is not in the map (its slot is dead there), yet clusters ran on it.
    SlotMap stale = map;
    stale.tpc_of_slot[83] = -1;
    FakeClusterProbe probe(132, domains_of(map));
    auto t = discover_topology(probe, stale, TopologyOptions{});
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find("TPC 65 ran cluster CTAs but no slot of the slot map controls"),
              std::string::npos)
        << t.status().message();
  }
}

TEST(DiscoverTopology, MalformedClusterAnswersAreErrors) {
  const SlotMap map = h100_slot_map();
  const std::pair<std::function<void(std::vector<std::vector<int>>&)>, std::string> cases[] = {
      {[](auto& out) { out[0].pop_back(); }, "reported 1 CTAs"},
      {[](auto& out) { out[0][1] = out[0][0]; }, "ran two CTAs on SM"},
      {[](auto& out) { out.pop_back(); }, "answered for 65"},
  };
  for (const auto& [corrupt, needle] : cases) {
    FakeClusterProbe probe(132, domains_of(map));
    probe.tamper = [&](int call, std::vector<std::vector<int>>& out) {
      if (call == 1) corrupt(out);
    };
    auto t = discover_topology(probe, map, TopologyOptions{});
    ASSERT_FALSE(t.is_ok()) << needle;
    EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  }
}

TEST(DiscoverTopology, ALiveTpcNeverSeenIsAnError) {
  // The placement never uses TPC 5 (SMs 10, 11).
  const SlotMap map = h100_slot_map();
  auto gpcs = domains_of(map);
  FakeClusterProbe probe(132, gpcs);
  auto pools = gpcs;
  for (auto& p : pools) p.erase(std::remove_if(p.begin(), p.end(), [](int sm) { return sm / 2 == 5; }), p.end());
  probe.set_pools(pools);
  auto t = discover_topology(probe, map, TopologyOptions{});
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("SMs 10,11 of live TPCs never ran"), std::string::npos) << t.status().message();
}

TEST(DiscoverTopology, ProbeFailuresStopTheDiscovery) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(132, domains_of(map));
  probe.fail_call = 5;
  TopologyStats stats;
  auto t = discover_topology(probe, map, TopologyOptions{}, &stats);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("launch of 132 clusters of 2 CTAs"), std::string::npos) << t.status().message();
  EXPECT_EQ(probe.calls, 5);
  EXPECT_EQ(stats.launches, 4);
}

TEST(DiscoverTopology, AMapForAnotherDeviceIsRefused) {
  const SlotMap map = h100_slot_map();
  FakeClusterProbe probe(114, domains_of(map));
  auto t = discover_topology(probe, map, TopologyOptions{});
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(probe.calls, 0);
}

TEST(DiscoverTopology, NeverMergesSmsOfDifferentGpcs) {
  // Random GPUs: every H100 GPC cut at random into 1-3 domains of whole
  // TPCs, clusters placed at random inside the domains. Discovery must find
  // exactly the domains: SMs are joined only when one cluster held them, so
  // two domains are never merged, and every domain is found whole.
  const SlotMap map = h100_slot_map();
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::vector<int>> domains;
    for (const auto& gpc : domains_of(map)) {
      const int tpcs = static_cast<int>(gpc.size()) / 2;
      const int parts = std::min(tpcs, 1 + static_cast<int>(rng() % 3));
      std::vector<int> cuts;  // TPC positions where a new domain starts
      for (int i = 1; i < tpcs; ++i) cuts.push_back(i);
      std::shuffle(cuts.begin(), cuts.end(), rng);
      cuts.resize(static_cast<std::size_t>(parts - 1));
      std::sort(cuts.begin(), cuts.end());
      domains.emplace_back();
      for (int i = 0; i < tpcs; ++i) {
        if (std::find(cuts.begin(), cuts.end(), i) != cuts.end()) domains.emplace_back();
        domains.back().push_back(gpc[2 * static_cast<std::size_t>(i)]);
        domains.back().push_back(gpc[2 * static_cast<std::size_t>(i) + 1]);
      }
    }
    FakeClusterProbe probe(132, domains, seed);
    auto t = discover_topology(probe, map, TopologyOptions{});
    ASSERT_TRUE(t.is_ok()) << "seed " << seed << ": " << t.status().to_string();
    ASSERT_EQ(t->count(), static_cast<int>(domains.size())) << "seed " << seed;
    for (const auto& d : domains) {
      TpcSet want;
      for (int sm : d) want.set(sm / 2);
      const int g = t->gpc_of(d.front() / 2);
      ASSERT_GE(g, 0);
      EXPECT_EQ(t->gpc(g), want) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace lithos::gpu
