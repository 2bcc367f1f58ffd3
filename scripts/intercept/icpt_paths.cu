// GPU evidence for liblithos.so: one kernel that records %smid per block,
// launched through every path the interposer must see, each checked for
// confinement to the TPC set lithos was asked for.
//
//   icpt_paths [all|mps]          (run it under `lithos run --tpcs N` or alone)
//
// Expected SMs: the process set (LITHOS_TPCS = first N live TPCs from the
// slot map, or LITHOS_TPC_SET), logical TPC t = SMs 2t, 2t+1. Without lithos
// every SM. With ICPT_COUNT_ONLY=1 (MPS: %smid is a virtual id there) only
// the number of SMs is compared. Each check prints one line
//   CHECK <name> PASS|FAIL seen=<n> expected=<n> outside=<n> [note]
// and the exit status is the number of failures.
//
// Built with nvcc -arch=sm_90 (and a second time with
// --default-stream per-thread, so that the runtime uses the _ptsz entry
// points); links libcuda directly, so the driver-API calls below go through
// liblithos.so's exported hooks, while the runtime reaches the driver through
// dlopen + cuGetProcAddress.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cg = cooperative_groups;

__global__ void smid_kernel(unsigned* out, long long spin) {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  if (threadIdx.x == 0) out[blockIdx.x + gridDim.x * blockIdx.y] = s + 1;
}

__global__ void coop_kernel(unsigned* out, long long spin) {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  cg::this_grid().sync();
  if (threadIdx.x == 0) out[blockIdx.x] = s + 1;
}

namespace {

int g_failures = 0;
bool g_count_only = false;
int g_sm_count = 0;

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("ERROR %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      std::fflush(stdout);                                                                      \
      std::exit(100);                                                                           \
    }                                                                                           \
  } while (0)
#define CU(x)                                                                                   \
  do {                                                                                          \
    CUresult r_ = (x);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                   \
      const char* n_ = nullptr;                                                                 \
      cuGetErrorName(r_, &n_);                                                                  \
      std::printf("ERROR %s:%d %s: %s\n", __FILE__, __LINE__, #x, n_ ? n_ : "?");             \
      std::fflush(stdout);                                                                      \
      std::exit(101);                                                                           \
    }                                                                                           \
  } while (0)

// The lithos C API, when liblithos.so is preloaded.
struct Lithos {
  int (*set_stream)(CUstream, const uint64_t*) = nullptr;
  int (*clear_stream)(CUstream) = nullptr;
  int (*set_process)(const uint64_t*) = nullptr;
  int (*live)(uint64_t*) = nullptr;
  int (*stats)(char*, size_t) = nullptr;
  bool present() const { return live != nullptr; }
  static Lithos load() {
    Lithos l;
    l.set_stream = reinterpret_cast<int (*)(CUstream, const uint64_t*)>(dlsym(RTLD_DEFAULT, "lithos_stream_set_tpcs"));
    l.clear_stream = reinterpret_cast<int (*)(CUstream)>(dlsym(RTLD_DEFAULT, "lithos_stream_clear_tpcs"));
    l.set_process = reinterpret_cast<int (*)(const uint64_t*)>(dlsym(RTLD_DEFAULT, "lithos_set_process_tpcs"));
    l.live = reinterpret_cast<int (*)(uint64_t*)>(dlsym(RTLD_DEFAULT, "lithos_live_tpcs"));
    l.stats = reinterpret_cast<int (*)(char*, size_t)>(dlsym(RTLD_DEFAULT, "lithos_stats_json"));
    return l;
  }
  std::string stats_json() const {
    if (stats == nullptr) return "{}";
    std::vector<char> buf(1 << 16);
    stats(buf.data(), buf.size());
    return buf.data();
  }
  // A number from the statistics JSON ("key":N, first occurrence).
  long long stat(const char* key) const {
    const std::string j = stats_json();
    const std::string k = std::string("\"") + key + "\":";
    const auto p = j.find(k);
    return p == std::string::npos ? -1 : std::atoll(j.c_str() + p + k.size());
  }
};
Lithos g_lithos;

std::vector<int> tpcs_of_words(const uint64_t w[2]) {
  std::vector<int> v;
  for (int t = 0; t < 128; ++t) {
    if ((w[t / 64] >> (t % 64)) & 1U) v.push_back(t);
  }
  return v;
}

std::vector<int> parse_set(const char* text) {
  std::vector<int> v;
  std::string s = text;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      v.push_back(std::atoi(item.c_str()));
    } else {
      for (int t = std::atoi(item.substr(0, dash).c_str()); t <= std::atoi(item.substr(dash + 1).c_str()); ++t) v.push_back(t);
    }
    pos = comma + 1;
  }
  return v;
}

