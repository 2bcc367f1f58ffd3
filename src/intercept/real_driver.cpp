#include "intercept/real_driver.hpp"

#include "intercept/cuda_abi.hpp"  // cuda.h in ABI mode

#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include <new>

#include "intercept/log.hpp"

namespace lithos::intercept {

namespace {

// Set while this thread resolves the driver: loading libcuda runs its
// initialisers, which may call dlsym; those calls must not recurse into
// resolve() (they get the unmapped answer).
thread_local bool t_resolving = false;

}  // namespace

DlsymFn real_dlsym() noexcept {
  static std::atomic<DlsymFn> cached{nullptr};
  DlsymFn fn = cached.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // glibc >= 2.34 defines dlsym in libc.so.6 at GLIBC_2.34 and keeps the old
  // version for old binaries; older glibc has it in libdl at the base version
  // of the architecture. dlvsym is not interposed by lithos.
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  for (const char* v : kVersions) {
    void* p = ::dlvsym(RTLD_NEXT, "dlsym", v);
    if (p != nullptr) {
      fn = reinterpret_cast<DlsymFn>(p);
      cached.store(fn, std::memory_order_release);
      return fn;
    }
  }
  return nullptr;
}

bool RealDriver::resolve(bool may_load) noexcept {
  if (state_.load(std::memory_order_acquire) == kResolved) return true;
  if (t_resolving) return false;
  DlsymFn sym = real_dlsym();
  if (sym == nullptr) return false;
  t_resolving = true;
  bool ok = false;
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    if (state_.load(std::memory_order_acquire) == kResolved) {
      ok = true;
    } else {
      void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (h == nullptr && may_load) {
        h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
          state_.store(kMissing, std::memory_order_release);
          const char* why = ::dlerror();
          LITHOS_LOG_ONCE(LogLevel::kError, "cannot load the CUDA driver libcuda.so.1 (%s)",
                          why != nullptr ? why : "?");
        }
      }
      if (h != nullptr) {
        for (int i = 0; i < kHookCount; ++i) {
          real_[static_cast<std::size_t>(i)].store(sym(h, kHookInfo[i].name), std::memory_order_release);
        }
        table_ = load_driver_table(h, sym);
        handle_.store(h, std::memory_order_release);
        state_.store(kResolved, std::memory_order_release);
        ok = true;
      }
    }
  } catch (...) {
    ok = false;  // std::mutex failures only; the caller reports the missing function
  }
  t_resolving = false;
  return ok;
}

std::optional<HookId> RealDriver::hook_of_real(const void* p) noexcept {
  if (p == nullptr || !resolve(false)) return std::nullopt;
  for (int i = 0; i < kHookCount; ++i) {
    if (real_[static_cast<std::size_t>(i)].load(std::memory_order_acquire) == p) return hook_at(i);
  }
  return std::nullopt;
}

bool RealDriver::driver_in_process() noexcept {
  if (state_.load(std::memory_order_acquire) == kResolved) return true;
  // dl_iterate_phdr rather than dlopen(RTLD_NOLOAD): this also runs at exit,
  // from a destructor, where taking the loader's main lock is best avoided.
  int found = 0;
  ::dl_iterate_phdr(
      [](struct dl_phdr_info* info, std::size_t, void* data) -> int {
        const char* name = info->dlpi_name;
        if (name == nullptr) return 0;
        const char* base = std::strrchr(name, '/');
        base = base != nullptr ? base + 1 : name;
        if (std::strncmp(base, "libcuda.so", 10) == 0) {
          *static_cast<int*>(data) = 1;
          return 1;
        }
        return 0;
      },
      &found);
  return found != 0;
}

static_assert(sizeof(CUstreamCaptureMode) == sizeof(int));

RelaxedCaptureMode::RelaxedCaptureMode() noexcept : mode_(CU_STREAM_CAPTURE_MODE_RELAXED) {
  if (const auto fn = driver().cuThreadExchangeStreamCaptureMode; fn != nullptr) {
    auto m = static_cast<CUstreamCaptureMode>(mode_);
    if (fn(&m) == CUDA_SUCCESS) {
      mode_ = static_cast<int>(m);
      set_ = true;
    }
  }
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (!set_) return;
  auto m = static_cast<CUstreamCaptureMode>(mode_);
  driver().cuThreadExchangeStreamCaptureMode(&m);
}

}  // namespace lithos::intercept
