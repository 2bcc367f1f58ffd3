// Why this file is long (~1.2k lines): every hook's body is one template,
// dispatch<>(), with the launch paths it routes to (best effort, atomized,
// deferred, graph replay) next to it, so that each instantiation sees them all.
//
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

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "intercept/client.hpp"
#include "intercept/hook_table.hpp"
#include "intercept/launch_copy.hpp"
#include "intercept/library.hpp"
#include "intercept/log.hpp"

namespace lithos::intercept {

namespace {

// The hooks reach the library's members (library.hpp) through these: each
// keeps the member's address in one function-local static (one guard check
// and one load, inlined here), the library making them in its order.
Runtime& runtime() noexcept {
  static Runtime* const self = &Library::get().runtime();
  return *self;
}
RealDriver& real_driver() noexcept {
  static RealDriver* const self = &Library::get().real_driver();
  return *self;
}
Atomizer& atomizer() noexcept {
  static Atomizer* const self = &Library::get().atomizer();
  return *self;
}
DeferredLaunches& deferred() noexcept {
  static DeferredLaunches* const self = &Library::get().deferred();
  return *self;
}
GraphReplay& graph_replay() noexcept {
  static GraphReplay* const self = &Library::get().graph_replay();
  return *self;
}
DaemonLink& daemon_link() noexcept {
  static DaemonLink* const self = &Library::get().daemon_link();
  return *self;
}

// Restores this thread's frame when a hooked call ends (calls can nest).
class FrameGuard {
 public:
  FrameGuard() noexcept : saved_(thread_frame()) {}
  ~FrameGuard() { thread_frame() = saved_; }
  FrameGuard(const FrameGuard&) = delete;
  FrameGuard& operator=(const FrameGuard&) = delete;
  const ThreadFrame& saved() const noexcept { return saved_; }

