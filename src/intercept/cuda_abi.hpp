// cuda.h as the driver's ABI: every exported variant of an entry point
// (cuLaunchKernel and cuLaunchKernel_ptsz, cuGraphInstantiate's legacy
// five-argument form, cuGetProcAddress and cuGetProcAddress_v2, ...) is
// declared under its own exported name, not remapped by cuda.h's source-level
// #defines. Include this header first, before anything else that includes
// cuda.h, in the translation units that define or name hooks.
#pragma once

#if defined(CUDA_VERSION) && !defined(__CUDA_API_VERSION_INTERNAL)
#error "cuda_abi.hpp must be included before any other include of cuda.h"
#endif

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
// Keeps the driver-internal extra enumerators (..._MAX) out, so that every
// translation unit sees the same enum definitions (one definition rule).
#ifndef __CUDA_API_VERSION_INTERNAL_ODR
#define __CUDA_API_VERSION_INTERNAL_ODR 1
#endif
#include <cuda.h>

namespace lithos::intercept {

// The stream of a cuLaunchKernelEx configuration (null config: null stream;
// the real driver then reports the error).
inline CUstream stream_of_config(const CUlaunchConfig* config) noexcept {
  return config != nullptr ? config->hStream : nullptr;
}
// The upload stream of cuGraphInstantiateWithParams (used only when the
// CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD flag asks for an upload).
inline CUstream stream_of_params(const CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept {
  return params != nullptr && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0 ? params->hUploadStream
                                                                                        : nullptr;
}

}  // namespace lithos::intercept
