// Every driver entry point lithos calls for itself (not the real functions
// behind its hooks: those are RealDriver::function(HookId), typed by
// hook_list.def). One table, typed, resolved once with the driver by
// RealDriver (real_driver.cpp): a member is null when the driver lacks that
// entry point, and every caller checks.
//
// A member is named after the entry point it holds; where the driver has a
// newer version (_v2), that one is taken and the older is the fallback.
#pragma once

#include "intercept/cuda_abi.hpp"  // cuda.h in ABI mode

#include <cstddef>

namespace lithos::intercept {

struct DriverTable {
  // Devices and contexts.
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice) = nullptr;  // _v2, else the first version
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxGetStreamPriorityRange)(int*, int*) = nullptr;
  int (*cuGetExportTable)(const void**, const void*) = nullptr;  // gpu::GetExportTableFn
  CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*) = nullptr;

  // Streams, events and host memory (markers, the green-context route).
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*cuStreamSetAttribute)(CUstream, CUstreamAttrID, const CUstreamAttrValue*) = nullptr;
  CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned) = nullptr;  // _v2, else v1
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;  // _v2
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;  // _v2
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;              // _v2, else v1
  CUresult (*cuMemHostRegister)(void*, size_t, unsigned) = nullptr;                // _v2, else v1
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned) = nullptr;  // _v2

  // Kernels: statics, names, parameters, occupancy.
  CUresult (*cuFuncGetAttribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
  CUresult (*cuFuncGetModule)(CUmodule*, CUfunction) = nullptr;
  CUresult (*cuFuncGetName)(const char**, CUfunction) = nullptr;
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*) = nullptr;
  CUresult (*cuKernelGetFunction)(CUfunction*, CUkernel) = nullptr;
  CUresult (*cuKernelGetName)(const char**, CUkernel) = nullptr;
  CUresult (*cuKernelGetLibrary)(CUlibrary*, CUkernel) = nullptr;
  CUresult (*cuKernelGetParamInfo)(CUkernel, size_t, size_t*, size_t*) = nullptr;
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t) = nullptr;
  CUresult (*cuParamSetv)(CUfunction, int, void*, unsigned int) = nullptr;
  CUresult (*cuParamSetSize)(CUfunction, unsigned int) = nullptr;

  // Modules (the atomizer loads its rewritten images and links them).
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuLibraryLoadData)(CUlibrary*, const void*, CUjit_option*, void**, unsigned int, CUlibraryOption*, void**,
                                unsigned int) = nullptr;
  CUresult (*cuLinkCreate)(unsigned, CUjit_option*, void**, CUlinkState*) = nullptr;  // _v2
  CUresult (*cuLinkAddData)(CUlinkState, CUjitInputType, void*, size_t, const char*, unsigned, CUjit_option*,
                            void**) = nullptr;  // _v2
  CUresult (*cuLinkComplete)(CUlinkState, void**, size_t*) = nullptr;
  CUresult (*cuLinkDestroy)(CUlinkState) = nullptr;

  // Graphs (what a graph needs, graphs replayed node by node).
  CUresult (*cuGraphClone)(CUgraph*, CUgraph) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  CUresult (*cuGraphGetEdges_v2)(CUgraph, CUgraphNode*, CUgraphNode*, CUgraphEdgeData*, size_t*) = nullptr;
  CUresult (*cuGraphGetEdges)(CUgraph, CUgraphNode*, CUgraphNode*, size_t*) = nullptr;
  CUresult (*cuGraphNodeGetType)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*cuGraphKernelNodeGetParams)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*) = nullptr;  // _v2
  CUresult (*cuGraphKernelNodeGetAttribute)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*) = nullptr;
  CUresult (*cuGraphMemsetNodeGetParams)(CUgraphNode, CUDA_MEMSET_NODE_PARAMS*) = nullptr;
  CUresult (*cuGraphMemcpyNodeGetParams)(CUgraphNode, CUDA_MEMCPY3D*) = nullptr;
  CUresult (*cuGraphHostNodeGetParams)(CUgraphNode, CUDA_HOST_NODE_PARAMS*) = nullptr;
  CUresult (*cuGraphEventRecordNodeGetEvent)(CUgraphNode, CUevent*) = nullptr;
  CUresult (*cuGraphEventWaitNodeGetEvent)(CUgraphNode, CUevent*) = nullptr;
  CUresult (*cuGraphChildGraphNodeGetGraph)(CUgraphNode, CUgraph*) = nullptr;
};

// The table of the driver in `handle`, looked up with `sym` (the C
// library's dlsym).
DriverTable load_driver_table(void* handle, void* (*sym)(void*, const char*)) noexcept;

}  // namespace lithos::intercept
