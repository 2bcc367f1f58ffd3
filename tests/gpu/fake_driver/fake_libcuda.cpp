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
// their SMs. Not thread-safe; one context; enough for the tests.
#include <cuda.h>

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

struct State {
  lithos::gpu::SlotMap map = lithos::gpu::testing::h100_slot_map();
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
CUresult fDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult fDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult fDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(len), "%s", "Fake H100 (lithos test driver)");
  return CUDA_SUCCESS;
}
CUresult fDeviceGetUuid(CUuuid* u, CUdevice) {
  for (int i = 0; i < 16; ++i) u->bytes[i] = static_cast<char>(0x10 + i);
  return CUDA_SUCCESS;
}
CUresult fDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = st().map.sm_count; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult fPrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = handle_of<CUcontext>(0x42);
  return CUDA_SUCCESS;
}
CUresult fPrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult fCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult fCtxGetCurrent(CUcontext* c) {
  *c = handle_of<CUcontext>(0x42);
  return CUDA_SUCCESS;
}
CUresult fUnsupported() { return CUDA_ERROR_NOT_SUPPORTED; }
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
  *k = handle_of<CUkernel>(0x88);
  return CUDA_SUCCESS;
}

// The heart of the fake: one launch of the %smid kernel.
CUresult fLaunchKernel(CUfunction, unsigned gx, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream s,
                       void** args, void**) {
  const auto it = st().streams.find(reinterpret_cast<std::uintptr_t>(s));
  if (it == st().streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second.hung) return CUDA_ERROR_LAUNCH_TIMEOUT;
  ++st().launches;
  // The descriptor the driver would upload, and the callback before upload.
  std::array<std::uint8_t, 384> qmd{};
  qmd[72] = 0x40;
  std::uint32_t grid = gx;
  std::memcpy(qmd.data() + 128, &grid, 4);
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
  auto* bitmap = reinterpret_cast<std::uint32_t*>(*static_cast<CUdeviceptr*>(args[0]));
  for (int sm : sms) bitmap[sm / 32] |= 1U << (sm % 32);
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
      {"cuModuleLoadData", fn(&fUnsupported)},
      {"cuModuleUnload", fn(&fUnsupported)},
      {"cuModuleGetFunction", fn(&fUnsupported)},
      {"cuLaunchKernel", fn(&fLaunchKernel)},
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
