// The kernel atomizer inside liblithos.so (docs/atomizer.md).
//
// Load side: every image the application hands the driver (cuModuleLoad*,
// cuLibraryLoad*, fatbins with LZ4 or Zstandard entries, cubins, PTX which
// lithos JIT-compiles itself first) is rewritten by cubin::atomize_image:
// each sm_90 kernel gets an appended 8-byte parameter (lo, hi) and an entry
// check that makes blocks outside [lo, hi) exit. The driver gets the
// rewritten cubin; if it refuses it, the original is loaded instead.
//
// Launch side: a launch of a rewritten kernel (every launch path, CUDA-graph
// kernel nodes included) must carry the extra parameter. The launch is run
// as `count` launches of the same grid with consecutive block ranges
// (atoms), in order on the caller's stream, each with its own launch
// descriptor (so each can carry its own TPC mask). Under lithosd each atom
// waits for its grant (the Engine decides its TPCs and when it goes: hooks.cpp
// run_granted); without a daemon the atoms are issued at once. count comes
// from the scheduling core's atom planner (sched::plan_atoms) fed with
// durations measured here with CUDA events on sampled launches, or from
// LITHOS_ATOMS.
// Cooperative launches and cluster launches whose clusters a block range
// cannot keep whole run as one atom covering the grid.
//
// Fail-safe: a handle lithos cannot tie to a rewritten image is launched
// untouched (such handles come only from images lithos did not rewrite).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cubin/atomize.hpp"
#include "intercept/config.hpp"
#include "intercept/stream.hpp"
#include "sched/atom_plan.hpp"

namespace lithos::intercept {

// One rewritten image, kept alive for as long as the driver may read it.
struct ImageRecord {
  cubin::AtomizedImage atomized;
  std::unordered_map<std::string, const cubin::KernelPatch*> by_name;
};

// Per-kernel counters (one per kernel name of a rewritten image, shared by
// every handle of that kernel).
struct KernelCounters {
  std::string name;
  std::uint64_t name_hash = 0;  // FNV-1a of name: the kernel's identity for lithosd (KernelInfo::id_of)
  cubin::PatchStatus status = cubin::PatchStatus::kPatched;
  std::atomic<std::uint64_t> launches{0};
  std::atomic<std::uint64_t> split_launches{0};  // run as more than one atom
  std::atomic<std::uint64_t> atoms{0};
  std::atomic<std::uint64_t> whole_reason[sched::kAtomReasonCount]{};  // sched::AtomReason of launches run whole
  std::atomic<std::uint64_t> timed{0};                                 // launches timed with events
  std::atomic<std::uint64_t> timed_ns{0};                              // their total GPU time
  std::atomic<std::uint64_t> long_whole{0};                    // timed launches run whole yet longer than one atom
  std::atomic<std::uint64_t> long_whole_ns{0};                 // their GPU time
  std::mutex mu;                                               // guards ewma_ns and seen
  std::unordered_map<std::uint64_t, double> ewma_ns;           // blocks -> smoothed duration
  std::unordered_map<std::uint64_t, std::uint64_t> seen;       // blocks -> launches (sampling)
  std::unordered_map<std::uint64_t, std::uint64_t> occupancy;  // threads << 32 | smem -> blocks per wave (0: unknown)
};

// What a launch hook needs about a launched handle.
struct FunctionEntry {
  const cubin::KernelPatch* patch = nullptr;  // null: not from a rewritten image
  std::shared_ptr<ImageRecord> image;         // keeps patch alive
  KernelCounters* counters = nullptr;         // null for unknown handles
};

// Builds the parameter list of one launch of a rewritten kernel: the
// caller's kernelParams or `extra` buffer plus (lo, hi) at bounds_offset.
class BoundsParams {
 public:
  // False when the caller's arguments cannot be extended (a malformed
  // `extra` list): the launch must then go on unmodified.
  bool build(const cubin::KernelPatch& p, void** kernel_params, void** extra);
  void set(std::uint32_t lo, std::uint32_t hi);
  void** params() { return params_; }
  void** extra() { return extra_; }

 private:
  std::uint32_t bounds_[2] = {0, 0xffffffffu};
  std::uint32_t offset_ = 0;
  std::vector<void*> ptrs_;
  std::vector<std::uint8_t> buf_;
  std::size_t buf_size_ = 0;
  void* extra_list_[5] = {};
  void** params_ = nullptr;
  void** extra_ = nullptr;
};

// What sizes a wave of a launch (cuOccupancyMaxActiveBlocksPerMultiprocessor
// x SMs): the launched handle, block shape and dynamic shared memory.
// A null handle: the wave is unknown (atoms are not wave-aligned).
struct AtomWaveQuery {
  const void* handle = nullptr;
  std::uint32_t block[3] = {1, 1, 1};
  std::uint32_t smem = 0;
};

class Atomizer {
 public:
  // Owned by the library (library.hpp: made once, never destroyed) and
  // handed to what uses it.
  void configure(const Config& c) noexcept;  // once, by the library as it makes the runtime
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  // Whether any rewritten image was loaded (its kernels need their bounds
  // on every launch, even after lithos is switched off).
  bool rewrote_any() const noexcept { return images_rewritten.load(std::memory_order_relaxed) != 0; }
  bool times_all() const noexcept { return active() && config_.atom_time_all; }
  // Changes the atom count rule at run time (lithos_atom_configure):
  // forced > 0 splits every splittable launch into `forced` atoms; else
  // atoms of `atom_us` (> 0) from the measured durations.
  void set_rule(std::uint32_t forced, double atom_us) noexcept;

