// Best-effort CUDA graphs replayed node by node under lithosd
// (docs/daemon.md, "CUDA graphs").
//
// The H100 fixes a graph exec's TPC mask when its launch descriptors are
// built, and the daemon can only grant a whole replay at once: one replay of
// a best-effort graph would be one atom of tens of milliseconds. Instead, when
// a best-effort process instantiates a graph, lithos keeps a clone of it (the
// clone owns the parameter values the replay points into; the application
// may destroy its graph) and its nodes in one topological order, child graphs
// flattened: a plan. A launch of the exec then issues the plan's steps on the
// launch's stream, in order, through the ordinary best-effort paths: kernel
// nodes as launches (submitted, granted, atomized, deferred), memsets,
// copies, event records and waits and host functions as their stream calls.
// One stream for the whole graph gives up concurrency between its branches,
// never an ordering the graph asked for.
//
// Not replayed (the exec is launched whole, as one granted atom): graphs
// with memory allocation or free, conditional, external-semaphore or batch
// memory-operation nodes, kernels updatable from the device, graphs
// instantiated for device launch, anything not understood,
// and execs changed after
// instantiation (cuGraphExec*SetParams, cuGraphNodeSetEnabled; an exec
// updated from a graph by cuGraphExecUpdate gets a plan of that graph).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "intercept/cuda_abi.hpp"

namespace lithos::intercept {

class Atomizer;

struct ReplayKernel {
  CUfunction function = nullptr;  // a CUfunction, or a CUkernel (launch APIs take either)
  CUlaunchConfig config{};        // hStream and attrs are filled in per replay
  CUlaunchAttribute attrs[4] = {};
  unsigned num_attrs = 0;
  void** params = nullptr;  // into the clone's storage
  void** extra = nullptr;
  // A kernel the atomizer rewrote whose node carries bounds other than the
  // whole grid (an atom cut when the graph was captured): launched with its
  // node's parameters as they are, as one granted piece.
  bool fixed_bounds = false;
};
struct ReplayMemset {
  CUDA_MEMSET_NODE_PARAMS p{};
};
struct ReplayMemcpy {
  CUDA_MEMCPY3D p{};
};
struct ReplayEventRecord {
  CUevent event = nullptr;
};
struct ReplayEventWait {
  CUevent event = nullptr;
};
struct ReplayHost {
  CUDA_HOST_NODE_PARAMS p{};
};
using ReplayStep =
    std::variant<ReplayKernel, ReplayMemset, ReplayMemcpy, ReplayEventRecord, ReplayEventWait, ReplayHost>;

// One exec's replay. Shared by the queued steps of its replays, so that the
// clone lives until the last of them was made.
struct ReplayPlan {
  CUgraph clone = nullptr;
  std::vector<ReplayStep> steps;
  std::uint32_t kernels = 0;
  // Recorded after each replay: a replay on another stream first waits for
  // it (launches of one exec never overlap, as the driver's never do).
  CUevent done = nullptr;
  std::mutex mu;
  CUstream last_stream = nullptr;  // guarded by mu
  bool replayed = false;           // guarded by mu

  ReplayPlan() = default;
  ReplayPlan(const ReplayPlan&) = delete;
  ReplayPlan& operator=(const ReplayPlan&) = delete;
  ~ReplayPlan();
};

class GraphReplay {
 public:
  // Owned by the library (library.hpp: made once, never destroyed).

  // Once, from the Runtime's constructor (LITHOS_GRAPH_REPLAY).
  void configure(bool on) noexcept { enabled_ = on; }
  bool enabled() const noexcept { return enabled_; }

  // `exec` was instantiated from (or updated to) `graph` with `flags`
  // (CUDA_GRAPH_INSTANTIATE_FLAG_*): builds its plan, or notes why it has
  // none. A graph instantiated for device launch is never replayed (its
  // kernels may launch graphs from the device, only valid inside a graph).
  void instantiated(CUgraphExec exec, CUgraph graph, unsigned long long flags = 0) noexcept;
  // `exec` was changed in place: from now on it is launched whole.
  void edited(CUgraphExec exec) noexcept;
  void destroyed(CUgraphExec exec) noexcept;
  // The exec's plan; null when it has none.
  std::shared_ptr<ReplayPlan> plan(CUgraphExec exec) noexcept;

  // Counted by the graph-launch hook.
  void count_replay(std::size_t steps) noexcept;
  void count_whole() noexcept;

  // {"enabled":..,"plans":..,"replays":..,"steps":..,"whole":..,"refused":{"reason":n,...}}
  std::string stats_json() const;

 private:
  explicit GraphReplay(Atomizer& atomizer) noexcept : atomizer_(atomizer) {}
  friend class Library;  // the one owner (library.hpp)
  void refuse(const char* reason) noexcept;

  Atomizer& atomizer_;  // the rewritten kernels' tables (the library's)
  bool enabled_ = true;
  mutable std::mutex mu_;
  std::unordered_map<const void*, std::shared_ptr<ReplayPlan>> plans_;  // guarded by mu_
  std::unordered_map<std::string, std::uint64_t> refused_;              // guarded by mu_
  std::uint64_t built_ = 0, edited_ = 0;                                // guarded by mu_
  std::uint64_t replays_ = 0, steps_ = 0, whole_ = 0;                   // guarded by mu_
};

}  // namespace lithos::intercept
