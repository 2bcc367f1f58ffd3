// liblithos.so preloaded into this test program, over the FAKE driver
// (fake_cuda.cpp, first on LD_LIBRARY_PATH). CTest runs one suite per
// process, each with its own LITHOS_* environment (CMakeLists.txt):
//   Passthrough     no mask asked for
//   Masked          LITHOS_TPC_SET=1-2 with the fake GPU's slot map
//   Fault           ... plus LITHOS_TEST_FAULT=launch (an internal step fails)
//   NoBackend       ... but the fake driver has no descriptor callback table
//   NoSlotMap       LITHOS_TPCS=2 without a slot map
//   OtherGpu        a slot map of another GPU
//   MultiGpu        two devices: the map is checked per launch
//   FollowsFirstGpu the first launch on device 1: its map from the cache
//   FirstGpuUncalibrated  ... with no map of device 1: unmasked
//   EveryGpu        launches on both devices: the set on each, its own map
// The program never links libcuda: it reaches the driver through dlopen,
// dlsym and cuGetProcAddress, like PyTorch, and reads the fake's records and
// lithos's statistics through their C functions.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

struct FakeCall {
  char name[64];
  std::uintptr_t args[12];
  int nargs;
};

// The fake driver's test functions.
struct Fake {
  void* handle = nullptr;
  const FakeCall* (*last_call)() = nullptr;
  const std::uint8_t* (*last_qmd)() = nullptr;
  void (*set_result)(int) = nullptr;
  void* (*address_of)(const char*) = nullptr;
  unsigned long (*descriptors)() = nullptr;
  int (*subscribers)() = nullptr;

  static Fake& get() {
    static Fake f = [] {
      Fake x;
      x.handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
      if (x.handle == nullptr) return x;
      x.last_call = reinterpret_cast<const FakeCall* (*)()>(::dlsym(x.handle, "fake_last_call"));
      x.last_qmd = reinterpret_cast<const std::uint8_t* (*)()>(::dlsym(x.handle, "fake_last_qmd"));
      x.set_result = reinterpret_cast<void (*)(int)>(::dlsym(x.handle, "fake_set_result"));
      x.address_of = reinterpret_cast<void* (*)(const char*)>(::dlsym(x.handle, "fake_address_of"));
      x.descriptors = reinterpret_cast<unsigned long (*)()>(::dlsym(x.handle, "fake_descriptors"));
      x.subscribers = reinterpret_cast<int (*)()>(::dlsym(x.handle, "fake_subscribers"));
      return x;
    }();
    return f;
  }
};

// A driver entry point as the program would get it from dlsym on the
// driver's handle.
template <class Fn>
Fn driver_fn(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(Fake::get().handle, name));
}

bool from_lithos(const void* p) {
  Dl_info info{};
  return p != nullptr && ::dladdr(p, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "liblithos") != nullptr;
}

nlohmann::json stats() {
  auto fn = reinterpret_cast<int (*)(char*, size_t)>(::dlsym(RTLD_DEFAULT, "lithos_stats_json"));
  if (fn == nullptr) return {};
  std::vector<char> buf(1 << 16);
  fn(buf.data(), buf.size());
  return nlohmann::json::parse(buf.data());
}

std::uint64_t stat(const char* key) { return stats().value(key, std::uint64_t{0}); }
std::uint64_t calls(const char* hook) {
  const auto s = stats();
  return s.contains("calls") ? s["calls"].value(hook, std::uint64_t{0}) : 0;
}
std::uint64_t not_applied(const char* reason) { return stats()["not_applied"].value(reason, std::uint64_t{0}); }

int (*api_set_stream)(CUstream, const std::uint64_t*) = nullptr;
int (*api_clear_stream)(CUstream) = nullptr;
int (*api_set_process)(const std::uint64_t*) = nullptr;
int (*api_live)(std::uint64_t*) = nullptr;

void load_api() {
  api_set_stream =
      reinterpret_cast<int (*)(CUstream, const std::uint64_t*)>(::dlsym(RTLD_DEFAULT, "lithos_stream_set_tpcs"));
  api_clear_stream = reinterpret_cast<int (*)(CUstream)>(::dlsym(RTLD_DEFAULT, "lithos_stream_clear_tpcs"));
  api_set_process = reinterpret_cast<int (*)(const std::uint64_t*)>(::dlsym(RTLD_DEFAULT, "lithos_set_process_tpcs"));
  api_live = reinterpret_cast<int (*)(std::uint64_t*)>(::dlsym(RTLD_DEFAULT, "lithos_live_tpcs"));
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using CoopFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**);
using GpaV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GpaV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
using InstantiateFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);
using StreamDestroyFn = CUresult (*)(CUstream);

CUresult launch_on(CUstream s, const char* which = "cuLaunchKernel") {
  return driver_fn<LaunchFn>(which)(reinterpret_cast<CUfunction>(0x10), 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr);
}

// The four mask words and the valid bit of the last descriptor the fake built
// on this thread.
struct QmdMask {
  std::uint32_t words[4];
  bool valid;
};
QmdMask last_mask() {
  QmdMask m{};
  const std::uint8_t* q = Fake::get().last_qmd();
  if (q == nullptr) return m;
  std::memcpy(m.words, q + 304, sizeof m.words);
  std::uint32_t dw0 = 0;
  std::memcpy(&dw0, q, sizeof dw0);
  m.valid = (dw0 & 0x80000000U) != 0;
  return m;
}

// The fake GPU's slot map (data/fake-slot-map.txt): slot 0 -> TPC 0,
// 2 -> 1, 3 -> 2, 5 -> 3; slots 1, 4, 6, 7 dead; 8..127 not probed.
// The disable mask of a TPC set enables exactly the set's slots.
QmdMask expected_for(std::initializer_list<int> slots) {
  QmdMask m{{0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU}, true};
  for (int s : slots) m.words[s / 32] &= ~(1U << (s % 32));
  return m;
}

void expect_mask(const QmdMask& got, const QmdMask& want, const char* what) {
  EXPECT_EQ(got.valid, want.valid) << what;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.words[i], want.words[i]) << what << " word " << i;
}

class PreloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Fake::get().handle, nullptr) << "the fake libcuda.so.1 must be first on LD_LIBRARY_PATH";
    ASSERT_NE(::dlsym(RTLD_DEFAULT, "lithos_version"), nullptr) << "liblithos.so must be in LD_PRELOAD";
    load_api();
    Fake::get().set_result(CUDA_SUCCESS);
  }
};

// ---------------------------------------------------------------------------
using Passthrough = PreloadTest;

TEST_F(Passthrough, DlsymOnTheDriverHandleReturnsHooksForHookedNames) {
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuGraphLaunch",
                           "cuGetProcAddress", "cuGetProcAddress_v2", "cuGraphInstantiateWithFlags"}) {
    void* p = ::dlsym(Fake::get().handle, name);
    EXPECT_TRUE(from_lithos(p)) << name;
    EXPECT_NE(p, Fake::get().address_of(name)) << name;
    EXPECT_EQ(p, ::dlsym(RTLD_DEFAULT, name)) << name << ": the same hook as the exported symbol";
  }
  EXPECT_GE(stat("dlsym_hooked"), 7U);
}

TEST_F(Passthrough, DlsymLeavesOtherNamesAlone) {
  EXPECT_EQ(::dlsym(Fake::get().handle, "cuMemAlloc_v2"), Fake::get().address_of("cuMemAlloc_v2"));
  EXPECT_FALSE(from_lithos(::dlsym(Fake::get().handle, "fake_last_call")));
  ::dlerror();
  EXPECT_EQ(::dlsym(Fake::get().handle, "cuNoSuchFunction"), nullptr);
  EXPECT_NE(::dlerror(), nullptr) << "dlerror must report the failed lookup as without lithos";
  // A hooked name looked up in a library that is not the driver keeps that
  // library's answer (here: none).
  void* self = ::dlopen(nullptr, RTLD_NOW);
  EXPECT_EQ(::dlsym(self, "strlen"), ::dlsym(RTLD_DEFAULT, "strlen"));
}

