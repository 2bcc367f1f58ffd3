// The calibration algorithm against simulated hardware. The fake probe fails
// the test if it ever receives a mask whose enabled slots are all dead: on
// the real GPU that launch never finishes.
#include "gpu/calibrate.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <vector>

#include "h100_fixture.hpp"

namespace lithos::gpu {
namespace {

using testing::h100_slot_map;

// Simulated hardware: slot s controls the SMs in sms_of_slot[s].
struct FakeGpu {
  int sm_count = 0;
  int mask_slots = kMaxSlots;
  std::vector<std::set<int>> sms_of_slot = std::vector<std::set<int>>(kMaxSlots);

  static FakeGpu from_map(const SlotMap& m) {
    FakeGpu g;
    g.sm_count = m.sm_count;
    for (int s = 0; s < kMaxSlots; ++s) {
      const int t = m.tpc_of_slot[static_cast<std::size_t>(s)];
      if (t >= 0) g.sms_of_slot[static_cast<std::size_t>(s)] = {2 * t, 2 * t + 1};
    }
    return g;
  }
};

class FakeProbe final : public SmProbe {
 public:
  explicit FakeProbe(FakeGpu gpu) : gpu_(std::move(gpu)) {}

  ProbeInfo info() const override {
    ProbeInfo i;
    i.gpu_uuid = "GPU-fake";
    i.gpu_name = "Fake GPU";
    i.driver_version = "1.0";
    i.sm_count = gpu_.sm_count;
    i.mask_slots = gpu_.mask_slots;
    return i;
  }

  Result<std::set<int>> sms_seen(const SlotMask& mask) override {
    ++calls;
    masks.push_back(mask);
    std::set<int> seen;
    for (int s = 0; s < kMaxSlots; ++s) {
      // Slots beyond the layout's mask width cannot be disabled.
      const bool enabled = s >= gpu_.mask_slots || !mask.disabled(s);
      if (enabled)
        seen.insert(gpu_.sms_of_slot[static_cast<std::size_t>(s)].begin(),
                    gpu_.sms_of_slot[static_cast<std::size_t>(s)].end());
    }
    if (seen.empty()) {
      ADD_FAILURE() << "HANG: calibrate emitted a mask whose enabled slots are all dead (call " << calls << ")";
      ++hangs;
      return Status::unavailable("fake launch never finished");
    }
    if (tamper) tamper(calls, mask, seen);
    return seen;
  }

  int calls = 0;
  int hangs = 0;
  std::vector<SlotMask> masks;
  // Lets a test corrupt the answer of call n (1-based).
  std::function<void(int, const SlotMask&, std::set<int>&)> tamper;

