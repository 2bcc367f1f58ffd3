// A fake CUDA driver library simulating the H100 of h100-facts.md, for CPU
// tests of the whole GPU path (driver loader, descriptor hook, %smid probe,
// calibration child, green contexts, `lithos calibrate`) without a GPU.
//
// Loaded through $LITHOS_CUDA_LIBRARY. It exports cuGetProcAddress_v2 only;
// every entry point lithos asks for is served from a table. A launch builds a
// 384-byte QMD V04_00, fires the subscribed descriptor callbacks, then reads
// back the TPC mask the callbacks wrote and "runs" the %smid kernel: the SMs
// of the enabled live slots (the fixture map) get their bitmap bits set. A
// launch whose enabled slots are all dead never completes (cuStreamQuery
// says NOT_READY forever), as on the real GPU. Green contexts run on exactly
// their SMs.
//
// Thread-block clusters follow the topology measured on the H100
// (docs/gpu.md "Topology (GPCs)"): the live TPCs of each 9-slot group 0-7
// are one GPC, and the TPCs at slots 72 and above (62-65) are one-TPC cluster
// domains. cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION writes
// the cluster shape into QMD bytes 268/269/270 before the descriptor
// callbacks run; a cluster launch whose enabled SMs (after the callbacks'
// mask) leave no GPC with at least cluster-size SMs never completes, like on
// the GPU. The cluster kernel of gpu/topology_probe.cpp (recognised by its
// PTX entry name) gets deterministic but varied placements: each cluster on
// distinct SMs of one GPC, as the hardware does. cuOccupancyMaxActiveClusters
// is computed from the topology and the blocks per SM that the dynamic
// shared memory allows.
//
// MPS, as far as calibration meets it: a context made while
// $CUDA_MPS_PIPE_DIRECTORY names a folder holding a file `control` (a
// running control daemon's pipe) is an MPS client, whose %smid is a
// virtual id (the SMs a launch ran on, numbered 0, 1, ... in order), as on
// the H100. If that folder also holds `exclusive` (the GPU in
// exclusive-process compute mode), a context made outside MPS while
// $FAKE_MPS_SERVER names such a folder is refused
// (CUDA_ERROR_DEVICE_UNAVAILABLE). Not thread-safe; one context; enough for
// the tests.
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../h100_fixture.hpp"

