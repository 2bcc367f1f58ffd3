#include "sched/dvfs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/rng.hpp"

namespace lithos::sched {
namespace {

// Duration at clock f of a kernel taking d0 at f_max = 1980 MHz with
// sensitivity s: d0 * (1 + s * (1980 / f - 1)), to the nearest ns.
Duration at_clock(double d0_ns, double s, int f) {
  return Duration(static_cast<Duration::rep>(std::llround(d0_ns * (1.0 + s * (1980.0 / f - 1.0)))));
}

// Observations at 1980 and 990 MHz (f_max/f = 1 and 2): d = d0 and
// d0 * (1 + s), which the fit recovers exactly for s = 0, 0.5, 1.
void teach(DvfsPolicy& p, KernelId k, double s) {
  p.observe(k, 1980, at_clock(1e6, s, 1980));
  p.observe(k, 990, at_clock(1e6, s, 990));
}

// The fit itself, without the conservative rule: two samples at two clocks
// suffice and the value is the point estimate.
DvfsConfig exact_fit() {
  DvfsConfig cfg;
  cfg.min_samples = 2;
  cfg.min_spread_mhz = 0;
  cfg.confidence_z = 0.0;
  return cfg;
}

constexpr KernelId kCompute = 1;  // s = 1
constexpr KernelId kMemory = 2;   // s = 0
constexpr KernelId kHalf = 3;     // s = 0.5

TEST(Dvfs, DefaultSupportedClocks) {
  const DvfsPolicy p;
  const std::vector<int>& f = p.supported();
  ASSERT_EQ(f.size(), 110U);  // (1980 - 345) / 15 + 1
  EXPECT_EQ(f.front(), 345);
  EXPECT_EQ(f.back(), 1980);
  for (std::size_t i = 1; i < f.size(); ++i) EXPECT_EQ(f[i] - f[i - 1], 15);

  DvfsConfig cfg;
  cfg.f_max_mhz = 1410;
  const DvfsPolicy lower(cfg);
  EXPECT_EQ(lower.supported().size(), 72U);  // (1410 - 345) / 15 + 1
  EXPECT_EQ(lower.supported().back(), 1410);
}

TEST(Dvfs, GivenSupportedClocksAreSortedAndBoundedByFmax) {
  DvfsConfig cfg;
  cfg.supported_mhz = {1500, 1000, 2100, 1000, 800, 0};
  const DvfsPolicy p(cfg);
  // 2100 > f_max and 0 are dropped, the duplicate 1000 merged, f_max added.
  EXPECT_EQ(p.supported(), (std::vector<int>{800, 1000, 1500, 1980}));
  EXPECT_EQ(p.round_up_supported(1200), 1500);
  EXPECT_EQ(p.round_up_supported(100), 800);
}

TEST(Dvfs, RoundUpSupported) {
  const DvfsPolicy p;
  EXPECT_EQ(p.round_up_supported(1000.0), 1005);  // 345 + 44 * 15
  EXPECT_EQ(p.round_up_supported(1005.0), 1005);
  EXPECT_EQ(p.round_up_supported(1005.5), 1020);
  EXPECT_EQ(p.round_up_supported(345.0), 345);
  EXPECT_EQ(p.round_up_supported(0.0), 345);
  EXPECT_EQ(p.round_up_supported(2500.0), 1980);  // none is: f_max
}

TEST(Dvfs, SensitivityRecoveredAtSeveralClocks) {
  for (const double s : {0.0, 0.5, 1.0}) {
    DvfsPolicy p(exact_fit());
    for (const int f : {1980, 1500, 1200, 900, 600}) p.observe(7, f, at_clock(2.5e6, s, f));
    const std::optional<double> got = p.sensitivity(7);
    ASSERT_TRUE(got.has_value());
    EXPECT_NEAR(*got, s, 1e-6) << "s = " << s;
  }
}

TEST(Dvfs, SensitivityNeedsTwoClocks) {
  DvfsPolicy p(exact_fit());
  EXPECT_FALSE(p.sensitivity(7).has_value());
  p.observe(7, 1980, us(100));
  p.observe(7, 1980, us(110));
  EXPECT_FALSE(p.sensitivity(7).has_value());
  // An unknown clock carries nothing and is ignored, whatever its duration.
  p.observe(7, 0, ms(50));
  EXPECT_FALSE(p.sensitivity(7).has_value());
  p.observe(7, 990, us(210));  // mean at 1980 is 105 us: d = a + c*x through (1, 105), (2, 210): s = 1
  ASSERT_TRUE(p.sensitivity(7).has_value());
  EXPECT_NEAR(*p.sensitivity(7), 1.0, 1e-9);
}

TEST(Dvfs, SensitivityIsClampedToUnitInterval) {
  DvfsPolicy p(exact_fit());
  // 1 ms at f_max, 2.5 ms at half clock: c = 1.5 ms, a = -0.5 ms, s = 1.5 -> 1.
  p.observe(1, 1980, ms(1));
  p.observe(1, 990, us(2500));
  EXPECT_DOUBLE_EQ(*p.sensitivity(1), 1.0);
  // Faster at the lower clock (noise): s = -0.2 -> 0.
  p.observe(2, 1980, ms(1));
  p.observe(2, 990, us(800));
  EXPECT_DOUBLE_EQ(*p.sensitivity(2), 0.0);
}

TEST(Dvfs, ChooseEmptyWorkIsFmax) {
  const DvfsPolicy p;
  const DvfsDecision d = p.choose({});
  EXPECT_EQ(d.mhz, 1980);
  EXPECT_DOUBLE_EQ(d.aggregate_sensitivity, 0.0);
  EXPECT_FALSE(d.unseen_kernel);
}

TEST(Dvfs, UnseenKernelForcesFmax) {
  DvfsPolicy p(exact_fit());
  teach(p, kMemory, 0.0);
  const std::vector<DvfsWork> w{{kMemory, 0.99}, {99, 0.01}};
  const DvfsDecision d = p.choose(w);
  EXPECT_EQ(d.mhz, 1980);
  EXPECT_TRUE(d.unseen_kernel);
  // Without the unseen kernel, memory-bound work goes to the lowest clock.
  const std::vector<DvfsWork> known{{kMemory, 0.99}};
  EXPECT_EQ(p.choose(known).mhz, 345);
  EXPECT_FALSE(p.choose(known).unseen_kernel);
}

TEST(Dvfs, ChooseByHand) {
  DvfsPolicy p(exact_fit());  // k = 0.05
  teach(p, kCompute, 1.0);
  teach(p, kMemory, 0.0);
  teach(p, kHalf, 0.5);

  // S = 1: f = 1980 / 1.05 = 1885.71 -> up to 1890.
  std::vector<DvfsWork> w{{kCompute, 1.0}};
  DvfsDecision d = p.choose(w);
  EXPECT_NEAR(d.aggregate_sensitivity, 1.0, 1e-9);
  EXPECT_EQ(d.mhz, 1890);

  // Weights 3 : 1 -> S = 0.75 * 1 + 0.25 * 0 = 0.75;
  // f = 1980 / (1 + 0.05 / 0.75) = 1856.25 -> up to 1860.
  w = {{kCompute, 3.0}, {kMemory, 1.0}};
  d = p.choose(w);
  EXPECT_NEAR(d.aggregate_sensitivity, 0.75, 1e-9);
  EXPECT_EQ(d.mhz, 1860);
  // Weights need not sum to 1: 0.3 : 0.1 is the same.
  w = {{kCompute, 0.3}, {kMemory, 0.1}};
  EXPECT_NEAR(p.choose(w).aggregate_sensitivity, 0.75, 1e-9);
  EXPECT_EQ(p.choose(w).mhz, 1860);
  // Equal weights of s = 1 and s = 0.5 are also S = 0.75.
  w = {{kCompute, 2.0}, {kHalf, 2.0}};
  EXPECT_EQ(p.choose(w).mhz, 1860);

  // All weights zero: the work counts equally, S = (1 + 1 + 0) / 3;
  // f = 1980 / (1 + 0.075) = 1841.86 -> up to 1845.
  w = {{kCompute, 0.0}, {kCompute, 0.0}, {kMemory, 0.0}};
  d = p.choose(w);
  EXPECT_NEAR(d.aggregate_sensitivity, 2.0 / 3, 1e-9);
  EXPECT_EQ(d.mhz, 1845);
  // A negative weight counts as zero: S = 1 -> 1890.
  w = {{kCompute, 1.0}, {kMemory, -5.0}};
  EXPECT_EQ(p.choose(w).mhz, 1890);

  // S = 0: the lowest supported clock.
  w = {{kMemory, 1.0}};
  d = p.choose(w);
  EXPECT_DOUBLE_EQ(d.aggregate_sensitivity, 0.0);
  EXPECT_EQ(d.mhz, 345);

  // A larger tolerance: k = 0.25, S = 1 -> 1980 / 1.25 = 1584 -> 1590.
  DvfsConfig cfg = exact_fit();
  cfg.tolerated_slowdown = 0.25;
  DvfsPolicy loose(cfg);
  teach(loose, kCompute, 1.0);
  w = {{kCompute, 1.0}};
  EXPECT_EQ(loose.choose(w).mhz, 1590);
}

// Random sensitivities, weights, tolerances and supported clocks: S is the
// normalised weighted mean, the clock is the smallest supported one at or
// above f_max / (1 + k/S), and the modelled slowdown stays within k.
TEST(Dvfs, ChooseRespectsTheSlowdownBound) {
  Rng rng(99);
  for (int round = 0; round < 300; ++round) {
    DvfsConfig cfg = exact_fit();
    cfg.tolerated_slowdown = 0.01 + 0.3 * rng.uniform();
    if (rng.below(2) == 0) {
      for (int i = 0; i < 12; ++i) cfg.supported_mhz.push_back(300 + static_cast<int>(rng.below(1700)));
    }
    DvfsPolicy p(cfg);
    const int kernels = 1 + static_cast<int>(rng.below(8));
    for (int k = 0; k < kernels; ++k) {
      const double s = rng.below(5) == 0 ? 0.0 : rng.uniform();
      for (int i = 0; i < 3; ++i) {
        const int f = p.supported()[rng.below(p.supported().size())];
        p.observe(static_cast<KernelId>(k), f, at_clock(1e5 + 1e6 * rng.uniform(), s, f));
        p.observe(static_cast<KernelId>(k), 1980, at_clock(1e6, s, 1980));
      }
    }
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<DvfsWork> work;
      const int n = 1 + static_cast<int>(rng.below(6));
      for (int i = 0; i < n; ++i) work.push_back({rng.below(static_cast<std::uint64_t>(kernels)), rng.uniform() * 10});
      double sum_w = 0.0;
      double sum_ws = 0.0;
      bool all_known = true;
      for (const DvfsWork& w : work) {
        const std::optional<double> s = p.sensitivity(w.kernel);
        all_known = all_known && s.has_value();
        sum_w += w.weight;
        sum_ws += w.weight * s.value_or(0.0);
      }
      const DvfsDecision d = p.choose(work);
      if (!all_known) {  // only a kernel observed at 1980 alone
        EXPECT_TRUE(d.unseen_kernel);
        EXPECT_EQ(d.mhz, 1980);
        continue;
      }
      const double S = sum_ws / sum_w;
      const double k = cfg.tolerated_slowdown;
      EXPECT_NEAR(d.aggregate_sensitivity, S, 1e-12);
      EXPECT_FALSE(d.unseen_kernel);
      const std::vector<int>& f = p.supported();
      ASSERT_TRUE(std::binary_search(f.begin(), f.end(), d.mhz));
      EXPECT_LE(S * (1980.0 / d.mhz - 1.0), k + 1e-12);
      const double target = S > 0 ? 1980.0 / (1.0 + k / S) : 0.0;
      EXPECT_GE(d.mhz, target - 1e-9);
      // Smallest such: the next lower supported clock is below the target.
      const auto it = std::lower_bound(f.begin(), f.end(), d.mhz);
      if (it != f.begin()) {
        EXPECT_LT(*(it - 1), target + 1e-9);
      }
    }
  }
}

TEST(Dvfs, MaybeChangeRespectsIntervalAndStep) {
  DvfsPolicy p(exact_fit());  // min_interval 500 ms, min_step 30 MHz
  teach(p, kCompute, 1.0);
  teach(p, kMemory, 0.0);
  const std::vector<DvfsWork> memory{{kMemory, 1.0}};
  const std::vector<DvfsWork> compute{{kCompute, 1.0}};  // target 1890

  EXPECT_EQ(p.maybe_change(time_at(ms(0)), 1980, memory), 345);  // the first change is free
  EXPECT_EQ(p.maybe_change(time_at(ms(100)), 345, compute), std::nullopt);
  EXPECT_EQ(p.maybe_change(time_at(ms(499)), 345, compute), std::nullopt);
  EXPECT_EQ(p.maybe_change(time_at(ms(500)), 345, compute), 1890);
  // 700 ms later: target 1890 is 15 MHz from 1875, below the step.
  EXPECT_EQ(p.maybe_change(time_at(ms(1100)), 1875, compute), std::nullopt);
  // That refusal was no change: 100 ms later, 30 MHz away, it changes.
  EXPECT_EQ(p.maybe_change(time_at(ms(1200)), 1860, compute), 1890);
  EXPECT_EQ(p.maybe_change(time_at(ms(1800)), 1890, compute), std::nullopt);  // already there

  DvfsConfig cfg = exact_fit();
  cfg.min_step_mhz = 0;
  DvfsPolicy any_step(cfg);
  teach(any_step, kCompute, 1.0);
  EXPECT_EQ(any_step.maybe_change(time_at(ms(0)), 1890, compute), std::nullopt);
  EXPECT_EQ(any_step.maybe_change(time_at(ms(0)), 1875, compute), 1890);
}

}  // namespace
}  // namespace lithos::sched
