#include "gpu/driver.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "gpu/slot_map.hpp"

namespace lithos::gpu {

namespace {

// cuGetProcAddress as exported since CUDA 12.0 (symbol cuGetProcAddress_v2)
// and before (CUDA 11.3, four arguments).
using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

constexpr int kMinDriverVersion = 12000;

struct Resolver {
  GetProcAddressV2 v2 = nullptr;
  GetProcAddressV1 v1 = nullptr;

  // The entry point `name` at ABI version `version`, or null.
  void* get(const char* name, int version) const {
    void* fn = nullptr;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (v2 != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      r = v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
      if (status != CU_GET_PROC_ADDRESS_SUCCESS) fn = nullptr;
    } else if (v1 != nullptr) {
      r = v1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    }
    return r == CUDA_SUCCESS ? fn : nullptr;
  }
};

template <class Fn>
bool resolve(const Resolver& res, Fn& slot, const char* name, int version) {
  slot = reinterpret_cast<Fn>(res.get(name, version));
  return slot != nullptr;
}

Result<DriverApi> load_from(const std::string& library) {
  DriverApi api;
  ::dlerror();
  api.handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.handle == nullptr) {
    const char* why = ::dlerror();
    return Status::unavailable("no CUDA driver: cannot load " + library + " (" +
                               (why != nullptr ? why : "unknown error") + ")");
  }
  Resolver res;
  res.v2 = reinterpret_cast<GetProcAddressV2>(::dlsym(api.handle, "cuGetProcAddress_v2"));
  if (res.v2 == nullptr) res.v1 = reinterpret_cast<GetProcAddressV1>(::dlsym(api.handle, "cuGetProcAddress"));
  if (res.v2 == nullptr && res.v1 == nullptr) {
    return Status::unavailable("the CUDA driver is too old: libcuda.so.1 has no cuGetProcAddress (needs CUDA 12.0+)");
  }
  if (!resolve(res, api.cuDriverGetVersion, "cuDriverGetVersion", 2020)) {
    return Status::unavailable("no usable CUDA driver: " + library +
                               " resolves no entry points (a stub library, or no driver installed?)");
  }
  if (api.cuDriverGetVersion(&api.driver_version) != CUDA_SUCCESS || api.driver_version < kMinDriverVersion) {
    return Status::unavailable("the CUDA driver reports version " + std::to_string(api.driver_version) +
                               "; lithos needs CUDA 12.0 (12000) or newer");
  }
  bool ok = true;
  ok &= resolve(res, api.cuInit, "cuInit", 2000);
  ok &= resolve(res, api.cuGetErrorName, "cuGetErrorName", 6000);
  ok &= resolve(res, api.cuGetErrorString, "cuGetErrorString", 6000);
  // cuGetExportTable has a single ABI; fall back to the exported symbol in
  // case a driver does not serve it through cuGetProcAddress.
  if (!resolve(res, api.cuGetExportTable, "cuGetExportTable", 3000)) {
    api.cuGetExportTable = reinterpret_cast<PFN_cuGetExportTable_v3000>(::dlsym(api.handle, "cuGetExportTable"));
    ok &= api.cuGetExportTable != nullptr;
  }
  ok &= resolve(res, api.cuDeviceGet, "cuDeviceGet", 2000);
  ok &= resolve(res, api.cuDeviceGetCount, "cuDeviceGetCount", 2000);
  ok &= resolve(res, api.cuDeviceGetName, "cuDeviceGetName", 2000);
  ok &= resolve(res, api.cuDeviceGetUuid, "cuDeviceGetUuid", 11040);
  ok &= resolve(res, api.cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000);
  ok &= resolve(res, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
  ok &= resolve(res, api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000);
  ok &= resolve(res, api.cuCtxSetCurrent, "cuCtxSetCurrent", 4000);
  ok &= resolve(res, api.cuCtxGetCurrent, "cuCtxGetCurrent", 4000);
  ok &= resolve(res, api.cuModuleLoadData, "cuModuleLoadData", 2000);
  ok &= resolve(res, api.cuModuleUnload, "cuModuleUnload", 2000);
  ok &= resolve(res, api.cuModuleGetFunction, "cuModuleGetFunction", 2000);
  ok &= resolve(res, api.cuLaunchKernel, "cuLaunchKernel", 4000);
  ok &= resolve(res, api.cuStreamCreate, "cuStreamCreate", 2000);
  ok &= resolve(res, api.cuStreamDestroy, "cuStreamDestroy", 4000);
  ok &= resolve(res, api.cuStreamQuery, "cuStreamQuery", 2000);
  ok &= resolve(res, api.cuStreamSynchronize, "cuStreamSynchronize", 2000);
  ok &= resolve(res, api.cuMemAlloc, "cuMemAlloc", 3020);
  ok &= resolve(res, api.cuMemFree, "cuMemFree", 3020);
  ok &= resolve(res, api.cuMemcpyDtoH, "cuMemcpyDtoH", 3020);
  ok &= resolve(res, api.cuMemsetD32, "cuMemsetD32", 3020);
  ok &= resolve(res, api.cuMemsetD32Async, "cuMemsetD32Async", 3020);
  ok &= resolve(res, api.cuLibraryLoadData, "cuLibraryLoadData", 12000);
  ok &= resolve(res, api.cuLibraryUnload, "cuLibraryUnload", 12000);
  ok &= resolve(res, api.cuLibraryGetKernel, "cuLibraryGetKernel", 12000);
  if (!ok) return Status::unavailable("the CUDA driver lacks an entry point lithos needs (driver too old?)");
  // Optional: thread-block clusters (the topology probe), green contexts.
  resolve(res, api.cuLaunchKernelEx, "cuLaunchKernelEx", 11060);
  resolve(res, api.cuFuncSetAttribute, "cuFuncSetAttribute", 9000);
  resolve(res, api.cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", 11070);
  resolve(res, api.cuDeviceGetDevResource, "cuDeviceGetDevResource", 12040);
  resolve(res, api.cuDevSmResourceSplitByCount, "cuDevSmResourceSplitByCount", 12040);
  resolve(res, api.cuDevResourceGenerateDesc, "cuDevResourceGenerateDesc", 12040);
  resolve(res, api.cuGreenCtxCreate, "cuGreenCtxCreate", 12040);
  resolve(res, api.cuGreenCtxDestroy, "cuGreenCtxDestroy", 12040);
  resolve(res, api.cuGreenCtxStreamCreate, "cuGreenCtxStreamCreate", 12050);
  resolve(res, api.cuCtxFromGreenCtx, "cuCtxFromGreenCtx", 12040);

  const CUresult init = api.cuInit(0);
  if (init != CUDA_SUCCESS) return api.check(init, "cuInit").with_context("no usable GPU");
  int count = 0;
  const CUresult rc = api.cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) return api.check(rc, "cuDeviceGetCount");
  if (count < 1) return Status::unavailable("the CUDA driver sees no GPU");
  return api;
}

// The driver's cuGetExportTable behind the plain function-pointer shape
// install_descriptor_callback() takes.
PFN_cuGetExportTable_v3000 g_export_table = nullptr;
int export_table_shim(const void** table, const void* id) {
  if (g_export_table == nullptr) return static_cast<int>(CUDA_ERROR_NOT_INITIALIZED);
  return static_cast<int>(g_export_table(table, static_cast<const CUuuid*>(id)));
}

}  // namespace

GetExportTableFn DriverApi::export_table_fn() const {
  if (cuGetExportTable == nullptr) return nullptr;
  g_export_table = cuGetExportTable;
  return &export_table_shim;
}

std::string DriverApi::error_text(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName != nullptr) cuGetErrorName(r, &name);
  if (cuGetErrorString != nullptr) cuGetErrorString(r, &text);
  std::string out = name != nullptr ? name : ("CUresult " + std::to_string(static_cast<int>(r)));
  if (text != nullptr) out += std::string(": ") + text;
  return out;
}

