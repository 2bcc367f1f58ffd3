#include "intercept/stats.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace lithos::intercept {
namespace {

StatsHeader header() {
  StatsHeader h;
  h.pid = 1234;
  h.program = "python3";
  h.backend = "descriptor";
  h.qmd_version = "V04_00";
  h.process_mask = "TPCs 0-7 (8 of 66 live)";
  h.slot_map = "/cache/\"map\".txt";
  h.driver_used = true;
  return h;
}

TEST(Stats, CountersSnapshotAndSums) {
  Counters c;
  for (int i = 0; i < 3; ++i) c.call(*find_hook("cuLaunchKernel"));
  c.call(*find_hook("cuLaunchKernelEx_ptsz"));
  c.call(*find_hook("cuGraphLaunch"));
  c.call(*find_hook("cuGetProcAddress_v2"));
  c.skip(SkipReason::kUnknownQmd);
  Counters::bump(c.masks_applied);
  const StatsSnapshot s = c.snapshot();
  EXPECT_EQ(s.kernel_launches(), 4U);
  EXPECT_EQ(s.graph_launches(), 1U);
  EXPECT_EQ(s.masks_applied, 1U);
  EXPECT_EQ(s.not_applied[static_cast<std::size_t>(SkipReason::kUnknownQmd)], 1U);
}

TEST(Stats, TextNamesEveryPathAndReason) {
  Counters c;
  for (int i = 0; i < 5; ++i) c.call(*find_hook("cuLaunchKernel_ptsz"));
  c.skip(SkipReason::kNoSlotMap);
  const std::string text = stats_text(header(), c.snapshot());
  EXPECT_NE(text.find("statistics of pid 1234 (python3)"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel launches seen: 5"), std::string::npos) << text;
  EXPECT_NE(text.find("cuLaunchKernel_ptsz"), std::string::npos) << text;
  EXPECT_NE(text.find("[launch_ptsz]"), std::string::npos) << text;
  EXPECT_NE(text.find("no_slot_map 1"), std::string::npos) << text;
  EXPECT_NE(text.find("descriptor layout V04_00"), std::string::npos) << text;
  EXPECT_EQ(text.find("WARNING"), std::string::npos) << text;
  for (std::size_t pos = 0; pos < text.size();) {
    EXPECT_EQ(text.compare(pos, 8, "lithos: "), 0) << "every line starts with lithos: " << text.substr(pos, 40);
    pos = text.find('\n', pos) + 1;
    if (pos == 0) break;
  }
}

TEST(Stats, ZeroLaunchesWithTheDriverUsedIsLoud) {
  Counters c;
  const std::string text = stats_text(header(), c.snapshot());
  EXPECT_NE(text.find("WARNING"), std::string::npos);
  EXPECT_NE(text.find("saw NO kernel launch"), std::string::npos);
  StatsHeader quiet = header();
  quiet.driver_used = false;
  EXPECT_FALSE(stats_interposition_failed(quiet, c.snapshot()));
  // Descriptors built without a hooked launch also mean interposition failed.
  Counters::bump(c.descriptors_outside);
  EXPECT_TRUE(stats_interposition_failed(quiet, c.snapshot()));
}

TEST(Stats, JsonIsValidAndComplete) {
  Counters c;
  c.call(*find_hook("cuLaunchKernel"));
  c.call(*find_hook("cuLaunchKernel"));
  c.call(*find_hook("cuLaunchKernelEx"));
  Counters::bump(c.masks_applied);
  Counters::bump(c.descriptors_in_launch);
  const std::string text = stats_json(header(), c.snapshot());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line";
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["pid"], 1234);
  EXPECT_EQ(j["slot_map"], "/cache/\"map\".txt");
  EXPECT_EQ(j["kernel_launches"], 3);
  EXPECT_EQ(j["calls"]["cuLaunchKernel"], 2);
  EXPECT_EQ(j["paths"]["launch"], 2);
  EXPECT_EQ(j["paths"]["launch_ex"], 1);
  EXPECT_EQ(j["masks_applied"], 1);
  EXPECT_EQ(j["descriptors"]["in_launch"], 1);
  EXPECT_EQ(j["not_applied"].size(), static_cast<std::size_t>(kSkipReasonCount));
  EXPECT_EQ(j["interposition_failed"], false);
}

}  // namespace
}  // namespace lithos::intercept