 private:
  FakeGpu gpu_;
};

SlotMap expected_map(const SlotMap& truth) {
  SlotMap m = truth;
  m.gpu_uuid = "GPU-fake";
  m.gpu_name = "Fake GPU";
  m.driver_version = "1.0";
  return m;
}

TEST(Calibrate, ReproducesTheH100Map) {
  const SlotMap truth = h100_slot_map();
  FakeProbe probe(FakeGpu::from_map(truth));
  CalibrateStats stats;
  auto map = calibrate(probe, CalibrateOptions{}, &stats);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(*map, expected_map(truth));
  EXPECT_EQ(probe.hangs, 0);
  EXPECT_EQ(stats.launches, probe.calls);
  EXPECT_EQ(stats.launches, 1 + 128 + 128);  // baseline, complement, positive
  EXPECT_EQ(stats.bootstrap_masks, 1);       // slot 0 is live on the H100
  EXPECT_EQ(stats.retried, 0);
}

TEST(Calibrate, EveryMaskEnablesASlotAlreadyProvenLiveOrIsABootstrapMask) {
  // Independent re-check of the guard: replay the masks and track what the
  // calibration could have known when it emitted each one.
  const SlotMap truth = h100_slot_map();
  FakeProbe probe(FakeGpu::from_map(truth));
  ASSERT_TRUE(calibrate(probe, CalibrateOptions{}).is_ok());
  std::set<int> proven;
  for (const SlotMask& m : probe.masks) {
    int disabled = 0, first_disabled = -1;
    bool enables_proven = false;
    for (int s = 0; s < kMaxSlots; ++s) {
      if (m.disabled(s)) {
        ++disabled;
        if (first_disabled < 0) first_disabled = s;
      } else if (proven.count(s) != 0) {
        enables_proven = true;
      }
    }
    const bool all_enabled = disabled == 0;
    const bool bootstrap = proven.empty() && disabled == 1;
    EXPECT_TRUE(all_enabled || enables_proven || bootstrap);
    // A complement mask proves its slot live when that slot is live.
    if (disabled == 1 && truth.tpc_of_slot[static_cast<std::size_t>(first_disabled)] >= 0) {
      proven.insert(first_disabled);
    }
  }
}

TEST(Calibrate, LeadingDeadSlotsCostOneBootstrapMaskEach) {
  SlotMap truth = h100_slot_map();
  // Move TPCs 0 and 8 (slots 0, 1) to slots 100, 101: slots 0-1 and 4-8 dead.
  truth.tpc_of_slot[100] = truth.tpc_of_slot[0];
  truth.tpc_of_slot[101] = truth.tpc_of_slot[1];
  truth.tpc_of_slot[0] = truth.tpc_of_slot[1] = -1;
  FakeProbe probe(FakeGpu::from_map(truth));
  CalibrateStats stats;
  auto map = calibrate(probe, CalibrateOptions{}, &stats);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(*map, expected_map(truth));
  EXPECT_EQ(stats.bootstrap_masks, 3);  // slots 0, 1 (dead) and 2 (first live)
  EXPECT_EQ(probe.hangs, 0);
}

TEST(Calibrate, SmallGpuWithOneLiveSlotAmongMany) {
  // Two TPCs only, far apart: still no hang.
  FakeGpu gpu;
  gpu.sm_count = 4;
  gpu.sms_of_slot[5] = {2, 3};
  gpu.sms_of_slot[100] = {0, 1};
  FakeProbe probe(gpu);
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(map->tpc_of_slot[5], 1);
  EXPECT_EQ(map->tpc_of_slot[100], 0);
  EXPECT_EQ(map->live_tpcs(), 2);
  EXPECT_EQ(probe.hangs, 0);
}

TEST(Calibrate, RefusesASingleTpcGpu) {
  FakeGpu gpu;
  gpu.sm_count = 2;
  gpu.sms_of_slot[0] = {0, 1};
  FakeProbe probe(gpu);
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_EQ(probe.calls, 1);  // the all-enabled baseline only
  EXPECT_EQ(probe.hangs, 0);
}

TEST(Calibrate, PreHopperSixtyFourSlotMask) {
  // 40 TPCs behind slots 0-39 of a 64-bit mask; slots 40-63 dead.
  FakeGpu gpu;
  gpu.sm_count = 80;
  gpu.mask_slots = 64;
  for (int s = 0; s < 40; ++s)
    gpu.sms_of_slot[static_cast<std::size_t>(s)] = {2 * ((s * 7) % 40), 2 * ((s * 7) % 40) + 1};
  FakeProbe probe(gpu);
  CalibrateStats stats;
  auto map = calibrate(probe, CalibrateOptions{}, &stats);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(map->slot_count, 64);
  EXPECT_EQ(map->live_tpcs(), 40);
  EXPECT_EQ(stats.launches, 1 + 64 + 64);
}

TEST(Calibrate, RetriesAMissedSm) {
  const SlotMap truth = h100_slot_map();
  FakeProbe probe(FakeGpu::from_map(truth));
  // Call 11 (complement of slot 9) loses SM 100 by chance once.
  probe.tamper = [](int call, const SlotMask&, std::set<int>& seen) {
    if (call == 11) seen.erase(100);
  };
  CalibrateStats stats;
  auto map = calibrate(probe, CalibrateOptions{}, &stats);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(*map, expected_map(truth));
  EXPECT_EQ(stats.retried, 1);
}

TEST(Calibrate, RetriesAMissedSmInThePositivePass) {
  const SlotMap truth = h100_slot_map();
  FakeProbe probe(FakeGpu::from_map(truth));
  probe.tamper = [](int call, const SlotMask&, std::set<int>& seen) {
    if (call == 140 && !seen.empty()) seen.erase(seen.begin());
  };
  CalibrateStats stats;
  auto map = calibrate(probe, CalibrateOptions{}, &stats);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(stats.retried, 1);
}

TEST(Calibrate, PersistentInconsistencyIsAnError) {
  FakeProbe probe(FakeGpu::from_map(h100_slot_map()));
  // SM 100 never shows up when slot 9 is disabled: looks like slot 9 owns
  // SMs 2, 3 and 100, which is not one TPC.
  probe.tamper = [](int, const SlotMask& m, std::set<int>& seen) {
    if (m.disabled(9) && !m.disabled(10)) seen.erase(100);
  };
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_EQ(map.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(map.status().message().find("not one TPC"), std::string::npos) << map.status().message();
  EXPECT_EQ(probe.hangs, 0);
}

TEST(Calibrate, AnSmClaimedByTwoSlotsIsAnError) {
  FakeGpu gpu = FakeGpu::from_map(h100_slot_map());
  gpu.sms_of_slot[4] = gpu.sms_of_slot[0];  // dead slot 4 also controls TPC 0
  FakeProbe probe(gpu);
  auto map = calibrate(probe, CalibrateOptions{});
  // With slot 0 disabled, slot 4 still runs TPC 0: slot 0 looks dead; then
  // TPC 0 is never found behind a single slot.
  ASSERT_FALSE(map.is_ok());
  EXPECT_EQ(map.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(map.status().message().find("never found"), std::string::npos) << map.status().message();
}

TEST(Calibrate, TwoSlotsReportingTheSameTpcIsAnError) {
  FakeProbe probe(FakeGpu::from_map(h100_slot_map()));
  // Inconsistent hardware: disabling slot 4 (dead) makes TPC 0 vanish too.
  probe.tamper = [](int, const SlotMask& m, std::set<int>& seen) {
    if (m.disabled(4) && !m.disabled(5)) {
      seen.erase(0);
      seen.erase(1);
    }
  };
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("two slots claim the same SMs"), std::string::npos) << map.status().message();
}

TEST(Calibrate, ASlotOwningTwoTpcsIsAnError) {
  FakeGpu gpu = FakeGpu::from_map(h100_slot_map());
  gpu.sms_of_slot[0].insert({16, 17});  // slot 0 controls TPCs 0 and 8
  gpu.sms_of_slot[1].clear();
  FakeProbe probe(gpu);
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("not one TPC"), std::string::npos) << map.status().message();
  EXPECT_EQ(probe.hangs, 0);
}

TEST(Calibrate, SmsNeverFoundAreAnError) {
  // TPCs 62-65 sit at slots 75-83; probing only 72 slots misses them.
  FakeProbe probe(FakeGpu::from_map(h100_slot_map()));
  CalibrateOptions opt;
  opt.slot_count = 72;
  auto map = calibrate(probe, opt);
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("{124,125,126,127,128,129,130,131}"), std::string::npos)
      << map.status().message();
  EXPECT_NE(map.status().message().find("never found"), std::string::npos);
}

TEST(Calibrate, BaselineShortOfSmCountIsAnError) {
  FakeGpu gpu = FakeGpu::from_map(h100_slot_map());
  gpu.sm_count = 134;  // the device claims one more TPC than runs blocks
  FakeProbe probe(gpu);
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("132 of 134"), std::string::npos) << map.status().message();
  EXPECT_EQ(probe.calls, 3);  // baseline tried 1 + 2 retries, nothing else
}

