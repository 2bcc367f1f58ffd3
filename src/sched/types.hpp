// Domain types shared by every part of the scheduling core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/time.hpp"
#include "sched/topology.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::sched {

using TenantId = std::uint32_t;
using QueueId = std::uint32_t;
using LaunchId = std::uint64_t;
// Identity of a kernel function: a hash of (module, name) in the runtime, the
// kernel class in the simulator. Stable for the life of a process.
using KernelId = std::uint64_t;

inline constexpr TenantId kNoTenant = UINT32_MAX;

// What the scheduler needs to know about the GPU. No CUDA: the runtime fills
// it from device attributes, the simulator from its model.
struct DeviceShape {
  std::string name = "H100-SXM5-80GB";
  int tpcs = 66;  // logical TPCs that are present
  int sms_per_tpc = 2;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int max_warps_per_sm = 64;
  int regs_per_sm = 65536;
  int max_regs_per_thread = 255;
  int reg_alloc_unit = 256;  // registers are allocated per warp in units of this
  int warp_size = 32;
  int smem_per_sm = 228 * 1024;  // bytes usable by blocks on one SM
  int smem_per_block_max = 227 * 1024;
  int smem_reserved_per_block = 1024;  // the driver's per-block reservation (sm_80+)
  // Which TPCs share a GPC (thread-block clusters must fit in one); unknown
  // by default, so that cluster launches run on the whole device.
  Topology topology;

  // Shape of an H100 SXM5 80GB (compute capability 9.0, 132 SMs), from
  // NVIDIA's CUDA C Programming Guide tables for compute capability 9.0, and
  // the GPCs measured on the lent H100 (docs/safe-masks.md).
  static DeviceShape h100_sxm();
};

enum class PriorityClass : std::uint8_t { kHigh, kBestEffort };
const char* priority_class_name(PriorityClass c);

// Whether best-effort work pauses while a high-priority tenant works (lithos
// policy). Paused: while the tenant has work on the GPU, and for the idle
// grace after, no best-effort atom starts on any TPC. For a service that
// shares with a memory-bound trainer what TPC masks cannot divide (memory
// bandwidth, L2): best-effort work then runs between its requests, and only
// atoms already on the GPU overlap one.
enum class BestEffortPause : std::uint8_t {
  kNever,   // best effort borrows and shares TPCs as the policy allows
  kAlways,  // paused whenever the tenant is active
  // Paused while the tenant's work measurably runs slower beside
  // best-effort atoms than without them (LithosConfig::pause_slowdown; the
  // lithos policy measures it, docs/daemon.md "Pausing best-effort work").
  kAuto,
};
// "false", "true", "auto": the configuration files' spellings (a TOML
// boolean, or the string "auto").
const char* best_effort_pause_name(BestEffortPause p);
// The value as a TOML or JSON literal: true, false or "auto" (quoted).
const char* best_effort_pause_literal(BestEffortPause p);
// The setting a TOML value gives: a boolean, or a string that must be
// "auto"; nullopt for any other value (the caller names the key).
std::optional<BestEffortPause> best_effort_pause_of(std::optional<bool> boolean, std::optional<std::string_view> text);
inline constexpr const char* kBestEffortPauseRule = "must be true, false or \"auto\"";

// A tenant as declared by its operator.
struct TenantSpec {
  std::string name;
  PriorityClass priority = PriorityClass::kBestEffort;
  // TPCs guaranteed to this tenant whenever it has work (0 for best-effort).
  int quota = 0;
  // Latency objective for one request, if the tenant has one.
  std::optional<Duration> slo;
  // TPCs this tenant gets under the static-partition baseline; when unset,
  // high-priority tenants get their quota and best-effort tenants share what
  // no quota holds.
  std::optional<int> static_tpcs;
  // High priority only (lithos policy): whether best-effort work pauses
  // while this tenant works (BestEffortPause).
  BestEffortPause pauses_best_effort = BestEffortPause::kNever;
  // Right-sizing under a policy that can (lithos): whether this tenant's
  // kernels get the fewest TPCs within its slip (unset: the policy's
  // setting), and its slip (unset: RightSizeConfig::slip).
  std::optional<bool> rightsize;
  std::optional<double> rightsize_slip;
};

struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
  constexpr std::uint64_t count() const { return std::uint64_t{x} * y * z; }
  friend constexpr bool operator==(const Dim3&, const Dim3&) = default;
};

// One kernel launch as the scheduler sees it.
struct LaunchDesc {
  KernelId kernel = 0;
  Dim3 grid;
  Dim3 block;
  std::uint32_t regs_per_thread = 32;
  std::uint32_t smem_per_block = 0;  // static + dynamic shared memory, bytes
  Dim3 cluster;                      // {1,1,1}: not a cluster launch
  bool cooperative = false;          // grid-synchronising: never split
  bool indivisible = false;          // the runtime cannot split it (a kernel it did not rewrite)
  // Its kernels are not described (a CUDA graph launched whole): it may use
  // every TPC, so its occupancy bound is the whole device, not its grid's.
  bool whole_device = false;
  std::uint64_t wave_blocks = 0;  // blocks the whole GPU holds at once (0: unknown)
  // TPCs it runs on whatever it is granted (a CUDA graph whose launch
  // descriptors, and so their mask, were built before); empty: none. A
  // grant always covers them (launch_fit.hpp, FitReason::kPinned).
  TpcSet pinned;
  // A duration the caller already knows (e.g. an oracle in the simulator);
  // the scheduler uses its own predictor when this is empty.
  std::optional<Duration> duration_hint;

  bool is_cluster() const { return cluster.count() > 1; }
};

// Hardware priority an atom is sent with (a stream priority on the GPU).
enum class HwPriority : std::uint8_t { kHigh = 0, kNormal = 1, kLow = 2 };

}  // namespace lithos::sched
