// The real CUDA driver behind the hooks: libcuda.so.1's own entry points,
// found with the C library's dlsym (never ours) on the driver's handle.
//
// Resolution is lazy. Hooks need the driver (a program holding one of our
// hooks has the driver loaded, or is about to call it): function() loads
// libcuda.so.1 when it is not loaded yet. The dlsym/cuGetProcAddress mapping
// only compares addresses and never loads the driver (RTLD_NOLOAD).
#pragma once

#include "intercept/cuda_abi.hpp"  // cuda.h in ABI mode

#include <array>
#include <atomic>
#include <mutex>
#include <optional>

#include "intercept/driver_table.hpp"
#include "intercept/hook_table.hpp"

namespace lithos::intercept {

using DlsymFn = void* (*)(void* handle, const char* symbol);

// The C library's dlsym, found with dlvsym(RTLD_NEXT, "dlsym", <version>).
// Null only on a C library that has none of the versions tried.
DlsymFn real_dlsym() noexcept;

// Address of lithos's own hook for `id` (defined in hooks.cpp).
void* hook_address(HookId id) noexcept;

class RealDriver {
 public:
  // The library's member (library.hpp: made once, never destroyed).
  static RealDriver& instance() noexcept;

  // The driver's function behind hook `id`; loads the driver on first use.
  // Null when libcuda.so.1 cannot be loaded or lacks the symbol.
  void* function(HookId id) noexcept {
    void* p = real_[static_cast<std::size_t>(hook_index(id))].load(std::memory_order_acquire);
    if (p != nullptr) return p;
    resolve(true);
    return real_[static_cast<std::size_t>(hook_index(id))].load(std::memory_order_acquire);
  }
  // Every other entry point lithos calls itself, typed (driver_table.hpp);
  // loads the driver on first use. All null when it cannot be loaded (or
  // while it is being loaded, from its own initialisers).
  const DriverTable& table() noexcept {
    if (state_.load(std::memory_order_acquire) == kResolved) return table_;  // the launch path: one load
    static const DriverTable kNone{};
    return resolve(true) ? table_ : kNone;
  }
  // The hook whose real function is at `p`, if any; never loads the driver.
  std::optional<HookId> hook_of_real(const void* p) noexcept;
  // Whether libcuda.so.1 is in the process (loaded by anyone); never loads it.
  bool driver_in_process() noexcept;
  // True once a load of libcuda.so.1 was tried and failed.
  bool driver_missing() const noexcept { return state_.load(std::memory_order_acquire) == kMissing; }

 private:
  enum : int { kUnresolved = 0, kResolved = 1, kMissing = 2 };
  RealDriver() = default;
  friend class Library;  // the one owner (library.hpp)
  // Finds the driver (RTLD_NOLOAD; with may_load, loads it) and every
  // hooked symbol. Returns whether the driver is resolved.
  bool resolve(bool may_load) noexcept;

  std::mutex mu_;
  std::atomic<int> state_{kUnresolved};
  std::atomic<void*> handle_{nullptr};
  std::array<std::atomic<void*>, kHookCount> real_{};
  DriverTable table_{};  // written once, before state_ becomes kResolved
};

// The driver's table (RealDriver::instance().table()).
inline const DriverTable& driver() noexcept {
  static RealDriver& real = RealDriver::instance();
  return real.table();
}

// Makes the calling thread's stream-capture mode "relaxed" while it lives
// (cuThreadExchangeStreamCaptureMode), so that lithos's own potentially
// unsafe driver calls (event queries, registering host memory) never
// invalidate a capture the application runs: in this thread, or in global
// mode in any thread. Restores the thread's mode when destroyed.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept;
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int mode_;  // CUstreamCaptureMode: relaxed, then the thread's own while it is lent
  bool set_ = false;
};

}  // namespace lithos::intercept
