#include "sched/rightsize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common/rng.hpp"

namespace lithos::sched {
namespace {

// m = 528 * 5000 ns divides evenly by every TPC count used below (528 is
// lcm(16, 33)), so the samples are exact integers on the line.
constexpr double kM = 2'640'000.0;
constexpr double kB = 30'000.0;
Duration model(int t) { return Duration(static_cast<Duration::rep>(kM / t + kB)); }

TEST(LatencyFit, At) {
  const LatencyFit f{.m_ns = 1000.0, .b_ns = 10.0};
  EXPECT_EQ(f.at(1), Duration(1010));
  EXPECT_EQ(f.at(3), Duration(343));  // 333.33 + 10, to the nearest ns
  EXPECT_EQ(f.at(0), f.at(1));        // fewer than one TPC counts as one
}

TEST(FitAccumulator, RecoversAnExactLine) {
  FitAccumulator acc;
  for (int t : {1, 2, 4, 8, 16, 33, 66}) acc.add(t, model(t));
  const std::optional<LatencyFit> f = acc.fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->m_ns, kM, 1e-3);
  EXPECT_NEAR(f->b_ns, kB, 1e-3);
  EXPECT_NEAR(f->r2, 1.0, 1e-12);
  EXPECT_EQ(f->samples, 7U);
  EXPECT_EQ(acc.samples(), 7U);
  EXPECT_EQ(acc.distinct_tpcs(), 2);  // "two or more"
}

TEST(FitAccumulator, NeedsTwoDistinctTpcCounts) {
  FitAccumulator acc;
  EXPECT_EQ(acc.distinct_tpcs(), 0);
  EXPECT_FALSE(acc.fit().has_value());
  acc.add(66, us(100));
  acc.add(66, us(120));
  acc.add(66, us(90));
  EXPECT_EQ(acc.distinct_tpcs(), 1);
  EXPECT_EQ(acc.samples(), 3U);
  EXPECT_FALSE(acc.fit().has_value());
  acc.add(33, us(150));
  EXPECT_EQ(acc.distinct_tpcs(), 2);
  EXPECT_TRUE(acc.fit().has_value());
}

TEST(FitAccumulator, RSquaredDropsWithNoise) {
  double previous_r2 = 1.0 + 1e-9;
  for (double noise : {0.0, 0.02, 0.2, 1.0}) {
    Rng rng(11);
    FitAccumulator acc;
    for (int i = 0; i < 400; ++i) {
      const int t = 1 + static_cast<int>(rng.below(66));
      const double l = (kM / t + kB) * std::max(0.05, 1.0 + noise * rng.normal());
      acc.add(t, Duration(static_cast<Duration::rep>(l)));
    }
    const std::optional<LatencyFit> f = acc.fit();
    ASSERT_TRUE(f.has_value());
    EXPECT_LT(f->r2, previous_r2) << "noise " << noise;
    EXPECT_GE(f->r2, 0.0);
    if (noise == 0.02) {
      EXPECT_GT(f->r2, 0.95);
      EXPECT_NEAR(f->m_ns, kM, 0.05 * kM);
    }
    previous_r2 = f->r2;
  }
  EXPECT_LT(previous_r2, 0.8);  // at 100% noise: below RightSizer's default min_r2
}

TEST(FitAccumulator, ClampsNegativeTerms) {
  // Latency that grows with TPCs: unconstrained m < 0. m = 0 and b = mean:
  // (110000 + 120000 + 140000) / 3, and R^2 = 0 (no better than the mean).
  FitAccumulator up;
  up.add(1, Duration(110000));
  up.add(2, Duration(120000));
  up.add(4, Duration(140000));
  std::optional<LatencyFit> f = up.fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->m_ns, 0.0);
  EXPECT_NEAR(f->b_ns, 370000.0 / 3, 1e-6);
  EXPECT_NEAR(f->r2, 0.0, 1e-12);

  // l = 1000/t - 100 exactly: b < 0, so m is refitted through the origin:
  // x = 1, .5, .25; y = 900, 400, 150; sum xy = 900 + 200 + 37.5 = 1137.5;
  // sum xx = 1 + .25 + .0625 = 1.3125; m = 1137.5 / 1.3125 = 2600/3.
  FitAccumulator down;
  down.add(1, Duration(900));
  down.add(2, Duration(400));
  down.add(4, Duration(150));
  f = down.fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->m_ns, 2600.0 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(f->b_ns, 0.0);
  EXPECT_LT(f->r2, 1.0);
  EXPECT_GT(f->r2, 0.9);
}

