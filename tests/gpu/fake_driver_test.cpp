// The whole GPU path against the fake driver (fake_driver/fake_libcuda.cpp,
// loaded through $LITHOS_CUDA_LIBRARY, set by CTest): loader, descriptor
// hook, %smid probe, calibration in a child, cache, confinement checks, the
// per-launch watchdog, green contexts, the cluster probe and the topology.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "gpu/cuda_probe.hpp"
#include "gpu/green_context.hpp"
#include "gpu/topology_probe.hpp"
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

void set_compute_capability(int major, int minor) {
  auto f = reinterpret_cast<void (*)(int, int)>(::dlsym(api().handle, "lithos_fake_cuda_set_compute_capability"));
  ASSERT_NE(f, nullptr);
  f(major, minor);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::map<int, int> kH100MaxActiveClusters = {{2, 66}, {4, 30}, {8, 15}, {16, 7}};

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

// `lithos run` on a node of several GPUs: the maps of the devices beside
// the one asked for go into the same cache, so that a process whose first
// launch is on any of them finds its GPU's map there.
TEST(FakeDriver, OtherDevicesMapsAreCachedBesideTheFirst) {
  ASSERT_EQ(::setenv("FAKE_GPU_DEVICES", "3", 1), 0);
  CalibrateRunOptions opt;
  opt.cache_dir = temp_dir();
  auto first = calibrate_device(opt);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->others, "") << "not asked for";
  EXPECT_EQ(first->device_count, 3);
  opt.other_devices = true;
  auto all = calibrate_device(opt);
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_TRUE(all->from_cache);
  EXPECT_EQ(all->others, "1 calibrated; 2 calibrated");
  for (const char* uuid : {"GPU-10111213-1415-1617-1819-1a1b1c1d1e20", "GPU-10111213-1415-1617-1819-1a1b1c1d1e21"}) {
    auto m = slot_map_load(slot_map_cache_path(opt.cache_dir, uuid, first->map.driver_version));
    ASSERT_TRUE(m.is_ok()) << uuid << ": " << m.status().to_string();
    EXPECT_EQ(m->gpu_uuid, uuid);
    EXPECT_EQ(m->tpc_of_slot, first->map.tpc_of_slot);
  }
  opt.device = 2;  // from another device: the rest, cached now
  auto again = calibrate_device(opt);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->map.gpu_uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e21");
  EXPECT_EQ(again->others, "0 cached; 1 cached");
  ::unsetenv("FAKE_GPU_DEVICES");
  std::system(("rm -rf '" + opt.cache_dir + "'").c_str());
}

// Under MPS %smid is a virtual id (docs/gpu.md, "Calibration under MPS"):
// the fake numbers a client's SMs 0, 1, ... as the H100 did. Calibrating in
// such a context fails as it did there; the calibration child makes its
// context outside MPS and measures the real map, and leaves the caller's
// environment as it was.
TEST(FakeDriver, CalibrationMeasuresOutsideMps) {
  const std::string dir = temp_dir();
  const std::string pipe = dir + "/mps";
  ASSERT_EQ(std::system(("mkdir -p '" + pipe + "' && touch '" + pipe + "/control'").c_str()), 0);
  ASSERT_EQ(::setenv("CUDA_MPS_PIPE_DIRECTORY", pipe.c_str(), 1), 0);
  CalibrateRunOptions opt;
  opt.cache_dir = dir + "/cache";
  opt.measure_topology = false;
  auto inside = calibrate_device_in_process(opt);  // this process's context: an MPS client
  ASSERT_FALSE(inside.is_ok());
  EXPECT_NE(inside.status().message().find("two slots claim the same SMs"), std::string::npos)
      << inside.status().to_string();
  auto outside = calibrate_device(opt);
  ASSERT_TRUE(outside.is_ok()) << outside.status().to_string();
  EXPECT_FALSE(outside->from_cache);
  EXPECT_EQ(outside->map.tpc_of_slot, testing::h100_slot_map().tpc_of_slot);
  EXPECT_STREQ(std::getenv("CUDA_MPS_PIPE_DIRECTORY"), pipe.c_str());

  // A GPU in exclusive-process compute mode refuses a context outside the
  // running MPS server: the error says what to do.
  ASSERT_EQ(std::system(("touch '" + pipe + "/exclusive'").c_str()), 0);
  ASSERT_EQ(::setenv("FAKE_MPS_SERVER", pipe.c_str(), 1), 0);
  opt.force = true;
  auto refused = calibrate_device(opt);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("cuDevicePrimaryCtxRetain"), std::string::npos)
      << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("exclusive-process compute mode"), std::string::npos)
      << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("`lithos calibrate` once with MPS stopped"), std::string::npos)
      << refused.status().to_string();
  ::unsetenv("FAKE_MPS_SERVER");
  ::unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  std::system(("rm -rf '" + dir + "'").c_str());
}

