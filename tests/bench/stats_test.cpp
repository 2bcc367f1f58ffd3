// The statistics of `lithos bench` on hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/stats.hpp"

namespace lithos::bench {
namespace {

using nlohmann::json;

TEST(BenchStats, RepPercentilesIncludeUnfinishedLowerBounds) {
  json raw = {{"latencies_ms", json::array()}, {"unfinished_ms", {500.0}}, {"completed", 99}, {"window_s", 2.0}};
  for (int i = 1; i <= 99; ++i) raw["latencies_ms"].push_back(static_cast<double>(i));
  auto r = rep_stats(raw);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->finished, 99u);
  EXPECT_EQ(r->unfinished, 1u);
  EXPECT_DOUBLE_EQ(r->p50_ms, 50.5);  // 100 values 1..99, 500: linear between ranks
  EXPECT_NEAR(r->p99_ms, 99.0 + 0.01 * (500.0 - 99.0), 1e-9);
  EXPECT_DOUBLE_EQ(r->throughput, 49.5);
  // SLO 50 ms: 50 of the 100 requests; the unfinished one always misses,
  // even with an SLO above its lower bound.
  EXPECT_DOUBLE_EQ(slo_attainment(*r, 50.0), 0.5);
  EXPECT_DOUBLE_EQ(goodput(*r, 50.0), 25.0);
  EXPECT_DOUBLE_EQ(slo_attainment(*r, 1000.0), 0.99);
}

TEST(BenchStats, MalformedRepsAreErrorsNotCrashes) {
  EXPECT_FALSE(rep_stats(json::array()));
  EXPECT_FALSE(rep_stats({{"latencies_ms", {1.0}}, {"completed", 1}}));                      // no window
  EXPECT_FALSE(rep_stats({{"latencies_ms", {1.0}}, {"completed", 1}, {"window_s", 0.0}}));   // zero window
  EXPECT_FALSE(rep_stats({{"latencies_ms", {-1.0}}, {"completed", 1}, {"window_s", 1.0}}));  // negative
  EXPECT_FALSE(rep_stats({{"latencies_ms", {"x"}}, {"completed", 1}, {"window_s", 1.0}}));   // not a number
  EXPECT_FALSE(rep_stats({{"latencies_ms", 3}, {"completed", 1}, {"window_s", 1.0}}));       // not an array
  EXPECT_FALSE(rep_stats({{"latencies_ms", {1.0}}, {"completed", -2}, {"window_s", 1.0}}));  // negative count
  auto empty = rep_stats({{"completed", 0}, {"window_s", 1.0}});
  ASSERT_TRUE(empty);
  EXPECT_EQ(slo_attainment(*empty, 1.0), 0.0);
}

TEST(BenchStats, SpreadIsMedianMinMax) {
  EXPECT_TRUE(spread({}).is_null());
  const json s = spread({3.0, 1.0, 2.0, NAN});
  EXPECT_EQ(s["median"], 2.0);
  EXPECT_EQ(s["min"], 1.0);
  EXPECT_EQ(s["max"], 3.0);
  EXPECT_EQ(s["n"], 3);
  EXPECT_EQ(*spread_median(spread({1.0, 4.0})), 2.5);
  EXPECT_FALSE(spread_median(json(nullptr)));
}

TEST(BenchStats, EnergyIsSplitByNormalisedThroughput) {
  // Two tenants at 0.5x and 1.5x their alone throughput share 100 J as 25/75.
  const std::vector<std::optional<double>> x{0.5, 1.5};
  EXPECT_DOUBLE_EQ(*energy_per_unit(100.0, x, 0, 5), 5.0);
  EXPECT_DOUBLE_EQ(*energy_per_unit(100.0, x, 1, 15), 5.0);
  EXPECT_FALSE(energy_per_unit(100.0, {0.5, std::nullopt}, 0, 5));  // no alone reference
  EXPECT_FALSE(energy_per_unit(100.0, x, 0, 0));                    // nothing completed
  EXPECT_FALSE(energy_per_unit(0.0, x, 0, 5));
  EXPECT_FALSE(energy_per_unit(100.0, x, 2, 5));
}

TEST(BenchStats, CdfPointsSpanMinToMax) {
  const std::vector<double> v{1, 2, 3, 4, 5};
  const auto c = cdf_points(v, 5);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c.front(), 1.0);
  EXPECT_EQ(c[2], 3.0);
  EXPECT_EQ(c.back(), 5.0);
  EXPECT_TRUE(cdf_points({}, 10).empty());
}

}  // namespace
}  // namespace lithos::bench
