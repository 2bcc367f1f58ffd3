#include "sched/rightsize.hpp"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(RightSizer, ProbeScheduleThenFit) {
  RightSizer rs;  // slip 1.1, probe 0.25, min R^2 0.8
  const PredictionKey k{3, 1};
  EXPECT_FALSE(rs.fit(k).has_value());
  EXPECT_EQ(rs.choose(k, 66), 66);  // first: the full allocation
  rs.observe(k, 66, model(66));
  EXPECT_EQ(rs.choose(k, 66), 17);  // second: 0.25 * 66 = 16.5, to the nearest: 17
  rs.observe(k, 17, model(17));
  // Two points on the line: a fit with R^2 = 1 through (1/66, 70000) and
  // (1/17, 185294); the answer is the one computed by hand above, 57.
  ASSERT_TRUE(rs.fit(k).has_value());
  EXPECT_NEAR(rs.fit(k)->r2, 1.0, 1e-9);
  EXPECT_EQ(rs.choose(k, 66), 57);
  // A smaller allocation is the new full one: bound 1.1 * at(33) = 1.1 * 110000
  // = 121000; 2640000 / t <= 91000 -> t >= 29.01 -> 30.
  EXPECT_EQ(rs.choose(k, 33), 30);
  // Other keys are untouched.
  EXPECT_EQ(rs.choose({3, 2}, 66), 66);
}

TEST(RightSizer, ProbeRounding) {
  RightSizer rs;
  auto probe_for = [&rs](int full) {
    const PredictionKey k{static_cast<KernelId>(full), 0};
    rs.observe(k, full, us(100));
    return rs.choose(k, full);
  };
  EXPECT_EQ(probe_for(10), 3);  // 2.5 -> 3 (halves round away from zero)
  EXPECT_EQ(probe_for(8), 2);
  EXPECT_EQ(probe_for(3), 1);  // 0.75 -> 1
  EXPECT_EQ(probe_for(2), 1);  // 0.5 -> 1
  EXPECT_EQ(probe_for(1), 1);  // never below 1
  RightSizer tiny(RightSizeConfig{.probe_fraction = 0.001});
  const PredictionKey k{9, 0};
  tiny.observe(k, 66, us(100));
  EXPECT_EQ(tiny.choose(k, 66), 1);  // 0.066 -> at least 1
}

TEST(RightSizer, LowRSquaredMeansFullAllocation) {
  RightSizer rs;
  const PredictionKey k{4, 0};
  // Both TPC counts average 2 ms: no dependence on t, and the spread is
  // all noise: m = 0, R^2 = 0 < 0.8.
  rs.observe(k, 66, us(1000));
  rs.observe(k, 17, us(3000));
  rs.observe(k, 66, us(3000));
  rs.observe(k, 17, us(1000));
  ASSERT_TRUE(rs.fit(k).has_value());
  EXPECT_LT(rs.fit(k)->r2, 0.8);
  EXPECT_EQ(rs.choose(k, 66), 66);
  // Lowering the bar to 0 trusts the flat fit: one TPC is enough.
  RightSizer trusting(RightSizeConfig{.min_r2 = 0.0});
  trusting.observe(k, 66, us(1000));
  trusting.observe(k, 17, us(3000));
  trusting.observe(k, 66, us(3000));
  trusting.observe(k, 17, us(1000));
  EXPECT_EQ(trusting.choose(k, 66), 1);
}

TEST(RightSizer, WithoutAFitAlternatesFullAndProbe) {
  RightSizer rs;
  const PredictionKey k{5, 0};
  // The caller could not grant the probe: both executions ran on 66.
  rs.observe(k, 66, us(100));
  rs.observe(k, 66, us(100));
  EXPECT_FALSE(rs.fit(k).has_value());
  EXPECT_EQ(rs.choose(k, 66), 66);
  rs.observe(k, 66, us(100));
  EXPECT_EQ(rs.choose(k, 66), 17);
}

TEST(RightSizer, ChoiceAlwaysWithinOneAndMaxUseful) {
  Rng rng(77);
  RightSizer rs;
  for (int i = 0; i < 20000; ++i) {
    const PredictionKey k{rng.below(20), 0};
    const int max_useful = static_cast<int>(rng.below(70)) - 2;  // includes 0 and negatives
    const int chosen = rs.choose(k, max_useful);
    ASSERT_GE(chosen, 1);
    ASSERT_LE(chosen, std::max(max_useful, 1));
    // Run on what was chosen or, now and then, on something else entirely.
    const int ran = rng.below(5) == 0 ? 1 + static_cast<int>(rng.below(66)) : chosen;
    const double l = (1e6 * static_cast<double>(k.kernel + 1) / ran + 2e4) * (1.0 + 0.3 * rng.uniform());
    rs.observe(k, ran, Duration(static_cast<Duration::rep>(l)));
  }
}

}  // namespace
}  // namespace lithos::sched