namespace {

using DriverCallback = void (*)(void*, int, int, const void*);

struct Sub {
  DriverCallback cb;
  void* user;
  bool enabled;
};

struct Stream {
  bool hung = false;
  std::set<int> green_sms;  // empty: a plain stream
};

// Shared memory of the H100 (bytes): per SM, per block (opt-in), reserved by
// the driver per block.
constexpr int kSmemPerSm = 233472;
constexpr int kSmemOptin = 232448;
constexpr int kSmemReserved = 1024;
constexpr int kThreadsPerSm = 2048;

// Function handles the fake knows: the %smid kernel (a CUkernel used as a
// CUfunction) and the cluster kernel (cuModuleGetFunction).
constexpr std::uintptr_t kSmidKernel = 0x88;
constexpr std::uintptr_t kClusterModule = 0x66;
constexpr std::uintptr_t kClusterFunction = 0x99;

struct FuncAttrs {
  int max_dynamic_smem = 48 * 1024;
  bool non_portable = false;
};

// The cluster domains of the fixture map, as SM lists: group g of slots
// 9g..9g+8 (g < 8) is one GPC; every TPC behind a slot >= 72 is its own.
std::vector<std::vector<int>> h100_gpcs(const lithos::gpu::SlotMap& map) {
  std::vector<std::vector<int>> gpcs(8);
  for (int slot = 0; slot < 128; ++slot) {
    const int tpc = map.tpc_of_slot[static_cast<std::size_t>(slot)];
    if (tpc < 0) continue;
    if (slot >= 72) gpcs.emplace_back();
    std::vector<int>& g = slot < 72 ? gpcs[static_cast<std::size_t>(slot / 9)] : gpcs.back();
    g.push_back(2 * tpc);
    g.push_back(2 * tpc + 1);
  }
  return gpcs;
}

struct State {
  lithos::gpu::SlotMap map = lithos::gpu::testing::h100_slot_map();
  std::vector<std::vector<int>> gpcs = h100_gpcs(map);
  int cc_major = 9, cc_minor = 0;
  bool mps_client = false;  // the context was made as an MPS client: virtual %smid
  std::map<std::uintptr_t, FuncAttrs> funcs;
  std::vector<Sub> subs;
  std::map<std::uintptr_t, Stream> streams;
  std::map<std::uintptr_t, std::set<int>> greens;     // green ctx -> SMs
  std::vector<std::unique_ptr<std::set<int>>> descs;  // resource descriptors handed out
  std::uintptr_t next_handle = 0x1000;
  int launches = 0;
};
State& st() {
  static State s;
  return s;
}

template <class T>
T handle_of(std::uintptr_t v) {
  return reinterpret_cast<T>(v);
}

constexpr unsigned char kTableId[16] = {0x2c, 0x8e, 0x0a, 0xd8, 0x07, 0x10, 0xab, 0x4e,
                                        0x90, 0xdd, 0x54, 0x71, 0x9f, 0xe5, 0xf7, 0x4b};

int subscribe(std::uint32_t* handle, DriverCallback cb, void* user) {
  st().subs.push_back({cb, user, false});
  *handle = static_cast<std::uint32_t>(st().subs.size() - 1);
  return 0;
}
int enable(std::uint32_t on, std::uint32_t handle, int domain, int cbid) {
  if (handle >= st().subs.size() || domain != 0xb || cbid != 1) return 1;
  st().subs[handle].enabled = on != 0;
  return 0;
}
std::array<std::uintptr_t, 8> g_table = {sizeof(g_table),
                                         0,
                                         0,
                                         reinterpret_cast<std::uintptr_t>(&subscribe),
                                         0,
                                         0,
                                         reinterpret_cast<std::uintptr_t>(&enable),
                                         0};

CUresult fGetExportTable(const void** table, const CUuuid* id) {
  if (std::memcmp(id, kTableId, 16) != 0) return CUDA_ERROR_INVALID_VALUE;
  *table = g_table.data();
  return CUDA_SUCCESS;
}
CUresult fInit(unsigned) { return CUDA_SUCCESS; }
CUresult fDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult fGetErrorName(CUresult, const char** s) {
  *s = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult fGetErrorString(CUresult, const char** s) {
  *s = "fake driver error";
  return CUDA_SUCCESS;
}
// FAKE_GPU_DEVICES=<n>: n devices alike but for their UUIDs (default 1).
int device_count() {
  const char* v = std::getenv("FAKE_GPU_DEVICES");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 1;
}
CUresult fDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult fDeviceGetCount(int* n) {
  *n = device_count();
  return CUDA_SUCCESS;
}
CUresult fDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(len), "%s", "Fake H100 (lithos test driver)");
  return CUDA_SUCCESS;
}
CUresult fDeviceGetUuid(CUuuid* u, CUdevice dev) {
  for (int i = 0; i < 16; ++i) u->bytes[i] = static_cast<char>(0x10 + i);
  u->bytes[15] = static_cast<char>(0x1f + dev);
  return CUDA_SUCCESS;
}
CUresult fDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = st().map.sm_count; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = st().cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = st().cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: *v = st().cc_major >= 9 ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = kSmemPerSm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = kSmemOptin; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = kSmemReserved; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = kThreadsPerSm; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
bool has_file(const char* dir, const char* name) {
  return dir != nullptr && *dir != '\0' && ::access((std::string(dir) + "/" + name).c_str(), F_OK) == 0;
}
CUresult fPrimaryCtxRetain(CUcontext* c, CUdevice) {
  const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  st().mps_client = has_file(pipe, "control");
  const char* server = std::getenv("FAKE_MPS_SERVER");
  if (!st().mps_client && has_file(server, "control") && has_file(server, "exclusive")) {
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  *c = handle_of<CUcontext>(0x42);
  return CUDA_SUCCESS;
}
CUresult fPrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult fCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult fCtxGetCurrent(CUcontext* c) {
  *c = handle_of<CUcontext>(0x42);
  return CUDA_SUCCESS;
}
CUresult fStreamCreate(CUstream* s, unsigned) {
  const std::uintptr_t h = st().next_handle++;
  st().streams[h] = Stream{};
  *s = handle_of<CUstream>(h);
  return CUDA_SUCCESS;
}
CUresult fStreamDestroy(CUstream s) {
  st().streams.erase(reinterpret_cast<std::uintptr_t>(s));
  return CUDA_SUCCESS;
}
CUresult fStreamQuery(CUstream s) {
  const auto it = st().streams.find(reinterpret_cast<std::uintptr_t>(s));
  if (it == st().streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  return it->second.hung ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
CUresult fStreamSynchronize(CUstream s) { return fStreamQuery(s); }
CUresult fMemAlloc(CUdeviceptr* p, std::size_t n) {
  void* mem = std::calloc(1, n);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(mem);
  return CUDA_SUCCESS;
}
CUresult fMemFree(CUdeviceptr p) {
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
CUresult fMemcpyDtoH(void* dst, CUdeviceptr src, std::size_t n) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
CUresult fMemsetD32(CUdeviceptr p, unsigned v, std::size_t n) {
  auto* w = reinterpret_cast<std::uint32_t*>(p);
  for (std::size_t i = 0; i < n; ++i) w[i] = v;
  return CUDA_SUCCESS;
}
CUresult fMemsetD32Async(CUdeviceptr p, unsigned v, std::size_t n, CUstream) { return fMemsetD32(p, v, n); }
CUresult fLibraryLoadData(CUlibrary* l, const void* code, CUjit_option*, void**, unsigned, CUlibraryOption*, void**,
                          unsigned) {
  if (std::strstr(static_cast<const char*>(code), "%smid") == nullptr) return CUDA_ERROR_INVALID_PTX;
  *l = handle_of<CUlibrary>(0x77);
  return CUDA_SUCCESS;
}
CUresult fLibraryUnload(CUlibrary) { return CUDA_SUCCESS; }
CUresult fLibraryGetKernel(CUkernel* k, CUlibrary, const char* name) {
  if (std::strcmp(name, "lithos_smid") != 0) return CUDA_ERROR_NOT_FOUND;
  *k = handle_of<CUkernel>(kSmidKernel);
  return CUDA_SUCCESS;
}
// Modules: only the cluster kernel of gpu/topology_probe.cpp, whose PTX must
// read %smid and the cluster index and target sm_90 (clusters need it).
CUresult fModuleLoadData(CUmodule* m, const void* image) {
  const char* ptx = static_cast<const char*>(image);
  if (std::strstr(ptx, ".entry lithos_cluster_smid") == nullptr || std::strstr(ptx, "%smid") == nullptr ||
      std::strstr(ptx, ".target sm_90") == nullptr ||
      (std::strstr(ptx, "%clusterid") == nullptr && std::strstr(ptx, "%cluster_nctarank") == nullptr)) {
    return CUDA_ERROR_INVALID_PTX;
  }
  *m = handle_of<CUmodule>(kClusterModule);
  return CUDA_SUCCESS;
}
CUresult fModuleUnload(CUmodule) { return CUDA_SUCCESS; }
CUresult fModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(m) != kClusterModule || std::strcmp(name, "lithos_cluster_smid") != 0) {
    return CUDA_ERROR_NOT_FOUND;
  }
  *f = handle_of<CUfunction>(kClusterFunction);
  return CUDA_SUCCESS;
}
CUresult fFuncSetAttribute(CUfunction f, CUfunction_attribute a, int value) {
  FuncAttrs& attrs = st().funcs[reinterpret_cast<std::uintptr_t>(f)];
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > kSmemOptin) return CUDA_ERROR_INVALID_VALUE;
      attrs.max_dynamic_smem = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: attrs.non_portable = value != 0; return CUDA_SUCCESS;
    default: return CUDA_SUCCESS;
  }
}

