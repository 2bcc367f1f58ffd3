// The whole GPU path against the fake driver (fake_driver/fake_libcuda.cpp,
// loaded through $LITHOS_CUDA_LIBRARY, set by CTest): loader, descriptor
// hook, %smid probe, calibration in a child, cache, confinement checks, the
// per-launch watchdog, green contexts.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpu/cuda_probe.hpp"
#include "gpu/green_context.hpp"
#include "gpu/watchdog.hpp"
#include "h100_fixture.hpp"

namespace lithos::gpu {
namespace {

const DriverApi& api() {
  static const Result<DriverApi> a = load_driver_api();
  if (!a.is_ok()) {
    ADD_FAILURE() << "fake driver did not load: " << a.status().to_string() << " (LITHOS_CUDA_LIBRARY="
                  << (std::getenv("LITHOS_CUDA_LIBRARY") ? std::getenv("LITHOS_CUDA_LIBRARY") : "") << ")";
    std::abort();
  }
  return *a;
}

int fake_launches() {
  auto f = reinterpret_cast<int (*)()>(::dlsym(api().handle, "lithos_fake_cuda_launches"));
  return f != nullptr ? f() : -1;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/lithos-fake-driver-XXXXXX";
  return ::mkdtemp(tmpl) != nullptr ? std::string(tmpl) : std::string("/tmp");
}

TEST(FakeDriver, LoadsAndDescribesTheDevice) {
  auto info = device_info(api(), 0);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
  EXPECT_EQ(info->sm_count, 132);
  EXPECT_EQ(info->cc_major, 9);
  EXPECT_TRUE(api().has_green_contexts());
  EXPECT_EQ(device_info(api(), 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(FakeDriver, ProbeAndCalibrationReproduceTheMap) {
  auto probe = CudaProbe::create(api(), 0, SmidLaunch{});
  ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
  EXPECT_EQ((*probe)->qmd_version(), QmdVersion::kV04_00);
  EXPECT_EQ((*probe)->params_size(), 88U);
  EXPECT_EQ((*probe)->info().mask_slots, 128);
  const int before = fake_launches();
  CalibrateStats stats;
  auto map = calibrate(**probe, CalibrateOptions{}, &stats);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  EXPECT_EQ(map->tpc_of_slot, testing::h100_slot_map().tpc_of_slot);
  EXPECT_EQ(fake_launches() - before, stats.launches);
  EXPECT_EQ(stats.bootstrap_masks, 1);
}

TEST(FakeDriver, CalibrateDeviceCachesPerUuidAndDriver) {
  CalibrateRunOptions opt;
  opt.cache_dir = temp_dir();
  opt.timeout_s = 30;
  auto first = calibrate_device(opt);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(first->qmd_version, "V04_00");
  EXPECT_TRUE(first->qmd_tested);
  EXPECT_EQ(first->params_size, 88U);
  EXPECT_TRUE(first->save_error.empty()) << first->save_error;
  EXPECT_EQ(first->stats.launches, 257);
  EXPECT_EQ(first->map.live_tpcs(), 66);
  auto second = calibrate_device(opt);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->map, first->map);
  EXPECT_EQ(second->cache_path, first->cache_path);
  opt.force = true;
  auto third = calibrate_device(opt);
  ASSERT_TRUE(third.is_ok());
  EXPECT_FALSE(third->from_cache);
  std::system(("rm -rf '" + opt.cache_dir + "'").c_str());
}

TEST(FakeDriver, AMalformedCacheIsRecalibratedAndReplaced) {
  CalibrateRunOptions opt;
  opt.cache_dir = temp_dir();
  auto first = calibrate_device(opt);
  ASSERT_TRUE(first.is_ok());
  ASSERT_EQ(std::system(("echo garbage > '" + first->cache_path + "'").c_str()), 0);
  auto second = calibrate_device(opt);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_FALSE(second->from_cache);
  EXPECT_NE(second->note.find("unusable"), std::string::npos) << second->note;
  EXPECT_TRUE(slot_map_load(first->cache_path).is_ok());
  std::system(("rm -rf '" + opt.cache_dir + "'").c_str());
}

TEST(FakeDriver, MaskConfinementIsExact) {
  const SlotMap map = testing::h100_slot_map();
  for (const char* text : {"0", "0-7", "62-65", "8-15,40-47", "0-65"}) {
    auto c = check_mask_confinement(api(), 0, map, sched::TpcSet::parse(text).value(), SmidLaunch{});
    ASSERT_TRUE(c.is_ok()) << text << ": " << c.status().to_string();
    EXPECT_TRUE(c->exact()) << text;
    EXPECT_EQ(c->backend, "descriptor-hook");
  }
  // Refused before any launch.
  const int before = fake_launches();
  auto refused = check_mask_confinement(api(), 0, map, sched::TpcSet::parse("66").value(), SmidLaunch{});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fake_launches(), before);
}

TEST(FakeDriver, AHangingLaunchIsReportedNotWaitedOn) {
  // A wrong map that puts TPC 0 behind dead slot 4: the launch enables only
  // a dead slot and, like on the GPU, never finishes.
  SlotMap wrong = testing::h100_slot_map();
  wrong.tpc_of_slot[0] = -1;
  wrong.tpc_of_slot[4] = 0;
  SmidLaunch launch;
  launch.timeout_s = 0.2;
  std::fflush(nullptr);
  auto r = run_in_child(
      [&]() -> Result<std::string> {
        auto c = check_mask_confinement(api(), 0, wrong, sched::TpcSet::parse("0").value(), launch);
        if (!c) return c.status();
        return std::string("finished?");
      },
      10, "hang test");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("did not finish"), std::string::npos) << r.status().message();
}

TEST(FakeDriver, GreenContextsConfineToTheirTpcs) {
  auto cat = GreenTpcCatalog::build(api(), 0);
  ASSERT_TRUE(cat.is_ok()) << cat.status().to_string();
  EXPECT_EQ(cat->group_count(), 66);
  EXPECT_EQ(cat->tpcs(), sched::TpcSet::first(66));
  EXPECT_EQ(cat->tpc_of_group(1), 7);  // the fake deals groups out of TPC order
  for (const char* text : {"0", "0-7", "62-65", "0-65"}) {
    auto c = check_green_confinement(*cat, sched::TpcSet::parse(text).value(), SmidLaunch{});
    ASSERT_TRUE(c.is_ok()) << text << ": " << c.status().to_string();
    EXPECT_TRUE(c->exact()) << text;
    EXPECT_GE(c->setup_ms, 0.0);
  }
  EXPECT_EQ(GreenPartition::create(*cat, sched::TpcSet{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GreenPartition::create(*cat, sched::TpcSet::parse("70").value()).status().code(),
            StatusCode::kInvalidArgument);
  auto part = GreenPartition::create(*cat, sched::TpcSet::parse("3-5").value());
  ASSERT_TRUE(part.is_ok());
  auto stream = (*part)->create_stream();
  ASSERT_TRUE(stream.is_ok());
  EXPECT_STREQ(tpc_backend_name(TpcBackend::kGreenContext), "green-context");
  EXPECT_STREQ(tpc_backend_name(TpcBackend::kDescriptorHook), "descriptor-hook");
  EXPECT_STREQ(tpc_backend_name(TpcBackend::kNone), "none");
}

}  // namespace
}  // namespace lithos::gpu
