// The hook table generated from hook_list.def: one HookId per hooked driver
// symbol, its name, what lithos does around it (HookKind), whether a null
// stream means the per-thread default stream, and the API-path label the
// statistics print. No CUDA header needed: the CUDA types of the list are
// dropped by the macro expansions here.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lithos::intercept {

enum class HookKind : std::uint8_t {
  kLaunch,             // a kernel launch: the mask for the next launch is set around it
  kGraphLaunch,        // cuGraphLaunch: the exec's kernels run with the mask their descriptors were built with
  kGraphUpload,        // cuGraphUpload: may build the exec's descriptors
  kGraphInstantiate,   // builds a graph exec (and possibly its descriptors)
  kGraphExecDestroy,   // forgets an exec
  kGraphExecEdit,      // changes an exec in place (its node-by-node replay is dropped)
  kGetFunction,        // cuModuleGetFunction: names a CUfunction
  kGetKernel,          // cuLibraryGetKernel: names a CUkernel
  kKernelGetFunction,  // cuKernelGetFunction: CUkernel -> CUfunction
  kStreamDestroy,      // forgets a stream's mask
  kPrimaryCtxRetain,   // green-context backend: returns the partition's context
  kGetProcAddress,     // maps returned entry points to hooks
  kModuleLoad,         // an image in memory: the atomizer may rewrite it
  kModuleLoadFile,     // an image in a file: likewise, loaded from memory when rewritten
  kUnload,             // cuModuleUnload / cuLibraryUnload
  kLibraryGetModule,   // a library's module, for the atomizer's handle map
  kKernelNode,         // CUDA_KERNEL_NODE_PARAMS of a hand-built graph node
  kGraphNode,          // CUgraphNodeParams (kernel nodes among them)
  kSync,               // the host waited for a stream (stream = nullptr: every stream of the context)
  kOrdered,            // any other call ordered after launches: waits for deferred launches (deferred.hpp)
};

enum class HookId : int {
#define LITHOS_HOOK(name, ret, params, args, kind, stream, ptsz, path) name,
#include "intercept/hook_list.def"
#undef LITHOS_HOOK
};

struct HookInfo {
  const char* name;
  HookKind kind;
  bool ptsz;
  const char* path;
};

inline constexpr HookInfo kHookInfo[] = {
#define LITHOS_HOOK(name, ret, params, args, kind, stream, ptsz, path) {#name, HookKind::kind, (ptsz) != 0, path},
#include "intercept/hook_list.def"
#undef LITHOS_HOOK
};

inline constexpr int kHookCount = static_cast<int>(sizeof kHookInfo / sizeof kHookInfo[0]);

constexpr int hook_index(HookId id) { return static_cast<int>(id); }
constexpr const HookInfo& hook_info(HookId id) { return kHookInfo[hook_index(id)]; }
constexpr HookId hook_at(int index) { return static_cast<HookId>(index); }

// The hook of an exact exported driver symbol name ("cuLaunchKernel_ptsz").
std::optional<HookId> find_hook(std::string_view name) noexcept;

// Whether calls of this kind are kernel launches (counted as "launches").
constexpr bool is_kernel_launch(HookKind k) { return k == HookKind::kLaunch; }

}  // namespace lithos::intercept
