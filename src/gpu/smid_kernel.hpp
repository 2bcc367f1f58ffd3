// The %smid kernel: which SMs run blocks of a launch.
//
// The kernel is PTX text embedded in smid_kernel.cpp, JIT-compiled by the
// driver at load time (no nvcc at build time). Each block spins for a few
// microseconds so that the launch spreads over every SM it may use, then
// thread 0 sets bit %smid of a bitmap in device memory.
//
// Launches are never waited on blindly: run() polls the stream until a
// deadline and reports a launch that does not finish as kUnavailable (a mask
// with no live slot hangs forever); the caller must then give up the process
// (the context is unusable), which is why calibration runs in a child.
#pragma once

#include <cuda.h>

#include <functional>
#include <set>
#include <string>

#include "common/status.hpp"
#include "gpu/driver.hpp"

namespace lithos::gpu {

struct SmidLaunch {
  int blocks = 0;  // 0 = 16 per SM of the device
  int threads = 128;
  long long spin_cycles = 20000;
  double timeout_s = 2.0;  // how long to wait for the launch to finish
};

// The outcome of one confinement check: a launch meant to run on `tpcs` and
// the SMs it actually ran on.
struct ConfinementCheck {
  std::string backend;     // "descriptor-hook" or "green-context"
  std::string tpcs;        // the TpcSet, as text
  std::set<int> expected;  // SMs 2t and 2t+1 of every requested TPC t
  std::set<int> seen;      // SMs that ran blocks
  double setup_ms = 0;     // green-context creation time; 0 for the hook
  bool exact() const { return expected == seen; }
};

class SmidKernel {
 public:
  // Loads the kernel (cuLibraryLoadData) and allocates the bitmap in the
  // current context. kUnavailable/kInternal on driver errors.
  static Result<SmidKernel> load(const DriverApi& api, int sm_count);

  SmidKernel(SmidKernel&& o) noexcept;
  SmidKernel& operator=(SmidKernel&& o) = delete;
  SmidKernel(const SmidKernel&) = delete;
  SmidKernel& operator=(const SmidKernel&) = delete;
  ~SmidKernel();

  // Launches on `stream` and returns the SMs that ran a block. A launch that
  // does not finish within timeout_s: kUnavailable, and hung() becomes true
  // (nothing may be launched or copied afterwards). `around_launch(true)` is
  // called just before cuLaunchKernel and `around_launch(false)` just after
  // (the descriptor callback fires in between), so a caller can arm a mask
  // for this launch only.
  Result<std::set<int>> run(CUstream stream, const SmidLaunch& launch,
                            const std::function<void(bool)>& around_launch = {});
  bool hung() const { return hung_; }

 private:
  SmidKernel() = default;
  const DriverApi* api_ = nullptr;
  CUlibrary library_ = nullptr;
  CUkernel kernel_ = nullptr;
  CUdeviceptr bitmap_ = 0;
  int sm_count_ = 0;
  bool hung_ = false;
};

}  // namespace lithos::gpu
