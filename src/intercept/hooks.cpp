// The exported hooks: one thin extern "C" shim per line of hook_list.def,
// all expanded from that list, each calling dispatch<>() with its HookId and
// the real function's exact type (taken from cuda.h, so a shim whose
// parameters disagree with cuda.h does not compile).
//
// Contract of every shim (docs/interposer.md, "Fail-safe rules"):
//  - it always ends in the real driver function with the caller's arguments,
//    unchanged (one exception: under the green-context backend a launch's
//    stream is replaced by the partition's stream, see runtime.hpp), and
//    returns its result unchanged;
//  - nothing lithos does around the call can throw out of the shim or stop
//    the process: failures are caught, counted and logged once, and the call
//    goes on;
//  - when the real function cannot be found it returns an error the driver
//    itself uses (CUDA_ERROR_NOT_INITIALIZED: no driver; CUDA_ERROR_NOT_FOUND:
//    the driver lacks the symbol) and never calls through a null pointer.
#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include <array>
#include <atomic>
#include <exception>
#include <tuple>
#include <type_traits>

#include "intercept/hook_table.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"
#include "intercept/runtime.hpp"

namespace lithos::intercept {

namespace {

// Restores this thread's frame when a hooked call ends (calls can nest).
class FrameGuard {
 public:
  FrameGuard() noexcept : saved_(Runtime::frame()) {}
  ~FrameGuard() { Runtime::frame() = saved_; }
  FrameGuard(const FrameGuard&) = delete;
  FrameGuard& operator=(const FrameGuard&) = delete;
  const ThreadFrame& saved() const noexcept { return saved_; }