 private:
  ThreadFrame saved_;
};

std::array<std::atomic<bool>, kHookCount> g_missing_logged{};

CUresult missing_real(HookId id) noexcept {
  const bool no_driver = real_driver().driver_missing();
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

// The two ordinary kernel-launch entry points, each with its _ptsz twin:
// the ones an atom can be cut from and a launch deferred.
constexpr bool is_plain_launch(HookId id) { return id == HookId::cuLaunchKernel || id == HookId::cuLaunchKernel_ptsz; }
constexpr bool is_ex_launch(HookId id) { return id == HookId::cuLaunchKernelEx || id == HookId::cuLaunchKernelEx_ptsz; }

// What a launch hook's arguments say of the launch (no driver call): the
// function, grid, block, dynamic shared memory, the cluster attribute and
// whether it is cooperative. Runtime::launch_needs turns it into what the
// launch needs of a TPC set not to hang.
template <HookId Id, class... A>
LaunchInfo launch_info(const A&... a) noexcept {
  LaunchInfo li;
  li.function = launched_function(a...);
  auto t = std::tie(a...);
  if constexpr (Id == HookId::cuLaunchKernel || Id == HookId::cuLaunchKernel_ptsz ||
                Id == HookId::cuLaunchCooperativeKernel || Id == HookId::cuLaunchCooperativeKernel_ptsz) {
    li.grid = {std::get<1>(t), std::get<2>(t), std::get<3>(t)};
    li.block = {std::get<4>(t), std::get<5>(t), std::get<6>(t)};
    li.smem = std::get<7>(t);
    li.cooperative = Id == HookId::cuLaunchCooperativeKernel || Id == HookId::cuLaunchCooperativeKernel_ptsz;
  } else if constexpr (Id == HookId::cuLaunchKernelEx || Id == HookId::cuLaunchKernelEx_ptsz) {
    const CUlaunchConfig* cfg = std::get<0>(t);
    if (cfg != nullptr) {
      li.grid = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
      li.block = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
      li.smem = cfg->sharedMemBytes;
      for (unsigned i = 0; cfg->attrs != nullptr && i < cfg->numAttrs; ++i) {
        const CUlaunchAttribute& at = cfg->attrs[i];
        if (at.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
          li.cluster = {at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z};
          li.cluster_attr = true;
        } else if (at.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && at.value.cooperative != 0) {
          li.cooperative = true;
        }
      }
    }
  } else if constexpr (Id == HookId::cuLaunchCooperativeKernelMultiDevice) {
    // Several devices' launches under one mask: only the whole GPU is known
    // to hold all of their grids at once.
    li.cooperative = true;
    li.multi_device = true;
    li.merged.resident_sms = sched::LaunchNeeds::kAllSms;
  }
  return li;
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
  Runtime& rt = runtime();
  if (const auto id = real_driver().hook_of_real(*pfn)) {
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

// One launch with its mask: the body of every launch hook (and of each atom).
// With `Bare` (lithos switched off) the real function only. `grant`: what
// lithosd granted this best-effort launch (null: nothing).
template <HookId Id, bool Bare = false, class Fn, class... A>
CUresult launch_one(Fn fn, CUstream stream, const Grant* grant, A... a) {
  if constexpr (Bare) {
    (void)stream;
    (void)grant;
    return fn(a...);
  }
  constexpr HookInfo info = hook_info(Id);
  Runtime& rt = runtime();
  const FrameGuard guard;
  const LaunchInfo li = launch_info<Id>(a...);
  try {
    rt.begin_launch(Id, Stream{stream, info.ptsz}, li, grant);
  } catch (const std::exception& e) {
    thread_frame() = guard.saved();
    rt.internal_error(Id, e.what());
  } catch (...) {
    thread_frame() = guard.saved();
    rt.internal_error(Id, "unknown exception");
  }
  if constexpr (kHasStreamParam<A...>) {
    if (rt.masking().routes_launches()) {
      const GreenBackend::Route route = rt.route(Stream{stream, info.ptsz}, &li);
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
  if (r == CUDA_SUCCESS) {
    rt.after_launch(Stream{stream, info.ptsz}, li, false,
                    grant != nullptr && grant->runs_free);  // lithosd, hp: accounted
  }
  return r;
}

// The grant a GrantMsg gives, handed to the launch it is for.
Grant grant_of(const ipc::GrantMsg& g) {
  // kGrantWholeGpu: an empty set means "no mask" to Runtime::choose.
  return {(g.flags & ipc::kGrantWholeGpu) != 0 ? sched::TpcSet{} : sched::TpcSet::from_words(g.tpcs[0], g.tpcs[1])};
}

// Told apart from its graph's launches (LaunchIdentity::kernel) when a
// best-effort graph's upload waits for the set its descriptors are built with.
constexpr std::uint64_t kGraphUploadSalt = 0x75706c6f61640000ULL;  // "upload"

// A best-effort launch that runs as one piece under lithosd: submitted, run
// when granted on the granted set, followed by the grant's marker. Without
// a grant (the daemon is gone) it runs on the fallback set. `launch` is
// called with the grant it runs under.
template <class Launch>
CUresult granted_whole(const LaunchInfo& li, Stream stream, const LaunchIdentity& id, bool graph, Launch&& launch,
                       const std::optional<sched::TpcSet>& pinned = std::nullopt) {
  DaemonClient& dc = daemon_link().current();
  const auto ticket = dc.submit(stream, li, id, 1, true, graph, pinned ? &*pinned : nullptr);
  ipc::GrantMsg g;
  if (!ticket || !dc.next_grant(*ticket, &g)) {
    const Grant fallback{dc.fallback()};
    return launch(&fallback);
  }
  const Grant grant = grant_of(g);
  const CUresult r = launch(&grant);
  dc.atom_launched(*ticket, stream, g.marker);
  // A whole launch gets one grant; anything else the daemon sent is stale.
  while ((g.flags & ipc::kGrantLast) == 0 && dc.next_grant(*ticket, &g)) dc.atom_launched(*ticket, stream, g.marker);
  return r;
}

// Runs the atoms of one planned launch in order, all at once (without
// lithosd nothing decides when an atom may go; under it, run_granted);
// `launch` performs one launch with the bounds currently in `bp`, under
// `grant` (a tenant running free: its allocation; else null). Stops at the
// first failure.
template <class Launch>
CUresult run_atoms(const FunctionEntry& e, const Atomizer::Launch& l, BoundsParams& bp, const Grant* grant,
                   Launch&& launch) {
  if (!l.plan.split()) {
    bp.set(0, 0xffffffffu);
    return launch(grant);
  }
  Atomizer& az = atomizer();
  for (std::uint32_t i = 0; i < l.plan.count; ++i) {
    const sched::BlockRange r = l.plan.atom(i);
    bp.set(static_cast<std::uint32_t>(r.lo), static_cast<std::uint32_t>(r.hi));
    const CUresult res = launch(grant);
    if (res != CUDA_SUCCESS) {
      az.atoms_issued(e, i);
      return res;
    }
  }
  az.atoms_issued(e, l.plan.count);
  return CUDA_SUCCESS;
}

// Under lithosd, a best-effort launch of a rewritten kernel: the daemon's
// Engine plans its atoms and grants them one by one (set + block range); each
// is launched with its bounds on its set and followed by its marker. When the
// daemon goes away mid-launch, the blocks left run at once on the fallback set.
template <class Launch>
CUresult run_granted(const FunctionEntry& e, const LaunchInfo& li, Stream stream, std::uint64_t unit, BoundsParams& bp,
                     Launch&& launch) {
  DaemonClient& dc = daemon_link().current();
  const std::uint64_t total = li.grid.count();
  const auto ticket = dc.submit(stream, li, runtime().kernels().identity(li.function, true),
                                static_cast<std::uint32_t>(std::min<std::uint64_t>(unit, UINT32_MAX)), false, false);
  std::uint64_t next = 0;
  std::uint32_t atoms = 0;
  CUresult r = CUDA_SUCCESS;
  while (ticket && next < total) {
    ipc::GrantMsg g;
    if (!dc.next_grant(*ticket, &g)) break;
    if (g.lo != next || g.hi <= g.lo || g.hi > total) break;  // not this launch's next range: run the rest alone
    bp.set(static_cast<std::uint32_t>(g.lo), static_cast<std::uint32_t>(g.hi));
    const Grant grant = grant_of(g);
    r = launch(&grant);
    dc.atom_launched(*ticket, stream, g.marker);
    ++atoms;
    next = g.hi;
    if (r != CUDA_SUCCESS || (g.flags & ipc::kGrantLast) != 0) break;
  }
  if (r == CUDA_SUCCESS && next < total) {
    bp.set(static_cast<std::uint32_t>(next), static_cast<std::uint32_t>(total));
    const Grant fallback{dc.fallback()};
    r = launch(&fallback);
    ++atoms;
  }
  atomizer().atoms_issued(e, atoms);
  return r;
}

// cuLaunchKernelEx attributes that matter to atoms.
void launch_attributes(const CUlaunchConfig* cfg, std::uint32_t cluster[3], bool* cooperative) {
  if (cfg == nullptr || cfg->attrs == nullptr) return;
  for (unsigned i = 0; i < cfg->numAttrs; ++i) {
    const CUlaunchAttribute& at = cfg->attrs[i];
    if (at.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      cluster[0] = at.value.clusterDim.x;
      cluster[1] = at.value.clusterDim.y;
      cluster[2] = at.value.clusterDim.z;
    } else if (at.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && at.value.cooperative != 0) {
      *cooperative = true;
    }
  }
}

// Whether this launch of the process goes through lithosd as best effort,
// through the client of the launch's GPU (DaemonLink::current; not where
// the daemon at that GPU's socket serves another). Registers on first use
// (high-priority processes too: they learn their class here, before their
// first launch is made). `grant`: the launch's (one made at once because the
// tenant runs free does not go through lithosd again).
bool be_daemon(const Grant* grant = nullptr) noexcept {
  DaemonClient& dc = daemon_link().current();
  if (!dc.wanted() || (grant != nullptr && grant->runs_free)) return false;
  const bool up = dc.ready();
  return !dc.high() && (up || dc.registered_once());
}

// Atom boundaries of a granted launch: whole clusters (sched::atom_unit; 0
// when clusters cannot be kept whole by block ranges: not split).
std::uint64_t granted_unit(const LaunchInfo& li, const std::uint32_t cluster[3]) {
  sched::LaunchDesc d;
  d.grid = li.grid;
  d.block = li.block;
  d.cluster = {cluster[0], cluster[1], cluster[2]};
  return sched::atom_unit(d);
}

// The atom unit of a best-effort launch of rewritten kernel `e` under
// lithosd: whole clusters (granted_unit; the kernel's compile-time cluster
// or a cuLaunchKernelEx attribute), 0 when it cannot be split (a
// cooperative grid, clusters a block range cannot keep whole).
template <HookId Id, class... A>
std::uint64_t be_atom_unit(const FunctionEntry& e, const LaunchInfo& li, const A&... a) {
  std::uint32_t cluster[3] = {e.patch->cluster[0], e.patch->cluster[1], e.patch->cluster[2]};
  bool cooperative = false;
  if constexpr (is_ex_launch(Id)) launch_attributes(std::get<0>(std::tie(a...)), cluster, &cooperative);
  return cooperative ? 0 : granted_unit(li, cluster);
}

// Under lithosd, a best-effort launch of rewritten kernel `e`: its atoms
// granted one by one (run_granted), or one grant for the whole grid when it
// cannot be split. `one` launches with the bounds in `bp`.
template <HookId Id, class Launch, class... A>
CUresult be_granted_atoms(const FunctionEntry& e, CUstream stream, BoundsParams& bp, Launch&& one, const A&... a) {
  const Stream s{stream, hook_info(Id).ptsz};
  const LaunchInfo li = launch_info<Id>(a...);
  const std::uint64_t unit = be_atom_unit<Id>(e, li, a...);
  if (unit == 0) {
    bp.set(0, 0xffffffffu);
    return granted_whole(li, s, runtime().kernels().identity(li.function, true), false, one);
  }
  return run_granted(e, li, s, unit, bp, one);
}

// A launch under the atomizer: rewritten kernels carry the atom bounds and
// may run as several atoms; everything else goes through launch_one.
// `grant`: a tenant running free's allocation (null: nothing granted yet).
template <HookId Id, bool Bare, class Fn, class... A>
CUresult launch_maybe_atomized(Fn fn, CUstream stream, const Grant* grant, A... a) {
  const bool runs_free = grant != nullptr && grant->runs_free;
  constexpr HookInfo info = hook_info(Id);
  Atomizer& az = atomizer();
  if constexpr (Id == HookId::cuLaunchCooperativeKernelMultiDevice) {
    auto t = std::tie(a...);
    CUDA_LAUNCH_PARAMS* list = std::get<0>(t);
    const unsigned n = std::get<1>(t);
    if (list == nullptr || n == 0 || n > 64) return launch_one<Id, Bare>(fn, stream, grant, a...);
    std::vector<CUDA_LAUNCH_PARAMS> copy(list, list + n);
    std::vector<BoundsParams> bps(n);
    for (unsigned i = 0; i < n; ++i) {
      const FunctionEntry* e = az.lookup(copy[i].function);
      if (e == nullptr) continue;
      if (!bps[i].build(*e->patch, copy[i].kernelParams, nullptr)) continue;
      bps[i].set(0, 0xffffffffu);
      copy[i].kernelParams = bps[i].params();
    }
    return launch_one<Id, Bare>(fn, stream, grant, copy.data(), n, std::get<2>(t));
  } else {
    const void* handle = launched_function(a...);
    const FunctionEntry* e = az.lookup(handle);
    if (e == nullptr) {
      if constexpr (!Bare && (Id == HookId::cuLaunchKernel || Id == HookId::cuLaunchKernel_ptsz)) {
        // LITHOS_ATOM_TIME: time kernels lithos did not rewrite too (coverage).
        if (az.times_all()) {
          auto t = std::tie(a...);
          const std::uint32_t grid[3] = {std::get<1>(t), std::get<2>(t), std::get<3>(t)};
          return az.timed_unknown(handle, runtime().kernels().name(handle), grid, Stream{stream, info.ptsz},
                                  [&] { return launch_one<Id>(fn, stream, grant, a...); });
        }
      } else if constexpr (!Bare && (Id == HookId::cuLaunchKernelEx || Id == HookId::cuLaunchKernelEx_ptsz)) {
        const CUlaunchConfig* cfg = std::get<0>(std::tie(a...));
        if (az.times_all() && cfg != nullptr) {
          const std::uint32_t grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
          return az.timed_unknown(handle, runtime().kernels().name(handle), grid, Stream{stream, info.ptsz},
                                  [&] { return launch_one<Id>(fn, stream, grant, a...); });
        }
      }
      return launch_one<Id, Bare>(fn, stream, grant, a...);
    }
    auto t = std::tie(a...);
    BoundsParams bp;
    std::uint32_t cluster[3] = {e->patch->cluster[0], e->patch->cluster[1], e->patch->cluster[2]};
    if constexpr (Id == HookId::cuLaunchKernel || Id == HookId::cuLaunchKernel_ptsz) {
      if (!bp.build(*e->patch, std::get<9>(t), std::get<10>(t))) {
        az.unsupported_path("a cuLaunchKernel `extra` list with unknown keys");
        return launch_one<Id, Bare>(fn, stream, grant, a...);
      }
      const std::uint32_t grid[3] = {std::get<1>(t), std::get<2>(t), std::get<3>(t)};
      auto one = [&](const Grant* g) {
        return launch_one<Id, Bare>(fn, stream, g, std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t),
                                    std::get<4>(t), std::get<5>(t), std::get<6>(t), std::get<7>(t), std::get<8>(t),
                                    bp.params(), bp.extra());
      };
      if constexpr (!Bare) {
        if (be_daemon(grant)) return be_granted_atoms<Id>(*e, stream, bp, one, a...);
      }
      const Atomizer::WaveQuery wave{handle, {std::get<4>(t), std::get<5>(t), std::get<6>(t)}, std::get<7>(t)};
      Atomizer::Launch l = az.plan(*e, grid, cluster, Bare, Stream{stream, info.ptsz}, wave, runs_free);
      const CUresult r = run_atoms(*e, l, bp, grant, one);
      az.finish(*e, l, r == CUDA_SUCCESS);
      return r;
    } else if constexpr (Id == HookId::cuLaunchKernelEx || Id == HookId::cuLaunchKernelEx_ptsz) {
      const CUlaunchConfig* cfg = std::get<0>(t);
      if (cfg == nullptr || !bp.build(*e->patch, std::get<2>(t), std::get<3>(t))) {
        az.unsupported_path("a cuLaunchKernelEx `extra` list with unknown keys");
        return launch_one<Id, Bare>(fn, stream, grant, a...);
      }
      auto one = [&](const Grant* g) {
        return launch_one<Id, Bare>(fn, stream, g, cfg, std::get<1>(t), bp.params(), bp.extra());
      };
      if constexpr (!Bare) {
        if (be_daemon(grant)) return be_granted_atoms<Id>(*e, stream, bp, one, a...);
      }
      bool cooperative = false;
      launch_attributes(cfg, cluster, &cooperative);
      const std::uint32_t grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
      const Atomizer::WaveQuery wave{handle, {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ}, cfg->sharedMemBytes};
      Atomizer::Launch l = az.plan(*e, grid, cluster, cooperative || Bare, Stream{stream, info.ptsz}, wave, runs_free);
      const CUresult r = run_atoms(*e, l, bp, grant, one);
      az.finish(*e, l, r == CUDA_SUCCESS);
      return r;
    } else if constexpr (Id == HookId::cuLaunchCooperativeKernel || Id == HookId::cuLaunchCooperativeKernel_ptsz) {
      // Grid-synchronising: never split, but the rewritten code needs its bounds.
      if (!bp.build(*e->patch, std::get<9>(t), nullptr)) return launch_one<Id, Bare>(fn, stream, grant, a...);
      const std::uint32_t grid[3] = {std::get<1>(t), std::get<2>(t), std::get<3>(t)};
      Atomizer::Launch l = az.plan(*e, grid, cluster, true, Stream{stream, info.ptsz});
      const CUresult r = run_atoms(*e, l, bp, grant, [&](const Grant* g) {
        return launch_one<Id, Bare>(fn, stream, g, std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t),
                                    std::get<4>(t), std::get<5>(t), std::get<6>(t), std::get<7>(t), std::get<8>(t),
                                    bp.params());
      });
      az.finish(*e, l, r == CUDA_SUCCESS);
      return r;
    } else {
      // cuLaunch / cuLaunchGrid(Async): parameters were set by cuParamSet*;
      // set the bounds the same way (the whole grid), then launch.
      const DriverTable& drv = driver();
      const auto setv = drv.cuParamSetv;
      const auto set_size = drv.cuParamSetSize;
      CUfunction f = std::get<0>(t);
      std::uint32_t whole[2] = {0, 0xffffffffu};
      if (setv == nullptr || set_size == nullptr ||
          setv(f, static_cast<int>(e->patch->bounds_offset), whole, sizeof whole) != CUDA_SUCCESS ||
          set_size(f, e->patch->bounds_offset + 8) != CUDA_SUCCESS) {
        az.unsupported_path("a legacy cuLaunch* of a rewritten kernel (cuParamSetv failed)");
      }
      return launch_one<Id, Bare>(fn, stream, grant, a...);
    }
  }
}

// ---- deferred launches (deferred.hpp) ----------------------------------------

// A call's result with the error of a deferred launch it drained: the
// driver reports an asynchronous error at a later call, so does lithos.
CUresult with_deferred_error(CUresult r, int deferred) noexcept {
  return r == CUDA_SUCCESS && deferred != 0 ? static_cast<CUresult>(deferred) : r;
}

// The calling thread's current context (the worker makes the launch in it).
CUcontext current_context() noexcept {
  const auto get = driver().cuCtxGetCurrent;
  CUcontext ctx = nullptr;
  if (get == nullptr || get(&ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

// Whether work on `stream` may be queued for the deferred-launch worker (a
// launch, or a graph replayed node by node): not on a per-thread default
// stream (the worker's would be another), not while a capture is in
// progress (what is captured must stay in its thread's capture sequence).
bool deferrable_on(Stream stream) noexcept {
  if (stream.null_per_thread() || stream.raw() == CU_STREAM_PER_THREAD) return false;
  return stream_captures().load(std::memory_order_acquire) == 0;
}

// Whether `stream` is being captured (checked only while some capture is in
// progress in the process).
bool capturing(Stream stream) noexcept {
  if (stream_captures().load(std::memory_order_acquire) == 0) return false;
  const auto is_capturing = driver().cuStreamIsCapturing;
  if (is_capturing == nullptr) return false;
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUstream h = stream.plain_handle();
  return is_capturing(h, &cs) == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

// A best-effort launch under lithosd, made now (in the hook, or by the
// deferred-launch worker with copied arguments).
template <HookId Id, class Fn, class... A>
CUresult be_launch(Fn fn, CUstream stream, A... a) {
  constexpr HookInfo info = hook_info(Id);
  Atomizer& az = atomizer();
  const bool atomizing = az.active() || az.rewrote_any();
  if (capturing(Stream{stream, info.ptsz})) {
    // Recorded into a graph, not run: nothing to grant, no marker (it would
    // be replayed with the graph). A rewritten kernel keeps the whole grid
    // in its node: a replay cuts it into atoms (graph_replay.hpp).
    return atomizing ? launch_maybe_atomized<Id, true>(fn, stream, nullptr, a...)
                     : launch_one<Id, true>(fn, stream, nullptr, a...);
  }
  if (sched::TpcSet free; daemon_link().current().runs_free(&free)) {
    // Nothing to protect: at once, on the allocation, reported after.
    const Grant grant{free, /*runs_free=*/true};
    return atomizing ? launch_maybe_atomized<Id, false>(fn, stream, &grant, a...)
                     : launch_one<Id>(fn, stream, &grant, a...);
  }
  // Best effort under lithosd: rewritten kernels run as granted atoms
  // (inside launch_maybe_atomized); everything else as one granted piece.
  constexpr bool splittable = is_plain_launch(Id) || is_ex_launch(Id);
  const LaunchInfo li = launch_info<Id>(a...);
  if (splittable && atomizing && az.lookup(li.function) != nullptr)
    return launch_maybe_atomized<Id, false>(fn, stream, nullptr, a...);
  return granted_whole(li, Stream{stream, info.ptsz}, runtime().kernels().identity(li.function, true), false,
                       [&](const Grant* grant) {
                         return atomizing ? launch_maybe_atomized<Id, false>(fn, stream, grant, a...)
                                          : launch_one<Id>(fn, stream, grant, a...);
                       });
}

// LITHOS_SUBMIT_AHEAD: submits a launch being queued, as be_launch will
// (the same kernel, block unit and wholeness), so that its grant can be
// ready when the worker reaches it (DaemonClient::AheadScope). Nothing when
// the tenant runs free (the launch then goes out at once).
template <HookId Id, class... A>
std::optional<DaemonClient::Ahead> submit_ahead(CUstream stream, const A&... a) noexcept {
  constexpr HookInfo info = hook_info(Id);
  DaemonClient& dc = daemon_link().current();
  if (!dc.submit_ahead() || !dc.connected()) return std::nullopt;
  if (sched::TpcSet free; dc.runs_free(&free)) return std::nullopt;
  Atomizer& az = atomizer();
  const LaunchInfo li = launch_info<Id>(a...);
  const LaunchIdentity id = runtime().kernels().identity(li.function, true);
  std::uint64_t unit = 0;  // as be_granted_atoms: 0 is one grant for the whole launch
  if (az.active() || az.rewrote_any()) {
    if (const FunctionEntry* e = az.lookup(li.function)) unit = be_atom_unit<Id>(*e, li, a...);
  }
  const auto t = unit != 0
                     ? dc.submit(Stream{stream, info.ptsz}, li, id,
                                 static_cast<std::uint32_t>(std::min<std::uint64_t>(unit, UINT32_MAX)), false, false)
                     : dc.submit(Stream{stream, info.ptsz}, li, id, 1, true, false);
  if (!t) return std::nullopt;
  dc.count_ahead();
  return DaemonClient::Ahead{*t, id.kernel, &dc};
}

// Queues a best-effort launch for the worker with its arguments copied.
// False when it cannot be deferred: another entry point than cuLaunchKernel
// / cuLaunchKernelEx, the per-thread default stream (the worker's would be
// another), a capture in progress, or parameters that cannot be copied.
template <HookId Id, class Fn, class... A>
bool defer_launch(Fn fn, CUstream stream, A... a) {
  constexpr HookInfo info = hook_info(Id);
  constexpr bool plain = is_plain_launch(Id);
  constexpr bool ex = is_ex_launch(Id);
  if constexpr (!plain && !ex) {
    return false;
  } else {
    if (!deferrable_on(Stream{stream, info.ptsz})) return false;
    std::tuple<A...> args(a...);
    const void* function = launched_function(a...);
    std::uint32_t limit = UINT32_MAX;
    if (const FunctionEntry* e = atomizer().lookup(function)) limit = e->patch->param_count;
    try {
      auto copy = std::make_shared<LaunchCopy>();
      if constexpr (plain) {
        if (!copy->copy_params(function, limit, std::get<9>(args), std::get<10>(args))) return false;
        std::get<9>(args) = copy->params();
        std::get<10>(args) = copy->extra();
      } else {
        const CUlaunchConfig* cfg = std::get<0>(args);
        if (cfg == nullptr) return false;  // the driver's error, reported in place
        copy->copy_config(*cfg);
        if (!copy->copy_params(function, limit, std::get<2>(args), std::get<3>(args))) return false;
        std::get<0>(args) = copy->config();
        std::get<2>(args) = copy->params();
        std::get<3>(args) = copy->extra();
      }
      if (!daemon_link().current().submit_ahead()) {
        return deferred().push(
            [fn, stream, args, copy]() -> int {
              return std::apply([&](auto... x) { return static_cast<int>(be_launch<Id>(fn, stream, x...)); }, args);
            },
            current_context());
      }
      // Submitted and queued as one step, so that launches of several
      // application threads reach the daemon in the order the worker makes them.
      static std::mutex ahead_mu;
      const std::lock_guard<std::mutex> lock(ahead_mu);
      const std::optional<DaemonClient::Ahead> ahead =
          std::apply([&](const auto&... x) { return submit_ahead<Id>(stream, x...); }, args);
      return deferred().push(
          [fn, stream, args, copy, ahead]() -> int {
            const DaemonClient::AheadScope scope(ahead);
            return std::apply([&](auto... x) { return static_cast<int>(be_launch<Id>(fn, stream, x...)); }, args);
          },
          current_context());
    } catch (...) {
      return false;  // no memory for the copy: made in place
    }
  }
}

// ---- best-effort graphs replayed node by node (graph_replay.hpp) -------------

// One step of a plan, made now on `stream` (by the deferred-launch worker,
// or in place): kernels through the best-effort launch path, everything
// else through the real driver call of the same stream operation.
int replay_step(const ReplayStep& step, CUstream stream) noexcept {
  RealDriver& drv = real_driver();
  auto real = [&drv](HookId id, auto* type) { return reinterpret_cast<decltype(type)>(drv.function(id)); };
  try {
    if (const auto* k = std::get_if<ReplayKernel>(&step)) {
      using Ex = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
      const auto ex = real(HookId::cuLaunchKernelEx, static_cast<Ex>(nullptr));
      if (ex == nullptr) return CUDA_ERROR_NOT_FOUND;
      CUlaunchConfig cfg = k->config;
      cfg.hStream = stream;
      cfg.attrs = k->num_attrs > 0 ? const_cast<CUlaunchAttribute*>(k->attrs) : nullptr;
      cfg.numAttrs = k->num_attrs;
      if (!k->fixed_bounds)
        return be_launch<HookId::cuLaunchKernelEx>(ex, stream, &cfg, k->function, k->params, k->extra);
      // An atom cut at capture: its node's parameters (bounds included) as they are, one grant.
      const LaunchInfo li = launch_info<HookId::cuLaunchKernelEx>(&cfg, k->function, k->params, k->extra);
      if (sched::TpcSet free; daemon_link().current().runs_free(&free)) {
        const Grant grant{free, /*runs_free=*/true};
        return launch_one<HookId::cuLaunchKernelEx>(ex, stream, &grant, &cfg, k->function, k->params, k->extra);
      }
      return granted_whole(
          li, Stream{stream, false}, runtime().kernels().identity(k->function, true), false, [&](const Grant* grant) {
            return launch_one<HookId::cuLaunchKernelEx>(ex, stream, grant, &cfg, k->function, k->params, k->extra);
          });
    }
    if (const auto* m = std::get_if<ReplayMemset>(&step)) {
      const CUDA_MEMSET_NODE_PARAMS& p = m->p;
      const size_t height = p.height == 0 ? 1 : p.height;
      if (p.elementSize == 1) {
        using F = CUresult (*)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream);
        const auto f = real(HookId::cuMemsetD2D8Async, static_cast<F>(nullptr));
        return f == nullptr ? CUDA_ERROR_NOT_FOUND
                            : f(p.dst, p.pitch, static_cast<unsigned char>(p.value), p.width, height, stream);
      }
      if (p.elementSize == 2) {
        using F = CUresult (*)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream);
        const auto f = real(HookId::cuMemsetD2D16Async, static_cast<F>(nullptr));
        return f == nullptr ? CUDA_ERROR_NOT_FOUND
                            : f(p.dst, p.pitch, static_cast<unsigned short>(p.value), p.width, height, stream);
      }
      using F = CUresult (*)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream);
      const auto f = real(HookId::cuMemsetD2D32Async, static_cast<F>(nullptr));
      return f == nullptr ? CUDA_ERROR_NOT_FOUND : f(p.dst, p.pitch, p.value, p.width, height, stream);
    }
    if (const auto* c = std::get_if<ReplayMemcpy>(&step)) {
      using F = CUresult (*)(const CUDA_MEMCPY3D*, CUstream);
      const auto f = real(HookId::cuMemcpy3DAsync_v2, static_cast<F>(nullptr));
      return f == nullptr ? CUDA_ERROR_NOT_FOUND : f(&c->p, stream);
    }
    if (const auto* r = std::get_if<ReplayEventRecord>(&step)) {
      using F = CUresult (*)(CUevent, CUstream);
      const auto f = real(HookId::cuEventRecord, static_cast<F>(nullptr));
      return f == nullptr ? CUDA_ERROR_NOT_FOUND : f(r->event, stream);
    }
    if (const auto* w = std::get_if<ReplayEventWait>(&step)) {
      using F = CUresult (*)(CUstream, CUevent, unsigned int);
      const auto f = real(HookId::cuStreamWaitEvent, static_cast<F>(nullptr));
      return f == nullptr ? CUDA_ERROR_NOT_FOUND : f(stream, w->event, 0);
    }
    if (const auto* h = std::get_if<ReplayHost>(&step)) {
      using F = CUresult (*)(CUstream, CUhostFn, void*);
      const auto f = real(HookId::cuLaunchHostFunc, static_cast<F>(nullptr));
      return f == nullptr ? CUDA_ERROR_NOT_FOUND : f(stream, h->p.fn, h->p.userData);
    }
  } catch (...) {
    runtime().internal_error(HookId::cuGraphLaunch, "graph replay step");
  }
  return CUDA_ERROR_UNKNOWN;
}

// A best-effort graph launch replayed node by node: every step queued for
// the deferred-launch worker (or, when launches are not deferred, made here
// in order). The application's call returns at once, as for a launch.
CUresult replay_graph(const std::shared_ptr<ReplayPlan>& plan, CUstream stream) {
  DeferredLaunches& dq = deferred();
  CUcontext ctx = current_context();
  int err = 0;
  auto issue = [&](DeferredLaunches::Launch op) {
    if (dq.enabled() && dq.push(op, ctx)) return;
    const int drained = dq.drain("graph replay in place");
    const int r = op();
    if (err == 0) err = r != 0 ? r : drained;
  };
  const DriverTable& drv = driver();
  const auto record = drv.cuEventRecord;
  const auto wait = drv.cuStreamWaitEvent;
  bool order_after_last = false;
  {
    const std::lock_guard<std::mutex> lock(plan->mu);
    order_after_last = plan->replayed && plan->last_stream != stream;
    plan->replayed = true;
    plan->last_stream = stream;
  }
  // Launches of one exec never overlap: a replay on another stream than the
  // last one waits for it.
  if (order_after_last && plan->done != nullptr && wait != nullptr)
    issue([plan, stream, wait]() -> int { return static_cast<int>(wait(stream, plan->done, 0)); });
  for (const ReplayStep& step : plan->steps)
    issue([plan, s = &step, stream]() -> int { return replay_step(*s, stream); });
  if (plan->done != nullptr && record != nullptr)
    issue([plan, stream, record]() -> int { return static_cast<int>(record(plan->done, stream)); });
  graph_replay().count_replay(plan->steps.size());
  return with_deferred_error(CUDA_SUCCESS, err != 0 ? err : dq.take_error());
}

// Calls `fn` with argument 1 replaced by `image` (the rewritten image).
template <class T>
T image_arg(T v, const void* image, std::size_t index) {
  if constexpr (std::is_same_v<T, const void*>) {
    return index == 1 ? image : v;
  } else {
    return v;
  }
}
template <class Fn, class Tuple, std::size_t... I>
CUresult call_with_image(Fn fn, const void* image, const Tuple& t, std::index_sequence<I...>) {
  return fn(image_arg(std::get<I>(t), image, I)...);
}

// The parameters of a hand-built kernel node with the atom bounds added
// (whole grid); returns false when the node is not a rewritten kernel's.
template <class P>
bool kernel_node_with_bounds(const P& in, P* out, BoundsParams* bp) {
  Atomizer& az = atomizer();
  const void* handle = in.func != nullptr ? static_cast<const void*>(in.func) : static_cast<const void*>(in.kern);
  const FunctionEntry* e = az.lookup(handle);
  if (e == nullptr) return false;
  if (!bp->build(*e->patch, in.kernelParams, in.extra)) {
    az.unsupported_path("a graph kernel node's `extra` list with unknown keys");
    return false;
  }
  bp->set(0, 0xffffffffu);
  *out = in;
  out->kernelParams = bp->params();
  out->extra = bp->extra();
  return true;
}

// A hand-built graph kernel node: a rewritten kernel's node gets the bounds.
template <HookId Id, class Fn, class... A>
CUresult kernel_node_call(Fn fn, A... a) {
  constexpr HookInfo info = hook_info(Id);
  auto t = std::tie(a...);
  constexpr std::size_t last = sizeof...(A) - 1;
  BoundsParams bp;
  if constexpr (info.kind == HookKind::kKernelNode) {
    const CUDA_KERNEL_NODE_PARAMS* in = std::get<last>(t);
    CUDA_KERNEL_NODE_PARAMS copy{};
    if (in == nullptr || !kernel_node_with_bounds(*in, &copy, &bp)) return fn(a...);
    std::get<last>(t) = &copy;
    return std::apply(fn, t);
  } else {
    CUgraphNodeParams* in = std::get<last>(t);
    if (in == nullptr || in->type != CU_GRAPH_NODE_TYPE_KERNEL) return fn(a...);
    CUgraphNodeParams copy = *in;
    if (!kernel_node_with_bounds(in->kernel, &copy.kernel, &bp)) return fn(a...);
    std::get<last>(t) = &copy;
    return std::apply(fn, t);
  }
}

template <HookId Id, class Fn, class... A>
CUresult dispatch_call(Fn fn, CUstream stream, A... a) {
  constexpr HookInfo info = hook_info(Id);
  if (lithos_disabled()) {
    // Kernels the atomizer rewrote before lithos was switched off still
    // need their bounds: they run whole, unmasked.
    if constexpr (info.kind == HookKind::kLaunch) {
      if (atomizer().rewrote_any()) return launch_maybe_atomized<Id, true>(fn, stream, nullptr, a...);
    } else if constexpr (info.kind == HookKind::kKernelNode || info.kind == HookKind::kGraphNode) {
      if (atomizer().rewrote_any()) return kernel_node_call<Id>(fn, a...);
    }
    return fn(a...);
  }

  Runtime& rt = runtime();
  rt.counters().call(Id);

  if constexpr (info.kind == HookKind::kLaunch) {
    Atomizer& az = atomizer();
    const bool atomizing = az.active() || az.rewrote_any();
    DeferredLaunches& dq = deferred();
    if (be_daemon()) {
      if (dq.enabled()) {
        // Queued: the worker makes it (be_launch) while the application runs on.
        if (defer_launch<Id>(fn, stream, a...)) return static_cast<CUresult>(dq.take_error());
        const int err = dq.drain(info.name);  // made here: after everything queued before it
        dq.count_inline();
        return with_deferred_error(be_launch<Id>(fn, stream, a...), err);
      }
      return be_launch<Id>(fn, stream, a...);
    }
    if (dq.pending()) dq.drain("launch after a class change");  // queued while this process was best effort
    if (atomizing) return launch_maybe_atomized<Id, false>(fn, stream, nullptr, a...);
    return launch_one<Id>(fn, stream, nullptr, a...);
  } else if constexpr (info.kind == HookKind::kGraphLaunch || info.kind == HookKind::kGraphUpload) {
    const CUgraphExec exec = std::get<0>(std::tie(a...));
    // `grant`: what lithosd granted this launch (null: nothing).
    auto run = [&](const Grant* grant) {
      const FrameGuard guard;
      const Runtime::GraphCall call = rt.begin_graph(exec, Stream{stream, info.ptsz}, grant);
      if (rt.masking().routes_launches()) {
        const GreenBackend::Route route = rt.route(Stream{stream, info.ptsz});
        if (route) {
          CUlaunchConfig cfg{};
          return fn(with_stream(a, route.target(), &cfg)...);
        }
      }
      const CUresult r = fn(a...);
      rt.end_graph_launch(r == CUDA_SUCCESS, exec, call);
      return r;
    };
    LaunchInfo li;
    li.function = exec;
    // A best-effort graph that will be launched whole for good (no replay
    // plan) and whose descriptors are not built yet takes the set they are
    // built with from the daemon, at its first launch or upload, even while
    // the tenant runs free: built on the whole GPU, it would keep every
    // quota's TPCs for every later replay, beside a service too (the Engine
    // grants such a first build only TPCs the tenant may keep).
    // `pinned`: rt.graph_pinned(exec), the set its descriptors were built with.
    auto first_build_for_good = [&](const std::optional<sched::TpcSet>& pinned) {
      return !pinned && rt.masking().writes_masks() && graph_replay().plan(exec) == nullptr;
    };
    if constexpr (info.kind == HookKind::kGraphLaunch) {
      // lithosd: a best-effort graph waits for its grant (its descriptors'
      // mask is fixed when they are first built, docs/daemon.md); a
      // high-priority one goes out at once and is accounted.
      std::optional<Grant> free_grant;
      if (be_daemon()) {
        const std::optional<sched::TpcSet> pinned = rt.graph_pinned(exec);
        if (sched::TpcSet free; !first_build_for_good(pinned) && daemon_link().current().runs_free(&free)) {
          // Built already, it runs on the set it was built with whatever it
          // is given: given that set, it is not taken for a stale launch.
          if (pinned) free = *pinned;
          free_grant = Grant{free, /*runs_free=*/true};
          graph_replay().count_whole();  // nothing to protect: the whole graph at once
        } else if (capturing(Stream{stream, info.ptsz})) {
          return run(nullptr);  // recorded into the graph being captured: nothing runs now
        } else {
          // Node by node where the graph allows it (graph_replay.hpp): each
          // kernel a granted launch of its own.
          GraphReplay& gr = graph_replay();
          if (const auto plan = deferrable_on(Stream{stream, info.ptsz}) ? gr.plan(exec) : nullptr)
            return replay_graph(plan, stream);
          gr.count_whole();
          // Descriptors built by an earlier launch keep their mask: the
          // daemon is told the set it runs on (docs/daemon.md, "CUDA graphs").
          return granted_whole(li, Stream{stream, info.ptsz}, runtime().kernels().identity(exec, false), true, run,
                               pinned);
        }
      }
      const bool runs_free = free_grant.has_value();
      rt.before_immediate_launch(Stream{stream, info.ptsz}, runs_free);
      const CUresult r = run(free_grant ? &*free_grant : nullptr);
      if (r == CUDA_SUCCESS) rt.after_launch(Stream{stream, info.ptsz}, li, true, runs_free);
      return r;
    } else {
      // An upload builds the descriptors as a first launch does (programs
      // that capture once upload to save the first replay's cost; PyTorch
      // 2.11 does not). It is submitted under an identity of its own, so
      // that the predictor does not learn the graph's time from it.
      if (be_daemon() && first_build_for_good(rt.graph_pinned(exec)) && !capturing(Stream{stream, info.ptsz})) {
        LaunchIdentity id = runtime().kernels().identity(exec, false);
        id.kernel ^= kGraphUploadSalt;
        return granted_whole(li, Stream{stream, info.ptsz}, id, true, run);
      }
      return run(nullptr);
    }
  } else if constexpr (info.kind == HookKind::kGraphInstantiate) {
    CUgraphExec* out = std::get<0>(std::tie(a...));
    const FrameGuard guard;
    rt.begin_graph(nullptr, Stream{stream, info.ptsz}, nullptr, std::get<1>(std::tie(a...)));
    const CUresult r = fn(a...);
    rt.end_graph_instantiate(r == CUDA_SUCCESS, r == CUDA_SUCCESS && out != nullptr ? *out : nullptr);
    // A best-effort process keeps what it needs to replay the exec node by node.
    if (r == CUDA_SUCCESS && out != nullptr && graph_replay().enabled() && be_daemon()) {
      unsigned long long flags = 0;
      if constexpr (Id == HookId::cuGraphInstantiateWithFlags) {
        flags = std::get<2>(std::tie(a...));
      } else if constexpr (Id == HookId::cuGraphInstantiateWithParams ||
                           Id == HookId::cuGraphInstantiateWithParams_ptsz) {
        const CUDA_GRAPH_INSTANTIATE_PARAMS* p = std::get<2>(std::tie(a...));
        flags = p != nullptr ? p->flags : 0;
      }
      graph_replay().instantiated(*out, std::get<1>(std::tie(a...)), flags);
    }
    return r;
  } else if constexpr (info.kind == HookKind::kGraphExecDestroy) {
    rt.forget_graph_exec(std::get<0>(std::tie(a...)));  // before: the handle may be reused at once
    graph_replay().destroyed(std::get<0>(std::tie(a...)));
    return fn(a...);
  } else if constexpr (info.kind == HookKind::kGraphExecEdit) {
    const CUgraphExec exec = std::get<0>(std::tie(a...));
    GraphReplay& gr = graph_replay();
    gr.edited(exec);
    const CUresult r = fn(a...);
    if constexpr (Id == HookId::cuGraphExecUpdate_v2 || Id == HookId::cuGraphExecUpdate) {
      // The exec now runs that graph's topology with its parameters.
      if (r == CUDA_SUCCESS && gr.enabled() && be_daemon()) gr.instantiated(exec, std::get<1>(std::tie(a...)));
    }
    return r;
  } else if constexpr (info.kind == HookKind::kSync) {
    constexpr bool every_stream = Id == HookId::cuCtxSynchronize || Id == HookId::cuCtxSynchronize_v2;
    // A context's synchronisation covers the streams of its GPU's client; a
    // stream's, those of the client that knows the stream.
    DaemonClient& dc = every_stream ? daemon_link().current() : daemon_link().of_stream(Stream{stream, info.ptsz});
    const auto points =
        dc.wanted() ? dc.sync_points(Stream{stream, info.ptsz}, every_stream) : std::vector<DaemonClient::SyncPoint>{};
    const CUresult r = fn(a...);
    if (r == CUDA_SUCCESS) dc.synced(points);
    return r;
  } else if constexpr (info.kind == HookKind::kStreamDestroy) {
    rt.forget_stream(Stream{stream, info.ptsz});
    return fn(a...);
  } else if constexpr (info.kind == HookKind::kGetFunction || info.kind == HookKind::kGetKernel) {
    const CUresult r = fn(a...);
    auto* out = std::get<0>(std::tie(a...));
    if (r == CUDA_SUCCESS && out != nullptr) {
      rt.kernels().note_name(*out, std::get<2>(std::tie(a...)));
      if (atomizer().active()) atomizer().note_function(*out, std::get<1>(std::tie(a...)), std::get<2>(std::tie(a...)));
    }
    return r;
  } else if constexpr (info.kind == HookKind::kKernelGetFunction) {
    const CUresult r = fn(a...);
    CUfunction* out = std::get<0>(std::tie(a...));
    if (r == CUDA_SUCCESS && out != nullptr) {
      rt.kernels().note_function_of_kernel(*out, std::get<1>(std::tie(a...)));
      if (atomizer().active()) atomizer().note_function_of_kernel(*out, std::get<1>(std::tie(a...)));
    }
    return r;
  } else if constexpr (info.kind == HookKind::kModuleLoad || info.kind == HookKind::kModuleLoadFile) {
    Atomizer& az = atomizer();
    if (!az.active()) return fn(a...);
    const auto t = std::tie(a...);
    auto* out = std::get<0>(t);
    Atomizer::Prepared p;
    if constexpr (info.kind == HookKind::kModuleLoad) {
      p = az.prepare(std::get<1>(t));
    } else {
      p = az.prepare_file(std::get<1>(t));
    }
    if (!p.record) return fn(a...);
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if constexpr (info.kind == HookKind::kModuleLoad) {
      r = call_with_image(fn, p.image, t, std::index_sequence_for<A...>{});
    } else if constexpr (Id == HookId::cuModuleLoad) {
      const auto data = driver().cuModuleLoadData;
      if (data != nullptr) r = data(out, p.image);
    } else {
      const auto data = driver().cuLibraryLoadData;
      if (data != nullptr)
        r = data(out, p.image, std::get<2>(t), std::get<3>(t), std::get<4>(t), std::get<5>(t), std::get<6>(t),
                 std::get<7>(t));
    }
    if (r != CUDA_SUCCESS) {
      az.load_refused(p, static_cast<int>(r));
      return fn(a...);
    }
    if (out != nullptr) az.loaded(*out, p);
    return r;
  } else if constexpr (info.kind == HookKind::kUnload) {
    atomizer().unloaded(std::get<0>(std::tie(a...)));
    return fn(a...);
  } else if constexpr (info.kind == HookKind::kLibraryGetModule) {
    const CUresult r = fn(a...);
    CUmodule* out = std::get<0>(std::tie(a...));
    if (r == CUDA_SUCCESS && out != nullptr && atomizer().active())
      atomizer().note_module_of_library(*out, std::get<1>(std::tie(a...)));
    return r;
  } else if constexpr (info.kind == HookKind::kKernelNode || info.kind == HookKind::kGraphNode) {
    if constexpr (Id == HookId::cuGraphExecKernelNodeSetParams_v2 || Id == HookId::cuGraphExecNodeSetParams)
      graph_replay().edited(std::get<0>(std::tie(a...)));  // replayed whole from now on
    if (!atomizer().rewrote_any()) return fn(a...);
    return kernel_node_call<Id>(fn, a...);
  } else if constexpr (info.kind == HookKind::kPrimaryCtxRetain) {
    const CUresult r = fn(a...);
    if (r == CUDA_SUCCESS) rt.after_primary_ctx_retain(std::get<0>(std::tie(a...)), std::get<1>(std::tie(a...)));
    return r;
  } else if constexpr (info.kind == HookKind::kGetProcAddress) {
    const CUresult r = fn(a...);
    void** pfn = std::get<1>(std::tie(a...));
    if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) map_proc_address(std::get<0>(std::tie(a...)), pfn);
    return r;
  } else if constexpr (info.kind == HookKind::kOrdered) {
    // Ordered behind the deferred launches (dispatch drained the queue).
    // While a stream capture is in progress no launch is deferred.
    constexpr std::string_view name = info.name;
    if constexpr (name.starts_with("cuStreamBeginCapture")) {
      // Not while the tracker writes this stream's marker (hold_markers).
      const auto hold = daemon_link().of_stream(Stream{stream, info.ptsz}).hold_markers(Stream{stream, info.ptsz});
      const CUresult r = fn(a...);
      if (r == CUDA_SUCCESS) stream_captures().fetch_add(1, std::memory_order_acq_rel);
      return r;
    }
    const CUresult r = fn(a...);
    if constexpr (name.starts_with("cuStreamEndCapture")) {
      if (stream_captures().load(std::memory_order_acquire) > 0)
        stream_captures().fetch_sub(1, std::memory_order_acq_rel);
    }
    return r;
  } else {
    static_assert(info.kind == HookKind::kLaunch, "hook kind without a dispatch branch");
    return fn(a...);
  }
}

// Hook kinds whose calls wait for the deferred launches first: everything
// but launches (which queue or drain themselves) and calls that neither
// enqueue, wait for nor free anything a launch uses.
constexpr bool ordered_after_launches(HookKind k) {
  switch (k) {
    case HookKind::kGraphLaunch:
    case HookKind::kGraphUpload:
    case HookKind::kGraphInstantiate:
    case HookKind::kGraphExecDestroy:
    case HookKind::kStreamDestroy:
    case HookKind::kUnload:
    case HookKind::kSync:
    case HookKind::kOrdered: return true;
    default: return false;
  }
}

// Stream operations a best-effort process queues behind its deferred
// launches instead of draining the queue first: their arguments are values
// and device memory only, and they neither read host memory nor wait on the
// host, so the worker can make them later in the same order (a memset
// between two queued launches had held the application until the queue
// drained: ~36 times per ResNet-50 training step, 7.3 s of waiting in a
// 27 s run, docs/daemon.md). Host-memory copies, queries and
// synchronisations drain.
constexpr bool queued_behind_launches(HookId id) {
  switch (id) {
    case HookId::cuMemsetD8Async:
    case HookId::cuMemsetD8Async_ptsz:
    case HookId::cuMemsetD16Async:
    case HookId::cuMemsetD16Async_ptsz:
    case HookId::cuMemsetD32Async:
    case HookId::cuMemsetD32Async_ptsz:
    case HookId::cuMemsetD2D8Async:
    case HookId::cuMemsetD2D8Async_ptsz:
    case HookId::cuMemsetD2D16Async:
    case HookId::cuMemsetD2D16Async_ptsz:
    case HookId::cuMemsetD2D32Async:
    case HookId::cuMemsetD2D32Async_ptsz:
    case HookId::cuMemcpyDtoDAsync_v2:
    case HookId::cuMemcpyDtoDAsync_v2_ptsz:
    case HookId::cuEventRecord:
    case HookId::cuEventRecord_ptsz:
    case HookId::cuEventRecordWithFlags:
    case HookId::cuEventRecordWithFlags_ptsz:
    case HookId::cuStreamWaitEvent:
    case HookId::cuStreamWaitEvent_ptsz: return true;
    default: return false;
  }
}

// Every result the application gets: a sticky one (its context is lost, a
// fatal GPU fault) is told to lithosd (DaemonClient::report_fault). One
// comparison when the call succeeded.
inline CUresult noted(CUresult r) noexcept {
  if (r != CUDA_SUCCESS) daemon_link().note_result(static_cast<int>(r));
  return r;
}

template <HookId Id, class Fn, class... A>
CUresult dispatch(CUstream stream, A... a) {
  static_assert(std::is_same_v<Fn, CUresult (*)(A...)>, "hook_list.def: args do not match params");
  constexpr HookInfo info = hook_info(Id);
  const auto fn = reinterpret_cast<Fn>(real_driver().function(Id));
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
  if (thread_frame().internal) return fn(a...);
  if constexpr (ordered_after_launches(info.kind)) {
    DeferredLaunches& dq = deferred();
    if (dq.enabled()) {
      if constexpr (queued_behind_launches(Id)) {
        if (!lithos_disabled() && be_daemon() && deferrable_on(Stream{stream, info.ptsz}) &&
            dq.push([fn, stream, a...]() -> int { return static_cast<int>(dispatch_call<Id>(fn, stream, a...)); },
                    current_context())) {
          dq.count_stream_op();
          return noted(static_cast<CUresult>(dq.take_error()));
        }
      }
      const int err = dq.drain(info.name);
      if constexpr (info.kind == HookKind::kUnload) LaunchCopy::forget_layouts();
      return noted(with_deferred_error(dispatch_call<Id>(fn, stream, a...), err));
    }
  }
  return noted(dispatch_call<Id>(fn, stream, a...));
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

// `stream` then the arguments, if any (cuCtxSynchronize has none).
#define LITHOS_ARGS(...) __VA_OPT__(, ) __VA_ARGS__
#define LITHOS_HOOK(name, ret, params, args, kind, stream, ptsz, path)                          \
  extern "C" __attribute__((visibility("default"))) ret name params {                           \
    return ::lithos::intercept::dispatch<::lithos::intercept::HookId::name, decltype(&::name)>( \
        stream LITHOS_ARGS args);                                                               \
  }
#include "intercept/hook_list.def"
#undef LITHOS_HOOK
#undef LITHOS_ARGS
