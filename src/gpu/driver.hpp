// A minimal loader of the CUDA driver for lithos's own GPU tools (calibration,
// green contexts). The driver is always reached with dlopen("libcuda.so.1")
// and cuGetProcAddress, each entry point requested at the ABI version whose
// typedef (cudaTypedefs.h) it is stored in; libcuda is never linked.
//
// This is NOT the interposer's driver table (src/intercept keeps its own); it
// is for processes that own their CUDA context, like `lithos calibrate`.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>
#include <string_view>

#include "common/status.hpp"
#include "gpu/descriptor_hook.hpp"

namespace lithos::gpu {

struct DriverApi {
  void* handle = nullptr;  // dlopen handle of libcuda.so.1 (never closed)
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000

  PFN_cuInit_v2000 cuInit = nullptr;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuGetExportTable_v3000 cuGetExportTable = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName = nullptr;
  PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease = nullptr;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuModuleLoadData_v2000 cuModuleLoadData = nullptr;
  PFN_cuModuleUnload_v2000 cuModuleUnload = nullptr;
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction = nullptr;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel = nullptr;
  PFN_cuStreamCreate_v2000 cuStreamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy = nullptr;
  PFN_cuStreamQuery_v2000 cuStreamQuery = nullptr;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize = nullptr;
  PFN_cuMemAlloc_v3020 cuMemAlloc = nullptr;
  PFN_cuMemFree_v3020 cuMemFree = nullptr;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH = nullptr;
  PFN_cuMemsetD32_v3020 cuMemsetD32 = nullptr;
  PFN_cuMemsetD32Async_v3020 cuMemsetD32Async = nullptr;
  // Context-independent kernels (driver >= 12.0): launchable on any context's
  // stream, green contexts included.
  PFN_cuLibraryLoadData_v12000 cuLibraryLoadData = nullptr;
  PFN_cuLibraryUnload_v12000 cuLibraryUnload = nullptr;
  PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel = nullptr;

  // Thread-block clusters (driver >= 11.8): the topology probe. Null when the
  // driver lacks them: check has_clusters().
  PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx = nullptr;
  PFN_cuFuncSetAttribute_v9000 cuFuncSetAttribute = nullptr;
  PFN_cuOccupancyMaxActiveClusters_v11070 cuOccupancyMaxActiveClusters = nullptr;

  // Green contexts (driver >= 12.4; cuGreenCtxStreamCreate >= 12.5). Null
  // when the driver lacks them: check has_green_contexts().
  PFN_cuDeviceGetDevResource_v12040 cuDeviceGetDevResource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 cuDevSmResourceSplitByCount = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 cuDevResourceGenerateDesc = nullptr;
  PFN_cuGreenCtxCreate_v12040 cuGreenCtxCreate = nullptr;
  PFN_cuGreenCtxDestroy_v12040 cuGreenCtxDestroy = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 cuGreenCtxStreamCreate = nullptr;
  PFN_cuCtxFromGreenCtx_v12040 cuCtxFromGreenCtx = nullptr;

  bool has_green_contexts() const {
    return cuDeviceGetDevResource != nullptr && cuDevSmResourceSplitByCount != nullptr &&
           cuDevResourceGenerateDesc != nullptr && cuGreenCtxCreate != nullptr && cuGreenCtxDestroy != nullptr &&
           cuGreenCtxStreamCreate != nullptr && cuCtxFromGreenCtx != nullptr;
  }
  bool has_clusters() const {
    return cuLaunchKernelEx != nullptr && cuFuncSetAttribute != nullptr && cuOccupancyMaxActiveClusters != nullptr;
  }
  // cuGetExportTable in the shape install_descriptor_callback() takes.
  GetExportTableFn export_table_fn() const;
  // "CUDA_ERROR_...: message" for a driver result.
  std::string error_text(CUresult r) const;
  // Status for a failed call: kUnavailable for no device / no driver /
  // unsupported, kInternal otherwise; message "<what>: <error_text>".
  Status check(CUresult r, const char* what) const;
};

// Loads libcuda.so.1 (or the file named by $LITHOS_CUDA_LIBRARY, for tests
// and unusual installs) and resolves every entry point above; calls cuInit(0).
// kUnavailable with a clear message when the library is missing, the driver
// is older than CUDA 12.0, cuInit fails (no GPU, stub library, driver/library
// mismatch) or no device is visible. Computed once per process and cached.
Result<DriverApi> load_driver_api();

// The same from an explicit library path, uncached (tests).
Result<DriverApi> load_driver_api_from(const std::string& library);

// What a tool needs to know about one device.
struct DeviceInfo {
  int ordinal = 0;
  std::string uuid;             // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;             // "NVIDIA H100 80GB HBM3"
  std::string driver_version;   // kernel driver "580.159.04" (from /proc), else "cuda-13.0"
  int cuda_driver_version = 0;  // 13000
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
};
Result<DeviceInfo> device_info(const DriverApi& api, int ordinal);

// The kernel driver version from /proc/driver/nvidia/version ("580.159.04"),
// or "" when unreadable.
std::string kernel_driver_version();
// The same from the text of that file (tests).
std::string kernel_driver_version_from(std::string_view proc_text);

}  // namespace lithos::gpu