TEST(Calibrate, VirtualSmIdsAreAnError) {
  FakeGpu gpu = FakeGpu::from_map(h100_slot_map());
  gpu.sms_of_slot[0] = {0, 500};
  FakeProbe probe(gpu);
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("outside"), std::string::npos) << map.status().message();
}

TEST(Calibrate, BaselineMissingAnSmOnEveryTryIsAnError) {
  FakeProbe probe(FakeGpu::from_map(h100_slot_map()));
  probe.tamper = [](int call, const SlotMask&, std::set<int>& seen) {
    if (call <= 3) seen.erase(7);
  };
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("131 of 132"), std::string::npos) << map.status().message();
  EXPECT_NE(map.status().message().find("missing {7}"), std::string::npos) << map.status().message();
}

TEST(Calibrate, ASmOutsideTheBaselineIsAnError) {
  FakeGpu gpu = FakeGpu::from_map(h100_slot_map());
  FakeProbe probe(gpu);
  probe.tamper = [](int call, const SlotMask&, std::set<int>& seen) {
    if (call == 5) seen.insert(140);  // an SM the baseline never ran on
  };
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("never used"), std::string::npos) << map.status().message();
}

TEST(Calibrate, PositiveCheckDisagreeingIsAnError) {
  FakeProbe probe(FakeGpu::from_map(h100_slot_map()));
  // In the positive pass a dead slot suddenly adds SM 7.
  probe.tamper = [](int, const SlotMask& m, std::set<int>& seen) {
    int enabled = 0;
    for (int s = 0; s < kMaxSlots; ++s) enabled += m.disabled(s) ? 0 : 1;
    if (enabled == 2 && !m.disabled(5)) seen.insert(7);
  };
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_NE(map.status().message().find("slot 5 beside reference slot 0"), std::string::npos) << map.status().message();
}