// The launch shape the fake checks, from cuLaunchKernel or cuLaunchKernelEx.
struct Shape {
  unsigned grid[3] = {1, 1, 1};
  unsigned cluster[3] = {1, 1, 1};
  unsigned threads = 1;
  unsigned smem = 0;
  unsigned cluster_size() const { return cluster[0] * cluster[1] * cluster[2]; }
};

// What the driver would refuse before launching (or counting occupancy).
CUresult check_shape(CUfunction f, const Shape& sh) {
  const auto it = st().funcs.find(reinterpret_cast<std::uintptr_t>(f));
  const FuncAttrs attrs = it != st().funcs.end() ? it->second : FuncAttrs{};
  const unsigned c = sh.cluster_size();
  if (c > 1 && st().cc_major < 9) return CUDA_ERROR_NOT_SUPPORTED;
  if (c > 16 || (c > 8 && !attrs.non_portable)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  for (int d = 0; d < 3; ++d) {
    if (sh.cluster[d] == 0 || sh.grid[d] % sh.cluster[d] != 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  if (sh.smem > static_cast<unsigned>(attrs.max_dynamic_smem)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

Shape shape_of(const CUlaunchConfig& cfg) {
  Shape sh;
  sh.grid[0] = cfg.gridDimX;
  sh.grid[1] = cfg.gridDimY;
  sh.grid[2] = cfg.gridDimZ;
  sh.threads = cfg.blockDimX * cfg.blockDimY * cfg.blockDimZ;
  sh.smem = cfg.sharedMemBytes;
  for (unsigned i = 0; i < cfg.numAttrs; ++i) {
    if (cfg.attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    sh.cluster[0] = cfg.attrs[i].value.clusterDim.x;
    sh.cluster[1] = cfg.attrs[i].value.clusterDim.y;
    sh.cluster[2] = cfg.attrs[i].value.clusterDim.z;
  }
  return sh;
}

// A deterministic mix (for varied but reproducible cluster placement).
std::uint32_t mix(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Runs the cluster kernel: cluster i goes to one GPC with at least
// cluster-size enabled SMs, each CTA on its own SM; writes %smid and the
// cluster index of every block.
void run_cluster_kernel(const Shape& sh, const std::vector<std::vector<int>>& eligible, void** args) {
  auto* sm_out = reinterpret_cast<std::uint32_t*>(*static_cast<CUdeviceptr*>(args[0]));
  auto* cluster_out = reinterpret_cast<std::uint32_t*>(*static_cast<CUdeviceptr*>(args[1]));
  const unsigned c = sh.cluster_size();
  const unsigned clusters = sh.grid[0] * sh.grid[1] * sh.grid[2] / c;
  const auto n = static_cast<std::uint32_t>(st().launches);
  for (unsigned i = 0; i < clusters; ++i) {
    const std::vector<int>& g = eligible[mix(i * 131U + n * 7919U) % eligible.size()];
    const std::uint32_t start = mix(i ^ (n << 16) ^ 0x5bd1e995U);
    for (unsigned r = 0; r < c; ++r) {
      sm_out[i * c + r] = static_cast<std::uint32_t>(g[(start + r) % g.size()]);
      cluster_out[i * c + r] = i;
    }
  }
}

// The heart of the fake: one launch. Builds the descriptor, runs the
// callbacks, applies their mask and "runs" the kernel (or hangs the stream).
CUresult launch(CUfunction f, const Shape& sh, CUstream s, void** args) {
  const auto it = st().streams.find(reinterpret_cast<std::uintptr_t>(s));
  if (it == st().streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second.hung) return CUDA_ERROR_LAUNCH_TIMEOUT;
  ++st().launches;
  // The descriptor the driver would upload, and the callback before upload.
  std::array<std::uint8_t, 384> qmd{};
  qmd[72] = 0x40;
  std::uint32_t grid = sh.grid[0];
  std::memcpy(qmd.data() + 128, &grid, 4);
  if (sh.cluster_size() > 1) {
    for (int d = 0; d < 3; ++d) qmd[static_cast<std::size_t>(268 + d)] = static_cast<std::uint8_t>(sh.cluster[d]);
  }
  struct {
    std::uint32_t size;
    std::uint32_t pad;
    void* ptr[10];
  } params{88, 0, {}};
  params.ptr[3] = qmd.data();  // pointer slot 4
  for (const Sub& sub : st().subs) {
    if (sub.enabled) sub.cb(sub.user, 0xb, 0x1, &params);
  }
  std::set<int> sms;
  if (!it->second.green_sms.empty()) {
    sms = it->second.green_sms;
  } else {
    std::uint32_t dw0 = 0;
    std::memcpy(&dw0, qmd.data(), 4);
    const bool valid = (dw0 & 0x80000000U) != 0;
    for (int slot = 0; slot < 128; ++slot) {
      std::uint32_t word = 0;
      std::memcpy(&word, qmd.data() + 304 + 4 * (slot / 32), 4);
      const bool disabled = valid && ((word >> (slot % 32)) & 1U) != 0;
      const int tpc = st().map.tpc_of_slot[static_cast<std::size_t>(slot)];
      if (!disabled && tpc >= 0) {
        sms.insert(2 * tpc);
        sms.insert(2 * tpc + 1);
      }
    }
  }
  if (sms.empty()) {
    it->second.hung = true;  // no live slot enabled: the launch never finishes
    return CUDA_SUCCESS;
  }
  // A cluster needs cluster-size SMs of one GPC; without such a GPC among the
  // enabled SMs it waits forever.
  std::vector<std::vector<int>> eligible;
  const unsigned c = sh.cluster_size();
  if (c > 1) {
    for (const std::vector<int>& gpc : st().gpcs) {
      std::vector<int> on;
      for (int sm : gpc) {
        if (sms.count(sm) != 0) on.push_back(sm);
      }
      if (on.size() >= c) eligible.push_back(std::move(on));
    }
    if (eligible.empty()) {
      it->second.hung = true;
      return CUDA_SUCCESS;
    }
  }
  if (reinterpret_cast<std::uintptr_t>(f) == kClusterFunction) {
    if (c > 1) {
      run_cluster_kernel(sh, eligible, args);
    } else {
      // Without clusters every block is its own cluster of one.
      std::vector<std::vector<int>> all = {std::vector<int>(sms.begin(), sms.end())};
      run_cluster_kernel(sh, all, args);
    }
    return CUDA_SUCCESS;
  }
  auto* bitmap = reinterpret_cast<std::uint32_t*>(*static_cast<CUdeviceptr*>(args[0]));
  int virtual_id = 0;
  for (int sm : sms) {
    const int id = st().mps_client ? virtual_id++ : sm;
    bitmap[id / 32] |= 1U << (id % 32);
  }
  return CUDA_SUCCESS;
}

CUresult fLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, CUstream s, void** args, void**) {
  Shape sh;
  sh.grid[0] = gx;
  sh.grid[1] = gy;
  sh.grid[2] = gz;
  sh.threads = bx * by * bz;
  sh.smem = smem;
  if (CUresult r = check_shape(f, sh); r != CUDA_SUCCESS) return r;
  return launch(f, sh, s, args);
}

CUresult fLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f, void** args, void**) {
  if (cfg == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Shape sh = shape_of(*cfg);
  if (CUresult r = check_shape(f, sh); r != CUDA_SUCCESS) return r;
  return launch(f, sh, cfg->hStream, args);
}

// sum over the GPCs holding at least c SMs of floor(SMs x blocks per SM / c):
// each CTA of a cluster needs its own SM; blocks per SM from the shared
// memory and threads of one block.
CUresult fOccupancyMaxActiveClusters(int* n, CUfunction f, const CUlaunchConfig* cfg) {
  if (n == nullptr || cfg == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Shape sh = shape_of(*cfg);
  if (CUresult r = check_shape(f, sh); r != CUDA_SUCCESS) return r;
  int per_sm = kThreadsPerSm / static_cast<int>(sh.threads == 0 ? 1 : sh.threads);
  if (sh.smem > 0) per_sm = std::min(per_sm, kSmemPerSm / (static_cast<int>(sh.smem) + kSmemReserved));
  per_sm = std::min(per_sm, 32);
  const int c = static_cast<int>(sh.cluster_size());
  int total = 0;
  for (const std::vector<int>& gpc : st().gpcs) {
    const int sms = static_cast<int>(gpc.size());
    if (sms >= c) total += sms * per_sm / c;
  }
  *n = total;
  return CUDA_SUCCESS;
}

// Green contexts: groups are identified by the TPC index stored in the
// resource's padding; a descriptor is a heap set of SMs.
CUresult fDeviceGetDevResource(CUdevice, CUdevResource* r, CUdevResourceType type) {
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_VALUE;
  std::memset(r, 0, sizeof *r);
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = static_cast<unsigned>(st().map.sm_count);
  r->sm.minSmPartitionSize = 8;
  r->sm.smCoscheduledAlignment = 8;
  return CUDA_SUCCESS;
}
CUresult fDevSmResourceSplitByCount(CUdevResource* result, unsigned* n, const CUdevResource* in, CUdevResource* rem,
                                    unsigned, unsigned min_count) {
  const unsigned groups = in->sm.smCount / min_count;
  if (result == nullptr) {
    *n = groups;
    return CUDA_SUCCESS;
  }
  for (unsigned g = 0; g < groups && g < *n; ++g) {
    std::memset(&result[g], 0, sizeof result[g]);
    result[g].type = CU_DEV_RESOURCE_TYPE_SM;
    result[g].sm.smCount = min_count;
    // Groups come in an order other than TPC order, like on real hardware.
    const unsigned tpc = (g * 7) % groups;
    std::memcpy(result[g]._internal_padding, &tpc, sizeof tpc);
  }
  if (rem != nullptr) std::memset(rem, 0, sizeof *rem);
  return CUDA_SUCCESS;
}
CUresult fDevResourceGenerateDesc(CUdevResourceDesc* d, CUdevResource* r, unsigned n) {
  st().descs.push_back(std::make_unique<std::set<int>>());
  std::set<int>* sms = st().descs.back().get();
  for (unsigned i = 0; i < n; ++i) {
    unsigned tpc = 0;
    std::memcpy(&tpc, r[i]._internal_padding, sizeof tpc);
    sms->insert(static_cast<int>(2 * tpc));
    sms->insert(static_cast<int>(2 * tpc + 1));
  }
  *d = reinterpret_cast<CUdevResourceDesc>(sms);
  return CUDA_SUCCESS;
}
CUresult fGreenCtxCreate(CUgreenCtx* g, CUdevResourceDesc d, CUdevice, unsigned) {
  const std::uintptr_t h = st().next_handle++;
  st().greens[h] = *reinterpret_cast<std::set<int>*>(d);
  *g = handle_of<CUgreenCtx>(h);
  return CUDA_SUCCESS;
}
CUresult fGreenCtxDestroy(CUgreenCtx g) {
  st().greens.erase(reinterpret_cast<std::uintptr_t>(g));
  return CUDA_SUCCESS;
}
CUresult fGreenCtxStreamCreate(CUstream* s, CUgreenCtx g, unsigned flags, int) {
  if ((flags & CU_STREAM_NON_BLOCKING) == 0) return CUDA_ERROR_INVALID_VALUE;
  const auto it = st().greens.find(reinterpret_cast<std::uintptr_t>(g));
  if (it == st().greens.end()) return CUDA_ERROR_INVALID_HANDLE;
  const std::uintptr_t h = st().next_handle++;
  st().streams[h] = Stream{false, it->second};
  *s = handle_of<CUstream>(h);
  return CUDA_SUCCESS;
}
CUresult fCtxFromGreenCtx(CUcontext* c, CUgreenCtx) {
  *c = handle_of<CUcontext>(0x43);
  return CUDA_SUCCESS;
}

template <class F>
void* fn(F f) {
  return reinterpret_cast<void*>(f);
}

const std::map<std::string, void*>& entry_points() {
  static const std::map<std::string, void*> m = {
      {"cuInit", fn(&fInit)},
      {"cuDriverGetVersion", fn(&fDriverGetVersion)},
      {"cuGetErrorName", fn(&fGetErrorName)},
      {"cuGetErrorString", fn(&fGetErrorString)},
      {"cuGetExportTable", fn(&fGetExportTable)},
      {"cuDeviceGet", fn(&fDeviceGet)},
      {"cuDeviceGetCount", fn(&fDeviceGetCount)},
      {"cuDeviceGetName", fn(&fDeviceGetName)},
      {"cuDeviceGetUuid", fn(&fDeviceGetUuid)},
      {"cuDeviceGetAttribute", fn(&fDeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", fn(&fPrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", fn(&fPrimaryCtxRelease)},
      {"cuCtxSetCurrent", fn(&fCtxSetCurrent)},
      {"cuCtxGetCurrent", fn(&fCtxGetCurrent)},
      {"cuModuleLoadData", fn(&fModuleLoadData)},
      {"cuModuleUnload", fn(&fModuleUnload)},
      {"cuModuleGetFunction", fn(&fModuleGetFunction)},
      {"cuLaunchKernel", fn(&fLaunchKernel)},
      {"cuLaunchKernelEx", fn(&fLaunchKernelEx)},
      {"cuFuncSetAttribute", fn(&fFuncSetAttribute)},
      {"cuOccupancyMaxActiveClusters", fn(&fOccupancyMaxActiveClusters)},
      {"cuStreamCreate", fn(&fStreamCreate)},
      {"cuStreamDestroy", fn(&fStreamDestroy)},
      {"cuStreamQuery", fn(&fStreamQuery)},
      {"cuStreamSynchronize", fn(&fStreamSynchronize)},
      {"cuMemAlloc", fn(&fMemAlloc)},
      {"cuMemFree", fn(&fMemFree)},
      {"cuMemcpyDtoH", fn(&fMemcpyDtoH)},
      {"cuMemsetD32", fn(&fMemsetD32)},
      {"cuMemsetD32Async", fn(&fMemsetD32Async)},
      {"cuLibraryLoadData", fn(&fLibraryLoadData)},
      {"cuLibraryUnload", fn(&fLibraryUnload)},
      {"cuLibraryGetKernel", fn(&fLibraryGetKernel)},
      {"cuDeviceGetDevResource", fn(&fDeviceGetDevResource)},
      {"cuDevSmResourceSplitByCount", fn(&fDevSmResourceSplitByCount)},
      {"cuDevResourceGenerateDesc", fn(&fDevResourceGenerateDesc)},
      {"cuGreenCtxCreate", fn(&fGreenCtxCreate)},
      {"cuGreenCtxDestroy", fn(&fGreenCtxDestroy)},
      {"cuGreenCtxStreamCreate", fn(&fGreenCtxStreamCreate)},
      {"cuCtxFromGreenCtx", fn(&fCtxFromGreenCtx)},
  };
  return m;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                                               int version, cuuint64_t,
                                                                               CUdriverProcAddressQueryResult* status) {
  const auto it = entry_points().find(symbol);
  const bool found = it != entry_points().end() && version >= 2000;
  if (pfn != nullptr) *pfn = found ? it->second : nullptr;
  if (status != nullptr) *status = found ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// How many launches this process made (tests).
extern "C" __attribute__((visibility("default"))) int lithos_fake_cuda_launches() { return st().launches; }

// Makes the fake report another compute capability (tests: below 9.0 there
// are no thread-block clusters). A forked child inherits the setting.
extern "C" __attribute__((visibility("default"))) void lithos_fake_cuda_set_compute_capability(int major, int minor) {
  st().cc_major = major;
  st().cc_minor = minor;
}