// OutsideMps names an empty folder of its own as the MPS pipe folder while
// it lives, and removes it.
TEST(FakeDriver, OutsideMpsPointsAtAnEmptyFolderOfItsOwn) {
  ASSERT_EQ(::setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps", 1), 0);
  std::string named;
  {
    const OutsideMps outside;
    const char* v = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    ASSERT_NE(v, nullptr);
    named = v;
    EXPECT_EQ(named.rfind("/tmp/lithos-no-mps-", 0), 0U) << named;
    EXPECT_EQ(std::system(("test -d '" + named + "' && test -z \"$(ls -A '" + named + "')\"").c_str()), 0);
    const Status other = outside.explain(Status::internal("cuLaunchKernel: no"));
    EXPECT_EQ(other.message(), "cuLaunchKernel: no");
  }
  EXPECT_NE(std::system(("test -e '" + named + "'").c_str()), 0) << named << " is left";
  ::unsetenv("CUDA_MPS_PIPE_DIRECTORY");
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

TEST(FakeDriver, ClusterProbeFindsTheH100Topology) {
  auto probe = CudaClusterProbe::create(api(), 0);
  ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
  EXPECT_EQ((*probe)->info().sm_count, 132);
  EXPECT_EQ((*probe)->dynamic_smem_bytes(), 232448);  // the opt-in maximum: one block per SM
  for (const auto& [c, n] : kH100MaxActiveClusters) {
    auto fit = (*probe)->max_active_clusters(c);
    ASSERT_TRUE(fit.is_ok()) << fit.status().to_string();
    EXPECT_EQ(*fit, n) << c;
  }
  // One launch: every cluster on distinct SMs of one GPC of the fixture.
  const sched::Topology truth = testing::h100_topology();
  auto seen = (*probe)->clusters_seen(4, 30, 1000, true);
  ASSERT_TRUE(seen.is_ok()) << seen.status().to_string();
  ASSERT_EQ(seen->size(), 30U);
  for (const auto& cluster : *seen) {
    ASSERT_EQ(cluster.size(), 4U);
    EXPECT_EQ(std::set<int>(cluster.begin(), cluster.end()).size(), 4U);
    for (int sm : cluster) EXPECT_EQ(truth.gpc_of(sm / 2), truth.gpc_of(cluster.front() / 2));
  }
  const int before = fake_launches();
  TopologyStats stats;
  auto t = discover_topology(**probe, testing::h100_slot_map(), TopologyOptions{}, &stats);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(*t, truth);
  EXPECT_EQ(stats.launches, 48);
  EXPECT_EQ(fake_launches() - before, 48);
  EXPECT_EQ(stats.max_active_clusters, kH100MaxActiveClusters);
}

TEST(FakeDriver, CalibrateDeviceMeasuresAndCachesTheTopology) {
  CalibrateRunOptions opt;
  opt.cache_dir = temp_dir();
  auto first = calibrate_device(opt);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(first->map.topology, testing::h100_topology());
  EXPECT_TRUE(first->topology_error.empty()) << first->topology_error;
  EXPECT_EQ(first->topology_stats.launches, 48);
  EXPECT_EQ(first->topology_stats.max_active_clusters, kH100MaxActiveClusters);
  EXPECT_GT(first->topology_stats.seconds, 0.0);
  EXPECT_EQ(first->stats.launches, 257);  // the slot map's launches are counted apart
  const std::string text = read_file(first->cache_path);
  EXPECT_EQ(text.rfind("lithos-slot-map 2\n", 0), 0U);
  EXPECT_NE(text.find("\ngpc 0,8,16,24\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ngpc 65\nend\n"), std::string::npos) << text;
  auto second = calibrate_device(opt);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->map.topology, testing::h100_topology());
  EXPECT_EQ(second->topology_stats.launches, 0);
  std::system(("rm -rf '" + opt.cache_dir + "'").c_str());
}

TEST(FakeDriver, ACachedMapWithoutTopologyIsRecalibrated) {
  CalibrateRunOptions opt;
  opt.cache_dir = temp_dir();
  auto first = calibrate_device(opt);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  // What an older lithos wrote: format 1, no gpc lines.
  SlotMap old = first->map;
  old.topology = sched::Topology{};
  std::string v1 = slot_map_serialize(old);
  v1.replace(0, std::string("lithos-slot-map 2").size(), "lithos-slot-map 1");
  std::ofstream(first->cache_path) << v1;
  auto second = calibrate_device(opt);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_FALSE(second->from_cache);
  EXPECT_NE(second->note.find("no topology"), std::string::npos) << second->note;
  EXPECT_EQ(second->map.topology, testing::h100_topology());
  EXPECT_EQ(slot_map_load(first->cache_path)->topology, testing::h100_topology());
  std::system(("rm -rf '" + opt.cache_dir + "'").c_str());
}

TEST(FakeDriver, WithoutClustersTheTopologyStaysUnknownAndCalibrationSucceeds) {
  set_compute_capability(8, 0);
  auto probe = CudaClusterProbe::create(api(), 0);
  EXPECT_EQ(probe.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(probe.status().message().find("no thread-block clusters before sm_90"), std::string::npos)
      << probe.status().message();
  CalibrateRunOptions opt;
  opt.cache_dir = temp_dir();
  auto first = calibrate_device(opt);
  auto second = calibrate_device(opt);
  set_compute_capability(9, 0);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(first->map.live_tpcs(), 66);
  EXPECT_FALSE(first->map.topology.known());
  EXPECT_NE(first->topology_error.find("no thread-block clusters before sm_90"), std::string::npos)
      << first->topology_error;
  EXPECT_TRUE(first->save_error.empty());
  // Nothing better can be measured on this device: the cache is used.
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_TRUE(second->from_cache);
  EXPECT_TRUE(second->note.empty()) << second->note;
  std::system(("rm -rf '" + opt.cache_dir + "'").c_str());
}

// Descriptor callback of the test below: writes `mask` into every launch
// and records the cluster bytes of the last descriptor.
struct ClusterMaskHook {
  SlotMask mask;
  std::uint8_t cluster_x = 0;
};
void cluster_mask_hook(void* user, std::uint8_t* qmd) {
  auto* h = static_cast<ClusterMaskHook*>(user);
  h->cluster_x = qmd[268];
  (void)qmd_write_mask(qmd, qmd_detect(qmd), h->mask);
}

TEST(FakeDriver, AClusterLaunchWithoutRoomInOneGpcHangs) {
  // TPCs 0 and 8 share GPC 0 (4 SMs); TPCs 0 and 1 are in GPCs 0 and 1 (2
  // SMs each). Clusters of 4 run on the first set; on the second, clusters
  // of 2 run and clusters of 4 never finish, as on the H100.
  std::fflush(nullptr);
  auto r = run_in_child(
      [&]() -> Result<std::string> {
        static ClusterMaskHook hook;
        const SlotMap map = testing::h100_slot_map();
        auto probe = CudaClusterProbe::create(api(), 0, 0.2);
        if (!probe) return probe.status();
        LITHOS_RETURN_IF_ERROR(install_descriptor_callback(api().export_table_fn(), &cluster_mask_hook, &hook));
        std::string out;
        hook.mask = mask_for(map, sched::TpcSet::parse("0,8").value()).value();
        auto a = (*probe)->clusters_seen(4, 3, 0, false);
        if (!a) return a.status().with_context("0,8 x 4");
        out += "qmd268=" + std::to_string(hook.cluster_x) + ";distinct=";
        for (const auto& c : *a) out += std::to_string(std::set<int>(c.begin(), c.end()).size());
        out += ";tpcs=";
        hook.mask = mask_for(map, sched::TpcSet::parse("0,1").value()).value();
        auto b = (*probe)->clusters_seen(2, 4, 0, false);
        if (!b) return b.status().with_context("0,1 x 2");
        for (const auto& c : *b) out += std::to_string(c.front() / 2) + std::to_string(c.back() / 2) + ",";
        auto hung = (*probe)->clusters_seen(4, 1, 0, false);
        out += " | " + hung.status().to_string();
        out += (*probe)->hung() ? " | hung" : " | not hung";
        return out;
      },
      10, "cluster hang test");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // Clusters of 4 on SMs 0,1,16,17 (4 distinct SMs each); clusters of 2 on
  // TPC 0 or TPC 1 (never one SM of each); then the hang.
  EXPECT_EQ(r->rfind("qmd268=4;distinct=444;tpcs=", 0), 0U) << *r;
  const std::string tpcs = r->substr(r->find("tpcs=") + 5, 12);
  for (std::size_t i = 0; i + 3 <= tpcs.size(); i += 3) {
    EXPECT_TRUE(tpcs.substr(i, 3) == "00," || tpcs.substr(i, 3) == "11,") << *r;
  }
  EXPECT_NE(r->find("unavailable: the cluster launch did not finish"), std::string::npos) << *r;
  EXPECT_NE(r->find("| hung"), std::string::npos) << *r;
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