TEST(Calibrate, ProbeErrorsStopTheCalibration) {
  class Failing final : public SmProbe {
   public:
    ProbeInfo info() const override { return {"u", "n", "d", 132, 128}; }
    Result<std::set<int>> sms_seen(const SlotMask&) override { return Status::unavailable("watchdog fired"); }
  } probe;
  auto map = calibrate(probe, CalibrateOptions{});
  ASSERT_FALSE(map.is_ok());
  EXPECT_EQ(map.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(map.status().message().find("watchdog fired"), std::string::npos);
}

TEST(Calibrate, RejectsBadOptionsAndDevices) {
  FakeProbe probe(FakeGpu::from_map(h100_slot_map()));
  CalibrateOptions opt;
  opt.slot_count = 129;
  EXPECT_EQ(calibrate(probe, opt).status().code(), StatusCode::kInvalidArgument);
  FakeGpu odd;
  odd.sm_count = 131;
  FakeProbe odd_probe(odd);
  EXPECT_EQ(calibrate(odd_probe, CalibrateOptions{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(probe.calls + odd_probe.calls, 0);
}

TEST(SlotGroups, H100GroupsOfNine) {
  const auto groups = slot_groups(h100_slot_map(), 9);
  ASSERT_EQ(groups.size(), 15U);  // ceil(128 / 9)
  const int live[] = {4, 8, 8, 8, 8, 8, 9, 9, 2, 2, 0};
  for (int g = 0; g < 11; ++g) EXPECT_EQ(groups[static_cast<std::size_t>(g)].live, live[g]) << g;
  EXPECT_EQ(groups[0].tpcs, (std::vector<int>{0, 8, 16, 24}));
  EXPECT_EQ(groups[7].first_slot, 63);
  EXPECT_EQ(groups[7].tpcs.front(), 7);
  EXPECT_EQ(groups[7].tpcs.back(), 61);
  EXPECT_TRUE(slot_groups(h100_slot_map(), 0).empty());
}

}  // namespace
}  // namespace lithos::gpu