TEST_F(Passthrough, DlsymRtldNextAnswersForTheRealCaller) {
  // Next after this executable: liblithos.so (preloaded), whose hook comes
  // before the fake driver (opened RTLD_GLOBAL). Were the caller taken to be
  // liblithos.so itself, the answer would be the fake's function.
  void* p = ::dlsym(RTLD_NEXT, "cuLaunchKernel");
  EXPECT_TRUE(from_lithos(p));
  EXPECT_EQ(::dlsym(RTLD_NEXT, "fake_last_call"), ::dlsym(Fake::get().handle, "fake_last_call"));
  EXPECT_EQ(::dlsym(RTLD_NEXT, "lithos_no_such_symbol"), nullptr);
}

TEST_F(Passthrough, GetProcAddressHonoursVersionAndFlags) {
  auto gpa = driver_fn<GpaV2Fn>("cuGetProcAddress_v2");
  ASSERT_TRUE(from_lithos(reinterpret_cast<void*>(gpa)));
  struct Case {
    const char* symbol;
    int version;
    cuuint64_t flags;
    const char* hook;
  };
  const Case cases[] = {
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuLaunchKernel"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernelEx_ptsz"},
      {"cuGraphLaunch", 13000, CU_GET_PROC_ADDRESS_DEFAULT, "cuGraphLaunch"},
      {"cuGraphInstantiate", 11000, CU_GET_PROC_ADDRESS_DEFAULT, "cuGraphInstantiate"},
      {"cuGraphInstantiate", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuGraphInstantiateWithFlags"},
      {"cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT, "cuGetProcAddress"},
  };
  for (const Case& c : cases) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    ASSERT_EQ(gpa(c.symbol, &p, c.version, c.flags, &st), CUDA_SUCCESS) << c.symbol;
    EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS) << c.symbol;
    EXPECT_EQ(p, ::dlsym(RTLD_DEFAULT, c.hook)) << c.symbol << " v" << c.version << " flags " << c.flags;
  }
  EXPECT_GE(stat("procaddress_hooked"), 9U);
}

