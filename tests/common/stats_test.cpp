#include "common/stats.hpp"

#include <gtest/gtest.h>

#include "common/rng.hpp"

namespace lithos {
namespace {

TEST(Percentile, LinearInterpolation) {
  std::vector<double> v{1, 2, 3, 4, 5};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 5);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 2);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 50), 15);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(Percentile, UnsortedInput) { EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3}, 50), 3); }

TEST(MeanStddev, Basic) {
  std::vector<double> v{2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(v), 5);
  EXPECT_NEAR(stddev(v), 2.138, 1e-3);
  EXPECT_DOUBLE_EQ(stddev(std::vector<double>{1}), 0);
}

TEST(LogHistogram, QuantileWithinRelativeError) {
  LogHistogram h;
  Rng rng(7);
  std::vector<double> all;
  for (int i = 0; i < 20000; ++i) {
    const double v = rng.lognormal_mean_cv(1000, 1.0);
    h.add(v);
    all.push_back(v);
  }
  for (double q : {50.0, 90.0, 99.0, 99.9}) {
    const double exact = percentile(all, q);
    EXPECT_NEAR(h.quantile(q), exact, exact * 0.04) << "q=" << q;
  }
  EXPECT_EQ(h.count(), 20000U);
}

TEST(LogHistogram, SmallValuesAndMerge) {
  LogHistogram a, b;
  a.add(0.5);
  a.add(0);
  b.add(100);
  a.merge(b);
  EXPECT_EQ(a.count(), 3U);
  EXPECT_DOUBLE_EQ(a.max(), 100);
  EXPECT_LE(a.quantile(100), 100);
  EXPECT_GE(a.quantile(100), 98);
  EXPECT_LE(a.quantile(10), 1.0);
}

}  // namespace
}  // namespace lithos