TEST(FitAccumulator, ConstantLatencyIsAPerfectFit) {
  FitAccumulator acc;
  acc.add(66, us(50));
  acc.add(17, us(50));
  acc.add(4, us(50));
  const std::optional<LatencyFit> f = acc.fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->m_ns, 0.0, 1e-6);
  EXPECT_NEAR(f->b_ns, 50000.0, 1e-6);
  EXPECT_DOUBLE_EQ(f->r2, 1.0);
}

TEST(SmallestTpcs, ByHand) {
  const LatencyFit f{.m_ns = kM, .b_ns = kB};
  // at(66) = 40000 + 30000 = 70000; bound 1.1 * 70000 = 77000.
  // at(57) = 46315.8 + 30000 -> 76316 <= 77000; at(56) = 47142.9 + 30000 -> 77143 > 77000.
  EXPECT_EQ(smallest_tpcs_within_slip(f, 1.1, 66), 57);
  // Slip 2: bound 140000; 2640000 / t <= 110000 -> t >= 24.
  EXPECT_EQ(smallest_tpcs_within_slip(f, 2.0, 66), 24);      // at(24) = 140000 exactly: equality counts
  EXPECT_EQ(smallest_tpcs_within_slip(f, 2.0, 66, 30), 30);  // min_tpcs binds
  EXPECT_EQ(smallest_tpcs_within_slip(f, 1.0, 66), 66);      // no slip: all of it
  EXPECT_EQ(smallest_tpcs_within_slip(f, 0.9, 66), 66);      // unreachable: all of it
  EXPECT_EQ(smallest_tpcs_within_slip(f, 1.1, 0), 1);        // at least 1
  // No work term: one TPC is as fast as many.
  EXPECT_EQ(smallest_tpcs_within_slip(LatencyFit{.m_ns = 0.0, .b_ns = 5e4}, 1.1, 66), 1);
}

TEST(SmallestTpcs, MatchesBruteForce) {
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    LatencyFit f;
    f.m_ns = rng.below(4) == 0 ? 0.0 : rng.uniform() * 1e7;
    f.b_ns = rng.below(4) == 0 ? 0.0 : rng.uniform() * 1e6;
    const double slip = 0.9 + rng.uniform() * 1.2;
    const int max_tpcs = 1 + static_cast<int>(rng.below(128));
    const int min_tpcs = 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(max_tpcs)));
    int expected = max_tpcs;
    for (int t = min_tpcs; t <= max_tpcs; ++t) {
      if (f.at(t) <= slip * f.at(max_tpcs)) {
        expected = t;
        break;
      }
    }
    ASSERT_EQ(smallest_tpcs_within_slip(f, slip, max_tpcs, min_tpcs), expected)
        << "m " << f.m_ns << " b " << f.b_ns << " slip " << slip << " max " << max_tpcs << " min " << min_tpcs;
  }
}

// A RightSizer that probes at once and without a budget, so that a test
// steers the schedule by hand; `budget` keeps the cap when given.
RightSizeConfig eager(double budget = 1e9) {
  return RightSizeConfig{.probe_after = 1, .probe_every = 1, .probe_budget = budget};
}

// One execution: the choice, then its run on what was chosen at the model's
// latency (timed and accounted).
SizeChoice run(RightSizer& rs, const SizeKey& k, int full, int occupancy, double slip = 1.1) {
  const SizeChoice c = rs.choose(0, k, full, occupancy, slip);
  rs.observe(0, k, full, c.tpcs, c.tpcs, c.source, model(c.tpcs), /*account=*/true, /*timed=*/true);
  return c;
}