Status DriverApi::check(CUresult r, const char* what) const {
  if (r == CUDA_SUCCESS) return Status::ok();
  const std::string msg = std::string(what) + ": " + error_text(r);
  switch (r) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_OPERATING_SYSTEM:
    case CUDA_ERROR_STUB_LIBRARY: return Status::unavailable(msg);
    default: return Status::internal(msg);
  }
}

Result<DriverApi> load_driver_api() {
  static std::once_flag once;
  static Result<DriverApi>* cached = nullptr;
  std::call_once(once, [] {
    const char* lib = std::getenv("LITHOS_CUDA_LIBRARY");
    cached = new Result<DriverApi>(load_from(lib != nullptr && *lib != '\0' ? lib : "libcuda.so.1"));
  });
  return *cached;
}

Result<DriverApi> load_driver_api_from(const std::string& library) { return load_from(library); }

std::string kernel_driver_version() {
  const int fd = ::open("/proc/driver/nvidia/version", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return "";
  return kernel_driver_version_from(std::string_view(buf, static_cast<std::size_t>(n)));
}

std::string kernel_driver_version_from(std::string_view text) {
  // First line, e.g. "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  <date>" or
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...":
  // the version is the first word made only of digits and dots, with a dot.
  text = text.substr(0, text.find('\n'));
  while (!text.empty()) {
    const std::size_t start = text.find_first_not_of(" \t");
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const std::size_t end = text.find_first_of(" \t");
    const std::string_view word = text.substr(0, end);
    const bool numeric = word.find_first_not_of("0123456789.") == std::string_view::npos;
    if (numeric && word.find('.') != std::string_view::npos && word.front() != '.') return std::string(word);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end);
  }
  return "";
}

Result<DeviceInfo> device_info(const DriverApi& api, int ordinal) {
  int count = 0;
  if (CUresult r = api.cuDeviceGetCount(&count); r != CUDA_SUCCESS) return api.check(r, "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    return Status::invalid_argument("device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) +
                                    " visible: 0-" + std::to_string(count - 1) + ")");
  }
  CUdevice dev = 0;
  if (CUresult r = api.cuDeviceGet(&dev, ordinal); r != CUDA_SUCCESS) return api.check(r, "cuDeviceGet");
  DeviceInfo info;
  info.ordinal = ordinal;
  info.cuda_driver_version = api.driver_version;
  char name[256] = {};
  if (CUresult r = api.cuDeviceGetName(name, sizeof name - 1, dev); r != CUDA_SUCCESS) {
    return api.check(r, "cuDeviceGetName");
  }
  info.name = name;
  CUuuid uuid{};
  if (CUresult r = api.cuDeviceGetUuid(&uuid, dev); r != CUDA_SUCCESS) return api.check(r, "cuDeviceGetUuid");
  info.uuid = uuid_text(uuid.bytes);
  if (CUresult r = api.cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  }
  api.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  api.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  info.driver_version = kernel_driver_version();
  if (info.driver_version.empty()) {
    info.driver_version =
        "cuda-" + std::to_string(api.driver_version / 1000) + "." + std::to_string((api.driver_version % 1000) / 10);
  }
  return info;
}

}  // namespace lithos::gpu