  // ---- loading ----
  struct Prepared {
    const void* image = nullptr;          // what the driver gets
    std::shared_ptr<ImageRecord> record;  // null: the original image
    std::string reason;                   // why not rewritten (for the log)
  };
  // `image` is a memory image; a file path is read first (prepare_file).
  Prepared prepare(const void* image) noexcept;
  Prepared prepare_file(const char* path) noexcept;
  void loaded(void* handle, const Prepared& p) noexcept;  // module or library
  void load_refused(const Prepared& p, int result) noexcept;
  void unloaded(void* handle) noexcept;

  // ---- handles ----
  void note_function(void* function, void* module_or_library, const char* name) noexcept;
  void note_function_of_kernel(void* function, void* kernel) noexcept;
  // Grows whenever an entry of the function table is replaced (note_function*),
  // so that what was derived from lookup() may be cached until it changes.
  std::uint32_t table_epoch() const noexcept { return table_epoch_.load(std::memory_order_acquire); }
  void note_module_of_library(void* module, void* library) noexcept;
  // The entry of a launched CUfunction/CUkernel; null when it is not a kernel
  // of a rewritten image.
  const FunctionEntry* lookup(const void* handle) noexcept;
  // The driver's name of a function or kernel handle ("" when it has none).
  std::string driver_name(const void* handle) noexcept;

  // ---- launching ----
  struct Launch {
    sched::AtomPlan plan;
    bool timed = false;
    void* start = nullptr;   // CUevent
    void* stream = nullptr;  // the stream events go to
  };
  using WaveQuery = AtomWaveQuery;
  // Decides the atoms of one launch. grid/cluster in blocks. `whole`: one
  // atom (AtomReason::kUnneeded: a tenant of lithosd running free
  // has nothing to protect, and atoms would only cost it).
  Launch plan(const FunctionEntry& e, const std::uint32_t grid[3], const std::uint32_t cluster[3], bool cooperative,
              Stream stream, const WaveQuery& wave = {}, bool whole = false) noexcept;
  void finish(const FunctionEntry& e, Launch& l, bool ok) noexcept;
  // Counts `n` atoms launched for a split launch (granted launches take
  // their ranges from the daemon, so the count can differ from the plan's).
  void atoms_issued(const FunctionEntry& e, std::uint32_t n) noexcept;

  // LITHOS_ATOM_TIME: a launch of a kernel lithos did not rewrite, timed
  // under "?<name>" so that coverage can count its GPU time.
  template <class F>
  auto timed_unknown(const void* handle, const std::string& name, const std::uint32_t grid[3], Stream stream,
                     F&& launch) noexcept -> decltype(launch()) {
    FunctionEntry e;
    static const cubin::KernelPatch kNone{};
    e.patch = &kNone;
    try {
      std::string n = name.empty() ? driver_name(handle) : name;
      if (n.empty()) n = std::to_string(reinterpret_cast<std::uintptr_t>(handle));
      e.counters = counters_for("?" + n, cubin::PatchStatus::kNotRewritten);
    } catch (...) {
      return launch();
    }
    const std::uint32_t one[3] = {1, 1, 1};
    Launch l = plan(e, grid, one, true, stream);
    const auto r = launch();
    finish(e, l, r == 0);
    return r;
  }
  // Counts a launch path lithos cannot extend (it went on unmodified).
  void unsupported_path(const char* what) noexcept;

  // Collects finished timings (blocking when `wait`), then writes the JSON
  // report to `path` (or LITHOS_ATOM_REPORT when null). 0 on success.
  int report(const char* path, bool wait) noexcept;
  std::string report_json() noexcept;

  std::atomic<std::uint64_t> images_seen{0}, images_rewritten{0}, images_refused{0}, images_jit{0};
  std::atomic<std::uint64_t> kernels_patched{0}, kernels_unpatched{0};
  std::atomic<std::uint64_t> load_ns{0};
  std::atomic<std::uint64_t> unknown_launches{0}, unsupported_paths{0};

 private:
  Atomizer() = default;
  friend class Library;  // the one owner (library.hpp)
  int device_sm() noexcept;
  int device_sm_count() noexcept;  // multiprocessors of the current context's device (0: unknown)
  std::uint64_t wave_blocks(KernelCounters& c, const void* handle, const std::uint32_t block[3],
                            std::uint32_t smem) noexcept;
  void poll_timings(bool wait) noexcept;
  // CUDA timing events from the pool; null when none can be created.
  void* take_event() noexcept;
  void give_event(void* ev) noexcept;
  KernelCounters* counters_for(const std::string& name, cubin::PatchStatus s);
  FunctionEntry entry_for(const std::shared_ptr<ImageRecord>& rec, const char* name);

  std::atomic<bool> active_{false};
  Config config_;
  sched::AtomConfig atom_config_;
  std::atomic<int> sm_{-1};
  std::atomic<int> sm_count_{-1};

  mutable std::shared_mutex mu_;
  std::unordered_map<const void*, std::shared_ptr<ImageRecord>> images_;  // module/library -> image
  std::unordered_map<const void*, FunctionEntry> functions_;              // function/kernel -> entry
  std::atomic<std::uint32_t> table_epoch_{0};
  std::vector<std::shared_ptr<ImageRecord>> keep_;  // every rewritten image
  std::mutex reasons_mu_;
  std::unordered_map<std::string, std::uint64_t> not_rewritten_;  // reason -> images
  std::mutex counters_mu_;
  std::unordered_map<std::string, std::unique_ptr<KernelCounters>> counters_;

  struct Pending {
    void* start;
    void* end;
    KernelCounters* counters;
    std::uint64_t blocks;
    bool split;  // ran as more than one atom
  };
  std::mutex timing_mu_;
  std::vector<Pending> pending_;
  std::vector<void*> free_events_;
};

}  // namespace lithos::intercept
