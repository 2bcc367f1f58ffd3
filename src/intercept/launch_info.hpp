// What a launch hook knows of its launch from its arguments alone (no driver
// call), and what the runtime learns of its kernel once per handle: shared by
// the mask decision (runtime.hpp) and the daemon client (client.hpp).
#pragma once

#include <cstdint>

#include "sched/launch_fit.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::intercept {

// What a launch hook knows of its launch without asking the driver.
struct LaunchInfo {
  const void* function = nullptr;  // CUfunction or CUkernel (null: unknown)
  sched::Dim3 grid;
  sched::Dim3 block;
  std::uint32_t smem = 0;     // dynamic shared memory
  sched::Dim3 cluster;        // from the launch's attributes
  bool cluster_attr = false;  // `cluster` was given at launch (else the kernel's compile-time shape applies)
  bool cooperative = false;   // cuLaunchCooperativeKernel* or CU_LAUNCH_ATTRIBUTE_COOPERATIVE
  bool multi_device = false;  // cuLaunchCooperativeKernelMultiDevice: needs of every entry already merged
  sched::LaunchNeeds merged;  // multi_device: the entries' needs
};

// What lithosd gave a best-effort launch (an atom, or a launch run on the
// fallback set when the daemon is gone): its TPC set, whatever else is
// configured. Handed down the launch path as an argument (launch_one,
// Runtime::begin_launch, Runtime::choose); null where nothing was granted.
struct Grant {
  sched::TpcSet tpcs;  // empty: the whole GPU (no mask)
  // Made at once because lithosd lets its tenant run free, on its
  // allocation: reported after it was made, as a high-priority launch is.
  bool runs_free = false;
};

// What a kernel's compiled code fixes for every launch of it, from
// cuFuncGetAttribute once per handle (KernelInfo::statics; zeros /
// {1,1,1} when unknown): the compile-time cluster shape, registers per
// thread and static shared memory (lithosd's occupancy bound needs the last
// two: a launch's grid and block alone let it assume 32 registers and no
// static memory).
struct KernelStatics {
  sched::Dim3 cluster;
  std::uint32_t regs = 0;
  std::uint32_t smem = 0;
};

// A launched function's stable identity (KernelInfo::id_of: the kernel's
// name where the atomizer knows it, so that processes of a tenant share
// predictions) with its statics (KernelInfo::identity).
struct LaunchIdentity {
  std::uint64_t kernel = 0;
  KernelStatics statics;
};

}  // namespace lithos::intercept