 private:
  ThreadFrame saved_;
};

std::array<std::atomic<bool>, kHookCount> g_missing_logged{};

CUresult missing_real(HookId id) noexcept {
  const bool no_driver = RealDriver::instance().driver_missing();
  auto& logged = g_missing_logged[static_cast<std::size_t>(hook_index(id))];
  if (!logged.exchange(true, std::memory_order_relaxed)) {
    LITHOS_LOG(LogLevel::kError, "%s: %s; returning %s", hook_info(id).name,
               no_driver ? "the CUDA driver (libcuda.so.1) cannot be loaded" : "the driver does not export it",
               no_driver ? "CUDA_ERROR_NOT_INITIALIZED" : "CUDA_ERROR_NOT_FOUND");
  }
  return no_driver ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_NOT_FOUND;
}

// The kernel a launch names (for debug logs), when its signature has one.
template <class... A>
const void* launched_function(const A&... a) noexcept {
  using Args = std::tuple<A...>;
  if constexpr (sizeof...(A) >= 1 && std::is_same_v<std::tuple_element_t<0, Args>, CUfunction>) {
    return std::get<0>(std::tie(a...));
  } else if constexpr (sizeof...(A) >= 2 && std::is_same_v<std::tuple_element_t<1, Args>, CUfunction>) {
    return std::get<1>(std::tie(a...));
  } else {
    return nullptr;
  }
}

// Green-context backend: the argument list with the stream replaced by the
// partition's stream (a cuLaunchKernelEx configuration is copied into *cfg).
template <class T>
T with_stream(T v, CUstream target, CUlaunchConfig* cfg) noexcept {
  if constexpr (std::is_same_v<T, CUstream>) {
    return target;
  } else if constexpr (std::is_same_v<T, const CUlaunchConfig*>) {
    if (v == nullptr) return v;
    *cfg = *v;
    cfg->hStream = target;
    return cfg;
  } else {
    return v;
  }
}
template <class... A>
inline constexpr bool kHasStreamParam = ((std::is_same_v<A, CUstream> || std::is_same_v<A, const CUlaunchConfig*>) ||
                                         ...);

// Replaces a cuGetProcAddress answer by the matching hook. The real driver
// chose the variant (by symbol, version and flags); lithos only recognises
// the address it returned among the real addresses of the hooked ABI names,
// so version and per-thread-stream semantics are exactly the driver's.
void map_proc_address(const char* symbol, void** pfn) noexcept {
  Runtime& rt = Runtime::instance();
  if (const auto id = RealDriver::instance().hook_of_real(*pfn)) {
    *pfn = hook_address(*id);
    rt.counters().bump(rt.counters().procaddress_hooked);
    return;
  }
  // A driver that reaches its own exported functions through the dynamic
  // linker hands out lithos's hooks already (they come first in the global
  // scope): nothing to replace.
  for (int i = 0; i < kHookCount; ++i) {
    if (*pfn == hook_address(hook_at(i))) {
      rt.counters().bump(rt.counters().procaddress_hooked);
      return;
    }
  }
  if (symbol != nullptr && find_hook(symbol)) {
    rt.counters().bump(rt.counters().procaddress_unrecognised);
    LITHOS_LOG(LogLevel::kWarn,
               "cuGetProcAddress(\"%s\") returned %p, which is none of the driver's exported variants: "
               "calls through it are not seen by lithos",
               symbol, *pfn);
  }
}

template <HookId Id, class Fn, class... A>
CUresult dispatch(CUstream stream, A... a) {
  static_assert(std::is_same_v<Fn, CUresult (*)(A...)>, "hook_list.def: args do not match params");
  constexpr HookInfo info = hook_info(Id);
  const auto fn = reinterpret_cast<Fn>(RealDriver::instance().function(Id));
  if (fn == nullptr) {
    if constexpr (info.kind == HookKind::kGetProcAddress) {
      void** pfn = std::get<1>(std::tie(a...));
      if (pfn != nullptr) *pfn = nullptr;
      if constexpr (sizeof...(A) == 5) {
        CUdriverProcAddressQueryResult* status = std::get<4>(std::tie(a...));
        if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      }
    }
    return missing_real(Id);
  }
  // lithos's own driver calls (green-context set-up) pass straight through,
  // and so does everything when the operator disabled lithos (pointers
  // handed out by cuGetProcAddress stay the driver's own then).
  if (lithos_disabled() || Runtime::frame().internal) return fn(a...);

  Runtime& rt = Runtime::instance();
  rt.counters().call(Id);

  if constexpr (info.kind == HookKind::kLaunch) {
    const FrameGuard guard;
    try {
      rt.begin_launch(Id, stream, info.ptsz, launched_function(a...));
    } catch (const std::exception& e) {
      Runtime::frame() = guard.saved();
      rt.internal_error(Id, e.what());
    } catch (...) {
      Runtime::frame() = guard.saved();
      rt.internal_error(Id, "unknown exception");
    }
    if constexpr (kHasStreamParam<A...>) {
      if (rt.backend() == Backend::kGreen) {
        const Runtime::GreenRoute route = rt.green_route(stream, info.ptsz);
        if (route) {
          CUlaunchConfig cfg{};
          const CUresult r = fn(with_stream(a, route.target(), &cfg)...);
          rt.end_launch();
          return r;  // the route orders the caller's stream after the partition's
        }
      }
    }
    const CUresult r = fn(a...);
    rt.end_launch();
    return r;
  } else if constexpr (info.kind == HookKind::kGraphLaunch || info.kind == HookKind::kGraphUpload) {
    const CUgraphExec exec = std::get<0>(std::tie(a...));
    const FrameGuard guard;
    const Runtime::GraphCall call = rt.begin_graph(exec, stream, info.ptsz);
    if (rt.backend() == Backend::kGreen) {
      const Runtime::GreenRoute route = rt.green_route(stream, info.ptsz);
      if (route) {
        CUlaunchConfig cfg{};
        return fn(with_stream(a, route.target(), &cfg)...);
      }
    }
    const CUresult r = fn(a...);
    rt.end_graph_launch(r == CUDA_SUCCESS, exec, call);
    return r;
  } else if constexpr (info.kind == HookKind::kGraphInstantiate) {
    CUgraphExec* out = std::get<0>(std::tie(a...));
    const FrameGuard guard;
    rt.begin_graph(nullptr, stream, info.ptsz);
    const CUresult r = fn(a...);
    rt.end_graph_instantiate(r == CUDA_SUCCESS, r == CUDA_SUCCESS && out != nullptr ? *out : nullptr);
    return r;
  } else if constexpr (info.kind == HookKind::kGraphExecDestroy) {
    rt.forget_graph_exec(std::get<0>(std::tie(a...)));  // before: the handle may be reused at once
    return fn(a...);
  } else if constexpr (info.kind == HookKind::kStreamDestroy) {
    rt.forget_stream(stream, info.ptsz);
    return fn(a...);
  } else if constexpr (info.kind == HookKind::kGetFunction || info.kind == HookKind::kGetKernel) {
    const CUresult r = fn(a...);
    auto* out = std::get<0>(std::tie(a...));
    if (r == CUDA_SUCCESS && out != nullptr) rt.note_kernel_name(*out, std::get<2>(std::tie(a...)));
    return r;
  } else if constexpr (info.kind == HookKind::kKernelGetFunction) {
    const CUresult r = fn(a...);
    CUfunction* out = std::get<0>(std::tie(a...));
    if (r == CUDA_SUCCESS && out != nullptr) rt.note_function_of_kernel(*out, std::get<1>(std::tie(a...)));
    return r;
  } else if constexpr (info.kind == HookKind::kPrimaryCtxRetain) {
    const CUresult r = fn(a...);
    if (r == CUDA_SUCCESS) rt.after_primary_ctx_retain(std::get<0>(std::tie(a...)), std::get<1>(std::tie(a...)));
    return r;
  } else if constexpr (info.kind == HookKind::kGetProcAddress) {
    const CUresult r = fn(a...);
    void** pfn = std::get<1>(std::tie(a...));
    if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) map_proc_address(std::get<0>(std::tie(a...)), pfn);
    return r;
  } else {
    static_assert(info.kind == HookKind::kLaunch, "hook kind without a dispatch branch");
    return fn(a...);
  }
}

}  // namespace

void* hook_address(HookId id) noexcept {
  static void* const kAddresses[] = {
#define LITHOS_HOOK(name, ret, params, args, kind, stream, ptsz, path) reinterpret_cast<void*>(&::name),
#include "intercept/hook_list.def"
#undef LITHOS_HOOK
  };
  static_assert(sizeof kAddresses / sizeof kAddresses[0] == static_cast<std::size_t>(kHookCount));
  return kAddresses[hook_index(id)];
}

}  // namespace lithos::intercept

#define LITHOS_UNPAREN(...) __VA_ARGS__
#define LITHOS_HOOK(name, ret, params, args, kind, stream, ptsz, path)                                               \
  extern "C" __attribute__((visibility("default"))) ret name params {                                                \
    return ::lithos::intercept::dispatch<::lithos::intercept::HookId::name, decltype(&::name)>(stream,               \
                                                                                               LITHOS_UNPAREN args); \
  }
#include "intercept/hook_list.def"
#undef LITHOS_HOOK
#undef LITHOS_UNPAREN
