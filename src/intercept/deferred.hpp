// The deferred-launch queue of a best-effort process under lithosd
// (docs/daemon.md, "Deferred launches").
//
// A best-effort launch waits for its grant from the daemon; made in the
// application's thread, that wait holds the application (PyTorch, Python)
// and the GPU is fed only as fast as the round trip goes. Instead the launch
// hook copies the launch (its arguments and parameter values), queues it
// here and returns CUDA_SUCCESS at once; one worker thread per process takes
// the queue in order and makes each launch exactly as the hook would have
// (submit, wait for grants, launch the atoms, write markers). The
// application runs ahead until the queue holds `depth` launches.
//
// Order: stream operations that touch device memory only (async memsets,
// device-to-device copies, event records and stream waits:
// queued_behind_launches in hooks.cpp) are queued behind the launches and
// made by the worker in turn. Every other driver call that could observe
// or depend on a queued launch (host-memory copies, synchronous sets, event
// queries, synchronisations and destructions, frees, graph launches,
// capture, unloads: the kOrdered hooks and the other hook kinds, hooks.cpp)
// first drains the queue: it waits until everything queued before it was
// made. Launches of every stream of the process share the one queue, so the
// driver sees them in the order the application made them. A launch that cannot be copied
// (parameters of unknown size, the per-thread default stream, a stream
// capture in progress) drains the queue and is made in place.
//
// Errors: a queued launch that fails is logged once and its error returned
// by the next call that drains the queue (as the driver reports an
// asynchronous error at a later call).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

struct CUctx_st;

namespace lithos::intercept {

class DeferredLaunches {
 public:
  // Makes the launch; returns its CUresult.
  using Launch = std::function<int()>;

  // The library's member (library.hpp: made once, never destroyed).
  static DeferredLaunches& instance() noexcept;

  // Once, from the Runtime's constructor. depth: launches queued at most.
  void configure(bool on, std::uint32_t depth) noexcept;
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  // Queues `launch`, to be made on the worker with `ctx` current. Blocks
  // while the queue is full. False when it was not queued (not enabled, the
  // worker thread itself, no worker): the caller drains and launches in place.
  bool push(Launch launch, CUctx_st* ctx) noexcept;
  // Whether launches are queued or being made now.
  bool pending() const noexcept {
    return pushed_.load(std::memory_order_acquire) != done_.load(std::memory_order_acquire);
  }
  // Waits until every launch queued before this call was made. Returns the
  // first error (a CUresult) of a queued launch since the last drain, 0 when
  // none. On the worker thread: returns 0 at once. `cause` (a string that
  // lives as long as the process: a hook's name) is what the drain is
  // counted under in the statistics' `drained_by`.
  int drain(const char* cause = "other") noexcept;
  // The first error of a queued launch not reported yet (0: none), cleared.
  int take_error() noexcept { return first_error_.exchange(0, std::memory_order_acq_rel); }

  struct Stats {
    std::uint64_t deferred = 0;       // launches and stream operations queued
    std::uint64_t stream_ops = 0;     // of them, stream operations (memsets, device copies, events)
    std::uint64_t inline_made = 0;    // launches that could not be queued (made in place after a drain)
    std::uint64_t drains = 0;         // drains that found launches pending
    std::uint64_t drain_wait_ns = 0;  // time those drains waited
    std::uint64_t full_waits = 0;     // pushes that found the queue full
    std::uint64_t max_depth = 0;      // most launches queued at once
    std::uint64_t errors = 0;         // queued launches that failed
  };
  Stats stats() const noexcept;
  // Counted by the launch hook when a launch had to be made in place.
  void count_inline() noexcept { inline_made_.fetch_add(1, std::memory_order_relaxed); }
  // Counted by the hooks when what they queued was a stream operation (a
  // memset, a device copy, an event record or wait), not a launch.
  void count_stream_op() noexcept { stream_ops_.fetch_add(1, std::memory_order_relaxed); }
  // The statistics as one JSON object.
  std::string stats_json() const;

 private:
  struct Item {
    Launch launch;
    CUctx_st* ctx = nullptr;
  };
  DeferredLaunches() = default;
  friend class Library;  // the one owner (library.hpp)
  bool start_locked() noexcept;
  void worker() noexcept;
  void after_fork_child() noexcept;

  std::atomic<bool> enabled_{false};
  std::uint32_t depth_ = 256;
  std::mutex mu_;
  std::condition_variable work_cv_;  // the worker waits for launches
  std::condition_variable done_cv_;  // drains and full pushes wait for the worker
  std::deque<Item> queue_;           // guarded by mu_
  bool started_ = false;             // guarded by mu_
  bool worker_sleeping_ = false;     // guarded by mu_
  int waiters_ = 0;                  // guarded by mu_: threads waiting on done_cv_
  std::atomic<std::uint64_t> pushed_{0}, done_{0};
  std::atomic<int> first_error_{0};
  std::atomic<std::uint64_t> stream_ops_{0}, inline_made_{0}, drains_{0}, drain_wait_ns_{0}, full_waits_{0},
      max_depth_{0}, errors_{0};
  // Drains that found launches pending, by cause (the first kCauses causes
  // seen; later ones under the last entry's "other").
  struct Cause {
    std::atomic<const char*> name{nullptr};
    std::atomic<std::uint64_t> n{0}, wait_ns{0};
  };
  static constexpr std::size_t kCauses = 24;
  Cause causes_[kCauses];
  void count_cause(const char* cause, std::uint64_t wait_ns) noexcept;
};

}  // namespace lithos::intercept
