// What a launch hook knows of its launch from its arguments alone (no driver
// call): shared by the mask decision (runtime.hpp) and the daemon client
// (client.hpp).
#pragma once

#include <cstdint>

#include "sched/launch_fit.hpp"
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

}  // namespace lithos::intercept