// The TPCs this process is confined to (empty: the whole GPU).
std::vector<int> g_live;
std::vector<int> process_tpcs() {
  if (!g_lithos.present()) return {};
  const char* n = std::getenv("LITHOS_TPCS");
  const char* set = std::getenv("LITHOS_TPC_SET");
  if (n != nullptr && *n != '\0') {
    std::vector<int> v(g_live.begin(), g_live.begin() + std::min<size_t>(g_live.size(), std::atoi(n)));
    return v;
  }
  if (set != nullptr && *set != '\0') return parse_set(set);
  return {};
}

std::set<int> sms_of(const std::vector<int>& tpcs) {
  std::set<int> s;
  if (tpcs.empty()) {
    for (int i = 0; i < g_sm_count; ++i) s.insert(i);
  } else {
    for (int t : tpcs) {
      s.insert(2 * t);
      s.insert(2 * t + 1);
    }
  }
  return s;
}

std::set<int> seen_of(const unsigned* d, int n) {
  std::vector<unsigned> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::set<int> s;
  int missing = 0;
  for (unsigned x : h) {
    if (x) s.insert(static_cast<int>(x) - 1);
    else ++missing;
  }
  if (missing) std::printf("  (%d blocks did not record)\n", missing);
  return s;
}

// exact: every expected SM must show up (enough blocks); otherwise only
// "nothing outside".
void check(const char* name, const std::set<int>& seen, const std::set<int>& expected, bool exact = true,
           const std::string& note = "") {
  int outside = 0;
  for (int s : seen) outside += expected.count(s) == 0;
  bool ok;
  if (g_count_only) {
    ok = exact ? seen.size() == expected.size() : seen.size() <= expected.size();
    outside = seen.size() > expected.size() ? static_cast<int>(seen.size() - expected.size()) : 0;
  } else {
    ok = outside == 0 && (!exact || seen.size() == expected.size());
  }
  if (!ok) ++g_failures;
  std::printf("CHECK %-34s %s seen=%zu expected=%zu outside=%d %s\n", name, ok ? "PASS" : "FAIL", seen.size(),
              expected.size(), outside, note.c_str());
  std::fflush(stdout);
}

constexpr int kBlocks = 4096;
constexpr long long kSpin = 20000;

void path_runtime(unsigned* d, const std::set<int>& want) {
  CK(cudaMemset(d, 0, kBlocks * 4));
  smid_kernel<<<kBlocks, 128>>>(d, kSpin);
  CK(cudaDeviceSynchronize());
  check("runtime <<<>>> default stream", seen_of(d, kBlocks), want);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMemsetAsync(d, 0, kBlocks * 4, s));
  smid_kernel<<<kBlocks, 128, 0, s>>>(d, kSpin);
  CK(cudaStreamSynchronize(s));
  check("runtime <<<>>> created stream", seen_of(d, kBlocks), want);
  CK(cudaStreamDestroy(s));
}

