// The masking backends' answers that the runtime no longer decides itself:
// why a launch gets no mask, whether the C API's sets apply, the flags the
// launch path reads, and the names the report prints (the preload suite
// checks the same through a whole process over the fake driver).
#include "intercept/masking_backend.hpp"

#include <gtest/gtest.h>

#include <string>

#include "intercept/stream_sets.hpp"

namespace lithos::intercept {
namespace {

Unmasked asked(bool any) {
  Unmasked u;
  u.idle_reason = SkipReason::kWholeLiveSet;
  u.anything_asked = any;
  return u;
}

TEST(MaskingBackend, NoMechanismCountsNoBackendOnlyWhenSomethingWasAsked) {
  const UnmaskedBackend none(UnmaskedBackend::Why::kNone);
  EXPECT_EQ(none.why_unmasked(asked(true)), SkipReason::kNoBackend);
  EXPECT_EQ(none.why_unmasked(asked(false)), SkipReason::kNotRequested);
  EXPECT_FALSE(none.takes_sets());
  EXPECT_STREQ(none.name(), "none (unmasked)");
}

TEST(MaskingBackend, OffIsNeverASkipAndTakesNoSets) {
  const UnmaskedBackend off(UnmaskedBackend::Why::kOff);
  EXPECT_EQ(off.why_unmasked(asked(true)), SkipReason::kNotRequested);
  EXPECT_FALSE(off.takes_sets());
  EXPECT_STREQ(off.name(), "off (observe only)");
}

TEST(MaskingBackend, PendingTakesSetsForTheFirstLaunchToApply) {
  const UnmaskedBackend pending(UnmaskedBackend::Why::kPending);
  EXPECT_TRUE(pending.takes_sets());
  EXPECT_EQ(pending.why_unmasked(asked(false)), SkipReason::kNoBackend);
  EXPECT_STREQ(pending.name(), "pending (no launch yet)");
}

TEST(MaskingBackend, UnmaskedBackendsWriteNoMaskAndRouteNothing) {
  for (const auto why : {UnmaskedBackend::Why::kPending, UnmaskedBackend::Why::kNone, UnmaskedBackend::Why::kOff}) {
    const UnmaskedBackend b(why);
    EXPECT_FALSE(b.writes_masks()) << b.name();
    EXPECT_FALSE(b.routes_launches()) << b.name();
  }
}

TEST(StreamSets, AnyFollowsTheSetsAndWriteBackSkipsStreamsThatLostTheirs) {
  StreamSets s;
  EXPECT_FALSE(s.any());
  MaskEntry e;
  e.tpcs.set(3);
  s.set(1, e);
  s.set(2, e);
  EXPECT_TRUE(s.any());
  StreamSets::Map remade = s.snapshot();
  ASSERT_EQ(remade.size(), 2U);
  for (auto& [key, m] : remade) m.whole = true;
  s.erase(2);
  s.replace_existing(remade);
  ASSERT_TRUE(s.find(1).has_value());
  EXPECT_TRUE(s.find(1)->whole);
  EXPECT_FALSE(s.find(2).has_value());  // erased meanwhile: not brought back
  s.erase(1);
  EXPECT_FALSE(s.any());
}

}  // namespace
}  // namespace lithos::intercept
