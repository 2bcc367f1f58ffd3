// share_busy_interval (src/daemon/busy_share.hpp): how lithosd splits the
// busy time of a stream among the launches one completion marker covers.
#include "daemon/busy_share.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace lithos::daemon {
namespace {

std::vector<CoveredLaunch> launches(std::initializer_list<std::pair<std::uint64_t, double>> since_predicted) {
  std::vector<CoveredLaunch> v;
  for (const auto& [since, pred] : since_predicted) v.push_back({.since_ns = since, .predicted_ns = pred});
  return v;
}

TEST(BusyShare, OneLaunchGetsTheWholeInterval) {
  auto v = launches({{100, 0}});
  share_busy_interval(50, 1000, v);
  EXPECT_EQ(v[0].start_ns, 100U);  // the stream was idle until it was launched
  EXPECT_EQ(v[0].end_ns, 1000U);
  v = launches({{100, 0}});
  share_busy_interval(400, 1000, v);
  EXPECT_EQ(v[0].start_ns, 400U);  // the stream was busy with earlier work until 400
  EXPECT_EQ(v[0].end_ns, 1000U);
}

TEST(BusyShare, LaunchesWithoutPredictionsShareAlike) {
  // Before: the first was credited with all 900 ns, the others with 0.
  auto v = launches({{100, 0}, {100, 0}, {100, 0}});
  share_busy_interval(100, 1000, v);
  EXPECT_EQ(v[0].start_ns, 100U);
  EXPECT_EQ(v[0].end_ns, 400U);
  EXPECT_EQ(v[1].start_ns, 400U);
  EXPECT_EQ(v[1].end_ns, 700U);
  EXPECT_EQ(v[2].start_ns, 700U);
  EXPECT_EQ(v[2].end_ns, 1000U);
}

TEST(BusyShare, SharesFollowPredictions) {
  auto v = launches({{0, 100}, {0, 300}, {0, 600}});
  share_busy_interval(0, 2000, v);  // twice as long as predicted: each twice its prediction
  EXPECT_EQ(v[0].end_ns - v[0].start_ns, 200U);
  EXPECT_EQ(v[1].end_ns - v[1].start_ns, 600U);
  EXPECT_EQ(v[2].end_ns - v[2].start_ns, 1200U);
  EXPECT_EQ(v[2].end_ns, 2000U);
}

TEST(BusyShare, AnUnpredictedLaunchWeighsAsTheMeanOfThePredictedOnes) {
  auto v = launches({{0, 100}, {0, 0}, {0, 300}});
  share_busy_interval(0, 600, v);  // weights 100, 200, 300
  EXPECT_EQ(v[0].end_ns, 100U);
  EXPECT_EQ(v[1].end_ns, 300U);
  EXPECT_EQ(v[2].end_ns, 600U);
}

TEST(BusyShare, AnIdleGapBeforeALaunchIsNobodysTime) {
  // The second launch came 500 ns after the first began; the first cannot
  // have run into the gap's share, and the rest is split from there.
  auto v = launches({{0, 100}, {700, 100}});
  share_busy_interval(0, 1000, v);
  EXPECT_EQ(v[0].start_ns, 0U);
  EXPECT_EQ(v[0].end_ns, 500U);
  EXPECT_EQ(v[1].start_ns, 700U);
  EXPECT_EQ(v[1].end_ns, 1000U);
}

TEST(BusyShare, PiecesAreOrderedAndInsideTheInterval) {
  // Reports that arrived after the marker landed (since after now), a busy_from
  // after now, huge and tiny predictions: never backwards, never past now.
  auto v = launches({{900, 1e12}, {1500, 1e-3}, {0, 5}, {2000, 0}});
  share_busy_interval(1200, 1000, v);
  std::uint64_t t = 0;
  for (const CoveredLaunch& c : v) {
    EXPECT_LE(t, c.start_ns);
    EXPECT_LE(c.start_ns, c.end_ns);
    EXPECT_LE(c.end_ns, 1000U);
    t = c.end_ns;
  }
  EXPECT_EQ(v.back().end_ns, 1000U);
}

TEST(BusyShare, EmptyIsLeftAlone) {
  std::vector<CoveredLaunch> v;
  share_busy_interval(0, 10, v);
  EXPECT_TRUE(v.empty());
}

}  // namespace
}  // namespace lithos::daemon
