// The TPC sets of the C API's streams (lithos_set_stream_tpcs), by stream
// handle (Stream::handle_key), each with its descriptor mask on the
// configured slot map; and MaskEntry, the set-and-mask pair the runtime
// keeps for the process too.
//
// Threading: a shared_mutex, taken on the launch path only once some stream
// has a set (any(): one atomic load otherwise). Every function but any()
// may throw only out of memory or a lock failure; callers count that.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "gpu/qmd.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::intercept {

// A TPC set and its descriptor mask. `whole`: the set is every live TPC; no
// mask is written for it (the descriptor is left as the driver built it:
// the same TPCs), and it needs no descriptor callback.
struct MaskEntry {
  gpu::SlotMask slots;
  sched::TpcSet tpcs;
  bool whole = false;
};

class StreamSets {
 public:
  using Map = std::unordered_map<std::uintptr_t, MaskEntry>;

  // Whether some stream has a set.
  bool any() const noexcept { return count_.load(std::memory_order_acquire) > 0; }
  std::optional<MaskEntry> find(std::uintptr_t key) const {
    const std::shared_lock<std::shared_mutex> lock(mu_);
    const auto it = sets_.find(key);
    if (it == sets_.end()) return std::nullopt;
    return it->second;
  }
  void set(std::uintptr_t key, const MaskEntry& e) {
    const std::unique_lock<std::shared_mutex> lock(mu_);
    sets_[key] = e;
    count_.store(sets_.size(), std::memory_order_release);
  }
  void erase(std::uintptr_t key) {
    const std::unique_lock<std::shared_mutex> lock(mu_);
    sets_.erase(key);
    count_.store(sets_.size(), std::memory_order_release);
  }
  // A copy of every set (to make them again on another slot map), and the
  // entries made again, written back to the streams that still have a set.
  Map snapshot() const {
    const std::shared_lock<std::shared_mutex> lock(mu_);
    return sets_;
  }
  void replace_existing(const Map& remade) {
    const std::unique_lock<std::shared_mutex> lock(mu_);
    for (const auto& [key, e] : remade) {
      if (auto it = sets_.find(key); it != sets_.end()) it->second = e;
    }
  }

 private:
  mutable std::shared_mutex mu_;
  Map sets_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace lithos::intercept
