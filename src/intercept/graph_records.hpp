// What lithos keeps of each CUDA graph exec: whether its launch descriptors
// were built, with which mask, set and slot map, and the merged needs of its
// kernel nodes. The driver builds an exec's descriptors once, at its first
// launch or upload, and keeps them (docs/interposer.md, "CUDA graphs"), so
// this is what its later launches run with.
//
// Threading: one mutex (graph calls are rare next to launches). Every
// function may throw only out of memory; callers count that.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "gpu/qmd.hpp"
#include "sched/launch_fit.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::intercept {

struct GpuView;

// A kernel node of a graph as lithosd's right-size table knows it: the
// kernel's identity (KernelInfo::id_of, as launches report it) and its grid.
struct GraphNodeKey {
  std::uint64_t kernel = 0;
  sched::Dim3 grid;
};
using GraphNodeKeys = std::shared_ptr<const std::vector<GraphNodeKey>>;

class GraphExecRecords {
 public:
  struct Record {
    bool built = false;
    bool has_mask = false;
    gpu::SlotMask mask{};
    sched::LaunchNeeds needs;       // of its kernel nodes (at instantiate)
    sched::TpcSet tpcs;             // the set chosen when its descriptors were built (has_mask)
    const GpuView* view = nullptr;  // the slot map they were built with (has_mask)
    // Its kernel nodes (at instantiate, for a tenant of lithosd; null:
    // none kept), for the per-node right sizes of descriptors built later.
    GraphNodeKeys nodes;
  };

  void put(const void* exec, const Record& r) {
    const std::lock_guard<std::mutex> lock(mu_);
    records_[exec] = r;
  }
  std::optional<Record> find(const void* exec) const {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = records_.find(exec);
    if (it == records_.end()) return std::nullopt;
    return it->second;
  }
  void forget(const void* exec) {
    const std::lock_guard<std::mutex> lock(mu_);
    records_.erase(exec);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<const void*, Record> records_;
};

}  // namespace lithos::intercept