void path_driver(unsigned* d, const std::set<int>& want) {
  CUfunction f;
  CK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(smid_kernel)));
  CK(cudaMemset(d, 0, kBlocks * 4));
  long long spin = kSpin;
  void* args[] = {&d, &spin};
  CU(cuLaunchKernel(f, kBlocks, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CK(cudaDeviceSynchronize());
  check("driver cuLaunchKernel", seen_of(d, kBlocks), want);

  // cuLaunchKernelEx with a cluster of 2 blocks (driver API).
  CK(cudaMemset(d, 0, kBlocks * 4));
  CUlaunchAttribute attr[1];
  attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr[0].value.clusterDim.x = 2;
  attr[0].value.clusterDim.y = 1;
  attr[0].value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = kBlocks;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = nullptr;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CU(cuLaunchKernelEx(&cfg, f, args, nullptr));
  CK(cudaDeviceSynchronize());
  check("driver cuLaunchKernelEx cluster=2", seen_of(d, kBlocks), want);

  // The runtime's cudaLaunchKernelEx with a cluster attribute.
  CK(cudaMemset(d, 0, kBlocks * 4));
  cudaLaunchAttribute rattr[1];
  rattr[0].id = cudaLaunchAttributeClusterDimension;
  rattr[0].val.clusterDim.x = 2;
  rattr[0].val.clusterDim.y = 1;
  rattr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t rcfg{};
  rcfg.gridDim = dim3(kBlocks);
  rcfg.blockDim = dim3(128);
  rcfg.attrs = rattr;
  rcfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&rcfg, smid_kernel, d, spin));
  CK(cudaDeviceSynchronize());
  check("runtime cudaLaunchKernelEx cluster=2", seen_of(d, kBlocks), want);
}

void path_cooperative(unsigned* d, const std::set<int>& want) {
  // 16 blocks of 128 threads fit on one SM, so they are co-resident under any
  // set (grid.sync needs that); only "nothing outside" is checked.
  CK(cudaMemset(d, 0, 64 * 4));
  long long spin = kSpin;
  void* args[] = {&d, &spin};
  CK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop_kernel), dim3(16), dim3(128), args, 0, nullptr));
  CK(cudaDeviceSynchronize());
  check("runtime cooperative (grid.sync)", seen_of(d, 16), want, false);
  CUfunction f;
  CK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(coop_kernel)));
  CK(cudaMemset(d, 0, 64 * 4));
  CU(cuLaunchCooperativeKernel(f, 16, 1, 1, 128, 1, 1, 0, nullptr, args));
  CK(cudaDeviceSynchronize());
  check("driver cuLaunchCooperativeKernel", seen_of(d, 16), want, false);
}

