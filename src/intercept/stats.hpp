// Coverage statistics: how many launches lithos saw on each API path, and
// whether each got its TPC mask (and if not, why). Counted with relaxed
// atomics on the launch path; printed at exit (LITHOS_STATS=1) and written as
// one JSON line (LITHOS_STATS_FILE). A process that used the CUDA driver but
// in which lithos saw no launch is reported loudly: interposition failed.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "intercept/hook_table.hpp"

namespace lithos::intercept {

// Why a launch (or a launch descriptor) ran without a lithos mask.
enum class SkipReason : int {
  kNotRequested,    // no mask asked for this stream or the process: whole GPU (not an error)
  kRequestRefused,  // a mask was asked for but refused (no live TPC in the set, bad set)
  kNoSlotMap,       // a mask was asked for but no slot map is loaded
  kOtherDevice,     // the launch went to a GPU the slot map does not describe
  kNoBackend,       // no mechanism can apply masks (descriptor hook unavailable)
  kUnknownQmd,      // the descriptor's layout version is unknown: refused
  kWriteFailed,     // the layout refused this mask (pre-Hopper 64-bit limit)
  kInternalError,   // lithos failed inside the hook; the launch ran unmasked
  kWholeLiveSet,    // the set is every live TPC: no mask written (same TPCs; not an error)
};
inline constexpr int kSkipReasonCount = 9;
const char* skip_reason_name(SkipReason r);

// A copy of the counters at one moment.
struct StatsSnapshot {
  std::array<std::uint64_t, kHookCount> calls{};  // per hooked symbol
  std::array<std::uint64_t, kSkipReasonCount> not_applied{};
  std::uint64_t masks_applied = 0;                // descriptors written with a mask
  std::uint64_t descriptors_in_launch = 0;        // descriptor callbacks inside a hooked launch
  std::uint64_t descriptors_in_graph = 0;         // ... inside graph instantiate/upload/launch
  std::uint64_t descriptors_outside = 0;          // ... outside any hooked call
  std::uint64_t launches_without_descriptor = 0;  // hooked launches whose descriptor never showed (capture, error)
  std::uint64_t graph_stale = 0;                  // graph launches that ran with a mask other than wanted
  std::uint64_t procaddress_hooked = 0;           // cuGetProcAddress answers replaced by a hook
  std::uint64_t procaddress_unrecognised = 0;     // hooked names whose pointer matched no known variant
  std::uint64_t dlsym_hooked = 0;                 // dlsym answers replaced by a hook
  std::uint64_t green_routed = 0;                 // launches sent to the green-context partition's stream
  std::uint64_t internal_errors = 0;
  // Safe masks (sched/launch_fit.hpp): what the rule did to masked launches.
  std::uint64_t cooperative_launches = 0;  // cooperative launches seen (any path, masked or not)
  std::uint64_t cluster_descriptors = 0;   // masked descriptors of cluster launches
  std::uint64_t widened_cluster = 0;       // masks widened inside a GPC for a cluster
  std::uint64_t widened_cooperative = 0;   // masks widened until a cooperative grid is resident
  std::uint64_t whole_by_rule = 0;         // launches left on the whole GPU by the rule (no mask written)
  std::uint64_t green_unrouted = 0;        // green-context launches kept off a partition that could hang them
  // Right-sizing of a high-priority tenant's launches (lithosd's right-size
  // table): eager launches narrowed; graph descriptors whose grid width
  // matched one of the graph's kernel nodes, matched none, and were narrowed.
  std::uint64_t rightsized_launches = 0;
  std::uint64_t graph_nodes_matched = 0;
  std::uint64_t graph_nodes_unmatched = 0;
  std::uint64_t graph_nodes_rightsized = 0;

  // Sum of calls over the kernel-launch hooks.
  std::uint64_t kernel_launches() const;
  std::uint64_t graph_launches() const;
  std::uint64_t descriptors() const { return descriptors_in_launch + descriptors_in_graph + descriptors_outside; }
  // Whether any hooked call was made or any descriptor seen: the process
  // touched CUDA through lithos.
  bool touched() const;
};

// What the report says about the process besides the counters.
struct StatsHeader {
  int pid = 0;
  std::string program;       // short name of the executable
  std::string backend;       // "descriptor", "green", "off", "none"
  std::string qmd_version;   // "V04_00", "" if no descriptor seen
  std::string process_mask;  // "TPCs 0-7 (8 of 66 live)", "whole GPU"
  std::string slot_map;      // path or ""
  bool driver_used = false;  // libcuda was loaded or a hook was called
  // The lithosd client's state and counters as one JSON object ("" when no
  // daemon is configured), from DaemonClient (client.hpp).
  std::string daemon_json;
};

// Multi-line human report, each line starting with "lithos: ".
std::string stats_text(const StatsHeader& header, const StatsSnapshot& s);
// One JSON object on one line (with a trailing newline).
std::string stats_json(const StatsHeader& header, const StatsSnapshot& s);
// True when the report must warn that interposition failed.
bool stats_interposition_failed(const StatsHeader& header, const StatsSnapshot& s);

// The live counters.
struct Counters {
  std::array<std::atomic<std::uint64_t>, kHookCount> calls{};
  std::array<std::atomic<std::uint64_t>, kSkipReasonCount> not_applied{};
  std::atomic<std::uint64_t> masks_applied{0};
  std::atomic<std::uint64_t> descriptors_in_launch{0};
  std::atomic<std::uint64_t> descriptors_in_graph{0};
  std::atomic<std::uint64_t> descriptors_outside{0};
  std::atomic<std::uint64_t> launches_without_descriptor{0};
  std::atomic<std::uint64_t> graph_stale{0};
  std::atomic<std::uint64_t> procaddress_hooked{0};
  std::atomic<std::uint64_t> procaddress_unrecognised{0};
  std::atomic<std::uint64_t> dlsym_hooked{0};
  std::atomic<std::uint64_t> green_routed{0};
  std::atomic<std::uint64_t> internal_errors{0};
  std::atomic<std::uint64_t> cooperative_launches{0};
  std::atomic<std::uint64_t> rightsized_launches{0};
  std::atomic<std::uint64_t> graph_nodes_matched{0};
  std::atomic<std::uint64_t> graph_nodes_unmatched{0};
  std::atomic<std::uint64_t> graph_nodes_rightsized{0};
  std::atomic<std::uint64_t> cluster_descriptors{0};
  std::atomic<std::uint64_t> widened_cluster{0};
  std::atomic<std::uint64_t> widened_cooperative{0};
  std::atomic<std::uint64_t> whole_by_rule{0};
  std::atomic<std::uint64_t> green_unrouted{0};

  static void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
  void call(HookId id) noexcept { bump(calls[static_cast<std::size_t>(hook_index(id))]); }
  void skip(SkipReason r) noexcept { bump(not_applied[static_cast<std::size_t>(r)]); }

  StatsSnapshot snapshot() const noexcept;
};

}  // namespace lithos::intercept
