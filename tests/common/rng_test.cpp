#include "common/rng.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "common/stats.hpp"

namespace lithos {
namespace {

TEST(Rng, DeterministicForSeed) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next();
    EXPECT_EQ(x, b.next());
    (void)c;
  }
  EXPECT_NE(Rng(42).next(), Rng(43).next());
}

TEST(Rng, ForkedStreamsDiffer) {
  Rng base(1);
  Rng f1 = base.fork(1), f2 = base.fork(2), f1b = base.fork(1);
  EXPECT_NE(f1.next(), f2.next());
  Rng g1 = base.fork(1);
  EXPECT_EQ(g1.next(), f1b.next());
}

TEST(Rng, DistributionMeans) {
  Rng r(9);
  std::vector<double> u, e, ln;
  for (int i = 0; i < 100000; ++i) {
    u.push_back(r.uniform());
    e.push_back(r.exponential(5.0));
    ln.push_back(r.lognormal_mean_cv(100.0, 0.5));
  }
  EXPECT_NEAR(mean(u), 0.5, 0.01);
  EXPECT_NEAR(mean(e), 5.0, 0.1);
  EXPECT_NEAR(mean(ln), 100.0, 1.5);
  EXPECT_NEAR(stddev(ln) / mean(ln), 0.5, 0.03);
  for (double x : u) ASSERT_TRUE(x >= 0.0 && x < 1.0);
  EXPECT_EQ(Rng(3).lognormal_mean_cv(7.0, 0.0), 7.0);
}

TEST(Rng, BelowInRange) {
  Rng r(5);
  for (int i = 0; i < 10000; ++i) ASSERT_LT(r.below(7), 7U);
}

}  // namespace
}  // namespace lithos