void path_kernel_handles(unsigned* d, const std::set<int>& want) {
  long long spin = kSpin;
  void* args[] = {&d, &spin};
  // CUkernel of this program's own kernel (runtime's lazy-loaded library).
  cudaKernel_t k;
  CK(cudaGetKernel(&k, smid_kernel));
  CK(cudaMemset(d, 0, kBlocks * 4));
  CU(cuLaunchKernel(reinterpret_cast<CUfunction>(k), kBlocks, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CK(cudaDeviceSynchronize());
  check("CUkernel via cudaGetKernel", seen_of(d, kBlocks), want);
  const char* cubin = std::getenv("ICPT_CUBIN");
  if (cubin == nullptr) {
    std::printf("  (ICPT_CUBIN unset: library/module paths skipped)\n");
    return;
  }
  CUlibrary lib;
  CU(cuLibraryLoadFromFile(&lib, cubin, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel lk;
  CU(cuLibraryGetKernel(&lk, lib, "smid_kernel_c"));
  CK(cudaMemset(d, 0, kBlocks * 4));
  CU(cuLaunchKernel(reinterpret_cast<CUfunction>(lk), kBlocks, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CK(cudaDeviceSynchronize());
  check("cuLibraryGetKernel + cuLaunchKernel", seen_of(d, kBlocks), want);
  CUfunction lf;
  CU(cuKernelGetFunction(&lf, lk));
  CK(cudaMemset(d, 0, kBlocks * 4));
  CU(cuLaunchKernel(lf, kBlocks, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CK(cudaDeviceSynchronize());
  check("cuKernelGetFunction + cuLaunchKernel", seen_of(d, kBlocks), want);
  CUmodule mod;
  CU(cuModuleLoad(&mod, cubin));
  CUfunction mf;
  CU(cuModuleGetFunction(&mf, mod, "smid_kernel_c"));
  CK(cudaMemset(d, 0, kBlocks * 4));
  CU(cuLaunchKernel(mf, kBlocks, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CK(cudaDeviceSynchronize());
  check("cuModuleGetFunction + cuLaunchKernel", seen_of(d, kBlocks), want);
}

void path_threads(const std::set<int>& want) {
  constexpr int kThreads = 4, kLaunches = 20;
  std::vector<std::set<int>> seen(kThreads);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t) {
    th.emplace_back([&, t] {
      cudaStream_t s;
      CK(cudaStreamCreate(&s));
      unsigned* d;
      CK(cudaMalloc(&d, kBlocks * 4));
      for (int i = 0; i < kLaunches; ++i) {
        CK(cudaMemsetAsync(d, 0, kBlocks * 4, s));
        smid_kernel<<<kBlocks / 4, 128, 0, s>>>(d, kSpin);
        CK(cudaStreamSynchronize(s));
        for (int x : seen_of(d, kBlocks / 4)) seen[t].insert(x);
      }
      CK(cudaFree(d));
      CK(cudaStreamDestroy(s));
    });
  }
  for (auto& x : th) x.join();
  std::set<int> all;
  for (auto& s : seen) all.insert(s.begin(), s.end());
  check("4 threads x 4 streams x 20 launches", all, want);
}

// Per-stream sets through the C API: four streams, four disjoint sets.
void path_stream_api() {
  const auto backend = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "lithos_backend"));
  if (backend != nullptr && std::strstr(backend(), "green") != nullptr) {
    std::printf("  (per-stream API skipped: the green-context backend has one static partition)\n");
    return;
  }
  if (!g_lithos.present() || g_live.size() < 52) {
    std::printf("  (per-stream API skipped: lithos %s, %zu live TPCs)\n", g_lithos.present() ? "present" : "absent",
                g_live.size());
    return;
  }
  constexpr int kStreams = 4;
  std::vector<std::set<int>> seen(kStreams), want(kStreams);
  std::vector<std::thread> th;
  std::atomic<int> api_errors{0};
  for (int i = 0; i < kStreams; ++i) {
    // Four live TPCs from four places of the live list (0-3, 16-19, ...).
    std::vector<int> tpcs(g_live.begin() + 16 * i, g_live.begin() + 16 * i + 4);
    want[i] = sms_of(tpcs);
    th.emplace_back([&, i, tpcs] {
      cudaStream_t s;
      CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      uint64_t w[2] = {0, 0};
      for (int t : tpcs) w[t / 64] |= uint64_t{1} << (t % 64);
      if (g_lithos.set_stream(reinterpret_cast<CUstream>(s), w) != 0) api_errors++;
      unsigned* d;
      CK(cudaMalloc(&d, kBlocks * 4));
      for (int r = 0; r < 10; ++r) {
        CK(cudaMemsetAsync(d, 0, kBlocks * 4, s));
        smid_kernel<<<kBlocks / 2, 128, 0, s>>>(d, kSpin);
        CK(cudaStreamSynchronize(s));
        for (int x : seen_of(d, kBlocks / 2)) seen[i].insert(x);
      }
      CK(cudaFree(d));
      CK(cudaStreamDestroy(s));
    });
  }
  for (auto& x : th) x.join();
  for (int i = 0; i < kStreams; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "per-stream set, stream %d", i);
    check(name, seen[i], want[i], true, api_errors ? "(API errors)" : "");
  }
}

void path_graph(unsigned* d, const std::set<int>& want) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ex;
  const long long desc0 = g_lithos.stat("in_graph");
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  smid_kernel<<<kBlocks, 128, 0, s>>>(d, kSpin);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ex, g, 0));
  const long long desc1 = g_lithos.stat("in_graph");
  CK(cudaMemset(d, 0, kBlocks * 4));
  CK(cudaGraphLaunch(ex, s));
  CK(cudaStreamSynchronize(s));
  const long long desc2 = g_lithos.stat("in_graph");
  check("graph capture + replay", seen_of(d, kBlocks), want);
  CK(cudaMemset(d, 0, kBlocks * 4));
  CK(cudaGraphLaunch(ex, s));
  CK(cudaStreamSynchronize(s));
  const long long desc3 = g_lithos.stat("in_graph");
  check("graph second replay", seen_of(d, kBlocks), want);
  std::printf("GRAPH descriptors built: at instantiate %lld, first launch %lld, second launch %lld\n", desc1 - desc0,
              desc2 - desc1, desc3 - desc2);
  if (g_lithos.present() && g_live.size() >= 24) {
    // Change the process set between replays: the exec keeps its mask.
    std::vector<int> other(g_live.begin() + 16, g_live.begin() + 24);
    uint64_t w[2] = {0, 0};
    for (int t : other) w[t / 64] |= uint64_t{1} << (t % 64);
    const long long stale0 = g_lithos.stat("graph_stale");
    if (g_lithos.set_process(w) == 0) {
      CK(cudaMemset(d, 0, kBlocks * 4));
      CK(cudaGraphLaunch(ex, s));
      CK(cudaStreamSynchronize(s));
      const long long stale1 = g_lithos.stat("graph_stale");
      check("graph replay after set change: old set", seen_of(d, kBlocks), want, true,
            "(graph_stale +" + std::to_string(stale1 - stale0) + ")");
      cudaGraphExec_t ex2;
      CK(cudaGraphInstantiate(&ex2, g, 0));
      CK(cudaMemset(d, 0, kBlocks * 4));
      CK(cudaGraphLaunch(ex2, s));
      CK(cudaStreamSynchronize(s));
      check("graph re-instantiated: new set", seen_of(d, kBlocks), sms_of(other));
      CK(cudaGraphExecDestroy(ex2));
      const std::vector<int> back = process_tpcs();
      uint64_t b[2] = {0, 0};
      for (int t : back) b[t / 64] |= uint64_t{1} << (t % 64);
      if (back.empty()) g_lithos.set_process(nullptr); else g_lithos.set_process(b);
    }
  }
  CK(cudaGraphExecDestroy(ex));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "all";
  g_count_only = std::getenv("ICPT_COUNT_ONLY") != nullptr;
  CK(cudaFree(nullptr));
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, dev));
  g_lithos = Lithos::load();
  if (g_lithos.present()) {
    uint64_t w[2] = {0, 0};
    const int n = g_lithos.live(w);
    if (n > 0) g_live = tpcs_of_words(w);
  }
  const std::vector<int> tpcs = process_tpcs();
  const std::set<int> want = sms_of(tpcs);
  std::printf("icpt_paths: %d SMs, lithos %s, %zu live TPCs, process set of %zu TPCs -> %zu SMs%s\n", g_sm_count,
              g_lithos.present() ? "preloaded" : "absent", g_live.size(), tpcs.size(), want.size(),
              g_count_only ? " (counts only)" : "");
  unsigned* d;
  CK(cudaMalloc(&d, kBlocks * 4));
  path_runtime(d, want);
  path_driver(d, want);
  path_cooperative(d, want);
  path_kernel_handles(d, want);
  path_threads(want);
  path_graph(d, want);
  if (mode == "all") path_stream_api();
  CK(cudaFree(d));
  std::printf("icpt_paths: %d failure(s)\n", g_failures);
  return g_failures > 100 ? 100 : g_failures;
}
