#include "intercept/driver_table.hpp"

#include <initializer_list>
#include <type_traits>

namespace lithos::intercept {

DriverTable load_driver_table(void* handle, void* (*sym)(void*, const char*)) noexcept {
  DriverTable t;
  // The first of `names` the driver exports.
  auto get = [&](auto& fp, std::initializer_list<const char*> names) {
    for (const char* name : names) {
      if (void* p = sym(handle, name); p != nullptr) {
        fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(p);
        return;
      }
    }
  };
  get(t.cuDeviceGetCount, {"cuDeviceGetCount"});
  get(t.cuDeviceGet, {"cuDeviceGet"});
  get(t.cuDeviceGetUuid, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"});
  get(t.cuDeviceGetAttribute, {"cuDeviceGetAttribute"});
  get(t.cuCtxGetDevice, {"cuCtxGetDevice"});
  get(t.cuCtxGetCurrent, {"cuCtxGetCurrent"});
  get(t.cuCtxSetCurrent, {"cuCtxSetCurrent"});
  get(t.cuCtxGetStreamPriorityRange, {"cuCtxGetStreamPriorityRange"});
  get(t.cuGetExportTable, {"cuGetExportTable"});
  get(t.cuThreadExchangeStreamCaptureMode, {"cuThreadExchangeStreamCaptureMode"});

  get(t.cuStreamIsCapturing, {"cuStreamIsCapturing"});
  get(t.cuStreamSetAttribute, {"cuStreamSetAttribute"});
  get(t.cuStreamWriteValue64, {"cuStreamWriteValue64_v2", "cuStreamWriteValue64"});
  get(t.cuStreamWaitEvent, {"cuStreamWaitEvent"});
  get(t.cuStreamDestroy, {"cuStreamDestroy_v2"});
  get(t.cuEventCreate, {"cuEventCreate"});
  get(t.cuEventDestroy, {"cuEventDestroy_v2"});
  get(t.cuEventRecord, {"cuEventRecord"});
  get(t.cuEventQuery, {"cuEventQuery"});
  get(t.cuEventSynchronize, {"cuEventSynchronize"});
  get(t.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  get(t.cuMemHostRegister, {"cuMemHostRegister_v2", "cuMemHostRegister"});
  get(t.cuMemHostGetDevicePointer, {"cuMemHostGetDevicePointer_v2"});

  get(t.cuFuncGetAttribute, {"cuFuncGetAttribute"});
  get(t.cuFuncGetModule, {"cuFuncGetModule"});
  get(t.cuFuncGetName, {"cuFuncGetName"});
  get(t.cuFuncGetParamInfo, {"cuFuncGetParamInfo"});
  get(t.cuKernelGetFunction, {"cuKernelGetFunction"});
  get(t.cuKernelGetName, {"cuKernelGetName"});
  get(t.cuKernelGetLibrary, {"cuKernelGetLibrary"});
  get(t.cuKernelGetParamInfo, {"cuKernelGetParamInfo"});
  get(t.cuOccupancyMaxActiveBlocksPerMultiprocessor, {"cuOccupancyMaxActiveBlocksPerMultiprocessor"});
  get(t.cuParamSetv, {"cuParamSetv"});
  get(t.cuParamSetSize, {"cuParamSetSize"});

  get(t.cuModuleLoadData, {"cuModuleLoadData"});
  get(t.cuLibraryLoadData, {"cuLibraryLoadData"});
  get(t.cuLinkCreate, {"cuLinkCreate_v2"});
  get(t.cuLinkAddData, {"cuLinkAddData_v2"});
  get(t.cuLinkComplete, {"cuLinkComplete"});
  get(t.cuLinkDestroy, {"cuLinkDestroy"});

  get(t.cuGraphClone, {"cuGraphClone"});
  get(t.cuGraphDestroy, {"cuGraphDestroy"});
  get(t.cuGraphGetNodes, {"cuGraphGetNodes"});
  get(t.cuGraphGetEdges_v2, {"cuGraphGetEdges_v2"});
  get(t.cuGraphGetEdges, {"cuGraphGetEdges"});
  get(t.cuGraphNodeGetType, {"cuGraphNodeGetType"});
  get(t.cuGraphKernelNodeGetParams, {"cuGraphKernelNodeGetParams_v2"});
  get(t.cuGraphKernelNodeGetAttribute, {"cuGraphKernelNodeGetAttribute"});
  get(t.cuGraphMemsetNodeGetParams, {"cuGraphMemsetNodeGetParams"});
  get(t.cuGraphMemcpyNodeGetParams, {"cuGraphMemcpyNodeGetParams"});
  get(t.cuGraphHostNodeGetParams, {"cuGraphHostNodeGetParams"});
  get(t.cuGraphEventRecordNodeGetEvent, {"cuGraphEventRecordNodeGetEvent"});
  get(t.cuGraphEventWaitNodeGetEvent, {"cuGraphEventWaitNodeGetEvent"});
  get(t.cuGraphChildGraphNodeGetGraph, {"cuGraphChildGraphNodeGetGraph"});
  return t;
}

}  // namespace lithos::intercept
