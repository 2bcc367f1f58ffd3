#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/kernel_info.hpp"

#include <array>

#include "intercept/atomizer.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"
#include "intercept/thread_frame.hpp"

namespace lithos::intercept {

namespace {

// A CUfunction for a launched handle: the handle itself, or for a CUkernel
// (cuLibrary*) its function in the current context. Null when neither.
CUfunction function_of(const void* handle) noexcept {
  const DriverTable& drv = driver();
  const auto get_module = drv.cuFuncGetModule;
  const auto kernel_get_function = drv.cuKernelGetFunction;
  if (handle == nullptr) return nullptr;
  auto* f = static_cast<CUfunction>(const_cast<void*>(handle));
  CUmodule mod = nullptr;
  if (get_module == nullptr || get_module(&mod, f) == CUDA_SUCCESS) return f;
  CUfunction g = nullptr;
  if (kernel_get_function != nullptr && kernel_get_function(&g, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS) {
    return g;
  }
  return nullptr;
}

}  // namespace

KernelStatics KernelInfo::statics(const void* function) noexcept {
  if (function == nullptr) return {};
  try {
    {
      const std::shared_lock<std::shared_mutex> lock(statics_mu_);
      const auto it = statics_.find(function);
      if (it != statics_.end()) return it->second;
    }
    const auto get_attr = driver().cuFuncGetAttribute;
    KernelStatics k;
    InternalScope internal;
    CUfunction f = function_of(function);
    if (get_attr != nullptr && f != nullptr) {
      auto attr = [&](CUfunction_attribute a) {
        int v = 0;
        return get_attr(&v, a, f) == CUDA_SUCCESS ? v : -1;
      };
      const int x = attr(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH);
      const int y = attr(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT);
      const int z = attr(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH);
      if (x > 0 && y >= 0 && z >= 0) {
        k.cluster = {static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y > 0 ? y : 1),
                     static_cast<std::uint32_t>(z > 0 ? z : 1)};
      }
      const int regs = attr(CU_FUNC_ATTRIBUTE_NUM_REGS);
      const int smem = attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
      if (regs > 0 && regs <= 255) k.regs = static_cast<std::uint32_t>(regs);
      if (smem > 0) k.smem = static_cast<std::uint32_t>(smem);
    }
    const std::unique_lock<std::shared_mutex> lock(statics_mu_);
    if (statics_.size() > 65536) {  // handles of unloaded modules
      statics_.clear();
      statics_epoch_.fetch_add(1, std::memory_order_acq_rel);
    }
    statics_[function] = k;
    return k;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return {};
  }
}

int KernelInfo::blocks_per_sm(const void* function, std::uint64_t threads, std::uint32_t smem) noexcept {
  const auto occupancy = driver().cuOccupancyMaxActiveBlocksPerMultiprocessor;
  if (occupancy == nullptr || threads == 0 || threads > 1024) return 0;
  InternalScope internal;
  CUfunction f = function_of(function);
  int n = 0;
  if (f == nullptr || occupancy(&n, f, static_cast<int>(threads), smem) != CUDA_SUCCESS) return 0;
  return n;
}

LaunchIdentity KernelInfo::identity(const void* function, bool statics) noexcept {
  struct Cached {
    const void* function = nullptr;
    std::uint64_t epoch = 0;
    bool statics = false;
    LaunchIdentity id;
  };
  thread_local std::array<Cached, 64> t_cache{};
  // Read before the tables: a change made meanwhile makes the entry stale.
  const std::uint64_t epoch =
      (static_cast<std::uint64_t>(atomizer_.table_epoch()) << 32) | statics_epoch_.load(std::memory_order_acquire);
  const auto h = reinterpret_cast<std::uintptr_t>(function);
  Cached& c = t_cache[((h >> 4) ^ (h >> 10)) & 63];
  if (c.function == function && c.epoch == epoch && (c.statics || !statics)) return c.id;
  LaunchIdentity id;
  id.kernel = id_of(function);
  if (statics) id.statics = this->statics(function);
  c = Cached{function, epoch, statics, id};
  return id;
}

std::uint64_t KernelInfo::id_of(const void* function) const noexcept {
  // The same kernel in every process of a tenant: the name the atomizer
  // recorded, else the handle (stable for the life of this process).
  if (const FunctionEntry* e = atomizer_.lookup(function); e != nullptr && e->counters != nullptr) {
    return e->counters->name_hash;  // hashed once, when the kernel was first seen
  }
  std::uint64_t h = reinterpret_cast<std::uintptr_t>(function);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// Kernel names serve the debug log only: recorded only when it is on (the
// runtime asks for CUfunctions tens of times per model step, and a mutex and
// a string copy each time cost ~1% of a launch-bound PyTorch loop).
void KernelInfo::note_name(const void* handle, const char* name) noexcept {
  if (handle == nullptr || name == nullptr || !log_enabled(LogLevel::kDebug)) return;
  try {
    const std::lock_guard<std::mutex> lock(names_mu_);
    names_[handle] = name;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

void KernelInfo::note_function_of_kernel(const void* function, const void* kernel) noexcept {
  if (function == nullptr || kernel == nullptr || !log_enabled(LogLevel::kDebug)) return;
  try {
    const std::lock_guard<std::mutex> lock(names_mu_);
    const auto it = names_.find(kernel);
    if (it != names_.end()) names_[function] = it->second;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

std::string KernelInfo::name(const void* handle) const noexcept {
  try {
    const std::lock_guard<std::mutex> lock(names_mu_);
    const auto it = names_.find(handle);
    return it != names_.end() ? it->second : std::string();
  } catch (...) {
    return {};
  }
}

}  // namespace lithos::intercept