TEST(RightSizer, OccupancyBoundDecidesBelowTheAllocation) {
  RightSizer rs(eager(0.0));  // no probes: only the bound can size it
  const SizeKey k{1, {10, 1, 1}};
  const SizeChoice c = rs.choose(0, k, 66, 10, 1.1);
  EXPECT_EQ(c.tpcs, 10);
  EXPECT_EQ(c.source, SizeSource::kOccupancy);
  rs.observe(0, k, 66, 10, 10, c.source, us(100), true, true);
  const RightSizeStats& st = rs.stats(0);
  EXPECT_EQ(st.executions, 1U);
  EXPECT_EQ(st.by_occupancy, 1U);
  EXPECT_EQ(st.by_model, 0U);
  // (66 - 10) TPCs x 100 us left to others, of 66 x 100 us allocated.
  EXPECT_DOUBLE_EQ(st.saved_tpc_ns, 56.0 * 100e3);
  EXPECT_NEAR(st.saved_share(), 56.0 / 66.0, 1e-12);
  // A kernel that fills the allocation is not sized without a fit.
  const SizeChoice full = rs.choose(0, {2, {1000, 1, 1}}, 66, 66, 1.1);
  EXPECT_EQ(full.tpcs, 66);
  EXPECT_EQ(full.source, SizeSource::kFull);
  // Unknown tenants read zeros.
  EXPECT_EQ(rs.stats(7).executions, 0U);
}

TEST(RightSizer, ProbeThenModelDecides) {
  RightSizer rs(eager());
  const SizeKey k{3, {528, 1, 1}};
  // First: nothing known, the whole allocation (a probe needs a sample on it).
  SizeChoice c = run(rs, k, 66, 66);
  EXPECT_EQ(c.source, SizeSource::kFull);
  EXPECT_EQ(c.tpcs, 66);
  // Second: a probe at 0.25 * 66 = 16.5 -> 17, its predicted extra time the
  // key's mean on 66 scaled as pure work: 70000 * (66 / 17 - 1).
  c = run(rs, k, 66, 66);
  EXPECT_EQ(c.source, SizeSource::kProbe);
  EXPECT_EQ(c.tpcs, 17);
  EXPECT_NEAR(static_cast<double>(c.probe_cost.count()), 70000.0 * (66.0 / 17.0 - 1.0), 1.0);
  EXPECT_EQ(rs.stats(0).probes, 1U);
  // Now a fit with R^2 = 1 exists: the fewest TPCs within 1.1 x at(66) =
  // 77000 ns: 2640000 / t <= 47000 -> t >= 56.2 -> 57.
  ASSERT_TRUE(rs.fit(k).has_value());
  c = run(rs, k, 66, 66);
  EXPECT_EQ(c.source, SizeSource::kModel);
  EXPECT_EQ(c.tpcs, 57);
  EXPECT_EQ(rs.stats(0).by_model, 1U);
  // A larger slip sizes it smaller; the occupancy bound caps what the fit
  // compares against (1.1 x at(33) = 121000 -> t >= 29.01 -> 30).
  EXPECT_EQ(rs.choose(0, k, 66, 66, 2.0).tpcs, 24);  // 2640000 / t <= 2 x 70000 - 30000: t >= 24
  EXPECT_EQ(rs.choose(0, k, 66, 33, 1.1).tpcs, 30);
  // The model's executions are measured against the fit at 66: l(57) /
  // l(66) = 76315 / 70000.
  const RightSizeStats& st = rs.stats(0);
  EXPECT_EQ(st.measured, 1U);
  EXPECT_NEAR(st.slowdown(), static_cast<double>(model(57).count()) / 70000.0, 1e-6);
  EXPECT_LE(st.slowdown(), 1.1);
}

TEST(RightSizer, LowRSquaredIsNotTrusted) {
  RightSizer rs(eager(0.0));
  const SizeKey k{4, {1000, 1, 1}};
  // Both counts average 2 ms: m = 0, R^2 = 0 < 0.8.
  const std::pair<int, int> runs[] = {{66, 1000}, {17, 3000}, {66, 3000}, {17, 1000}};
  for (const auto& [t, l] : runs) rs.observe(0, k, 66, t, t, SizeSource::kFull, us(l), true, true);
  ASSERT_TRUE(rs.fit(k).has_value());
  EXPECT_LT(rs.fit(k)->r2, 0.8);
  EXPECT_EQ(rs.choose(0, k, 66, 66, 1.1).source, SizeSource::kFull);
}