TEST_F(Passthrough, GetProcAddressForwardsItsArgumentsExactly) {
  auto gpa = driver_fn<GpaV2Fn>("cuGetProcAddress_v2");
  const char* symbol = "cuMemAlloc";
  void* p = nullptr;
  CUdriverProcAddressQueryResult st{};
  ASSERT_EQ(gpa(symbol, &p, 12345, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st), CUDA_SUCCESS);
  const FakeCall* c = Fake::get().last_call();
  EXPECT_STREQ(c->name, "cuGetProcAddress_v2");
  EXPECT_EQ(c->args[0], reinterpret_cast<std::uintptr_t>(symbol));
  EXPECT_EQ(c->args[1], reinterpret_cast<std::uintptr_t>(&p));
  EXPECT_EQ(c->args[2], 12345U);
  EXPECT_EQ(c->args[3], static_cast<std::uintptr_t>(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  EXPECT_EQ(c->args[4], reinterpret_cast<std::uintptr_t>(&st));
  // Not hooked: the driver's own pointer, untouched.
  EXPECT_EQ(p, Fake::get().address_of("cuMemAlloc_v2"));
}

TEST_F(Passthrough, GetProcAddressLeavesFailuresAndUnknownPointersAlone) {
  auto gpa = driver_fn<GpaV2Fn>("cuGetProcAddress_v2");
  void* p = reinterpret_cast<void*>(0x1);
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(gpa("cuFakeMissingThing", &p, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // The fake hands out an internal (unexported) entry point for this hooked
  // name: lithos cannot tell which variant it is, returns it untouched and
  // counts it.
  const auto before = stat("procaddress_unrecognised");
  ASSERT_EQ(gpa("cuLaunchCooperativeKernel", &p, 12000, 0, &st), CUDA_SUCCESS);
  EXPECT_FALSE(from_lithos(p));
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(stat("procaddress_unrecognised"), before + 1);
}

TEST_F(Passthrough, GetProcAddressV1IsHookedToo) {
  auto gpa1 = driver_fn<GpaV1Fn>("cuGetProcAddress");
  ASSERT_TRUE(from_lithos(reinterpret_cast<void*>(gpa1)));
  void* p = nullptr;
  ASSERT_EQ(gpa1("cuLaunchKernel", &p, 11030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), CUDA_SUCCESS);
  EXPECT_EQ(p, ::dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"));
}

TEST_F(Passthrough, LaunchArgumentsAndResultsPassThroughUnchanged) {
  int params_storage = 0;
  void* params[] = {&params_storage};
  void* extra[] = {nullptr};
  const auto stream = reinterpret_cast<CUstream>(0x99);
  Fake::get().set_result(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  for (const char* which : {"cuLaunchKernel", "cuLaunchKernel_ptsz"}) {
    auto fn = driver_fn<LaunchFn>(which);
    EXPECT_EQ(fn(reinterpret_cast<CUfunction>(0x1234), 1, 2, 3, 4, 5, 6, 7, stream, params, extra),
              CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    const FakeCall* c = Fake::get().last_call();
    EXPECT_STREQ(c->name, which);
    const std::uintptr_t want[] = {0x1234,
                                   1,
                                   2,
                                   3,
                                   4,
                                   5,
                                   6,
                                   7,
                                   0x99,
                                   reinterpret_cast<std::uintptr_t>(params),
                                   reinterpret_cast<std::uintptr_t>(extra)};
    ASSERT_EQ(c->nargs, 11);
    for (int i = 0; i < 11; ++i) EXPECT_EQ(c->args[i], want[i]) << which << " argument " << i;
  }
  CUlaunchConfig cfg{};
  cfg.hStream = stream;
  Fake::get().set_result(CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(driver_fn<LaunchExFn>("cuLaunchKernelEx")(&cfg, reinterpret_cast<CUfunction>(0x55), params, extra),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_STREQ(Fake::get().last_call()->name, "cuLaunchKernelEx");
  EXPECT_EQ(Fake::get().last_call()->args[0], reinterpret_cast<std::uintptr_t>(&cfg));
  // A null configuration reaches the driver as is (it reports the error).
  EXPECT_EQ(driver_fn<LaunchExFn>("cuLaunchKernelEx")(nullptr, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Fake::get().last_call()->args[0], 0U);

  Fake::get().set_result(CUDA_SUCCESS);
  EXPECT_EQ(driver_fn<CoopFn>("cuLaunchCooperativeKernel")(reinterpret_cast<CUfunction>(0x77), 8, 1, 1, 64, 1, 1, 0,
                                                           stream, params),
            CUDA_SUCCESS);
  EXPECT_STREQ(Fake::get().last_call()->name, "cuLaunchCooperativeKernel");
  EXPECT_EQ(Fake::get().last_call()->args[0], 0x77U);

  CUgraphExec exec = nullptr;
  const auto graph = reinterpret_cast<CUgraph>(0x6600);
  ASSERT_EQ(driver_fn<InstantiateFn>("cuGraphInstantiateWithFlags")(&exec, graph, 4ULL), CUDA_SUCCESS);
  EXPECT_EQ(Fake::get().last_call()->args[1], 0x6600U);
  EXPECT_EQ(Fake::get().last_call()->args[2], 4U);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(driver_fn<GraphLaunchFn>("cuGraphLaunch")(exec, stream), CUDA_SUCCESS);
  EXPECT_EQ(Fake::get().last_call()->args[0], reinterpret_cast<std::uintptr_t>(exec));
  EXPECT_EQ(driver_fn<GraphLaunchFn>("cuGraphLaunch")(reinterpret_cast<CUgraphExec>(0x1), stream),
            CUDA_ERROR_INVALID_HANDLE);

  CUfunction f = nullptr;
  auto get_function = driver_fn<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction");
  EXPECT_EQ(get_function(&f, reinterpret_cast<CUmodule>(0x42), "my_kernel"), CUDA_SUCCESS);
  EXPECT_EQ(f, reinterpret_cast<CUfunction>(0xf00));
  EXPECT_EQ(Fake::get().last_call()->args[1], 0x42U);

  Fake::get().set_result(CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(driver_fn<StreamDestroyFn>("cuStreamDestroy_v2")(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Fake::get().last_call()->args[0], 0x99U);
}

TEST_F(Passthrough, MissingDriverFunctionReturnsAnErrorInsteadOfCallingNull) {
  // The fake exports no cuLaunchCooperativeKernel_ptsz and no cuLaunchGridAsync.
  auto coop_ptsz = reinterpret_cast<CoopFn>(::dlsym(RTLD_DEFAULT, "cuLaunchCooperativeKernel_ptsz"));
  ASSERT_TRUE(from_lithos(reinterpret_cast<void*>(coop_ptsz)));
  const auto before = Fake::get().last_call()->name;
  (void)before;
  EXPECT_EQ(coop_ptsz(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr), CUDA_ERROR_NOT_FOUND);
  auto grid =
      reinterpret_cast<CUresult (*)(CUfunction, int, int, CUstream)>(::dlsym(RTLD_DEFAULT, "cuLaunchGridAsync"));
  EXPECT_EQ(grid(nullptr, 1, 1, nullptr), CUDA_ERROR_NOT_FOUND);
  // ...and the driver's dlsym answer for it stays "not there".
  EXPECT_EQ(::dlsym(Fake::get().handle, "cuLaunchCooperativeKernel_ptsz"), nullptr);
}

TEST_F(Passthrough, CountsLaunchesPerPathFromManyThreads) {
  const auto k0 = calls("cuLaunchKernel");
  const auto p0 = calls("cuLaunchKernel_ptsz");
  const auto total0 = stat("kernel_launches");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 250; ++i) launch_on(nullptr, t % 2 == 0 ? "cuLaunchKernel" : "cuLaunchKernel_ptsz");
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(calls("cuLaunchKernel"), k0 + 500);
  EXPECT_EQ(calls("cuLaunchKernel_ptsz"), p0 + 500);
  EXPECT_EQ(stat("kernel_launches"), total0 + 1000);
  const auto s = stats();
  EXPECT_GE(s["paths"].value("launch", 0U), 500U);
  EXPECT_GE(s["paths"].value("launch_ptsz", 0U), 500U);
}

TEST_F(Passthrough, NoMaskIsWrittenWhenNoneIsAskedFor) {
  const auto applied = stat("masks_applied");
  ASSERT_EQ(launch_on(reinterpret_cast<CUstream>(0x5)), CUDA_SUCCESS);
  const QmdMask m = last_mask();
  EXPECT_FALSE(m.valid);
  EXPECT_EQ(m.words[0], 0U);
  EXPECT_EQ(stat("masks_applied"), applied);
  // No mask asked for: the descriptor callback is not even subscribed (the
  // driver takes one subscriber, which CUPTI tools need).
  EXPECT_EQ(stats().value("backend", ""), "descriptor (idle: no mask asked for)");
  EXPECT_EQ(Fake::get().subscribers(), 0);
  EXPECT_EQ(stats()["descriptors"].value("in_launch", 0U), 0U);
  // Without a slot map the stream API cannot make masks.
  // It says so once, with the way to a map.
  const std::uint64_t words[2] = {1, 0};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(api_set_stream(reinterpret_cast<CUstream>(0x5), words), -2);
  EXPECT_EQ(api_set_process(words), -2);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("lithos calibrate"), std::string::npos) << said;
  EXPECT_EQ(said.find("LITHOS_ENOSLOTMAP"), said.rfind("LITHOS_ENOSLOTMAP")) << "once: " << said;
}

// ---------------------------------------------------------------------------
using Masked = PreloadTest;

TEST_F(Masked, ProcessMaskIsWrittenIntoEveryLaunchPath) {
  const QmdMask want = expected_for({2, 3});  // TPCs 1-2 -> slots 2, 3
  ASSERT_EQ(launch_on(reinterpret_cast<CUstream>(0x5)), CUDA_SUCCESS);
  expect_mask(last_mask(), want, "cuLaunchKernel");
  ASSERT_EQ(launch_on(nullptr, "cuLaunchKernel_ptsz"), CUDA_SUCCESS);
  expect_mask(last_mask(), want, "cuLaunchKernel_ptsz");
  CUlaunchConfig cfg{};
  ASSERT_EQ(driver_fn<LaunchExFn>("cuLaunchKernelEx_ptsz")(&cfg, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), want, "cuLaunchKernelEx_ptsz");
  // A one-block cooperative grid fits the set (FAKE_OCCUPANCY=8 blocks per SM).
  ASSERT_EQ(driver_fn<CoopFn>("cuLaunchCooperativeKernel")(reinterpret_cast<CUfunction>(0x10), 1, 1, 1, 1, 1, 1, 0,
                                                           nullptr, nullptr),
            CUDA_SUCCESS);
  expect_mask(last_mask(), want, "cuLaunchCooperativeKernel");
  // Through cuGetProcAddress, as the CUDA runtime and PyTorch get it.
  void* p = nullptr;
  ASSERT_EQ(driver_fn<GpaV2Fn>("cuGetProcAddress_v2")("cuLaunchKernel", &p, 12000,
                                                      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(reinterpret_cast<LaunchFn>(p)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), want, "cuGetProcAddress(cuLaunchKernel, per-thread)");
  EXPECT_GE(stat("masks_applied"), 5U);
}

// Without a measured topology (this slot map has no gpc lines) a cluster
// launch can only be known safe on the whole GPU.
TEST_F(Masked, ClusterLaunchesRunOnTheWholeGpuWithoutATopology) {
  const auto before = stats()["safe"];
  CUlaunchAttribute at{};
  at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at.value.clusterDim.x = 2;
  at.value.clusterDim.y = at.value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = 4;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  ASSERT_EQ(driver_fn<LaunchExFn>("cuLaunchKernelEx")(&cfg, reinterpret_cast<CUfunction>(0x10), nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  const auto after = stats()["safe"];
  EXPECT_EQ(after.value("whole_by_rule", 0U), before.value("whole_by_rule", 0U) + 1);
}

TEST_F(Masked, LiveTpcsComeFromTheSlotMap) {
  std::uint64_t words[2] = {0, 0};
  EXPECT_EQ(api_live(words), 4);
  EXPECT_EQ(words[0], 0xFU);
  EXPECT_EQ(words[1], 0U);
}

TEST_F(Masked, StreamMaskOverridesTheProcessMask) {
  const auto s = reinterpret_cast<CUstream>(0x777);
  const auto other = reinterpret_cast<CUstream>(0x778);
  const std::uint64_t tpc3[2] = {1U << 3, 0};
  ASSERT_EQ(api_set_stream(s, tpc3), 0);
  launch_on(s);
  expect_mask(last_mask(), expected_for({5}), "stream with its own set");
  launch_on(other);
  expect_mask(last_mask(), expected_for({2, 3}), "another stream: the process set");
  CUlaunchConfig cfg{};
  cfg.hStream = s;
  driver_fn<LaunchExFn>("cuLaunchKernelEx")(&cfg, nullptr, nullptr, nullptr);
  expect_mask(last_mask(), expected_for({5}), "cuLaunchKernelEx on the stream");
  ASSERT_EQ(api_clear_stream(s), 0);
  launch_on(s);
  expect_mask(last_mask(), expected_for({2, 3}), "after clearing");
}

TEST_F(Masked, LegacyAndPerThreadDefaultStreamsAreDistinct) {
  const std::uint64_t tpc0[2] = {1U << 0, 0};
  const std::uint64_t tpc3[2] = {1U << 3, 0};
  ASSERT_EQ(api_set_stream(CU_STREAM_PER_THREAD, tpc0), 0);
  launch_on(nullptr, "cuLaunchKernel_ptsz");
  expect_mask(last_mask(), expected_for({0}), "null stream of a _ptsz launch");
  launch_on(CU_STREAM_PER_THREAD, "cuLaunchKernel");
  expect_mask(last_mask(), expected_for({0}), "CU_STREAM_PER_THREAD");
  launch_on(nullptr, "cuLaunchKernel");
  expect_mask(last_mask(), expected_for({2, 3}), "null stream of a legacy launch: the process set");
  ASSERT_EQ(api_set_stream(nullptr, tpc3), 0);
  launch_on(nullptr, "cuLaunchKernel");
  expect_mask(last_mask(), expected_for({5}), "legacy default stream");
  launch_on(CU_STREAM_LEGACY, "cuLaunchKernel_ptsz");
  expect_mask(last_mask(), expected_for({5}), "CU_STREAM_LEGACY named in a _ptsz launch");
  launch_on(nullptr, "cuLaunchKernel_ptsz");
  expect_mask(last_mask(), expected_for({0}), "per-thread default stream unchanged");
  api_clear_stream(nullptr);
  api_clear_stream(CU_STREAM_PER_THREAD);
}

TEST_F(Masked, DestroyedStreamForgetsItsMask) {
  const auto s = reinterpret_cast<CUstream>(0x9990);
  const std::uint64_t tpc0[2] = {1, 0};
  ASSERT_EQ(api_set_stream(s, tpc0), 0);
  driver_fn<StreamDestroyFn>("cuStreamDestroy_v2")(s);
  launch_on(s);  // a new stream reusing the handle
  expect_mask(last_mask(), expected_for({2, 3}), "reused handle");
}

TEST_F(Masked, SetsWithoutLiveTpcsAreRefusedBeforeAnyLaunch) {
  const auto s = reinterpret_cast<CUstream>(0x4242);
  const std::uint64_t empty[2] = {0, 0};
  const std::uint64_t dead[2] = {1U << 7, 0};  // no slot controls TPC 7
  const std::uint64_t high[2] = {0, 1U << 5};  // TPC 69
  const std::uint64_t mixed[2] = {(1U << 3) | (1U << 6), 0};
  EXPECT_EQ(api_set_stream(s, empty), -1);
  EXPECT_EQ(api_set_stream(s, dead), -1);
  EXPECT_EQ(api_set_stream(s, high), -1);
  EXPECT_EQ(api_set_stream(s, mixed), -1);
  EXPECT_EQ(api_set_stream(s, nullptr), -1);
  EXPECT_EQ(api_set_process(empty), -1);
  launch_on(s);
  expect_mask(last_mask(), expected_for({2, 3}), "the refused sets changed nothing");
}

TEST_F(Masked, ProcessMaskCanBeReplacedAndCleared) {
  const std::uint64_t tpc0[2] = {1, 0};
  ASSERT_EQ(api_set_process(tpc0), 0);
  launch_on(nullptr);
  expect_mask(last_mask(), expected_for({0}), "new process set");
  ASSERT_EQ(api_set_process(nullptr), 0);
  launch_on(nullptr);
  EXPECT_FALSE(last_mask().valid) << "whole GPU: no mask written";
  const std::uint64_t back[2] = {0x6, 0};
  ASSERT_EQ(api_set_process(back), 0);
  launch_on(nullptr);
  expect_mask(last_mask(), expected_for({2, 3}), "restored");
}

TEST_F(Masked, GraphKeepsTheMaskItsDescriptorsWereBuiltWith) {
  CUgraphExec exec = nullptr;
  ASSERT_EQ(driver_fn<InstantiateFn>("cuGraphInstantiateWithFlags")(&exec, reinterpret_cast<CUgraph>(0x1), 0),
            CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "descriptors built at instantiation");
  const auto stale0 = stat("graph_stale");
  const std::uint64_t tpc0[2] = {1, 0};
  ASSERT_EQ(api_set_process(tpc0), 0);
  ASSERT_EQ(driver_fn<GraphLaunchFn>("cuGraphLaunch")(exec, nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "replay after the set changed: the old mask");
  EXPECT_EQ(stat("graph_stale"), stale0 + 1);
  // A new instantiation takes the new set.
  CUgraphExec exec2 = nullptr;
  ASSERT_EQ(driver_fn<InstantiateFn>("cuGraphInstantiateWithFlags")(&exec2, reinterpret_cast<CUgraph>(0x1), 0),
            CUDA_SUCCESS);
  ASSERT_EQ(driver_fn<GraphLaunchFn>("cuGraphLaunch_ptsz")(exec2, nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({0}), "new exec");
  EXPECT_EQ(stat("graph_stale"), stale0 + 1) << "the new exec matches the wanted set";
  auto destroy = driver_fn<CUresult (*)(CUgraphExec)>("cuGraphExecDestroy");
  EXPECT_EQ(destroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(destroy(exec2), CUDA_SUCCESS);
  const std::uint64_t back[2] = {0x6, 0};
  ASSERT_EQ(api_set_process(back), 0);
  EXPECT_GE(stats()["descriptors"].value("in_graph", 0U), 2U);
}

TEST_F(Masked, UnknownDescriptorLayoutIsRefused) {
  const auto refused = not_applied("unknown_descriptor_layout");
  ::setenv("FAKE_QMD_VERSION", "0x99", 1);
  launch_on(nullptr);
  ::unsetenv("FAKE_QMD_VERSION");
  const QmdMask m = last_mask();
  EXPECT_FALSE(m.valid);
  EXPECT_EQ(m.words[0], 0U);
  EXPECT_EQ(not_applied("unknown_descriptor_layout"), refused + 1);
}

TEST_F(Masked, DescriptorsOutsideHookedCallsGetTheProcessMask) {
  // Straight into the driver, around every hook (as a path lithos missed).
  auto real = reinterpret_cast<LaunchFn>(Fake::get().address_of("cuLaunchKernel"));
  const auto outside = stats()["descriptors"].value("outside", 0U);
  real(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  expect_mask(last_mask(), expected_for({2, 3}), "unhooked launch");
  EXPECT_EQ(stats()["descriptors"].value("outside", 0U), outside + 1);
}

TEST_F(Masked, EachThreadKeepsItsOwnStreamMask) {
  const std::uint64_t sets[4][2] = {{1, 0}, {2, 0}, {4, 0}, {8, 0}};
  const int slots[4] = {0, 2, 3, 5};
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    const auto s = reinterpret_cast<CUstream>(0xA000 + t);
    ASSERT_EQ(api_set_stream(s, sets[t]), 0);
    threads.emplace_back([&, t, s] {
      const QmdMask want = expected_for({slots[t]});
      for (int i = 0; i < 2000; ++i) {
        launch_on(s, i % 2 == 0 ? "cuLaunchKernel" : "cuLaunchKernel_ptsz");
        const QmdMask got = last_mask();
        if (std::memcmp(got.words, want.words, sizeof want.words) != 0 || !got.valid) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(Masked, TheWholeLiveSetWritesNoMask) {
  const auto s = reinterpret_cast<CUstream>(0x5151);
  const std::uint64_t all[2] = {0xF, 0};  // every live TPC of the fake GPU
  const auto whole = not_applied("whole_live_set");
  ASSERT_EQ(api_set_stream(s, all), 0);
  launch_on(s);
  EXPECT_FALSE(last_mask().valid) << "the same TPCs as no mask: the descriptor is left as the driver built it";
  EXPECT_EQ(not_applied("whole_live_set"), whole + 1);
  ASSERT_EQ(api_clear_stream(s), 0);
  EXPECT_EQ(Fake::get().subscribers(), 1);
}

// ---------------------------------------------------------------------------
// LITHOS_TPCS = every live TPC of the fake GPU: nothing to write, so the
// descriptor callback is not subscribed at all (the hook is the only cost).
using Whole = PreloadTest;

TEST_F(Whole, EveryLiveTpcNeedsNoCallback) {
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  EXPECT_EQ(Fake::get().subscribers(), 0);
  EXPECT_EQ(stats().value("backend", ""), "descriptor (idle: no mask asked for)");
  EXPECT_GE(not_applied("whole_live_set"), 1U);
  // A narrower set later subscribes it and applies.
  const std::uint64_t tpc3[2] = {8, 0};
  ASSERT_EQ(api_set_stream(reinterpret_cast<CUstream>(0x71), tpc3), 0);
  EXPECT_EQ(Fake::get().subscribers(), 1);
  launch_on(reinterpret_cast<CUstream>(0x71));
  expect_mask(last_mask(), expected_for({5}), "stream set");
  launch_on(nullptr);
  EXPECT_FALSE(last_mask().valid) << "the process set still writes nothing";
}

// ---------------------------------------------------------------------------
// A slot map but no mask asked for at start: the callback is subscribed when
// the first mask is set through the API.
using Lazy = PreloadTest;

TEST_F(Lazy, TheCallbackIsSubscribedWhenTheFirstMaskIsSet) {
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Fake::get().subscribers(), 0);
  EXPECT_FALSE(last_mask().valid);
  const std::uint64_t tpc0[2] = {1, 0};
  ASSERT_EQ(api_set_process(tpc0), 0);
  EXPECT_EQ(Fake::get().subscribers(), 1);
  EXPECT_EQ(stats().value("backend", ""), "descriptor");
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({0}), "after the first set");
  const std::uint64_t tpc3[2] = {8, 0};
  ASSERT_EQ(api_set_stream(reinterpret_cast<CUstream>(0x61), tpc3), 0);
  EXPECT_EQ(Fake::get().subscribers(), 1) << "subscribed once";
  ASSERT_EQ(launch_on(reinterpret_cast<CUstream>(0x61)), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({5}), "stream set");
}

// ---------------------------------------------------------------------------
using Fault = PreloadTest;

TEST_F(Fault, AFailingInternalStepStillCallsTheDriver) {
  Fake::get().set_result(CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(launch_on(reinterpret_cast<CUstream>(0x31)), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_STREQ(Fake::get().last_call()->name, "cuLaunchKernel");
  EXPECT_EQ(Fake::get().last_call()->args[8], 0x31U);
  EXPECT_GE(stat("internal_errors"), 1U);
  EXPECT_GE(not_applied("internal_error"), 1U);
  // The process mask still reaches the descriptor: the callback treats the
  // failed launch as an unhooked one.
  expect_mask(last_mask(), expected_for({2, 3}), "fallback path");
}

// ---------------------------------------------------------------------------
using NoBackend = PreloadTest;

TEST_F(NoBackend, LaunchesRunUnmaskedWhenTheDescriptorHookIsMissing) {
  Fake::get().set_result(CUDA_SUCCESS);
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  EXPECT_EQ(stats().value("backend", ""), "none (unmasked)");
  EXPECT_GE(not_applied("no_backend"), 1U);
}

// ---------------------------------------------------------------------------
using NoSlotMap = PreloadTest;

TEST_F(NoSlotMap, AMaskWithoutASlotMapIsNotApplied) {
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  EXPECT_GE(not_applied("no_slot_map"), 1U);
}

// ---------------------------------------------------------------------------
using OtherGpu = PreloadTest;

TEST_F(OtherGpu, ASlotMapOfAnotherGpuDisablesMasks) {
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  EXPECT_GE(not_applied("other_device"), 1U);
  // Not even the unhooked-descriptor fallback may use it.
  auto real = reinterpret_cast<LaunchFn>(Fake::get().address_of("cuLaunchKernel"));
  real(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  EXPECT_FALSE(last_mask().valid);
}

// ---------------------------------------------------------------------------
// LITHOS_BACKEND=green on a driver whose green contexts do not work (the
// fake's answer NOT_SUPPORTED): the context is handed back untouched and the
// program runs unconfined, and says so.
using GreenUnavailable = PreloadTest;

TEST_F(GreenUnavailable, ThePrimaryContextIsUntouchedAndLaunchesPass) {
  auto retain = driver_fn<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  ASSERT_TRUE(from_lithos(reinterpret_cast<void*>(retain)));
  CUcontext ctx = nullptr;
  ASSERT_EQ(retain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(ctx, reinterpret_cast<CUcontext>(0xc0de));
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_STREQ(Fake::get().last_call()->name, "cuLaunchKernel");
  EXPECT_EQ(stats().value("backend", ""), "none (unmasked)");
  EXPECT_EQ(Fake::get().subscribers(), 0) << "green mode never subscribes the descriptor callback";
}

// ---------------------------------------------------------------------------
using MultiGpu = PreloadTest;

TEST_F(MultiGpu, TheMapIsCheckedAgainstTheLaunchingDevice) {
  // Two devices; the current one (0) is the map's GPU.
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "device 0");
}

// The first launch is on device 1, and LITHOS_SLOT_MAP is device 0's (as
// `lithos run` gives every process of a job): device 1's map comes from the
// calibration cache beside it, and masks apply on device 1.
using FollowsFirstGpu = PreloadTest;

// Runs first (no launch yet): a stream set given before the first launch is
// made again on the first launch's GPU's map, which replaces the configured
// one.
TEST_F(FollowsFirstGpu, AStreamSetGivenBeforeTheFirstLaunchFollowsItsGpu) {
  const auto s = reinterpret_cast<CUstream>(0x6161);
  const std::uint64_t tpc3[2] = {1U << 3, 0};
  ASSERT_EQ(api_set_stream(s, tpc3), 0);  // made on device 0's map: slot 5
  EXPECT_EQ(launch_on(s), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({6}), "device 1: TPC 3 is its slot 6");
  EXPECT_NE(stats()["slot_map"].get<std::string>().find("aabbccddeefe"), std::string::npos) << stats().dump();
  ASSERT_EQ(api_clear_stream(s), 0);
}

TEST_F(FollowsFirstGpu, TheFirstLaunchsGpuBringsItsOwnMap) {
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({1, 3}), "device 1: TPCs 1-2 are its slots 1 and 3");
  EXPECT_EQ(not_applied("other_device"), 0U);
  // The statistics name the map in use.
  EXPECT_NE(stats()["slot_map"].get<std::string>().find("aabbccddeefe"), std::string::npos) << stats().dump();
}

// Launches on both GPUs of one process, the first on device 0: the set
// asked for applies on each, made with each GPU's own map (device 1's from
// the cache beside LITHOS_SLOT_MAP).
using EveryGpu = PreloadTest;

TEST_F(EveryGpu, TheSetAppliesOnEachGpuWithItsOwnMap) {
  using RetainFn = CUresult (*)(CUcontext*, CUdevice);
  using SetCurrentFn = CUresult (*)(CUcontext);
  CUcontext ctx[2] = {};
  for (int d = 0; d < 2; ++d) ASSERT_EQ(driver_fn<RetainFn>("cuDevicePrimaryCtxRetain")(&ctx[d], d), CUDA_SUCCESS);
  const auto set_current = driver_fn<SetCurrentFn>("cuCtxSetCurrent");
  ASSERT_NE(set_current, nullptr);
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(set_current(ctx[0]), CUDA_SUCCESS);
    EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
    expect_mask(last_mask(), expected_for({2, 3}), "device 0: TPCs 1-2 are its slots 2 and 3");
    ASSERT_EQ(set_current(ctx[1]), CUDA_SUCCESS);
    EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
    expect_mask(last_mask(), expected_for({1, 3}), "device 1: TPCs 1-2 are its slots 1 and 3");
  }
  EXPECT_EQ(not_applied("other_device"), 0U);
}

// Sets given through lithos.h are logical TPCs: on every GPU, each made
// with its own map. The process set given there replaces the one asked for
// (LITHOS_TPC_SET) on both GPUs, a whole-GPU one too.
TEST_F(EveryGpu, TheCApiSetsApplyOnEachGpuWithItsOwnMap) {
  using RetainFn = CUresult (*)(CUcontext*, CUdevice);
  using SetCurrentFn = CUresult (*)(CUcontext);
  CUcontext ctx[2] = {};
  for (int d = 0; d < 2; ++d) ASSERT_EQ(driver_fn<RetainFn>("cuDevicePrimaryCtxRetain")(&ctx[d], d), CUDA_SUCCESS);
  const auto set_current = driver_fn<SetCurrentFn>("cuCtxSetCurrent");
  const auto on = [&](int d, CUstream s) {
    EXPECT_EQ(set_current(ctx[d]), CUDA_SUCCESS);
    EXPECT_EQ(launch_on(s), CUDA_SUCCESS);
    return last_mask();
  };
  const auto s = reinterpret_cast<CUstream>(0x5151);
  const std::uint64_t tpc3[2] = {1U << 3, 0};
  const std::uint64_t tpc0_3[2] = {(1U << 0) | (1U << 3), 0};
  const std::uint64_t every[2] = {0xFU, 0};
  ASSERT_EQ(api_set_stream(s, tpc3), 0);
  expect_mask(on(0, s), expected_for({5}), "stream set, device 0: TPC 3 is slot 5");
  expect_mask(on(1, s), expected_for({6}), "stream set, device 1: TPC 3 is slot 6");
  expect_mask(on(1, nullptr), expected_for({1, 3}), "another stream, device 1: the set asked for");
  ASSERT_EQ(api_set_process(tpc0_3), 0);
  expect_mask(on(0, nullptr), expected_for({0, 5}), "process set, device 0");
  expect_mask(on(1, nullptr), expected_for({0, 6}), "process set, device 1");
  expect_mask(on(1, s), expected_for({6}), "the stream's own set still wins on device 1");
  const auto whole_before = not_applied("whole_live_set");
  ASSERT_EQ(api_set_process(every), 0);
  EXPECT_FALSE(on(1, nullptr).valid) << "every live TPC: no mask on device 1 either";
  ASSERT_EQ(api_set_process(nullptr), 0);
  EXPECT_FALSE(on(0, nullptr).valid) << "whole GPU";
  EXPECT_FALSE(on(1, nullptr).valid) << "whole GPU on device 1 too, not the set asked for";
  EXPECT_GE(not_applied("whole_live_set"), whole_before + 1);
  ASSERT_EQ(api_clear_stream(s), 0);
  const std::uint64_t tpc1_2[2] = {(1U << 1) | (1U << 2), 0};
  ASSERT_EQ(api_set_process(tpc1_2), 0);
  expect_mask(on(1, s), expected_for({1, 3}), "after clearing: the process set, device 1");
  EXPECT_EQ(not_applied("other_device"), 0U);
  set_current(ctx[0]);
}

// The same with no map of device 1 anywhere: its launches run unmasked, as
// on any GPU the map is not for.
using FirstGpuUncalibrated = PreloadTest;

TEST_F(FirstGpuUncalibrated, LaunchesRunUnmasked) {
  EXPECT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  EXPECT_GE(not_applied("other_device"), 1U);
}

}  // namespace

// ---------------------------------------------------------------------------
// LITHOS_DISABLE=1 (with a mask asked for): the kill switch. The library is
// loaded but hands out the driver's own functions and does nothing itself.
using Disabled = PreloadTest;

TEST_F(Disabled, DriverFunctionsAreHandedOutUntouched) {
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch", "cuGetProcAddress_v2"}) {
    EXPECT_EQ(::dlsym(Fake::get().handle, name), Fake::get().address_of(name)) << name;
  }
  auto gpa = reinterpret_cast<GpaV2Fn>(::dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"));
  ASSERT_NE(gpa, nullptr);
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(gpa("cuLaunchKernel", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_FALSE(from_lithos(pfn));
}

TEST_F(Disabled, ExportedHooksOnlyForwardAndWriteNoMask) {
  // The exported hook (what a -lcuda program calls) forwards to the driver.
  auto hook = reinterpret_cast<LaunchFn>(::dlsym(RTLD_DEFAULT, "cuLaunchKernel"));
  ASSERT_TRUE(from_lithos(reinterpret_cast<void*>(hook)));
  ASSERT_EQ(hook(reinterpret_cast<CUfunction>(0x10), 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  EXPECT_EQ(Fake::get().subscribers(), 0);
}

TEST_F(Masked, SwitchingOffAndOnAtRunTime) {
  using SetEnabledFn = int (*)(int);
  auto set_enabled = reinterpret_cast<SetEnabledFn>(::dlsym(RTLD_DEFAULT, "lithos_set_enabled"));
  ASSERT_NE(set_enabled, nullptr);
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "on");
  EXPECT_EQ(set_enabled(0), 1);  // it was on
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid) << "off: the hook only forwards";
  EXPECT_EQ(set_enabled(1), 0);  // it was off
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "on again");
}

// ---- Kernel atomizer (LITHOS_ATOMIZE=1 LITHOS_ATOMS=4) ---------------------------
#ifdef LITHOS_CUBIN_FIXTURES
namespace {

std::vector<std::uint8_t> read_fixture(const char* name) {
  std::vector<std::uint8_t> out;
  const std::string path = std::string(LITHOS_CUBIN_FIXTURES) + "/" + name;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::uint8_t buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
    std::fclose(f);
  }
  return out;
}

using LoadFn = CUresult (*)(CUmodule*, const void*);
using GetFunctionFn = CUresult (*)(CUfunction*, CUmodule, const char*);

std::vector<std::pair<std::uint32_t, std::uint32_t>> recorded_bounds() {
  auto fn = driver_fn<int (*)(std::uint32_t*, int)>("fake_bounds");
  std::uint32_t raw[512];
  const int n = fn(raw, 256);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  for (int i = 0; i < n && i < 256; ++i) out.emplace_back(raw[2 * i], raw[2 * i + 1]);
  return out;
}

nlohmann::json atom_report() {
  auto fn = reinterpret_cast<int (*)(const char*)>(::dlsym(RTLD_DEFAULT, "lithos_atom_report"));
  if (fn == nullptr) return {};
  // One file per process: ctest runs the preload suites (one process each)
  // side by side, and a shared name let one suite read another's half-written
  // report.
  const std::string path = ::testing::TempDir() + "lithos-atom-report-" + std::to_string(::getpid()) + ".json";
  if (fn(path.c_str()) != 0) return {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::string text;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  std::remove(path.c_str());
  return nlohmann::json::parse(text, nullptr, false);
}

std::vector<std::uint64_t> recorded_outstanding() {
  auto fn = driver_fn<int (*)(std::uint64_t*, int)>("fake_outstanding");
  std::uint64_t raw[256];
  const int n = fn(raw, 256);
  return {raw, raw + std::min(n, 256)};
}

// Loads the fixture's block_ids kernel, records the bounds of the launches
// that follow (fake_record_bounds) and launches it on a 100 x 3 grid.
struct AtomLaunch {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> bounds;
  std::vector<std::uint64_t> outstanding;  // launches not ended when each atom was launched
};
AtomLaunch launch_block_ids() {
  static const std::vector<std::uint8_t> img = read_fixture("corpus_kernels.sm90.cubin");
  CUmodule mod = nullptr;
  CUfunction f = nullptr;
  if (img.empty() || driver_fn<LoadFn>("cuModuleLoadData")(&mod, img.data()) != CUDA_SUCCESS ||
      driver_fn<GetFunctionFn>("cuModuleGetFunction")(&f, mod, "block_ids") != CUDA_SUCCESS) {
    ADD_FAILURE() << "cannot load block_ids";
    return {};
  }
  driver_fn<void (*)(int)>("fake_record_bounds")(1);
  CUdeviceptr out = 0x1000;
  void* params[] = {&out};
  EXPECT_EQ(driver_fn<LaunchFn>("cuLaunchKernel")(f, 100, 3, 1, 64, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  return {recorded_bounds(), recorded_outstanding()};
}

}  // namespace

using Atomize = PreloadTest;

TEST_F(Atomize, TheDriverGetsTheRewrittenImageAndLaunchesRunAsAtoms) {
  const std::vector<std::uint8_t> img = read_fixture("corpus_kernels.sm90.cubin");
  ASSERT_FALSE(img.empty());
  CUmodule mod = nullptr;
  ASSERT_EQ(driver_fn<LoadFn>("cuModuleLoadData")(&mod, img.data()), CUDA_SUCCESS);
  const FakeCall* c = Fake::get().last_call();
  ASSERT_STREQ(c->name, "cuModuleLoadData");
  const auto* got = reinterpret_cast<const std::uint8_t*>(c->args[1]);
  EXPECT_NE(got, img.data());  // a rewritten copy
  EXPECT_EQ(std::memcmp(got,
                        "\x7f"
                        "ELF",
                        4),
            0);

  CUfunction f = nullptr;
  ASSERT_EQ(driver_fn<GetFunctionFn>("cuModuleGetFunction")(&f, mod, "block_ids"), CUDA_SUCCESS);
  driver_fn<void (*)(int)>("fake_record_bounds")(1);  // block_ids(uint32_t*): the bounds follow
  CUdeviceptr out = 0x1000;
  void* params[] = {&out};
  ASSERT_EQ(driver_fn<LaunchFn>("cuLaunchKernel")(f, 100, 3, 1, 64, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  const auto b = recorded_bounds();
  ASSERT_EQ(b.size(), 4u);  // LITHOS_ATOMS=4
  std::uint32_t next = 0;
  for (const auto& [lo, hi] : b) {
    EXPECT_EQ(lo, next);
    EXPECT_GT(hi, lo);
    next = hi;
  }
  EXPECT_EQ(next, 300u);  // the 100 x 3 blocks, in order, each once

  // A cooperative launch is never split: one launch with the whole grid.
  driver_fn<void (*)(int)>("fake_record_bounds")(1);
  ASSERT_EQ(driver_fn<CoopFn>("cuLaunchCooperativeKernel")(f, 100, 3, 1, 64, 1, 1, 0, nullptr, params), CUDA_SUCCESS);
  const auto report = atom_report();
  ASSERT_TRUE(report.is_object());
  EXPECT_GE(report.value("kernels_patched", 0), 4);
  EXPECT_EQ(report.value("images_rewritten", 0), 1);
  bool seen = false;
  for (const auto& k : report["kernels"]) {
    if (k.value("name", "") != "block_ids") continue;
    seen = true;
    EXPECT_EQ(k.value("split_launches", 0), 1);
    EXPECT_EQ(k.value("atoms", 0), 4);
    EXPECT_EQ(k["whole"].value("cooperative", 0), 1);
    // Both launches were timed (1 ms each on the fake GPU); the cooperative
    // one ran whole for longer than one 500 us atom.
    EXPECT_EQ(k.value("timed", 0), 2);
    EXPECT_EQ(k.value("long_whole", 0), 1);
    EXPECT_EQ(k.value("long_whole_ns", 0), 1000000);
  }
  EXPECT_TRUE(seen);
}

TEST_F(Atomize, TheOriginalIsLoadedWhenTheDriverRefusesTheRewrite) {
  const std::vector<std::uint8_t> img = read_fixture("corpus_kernels.sm90.cubin");
  ASSERT_FALSE(img.empty());
  driver_fn<void (*)(int)>("fake_refuse_loads")(1);
  CUmodule mod = nullptr;
  ASSERT_EQ(driver_fn<LoadFn>("cuModuleLoadData")(&mod, img.data()), CUDA_SUCCESS);
  const FakeCall* c = Fake::get().last_call();
  EXPECT_EQ(reinterpret_cast<const std::uint8_t*>(c->args[1]), img.data());  // the second try: the original
  // Its kernels are not rewritten: launched once, with the caller's parameters.
  CUfunction f = nullptr;
  ASSERT_EQ(driver_fn<GetFunctionFn>("cuModuleGetFunction")(&f, mod, "saxpy_stride"), CUDA_SUCCESS);
  driver_fn<void (*)(int)>("fake_record_bounds")(-1);
  void* params[] = {nullptr, nullptr, nullptr, nullptr};
  ASSERT_EQ(driver_fn<LaunchFn>("cuLaunchKernel")(f, 64, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  c = Fake::get().last_call();
  EXPECT_EQ(reinterpret_cast<void**>(c->args[9]), params);
  EXPECT_GE(atom_report().value("images_refused_by_driver", 0), 1);
}

TEST_F(Atomize, ImagesThatAreNotCubinsPassThrough) {
  const char garbage[] = "not an image at all, and not PTX either";
  CUmodule mod = nullptr;
  ASSERT_EQ(driver_fn<LoadFn>("cuModuleLoadData")(&mod, garbage), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<const char*>(Fake::get().last_call()->args[1]), garbage);
}

// Without lithosd nothing decides when an atom may go: every atom of the
// launch is issued at once, in order on its stream (with lithosd each waits
// for its grant: DaemonE2E).
TEST_F(Atomize, EveryAtomIsIssuedAtOnce) {
  driver_fn<void (*)(int, int)>("fake_events")(3, 0);
  const AtomLaunch l = launch_block_ids();
  ASSERT_EQ(l.bounds.size(), 4u);
  EXPECT_EQ(l.outstanding, (std::vector<std::uint64_t>{0, 1, 2, 3}));
  const nlohmann::json report = atom_report();
  ASSERT_TRUE(report.is_object());
  EXPECT_FALSE(report.contains("paced_launches")) << "the pacer is gone";
}

// Under stream capture nothing runs: the atoms become consecutive nodes at once.
TEST_F(Atomize, CapturedAtomsAreConsecutiveNodes) {
  driver_fn<void (*)(int, int)>("fake_events")(3, 0);
  driver_fn<void (*)(int)>("fake_capturing")(1);
  const AtomLaunch l = launch_block_ids();
  driver_fn<void (*)(int)>("fake_capturing")(0);
  ASSERT_EQ(l.bounds.size(), 4u);
  EXPECT_EQ(l.outstanding, (std::vector<std::uint64_t>{0, 1, 2, 3}));
}

// With the occupancy known (FAKE_OCCUPANCY=5 blocks per SM x 4 SMs: waves of
// 20 blocks) atoms are whole waves: 300 blocks = 15 waves of 1 ms / 15 each
// (every timed launch takes 1 ms on the fake); 300 us atoms hold 4 waves.
using AtomizeWaves = PreloadTest;
TEST_F(AtomizeWaves, AtomsAreWholeWaves) {
  driver_fn<void (*)(int, int)>("fake_events")(3, 0);
  const AtomLaunch first = launch_block_ids();
  EXPECT_EQ(first.bounds.size(), 1u) << "no prediction yet: whole";
  launch_block_ids();
  ASSERT_TRUE(atom_report().is_object());  // waits for the timings: the prediction is 1 ms now
  const AtomLaunch l = launch_block_ids();
  std::vector<std::uint32_t> sizes;
  for (const auto& [lo, hi] : l.bounds) sizes.push_back(hi - lo);
  EXPECT_EQ(sizes, (std::vector<std::uint32_t>{80, 80, 80, 60})) << "near-equal atoms would be 4 x 75";
}
#endif

namespace {

// ---------------------------------------------------------------------------
// Safe masks (sched/launch_fit.hpp): two GPCs {0,1} and {2,3}; the process
// set 1-2 (slots 2, 3) holds one TPC of each.
using Safe = PreloadTest;
using SafeUnknownOccupancy = PreloadTest;

CUresult launch_cluster(unsigned x, CUfunction f = reinterpret_cast<CUfunction>(0x10)) {
  CUlaunchAttribute at{};
  at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at.value.clusterDim.x = x;
  at.value.clusterDim.y = at.value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = 8 * x;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  return driver_fn<LaunchExFn>("cuLaunchKernelEx")(&cfg, f, nullptr, nullptr);
}

CUresult launch_cooperative(unsigned grid) {
  return driver_fn<CoopFn>("cuLaunchCooperativeKernel")(reinterpret_cast<CUfunction>(0x10), grid, 1, 1, 64, 1, 1, 0,
                                                        nullptr, nullptr);
}

std::uint64_t safe_stat(const char* key) { return stats()["safe"].value(key, std::uint64_t{0}); }

TEST_F(Safe, AClusterThatFitsOneGpcKeepsTheSet) {
  ASSERT_EQ(launch_cluster(2), CUDA_SUCCESS);  // 2 SMs: one TPC of either GPC
  expect_mask(last_mask(), expected_for({2, 3}), "cluster of 2");
}

TEST_F(Safe, AClusterIsWidenedInsideOneGpc) {
  const std::uint64_t widened = safe_stat("widened_cluster");
  ASSERT_EQ(launch_cluster(4), CUDA_SUCCESS);  // 4 SMs: both TPCs of one GPC
  // GPC {0,1} holds TPC 1 of the set (as many as GPC {2,3} does, and comes
  // first): TPC 0 (slot 0) is added.
  expect_mask(last_mask(), expected_for({0, 2, 3}), "cluster of 4");
  EXPECT_EQ(safe_stat("widened_cluster"), widened + 1);
  EXPECT_GE(safe_stat("cluster_descriptors"), 1U);
}

TEST_F(Safe, AClusterNoGpcCanHoldRunsOnTheWholeGpu) {
  const std::uint64_t whole = safe_stat("whole_by_rule");
  ASSERT_EQ(launch_cluster(8), CUDA_SUCCESS);  // 8 SMs: no GPC has 4 TPCs
  EXPECT_FALSE(last_mask().valid);
  EXPECT_EQ(safe_stat("whole_by_rule"), whole + 1);
}

TEST_F(Safe, CompileTimeClustersAreLookedUp) {
  // Function 0xc4 was compiled with __cluster_dims__(4,1,1): a plain
  // cuLaunchKernel of it is a cluster launch.
  ASSERT_EQ(driver_fn<LaunchFn>("cuLaunchKernel")(reinterpret_cast<CUfunction>(0xc4), 8, 1, 1, 128, 1, 1, 0, nullptr,
                                                  nullptr, nullptr),
            CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({0, 2, 3}), "compile-time cluster of 4");
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);  // function 0x10: no cluster
  expect_mask(last_mask(), expected_for({2, 3}), "plain launch");
}

TEST_F(Safe, CooperativeGridsGetTheirCapacity) {
  const std::uint64_t coop = safe_stat("cooperative_launches");
  // FAKE_OCCUPANCY=2 blocks per SM; the set has 2 TPCs = 4 SMs = 8 blocks.
  ASSERT_EQ(launch_cooperative(8), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "cooperative at capacity");
  ASSERT_EQ(launch_cooperative(9), CUDA_SUCCESS);  // 5 SMs: 3 TPCs, TPC 0 added
  expect_mask(last_mask(), expected_for({0, 2, 3}), "cooperative beyond capacity");
  EXPECT_GE(safe_stat("widened_cooperative"), 1U);
  ASSERT_EQ(launch_cooperative(16), CUDA_SUCCESS);  // every SM: the whole GPU
  EXPECT_FALSE(last_mask().valid);
  EXPECT_EQ(safe_stat("cooperative_launches"), coop + 3);
}

TEST_F(Safe, GraphsWithCooperativeOrClusterNodesAreWidened) {
  using InstFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
  CUgraphExec exec = nullptr;
  // One cooperative node of 16 blocks at 2 per SM: every SM -> whole GPU.
  ASSERT_EQ(driver_fn<InstFn>("cuGraphInstantiateWithFlags")(&exec, reinterpret_cast<CUgraph>(0x6c00), 0),
            CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  // A node with a 4-CTA cluster attribute.
  ASSERT_EQ(driver_fn<InstFn>("cuGraphInstantiateWithFlags")(&exec, reinterpret_cast<CUgraph>(0x6c10), 0),
            CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({0, 2, 3}), "graph with a cluster node");
  // The cooperative node inside a child graph is found too.
  ASSERT_EQ(driver_fn<InstFn>("cuGraphInstantiateWithFlags")(&exec, reinterpret_cast<CUgraph>(0x6c20), 0),
            CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  // A graph without such nodes keeps the set.
  ASSERT_EQ(driver_fn<InstFn>("cuGraphInstantiateWithFlags")(&exec, reinterpret_cast<CUgraph>(0x6d00), 0),
            CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "plain graph");
}

TEST_F(Safe, TheStatisticsReportTheRule) {
  ASSERT_EQ(launch_cluster(4), CUDA_SUCCESS);
  const auto s = stats();
  ASSERT_TRUE(s.contains("safe"));
  for (const char* k : {"cooperative_launches", "cluster_descriptors", "widened_cluster", "widened_cooperative",
                        "whole_by_rule", "green_unrouted"}) {
    EXPECT_TRUE(s["safe"].contains(k)) << k;
  }
}

// The descriptor's own cluster shape counts even where the hook saw none
// (graph nodes, launches outside a hook): here every descriptor says 4 CTAs.
using SafeQmd = PreloadTest;
TEST_F(SafeQmd, TheDescriptorsClusterShapeIsObeyed) {
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);  // function 0x10: no cluster known to the hook
  expect_mask(last_mask(), expected_for({0, 2, 3}), "cluster of 4 from the descriptor");
  using InstFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(driver_fn<InstFn>("cuGraphInstantiateWithFlags")(&exec, reinterpret_cast<CUgraph>(0x6d00), 0),
            CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({0, 2, 3}), "graph node with a cluster of 4");
}

TEST_F(SafeUnknownOccupancy, CooperativeLaunchesWithoutOccupancyRunWhole) {
  ASSERT_EQ(launch_cooperative(1), CUDA_SUCCESS);
  EXPECT_FALSE(last_mask().valid);
  ASSERT_EQ(launch_on(nullptr), CUDA_SUCCESS);
  expect_mask(last_mask(), expected_for({2, 3}), "plain launch");
}

}  // namespace
