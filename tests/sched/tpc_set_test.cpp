#include "sched/tpc_set.hpp"

#include <gtest/gtest.h>

namespace lithos::sched {
namespace {

TEST(TpcSet, EmptyByDefault) {
  TpcSet s;
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.count(), 0);
  EXPECT_EQ(s.lowest(), -1);
  EXPECT_EQ(s.to_string(), "");
}

TEST(TpcSet, RangeSpansBothWords) {
  const TpcSet s = TpcSet::range(60, 70);
  EXPECT_EQ(s.count(), 10);
  EXPECT_FALSE(s.test(59));
  EXPECT_TRUE(s.test(60));
  EXPECT_TRUE(s.test(63));
  EXPECT_TRUE(s.test(64));
  EXPECT_TRUE(s.test(69));
  EXPECT_FALSE(s.test(70));
  EXPECT_EQ(s.to_string(), "60-69");
}

TEST(TpcSet, FirstCoversWholeDevice) {
  EXPECT_EQ(TpcSet::first(66).count(), 66);
  EXPECT_EQ(TpcSet::first(128).count(), 128);
  EXPECT_EQ(TpcSet::first(200).count(), 128);  // clamped
  EXPECT_EQ(TpcSet::first(0).count(), 0);
  EXPECT_EQ(TpcSet::first(64).word(1), 0U);
  EXPECT_EQ(TpcSet::first(64).word(0), ~0ULL);
}

TEST(TpcSet, SetOperations) {
  const TpcSet a = TpcSet::range(0, 10);
  const TpcSet b = TpcSet::range(5, 15);
  EXPECT_EQ((a | b), TpcSet::range(0, 15));
  EXPECT_EQ((a & b), TpcSet::range(5, 10));
  EXPECT_EQ((a - b), TpcSet::range(0, 5));
  EXPECT_TRUE(a.intersects(b));
  EXPECT_FALSE(a.intersects(TpcSet::range(10, 20)));
  EXPECT_TRUE(TpcSet::range(0, 15).contains(a));
  EXPECT_FALSE(a.contains(b));
}

TEST(TpcSet, SetResetOutOfRangeIsIgnored) {
  TpcSet s;
  s.set(-1);
  s.set(128);
  EXPECT_TRUE(s.empty());
  s.set(127);
  EXPECT_TRUE(s.test(127));
  s.reset(127);
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.test(500));
}

TEST(TpcSet, TakeLowest) {
  TpcSet s = TpcSet::range(62, 66);
  s.set(3);
  EXPECT_EQ(s.take_lowest(2).to_string(), "3,62");
  EXPECT_EQ(s.take_lowest(3).to_string(), "3,62-63");
  EXPECT_EQ(s.take_lowest(4).to_string(), "3,62-64");
  EXPECT_EQ(s.take_lowest(99), s);
  EXPECT_TRUE(s.take_lowest(0).empty());
}

TEST(TpcSet, ForEachAscending) {
  TpcSet s;
  for (int t : {100, 2, 64, 63, 0}) s.set(t);
  std::vector<int> seen;
  s.for_each([&](int t) { seen.push_back(t); });
  EXPECT_EQ(seen, (std::vector<int>{0, 2, 63, 64, 100}));
}

TEST(TpcSet, ParseRoundTrips) {
  auto s = TpcSet::parse(" 0-3, 8 ,10-11,65");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->count(), 8);
  EXPECT_EQ(s->to_string(), "0-3,8,10-11,65");
  auto again = TpcSet::parse(s->to_string());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *s);
}

TEST(TpcSet, ParseRejectsBadInput) {
  EXPECT_EQ(TpcSet::parse("x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TpcSet::parse("1-").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TpcSet::parse("5-2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TpcSet::parse("1,,2").status().code(), StatusCode::kInvalidArgument);
  auto over = TpcSet::parse("0-66", 66);
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("0-65"), std::string::npos);
  EXPECT_TRUE(TpcSet::parse("").is_ok());
}

}  // namespace
}  // namespace lithos::sched
