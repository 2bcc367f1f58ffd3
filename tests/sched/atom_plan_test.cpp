#include "sched/atom_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "common/rng.hpp"

namespace lithos::sched {
namespace {

LaunchDesc grid(Dim3 g, Dim3 cluster = {}) {
  LaunchDesc l;
  l.grid = g;
  l.block = {128, 1, 1};
  l.cluster = cluster;
  return l;
}

const LaunchDesc kBig = grid({100000, 1, 1});

TEST(AtomConfig, AtomDurationIsTheTargetFlooredByCostOverOverhead) {
  AtomConfig c;  // target 400 us, cost 20 us, overhead 0.08: floor 250 us
  EXPECT_EQ(c.atom_duration(), us(400));
  c.target = us(100);
  EXPECT_EQ(c.atom_duration(), us(250));  // 20 / 0.08
  c.per_atom_cost = us(40);
  c.tolerated_overhead = 0.05;
  EXPECT_EQ(c.atom_duration(), us(800));  // 40 / 0.05
  c.tolerated_overhead = 0.0;             // no overhead tolerated: never worth splitting
  EXPECT_EQ(c.atom_duration(), Duration::max());
  c = AtomConfig{};
  c.target = Duration(0);
  c.per_atom_cost = Duration(0);
  EXPECT_EQ(c.atom_duration(), Duration(1));  // never zero: plans divide by it
}

TEST(AtomPlan, CountIsPredictedOverAtomDuration) {
  const AtomConfig c;  // 400 us atoms
  AtomPlan p = plan_atoms(c, kBig, ms(4));
  EXPECT_EQ(p.reason, AtomReason::kSplit);
  EXPECT_EQ(p.count, 10U);  // 4000 / 400
  EXPECT_TRUE(p.split());
  EXPECT_EQ(p.atom_duration, us(400));
  EXPECT_EQ(p.total_blocks, 100000U);
  EXPECT_EQ(p.unit, 1U);
  EXPECT_EQ(plan_atoms(c, kBig, us(4399)).count, 11U);  // ceil(10.9975): no atom longer than 400 us
  EXPECT_EQ(plan_atoms(c, kBig, us(4400)).count, 11U);  // exactly eleven atoms
  EXPECT_EQ(plan_atoms(c, kBig, us(800)).count, 2U);    // exactly two atoms
  EXPECT_EQ(plan_atoms(c, kBig, us(401)).count, 2U);    // just over one atom
  p = plan_atoms(c, kBig, us(400));                     // one atom: tiny
  EXPECT_EQ(p.reason, AtomReason::kTiny);
  EXPECT_EQ(p.count, 1U);
  EXPECT_FALSE(p.split());
  EXPECT_EQ(p.atom_duration, Duration(0));
  EXPECT_EQ(plan_atoms(c, kBig, Duration(0)).reason, AtomReason::kTiny);
  EXPECT_EQ(plan_atoms(c, kBig, us(-5)).reason, AtomReason::kTiny);
}

TEST(AtomPlan, AtomsAreWholeWavesWhenTheWaveIsKnown) {
  const AtomConfig c;   // 400 us atoms
  LaunchDesc l = kBig;  // 100000 blocks
  l.wave_blocks = 264;  // 132 SMs x 2 blocks: 379 waves (the last one partial)
  // 379 waves in 3.79 ms: 10 us per wave, 40 waves per atom, 10 atoms (the last 19 waves).
  AtomPlan p = plan_atoms(c, l, us(3790));
  ASSERT_EQ(p.reason, AtomReason::kSplit);
  EXPECT_EQ(p.atom_units, 40U * 264U);
  EXPECT_EQ(p.count, 10U);
  EXPECT_EQ(p.atom(0), (BlockRange{0, 10560}));
  EXPECT_EQ(p.atom(9), (BlockRange{95040, 100000}));
  // Waves longer than an atom: one wave per atom, never less.
  l.grid = {264 * 40, 1, 1};
  p = plan_atoms(c, l, ms(20));  // 40 waves of 500 us
  ASSERT_EQ(p.reason, AtomReason::kSplit);
  EXPECT_EQ(p.count, 40U);
  EXPECT_EQ(p.atom(39), (BlockRange{39 * 264, 40 * 264}));
  // 40 waves of 125 us in 5 ms: 3 waves (375 us) per atom, not 3.6 as the
  // plain rule would give (which lasts 4 waves, 500 us, on the GPU).
  p = plan_atoms(c, l, ms(5));
  EXPECT_EQ(p.atom_units, 3U * 264U);
  EXPECT_EQ(p.count, 14U);
  // One wave or less: atoms would run one after another, each a full block time.
  l.grid = {264, 1, 1};
  EXPECT_EQ(plan_atoms(c, l, ms(20)).reason, AtomReason::kSingleWave);
  l.grid = {200, 1, 1};
  EXPECT_EQ(plan_atoms(c, l, ms(20)).reason, AtomReason::kSingleWave);
  // max_atoms still caps the count (atoms of more waves then).
  AtomConfig few = c;
  few.max_atoms = 8;
  l.grid = {264 * 40, 1, 1};
  p = plan_atoms(few, l, ms(20));
  EXPECT_EQ(p.atom_units, 5U * 264U);
  EXPECT_EQ(p.count, 8U);
  // Cluster launches: waves in whole units (clusters of 2 along x).
  l.grid = {264 * 40, 1, 1};
  l.cluster = {2, 1, 1};
  p = plan_atoms(c, l, ms(20));
  EXPECT_EQ(p.unit, 2U);
  EXPECT_EQ(p.atom_units, 132U);
}

TEST(AtomPlan, CountIsClampedByMaxAtomsAndUnits) {
  AtomConfig c;
  c.max_atoms = 8;
  EXPECT_EQ(plan_atoms(c, kBig, ms(10)).count, 8U);  // 25 wanted
  // 5 blocks: at most 5 atoms of one block each.
  const AtomPlan p = plan_atoms(AtomConfig{}, grid({5, 1, 1}), ms(10));
  EXPECT_EQ(p.count, 5U);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_EQ(p.atom(i), (BlockRange{i, i + 1}));
  // A 64-block 1-D cluster launch with 8-block clusters has 8 units.
  EXPECT_EQ(plan_atoms(AtomConfig{}, grid({64, 1, 1}, {8, 1, 1}), ms(100)).count, 8U);
  // max_atoms below 2 allows no split at all.
  c.max_atoms = 1;
  EXPECT_EQ(plan_atoms(c, kBig, ms(10)).reason, AtomReason::kDisabled);
}

TEST(AtomPlan, Reasons) {
  AtomConfig off;
  off.enabled = false;
  EXPECT_EQ(plan_atoms(off, kBig, ms(10)).reason, AtomReason::kDisabled);
  EXPECT_EQ(plan_atoms(AtomConfig{}, kBig, std::nullopt).reason, AtomReason::kUnpredicted);
  EXPECT_EQ(plan_atoms(AtomConfig{}, kBig, us(400)).reason, AtomReason::kTiny);   // one atom
  EXPECT_EQ(plan_atoms(AtomConfig{}, kBig, us(500)).reason, AtomReason::kSplit);  // 1.25 atoms: two

  LaunchDesc coop = kBig;
  coop.cooperative = true;
  EXPECT_EQ(plan_atoms(AtomConfig{}, coop, ms(100)).reason, AtomReason::kCooperative);

  // Clusters that span planes shared with other clusters.
  EXPECT_EQ(plan_atoms(AtomConfig{}, grid({4, 4, 2}, {2, 2, 2}), ms(100)).reason, AtomReason::kClusterIndivisible);
  EXPECT_EQ(plan_atoms(AtomConfig{}, grid({1, 1, 1}), ms(100)).reason, AtomReason::kSingleUnit);
  EXPECT_EQ(plan_atoms(AtomConfig{}, grid({4, 1, 1}, {4, 1, 1}), ms(100)).reason, AtomReason::kSingleUnit);
  EXPECT_EQ(plan_atoms(AtomConfig{}, grid({0, 1, 1}), ms(100)).reason, AtomReason::kSingleUnit);

  // Whatever the reason, an unsplit plan is one atom over the whole grid.
  for (const AtomPlan& p :
       {plan_atoms(off, kBig, ms(10)), plan_atoms(AtomConfig{}, coop, ms(100)),
        plan_atoms(AtomConfig{}, grid({4, 4, 2}, {2, 2, 2}), ms(100)), plan_atoms(AtomConfig{}, kBig, std::nullopt)}) {
    EXPECT_EQ(p.count, 1U);
    EXPECT_FALSE(p.split());
    EXPECT_EQ(p.atom(0), (BlockRange{0, p.total_blocks}));
    EXPECT_EQ(p.atom_duration, Duration(0));
  }
  EXPECT_EQ(plan_atoms(AtomConfig{}, grid({0, 1, 1}), ms(100)).atom(0), (BlockRange{0, 0}));
}

TEST(AtomPlan, ReasonNames) {
  EXPECT_STREQ(atom_reason_name(AtomReason::kSplit), "split");
  EXPECT_STREQ(atom_reason_name(AtomReason::kClusterIndivisible), "cluster-indivisible");
  EXPECT_STREQ(atom_reason_name(AtomReason::kSingleUnit), "single-unit");
}

TEST(AtomPlan, RangesByHand) {
  // 10 blocks in 3 atoms: 4, 3, 3.
  AtomPlan p;
  p.count = 3;
  p.total_blocks = 10;
  EXPECT_EQ(p.atom(0), (BlockRange{0, 4}));
  EXPECT_EQ(p.atom(1), (BlockRange{4, 7}));
  EXPECT_EQ(p.atom(2), (BlockRange{7, 10}));
  // 48 blocks in units of 8 (6 units) in 4 atoms: 2, 2, 1, 1 units.
  p.total_blocks = 48;
  p.unit = 8;
  p.count = 4;
  EXPECT_EQ(p.atom(0), (BlockRange{0, 16}));
  EXPECT_EQ(p.atom(1), (BlockRange{16, 32}));
  EXPECT_EQ(p.atom(2), (BlockRange{32, 40}));
  EXPECT_EQ(p.atom(3), (BlockRange{40, 48}));
}

TEST(AtomUnit, Rules) {
  EXPECT_EQ(atom_unit(grid({100, 7, 3})), 1U);  // not a cluster launch
  // 1-D: runs of cluster.x.
  EXPECT_EQ(atom_unit(grid({64, 1, 1}, {4, 1, 1})), 4U);
  // 2-D: y-slabs of cluster.y rows of grid.x: 8 * 2.
  EXPECT_EQ(atom_unit(grid({8, 6, 1}, {2, 2, 1})), 16U);
  EXPECT_EQ(atom_unit(grid({8, 6, 1}, {1, 2, 1})), 16U);
  // 3-D: z-slabs of cluster.z planes of grid.x * grid.y: 4 * 4 * 2.
  EXPECT_EQ(atom_unit(grid({4, 4, 6}, {2, 2, 2})), 32U);
  EXPECT_EQ(atom_unit(grid({4, 4, 6}, {2, 2, 1})), 16U);
  // grid.z == cluster.z > 1 with grid.y > cluster.y: clusters span every
  // plane and share them: indivisible.
  EXPECT_EQ(atom_unit(grid({4, 4, 2}, {2, 2, 2})), 0U);
  EXPECT_EQ(atom_unit(grid({8, 1, 2}, {2, 1, 2})), 0U);
  // One plane, grid.y == cluster.y > 1: clusters span every row: indivisible.
  EXPECT_EQ(atom_unit(grid({4, 2, 1}, {2, 2, 1})), 0U);
  // A grid that is not a whole number of clusters: no valid launch.
  EXPECT_EQ(atom_unit(grid({6, 1, 1}, {4, 1, 1})), 0U);
  EXPECT_EQ(atom_unit(grid({4, 3, 1}, {2, 2, 1})), 0U);
  // One cluster: the unit is the whole grid.
  EXPECT_EQ(atom_unit(grid({4, 1, 1}, {4, 1, 1})), 4U);
}

// Every cut point that no cluster straddles, by enumeration: blocks of each
// cluster, as linear indices, must lie all below or all at/above the cut.
std::vector<bool> valid_cuts(const Dim3& g, const Dim3& c) {
  const std::uint64_t total = g.count();
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>, std::pair<std::uint64_t, std::uint64_t>> span;
  for (std::uint32_t z = 0; z < g.z; ++z) {
    for (std::uint32_t y = 0; y < g.y; ++y) {
      for (std::uint32_t x = 0; x < g.x; ++x) {
        const std::uint64_t linear = x + std::uint64_t{g.x} * (y + std::uint64_t{g.y} * z);
        auto [it, fresh] = span.try_emplace({x / c.x, y / c.y, z / c.z}, linear, linear);
        if (!fresh) {
          it->second.first = std::min(it->second.first, linear);
          it->second.second = std::max(it->second.second, linear);
        }
      }
    }
  }
  std::vector<bool> ok(total + 1, true);
  for (const auto& [id, lohi] : span) {
    for (std::uint64_t p = lohi.first + 1; p <= lohi.second; ++p) ok[p] = false;
  }
  return ok;
}

// For every small valid cluster launch: a nonzero unit divides the grid and
// each of its multiples is a valid cut; a zero unit means there is no valid
// cut at all (other than 0 and the end).
TEST(AtomUnit, AgreesWithEnumeratedCuts) {
  int checked = 0;
  int indivisible = 0;
  for (std::uint32_t gx = 1; gx <= 8; ++gx) {
    for (std::uint32_t gy = 1; gy <= 6; ++gy) {
      for (std::uint32_t gz = 1; gz <= 4; ++gz) {
        for (std::uint32_t cx = 1; cx <= gx; ++cx) {
          for (std::uint32_t cy = 1; cy <= gy; ++cy) {
            for (std::uint32_t cz = 1; cz <= gz; ++cz) {
              if (gx % cx || gy % cy || gz % cz || cx * cy * cz < 2 || cx * cy * cz > 8) continue;
              const Dim3 g{gx, gy, gz};
              const Dim3 c{cx, cy, cz};
              const std::uint64_t u = atom_unit(grid(g, c));
              const std::vector<bool> ok = valid_cuts(g, c);
              const std::uint64_t total = g.count();
              ++checked;
              if (u == 0) {
                ++indivisible;
                for (std::uint64_t p = 1; p < total; ++p) {
                  EXPECT_FALSE(ok[p]) << gx << "x" << gy << "x" << gz << " / " << cx << "x" << cy << "x" << cz;
                }
              } else {
                EXPECT_EQ(total % u, 0U);
                for (std::uint64_t p = u; p < total; p += u) {
                  EXPECT_TRUE(ok[p]) << gx << "x" << gy << "x" << gz << " / " << cx << "x" << cy << "x" << cz << " cut "
                                     << p;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(indivisible, 50);
}

// Split plans of small 2-D and 3-D cluster grids: each cluster's blocks all
// land in one atom.
TEST(AtomPlan, ClustersStayWhole) {
  const std::vector<std::pair<Dim3, Dim3>> cases = {
      {{8, 6, 1}, {2, 2, 1}}, {{6, 9, 1}, {3, 3, 1}},  {{4, 4, 6}, {2, 2, 2}}, {{6, 2, 9}, {3, 1, 3}},
      {{4, 6, 4}, {1, 2, 1}}, {{16, 1, 1}, {4, 1, 1}}, {{2, 8, 1}, {2, 1, 1}}, {{3, 5, 14}, {1, 1, 7}},
  };
  for (const auto& [g, c] : cases) {
    const AtomPlan base = plan_atoms(AtomConfig{}, grid(g, c), ms(1000));
    // Every atom count the units allow, not only the maximal one.
    for (std::uint32_t max_atoms = 2; max_atoms <= base.count; ++max_atoms) {
      AtomConfig cfg;
      cfg.max_atoms = max_atoms;
      const AtomPlan p = plan_atoms(cfg, grid(g, c), ms(1000));
      if (!p.split()) {
        ADD_FAILURE() << "not split: " << g.x << "x" << g.y << "x" << g.z;
        continue;
      }
      std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>, std::uint32_t> atom_of_cluster;
      for (std::uint32_t z = 0; z < g.z; ++z) {
        for (std::uint32_t y = 0; y < g.y; ++y) {
          for (std::uint32_t x = 0; x < g.x; ++x) {
            const std::uint64_t linear = x + std::uint64_t{g.x} * (y + std::uint64_t{g.y} * z);
            std::uint32_t a = 0;
            while (a < p.count && !(p.atom(a).lo <= linear && linear < p.atom(a).hi)) ++a;
            ASSERT_LT(a, p.count) << "block " << linear << " in no atom";
            const auto [it, fresh] = atom_of_cluster.try_emplace({x / c.x, y / c.y, z / c.z}, a);
            EXPECT_TRUE(fresh || it->second == a)
                << g.x << "x" << g.y << "x" << g.z << " block " << linear << " in atom " << a << " not " << it->second;
          }
        }
      }
    }
  }
}

// Random configs, predictions and grids (plain and cluster launches).
TEST(AtomPlan, RandomPlansRespectTheContract) {
  Rng rng(2024);
  int split = 0;
  for (int i = 0; i < 20000; ++i) {
    AtomConfig cfg;
    cfg.target = us(static_cast<double>(50 + rng.below(1000)));
    cfg.per_atom_cost = us(static_cast<double>(5 + rng.below(60)));
    cfg.tolerated_overhead = 0.01 + 0.2 * rng.uniform();
    cfg.max_atoms = static_cast<std::uint32_t>(1 + rng.below(64));
    LaunchDesc l;
    if (rng.below(2) == 0) {
      l = grid({static_cast<std::uint32_t>(1 + rng.below(5000)), static_cast<std::uint32_t>(1 + rng.below(4)),
                static_cast<std::uint32_t>(1 + rng.below(3))});
    } else {
      const Dim3 c{static_cast<std::uint32_t>(1 + rng.below(4)), static_cast<std::uint32_t>(1 + rng.below(2)),
                   static_cast<std::uint32_t>(1 + rng.below(2))};
      l = grid({c.x * static_cast<std::uint32_t>(1 + rng.below(50)), c.y * static_cast<std::uint32_t>(1 + rng.below(4)),
                c.z * static_cast<std::uint32_t>(1 + rng.below(3))},
               c);
    }
    const Duration predicted(static_cast<Duration::rep>(rng.exponential(3e6)));
    const AtomPlan p = plan_atoms(cfg, l, predicted);
    const Duration atom = cfg.atom_duration();

    ASSERT_GE(p.count, 1U);
    ASSERT_EQ(p.total_blocks, l.grid.count());
    ASSERT_GE(p.unit, 1U);
    ASSERT_EQ(p.total_blocks % p.unit, 0U);
    const std::uint64_t units = p.total_blocks / p.unit;
    EXPECT_LE(p.count, std::min<std::uint64_t>(cfg.max_atoms, std::max<std::uint64_t>(units, 1)));
    if (p.split()) {
      ++split;
      EXPECT_EQ(p.reason, AtomReason::kSplit);
      EXPECT_EQ(p.atom_duration, atom);
      // count = ceil(predicted / atom) unless clamped.
      const auto wanted = static_cast<std::uint64_t>((predicted + atom - Duration(1)) / atom);
      EXPECT_EQ(p.count, std::min<std::uint64_t>({wanted, cfg.max_atoms, units}));
      if (p.count == wanted) {
        EXPECT_LE(predicted / p.count, atom);  // no atom longer than the atom duration
      }
    } else {
      EXPECT_NE(p.reason, AtomReason::kSplit);
      if (p.reason == AtomReason::kTiny) {
        EXPECT_LE(predicted, atom);
      }
    }
    // Ranges: contiguous from 0 to total, whole units, sizes within one unit.
    std::uint64_t next = 0;
    std::uint64_t smallest = UINT64_MAX;
    std::uint64_t largest = 0;
    for (std::uint32_t a = 0; a < p.count; ++a) {
      const BlockRange r = p.atom(a);
      ASSERT_EQ(r.lo, next);
      ASSERT_EQ(r.lo % p.unit, 0U);
      ASSERT_EQ(r.hi % p.unit, 0U);
      next = r.hi;
      smallest = std::min(smallest, r.size());
      largest = std::max(largest, r.size());
      if (a > 0) {
        EXPECT_LE(r.size(), p.atom(a - 1).size());  // larger ones first
      }
    }
    ASSERT_EQ(next, p.total_blocks);
    if (p.split()) {
      EXPECT_GE(smallest, p.unit);
      EXPECT_LE(largest - smallest, p.unit);
    }
  }
  EXPECT_GT(split, 5000);
}

}  // namespace
}  // namespace lithos::sched
