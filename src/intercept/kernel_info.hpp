// What lithos knows of the kernels a process launches, by CUfunction /
// CUkernel handle: what the compiled code fixes for every launch
// (KernelStatics: cluster shape, registers, static shared memory, from
// cuFuncGetAttribute once per handle), the occupancy asked per launch
// shape, a stable identity for lithosd, and the names the debug log prints.
//
// Threading: statics behind a shared_mutex (read-mostly), names behind a
// mutex and recorded only while the debug log is on; identity() answers
// from a small per-thread cache first (the hot path of a launch).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "intercept/launch_info.hpp"
#include "intercept/stats.hpp"
#include "sched/types.hpp"

namespace lithos::intercept {

class Atomizer;

class KernelInfo {
 public:
  // The atomizer: its table's epoch and per-kernel counters (its owner's, handed down).
  KernelInfo(Counters& counters, Atomizer& atomizer) noexcept : counters_(counters), atomizer_(atomizer) {}
  KernelInfo(const KernelInfo&) = delete;
  KernelInfo& operator=(const KernelInfo&) = delete;

  // What a kernel's compiled code fixes for every launch of it
  // (launch_info.hpp), from cuFuncGetAttribute once per handle.
  KernelStatics statics(const void* function) noexcept;
  // Compile-time cluster shape of a function (CU_FUNC_ATTRIBUTE_REQUIRED_
  // CLUSTER_*); {1,1,1} when none or unknown.
  sched::Dim3 static_cluster(const void* function) noexcept { return statics(function).cluster; }
  // Resident blocks per SM of `function` with this block and dynamic shared
  // memory (0: unknown).
  int blocks_per_sm(const void* function, std::uint64_t threads, std::uint32_t smem) noexcept;
  // A stable identity of a launched function (the kernel's name where the
  // atomizer knows it, so that processes of a tenant share predictions).
  std::uint64_t id_of(const void* function) const noexcept;
  // id_of and statics of a launched function together, from a small
  // per-thread cache in front of the two locked tables. `statics` false:
  // id_of only (a graph exec has none).
  LaunchIdentity identity(const void* function, bool statics) noexcept;

  // Kernel names (cuModuleGetFunction, cuLibraryGetKernel,
  // cuKernelGetFunction), for the debug log.
  void note_name(const void* handle, const char* name) noexcept;
  void note_function_of_kernel(const void* function, const void* kernel) noexcept;
  // The name recorded for a CUfunction/CUkernel ("" if unknown).
  std::string name(const void* handle) const noexcept;

 private:
  Counters& counters_;
  Atomizer& atomizer_;
  mutable std::shared_mutex statics_mu_;
  std::unordered_map<const void*, KernelStatics> statics_;
  std::atomic<std::uint32_t> statics_epoch_{0};  // grows when statics_ is cleared (identity's cache)
  mutable std::mutex names_mu_;
  std::unordered_map<const void*, std::string> names_;
};

}  // namespace lithos::intercept