TEST(RightSizer, ProbeSchedule) {
  // probe_after 3, probe_every 4, no budget limit.
  RightSizer rs(RightSizeConfig{.probe_after = 3, .probe_every = 4, .probe_budget = 1e9});
  const SizeKey k{5, {528, 1, 1}};
  // Untimed executions (a burst's shares) never make a probe due.
  for (int i = 0; i < 10; ++i) {
    const SizeChoice c = rs.choose(0, k, 66, 66, 1.1);
    ASSERT_EQ(c.source, SizeSource::kFull);
    rs.observe(0, k, 66, 66, 66, c.source, model(66), true, /*timed=*/false);
  }
  // Three timed ones on what it can use, then the probe.
  std::vector<SizeSource> seen;
  // Probes run on 17 but are fed back as runs on 66 (as if the caller
  // could not grant them): no fit forms, so the schedule keeps probing.
  for (int i = 0; i < 12; ++i) {
    const SizeChoice c = rs.choose(0, k, 66, 66, 1.1);
    seen.push_back(c.source);
    rs.observe(0, k, 66, 66, 66, SizeSource::kFull, model(66), true, true);
  }
  // Timed samples 1, 2 before the first choice that sees 3; then one probe
  // per 4 choices.
  const std::vector<SizeSource> want = {SizeSource::kFull, SizeSource::kFull, SizeSource::kFull, SizeSource::kProbe,
                                        SizeSource::kFull, SizeSource::kFull, SizeSource::kFull, SizeSource::kProbe,
                                        SizeSource::kFull, SizeSource::kFull, SizeSource::kFull, SizeSource::kProbe};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(rs.stats(0).probes, 3U);
}

TEST(RightSizer, ProbeCostStaysWithinTheBudget) {
  // 1% of busy time; a probe at 17 of 66 is predicted to cost
  // 70000 * (66/17 - 1) = 201765 ns, so it waits for 20.2 ms of busy time.
  RightSizer rs(RightSizeConfig{.probe_after = 1, .probe_every = 1, .probe_budget = 0.01});
  const SizeKey k{6, {528, 1, 1}};
  std::uint64_t probes = 0;
  for (int i = 0; i < 2000; ++i) {
    const SizeChoice c = rs.choose(0, k, 66, 66, 1.1);
    if (c.source == SizeSource::kProbe) ++probes;
    // Always fed back as a run on 66: the fit never forms.
    rs.observe(0, k, 66, 66, 66, SizeSource::kFull, model(66), true, true);
    const RightSizeStats& st = rs.stats(0);
    ASSERT_LE(st.probe_cost_ns, 0.01 * st.busy_ns + 1e-6) << "execution " << i;
  }
  // 2000 x 70 us = 140 ms busy: 1.4 ms of probe budget, 6 probes of 0.2 ms.
  EXPECT_EQ(probes, 6U);
  EXPECT_EQ(rs.stats(0).probes, 6U);
  // No budget: no probe at all.
  RightSizer none(RightSizeConfig{.probe_after = 1, .probe_every = 1, .probe_budget = 0.0});
  for (int i = 0; i < 100; ++i) {
    ASSERT_NE(run(none, k, 66, 66).source, SizeSource::kProbe);
  }
}

TEST(RightSizer, ChoiceAlwaysWithinOneAndTheAllocation) {
  Rng rng(77);
  RightSizer rs(eager());
  for (int i = 0; i < 20000; ++i) {
    const SizeKey k{rng.below(20), {static_cast<std::uint32_t>(1 + rng.below(3)), 1, 1}};
    const int full = static_cast<int>(rng.below(70)) - 2;  // includes 0 and negatives
    const int occ = static_cast<int>(rng.below(70)) - 2;
    const SizeChoice c = rs.choose(0, k, full, occ, 1.1);
    ASSERT_GE(c.tpcs, 1);
    ASSERT_LE(c.tpcs, std::max(full, 1));
    ASSERT_LE(c.tpcs, std::max(std::min(occ, full), 1));
    const int ran = rng.below(5) == 0 ? 1 + static_cast<int>(rng.below(66)) : c.tpcs;
    const double l = (1e6 * static_cast<double>(k.kernel + 1) / ran + 2e4) * (1.0 + 0.3 * rng.uniform());
    rs.observe(0, k, full, ran, ran, c.source, Duration(static_cast<Duration::rep>(l)), true, true);
  }
}

}  // namespace
}  // namespace lithos::sched
