// Hang-free calibration of the physical slot map.
//
// A launch whose enabled mask slots are all dead never finishes (the process
// must be killed), so the calibration never emits such a mask:
//
//  1. Baseline: every slot enabled -> S_all, the SMs that run blocks.
//  2. Complement pass: for each slot s, disable s alone, every other slot
//     enabled. The SMs that vanish belong to s (none: s is dead). Once a slot
//     is proven live (it lost SMs), every later mask enables it, so it cannot
//     hang. Before the first live slot is found the masks disable one slot
//     while S_all holds at least two TPCs; a mask bit controls at most one TPC
//     (NVIDIA names the field TPC_DISABLE_MASK; measured on the H100), so at
//     least one live slot stays enabled. These "bootstrap" masks are counted.
//  3. Positive pass: each slot s is verified by enabling exactly {s, ref},
//     ref a proven-live slot: the SMs seen must be ref's plus s's (nothing
//     more for a dead slot). No mask ever enables only unproven slots.
//
// An internal guard checks every mask before it reaches the probe and fails
// the calibration (kInternal) instead of emitting one that could hang.
// Inconsistent hardware answers are errors, never silent maps: an SM claimed
// by two slots, a slot that owns SMs of several TPCs or half a TPC, SMs never
// found, SMs outside the baseline, a positive check that disagrees, or a map
// that does not cover sm_count/2 TPCs.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "gpu/qmd.hpp"
#include "gpu/slot_map.hpp"

namespace lithos::gpu {

// Identity of the device behind a probe.
struct ProbeInfo {
  std::string gpu_uuid, gpu_name, driver_version;
  int sm_count = 0;            // SMs the device reports
  int mask_slots = kMaxSlots;  // slots the descriptor mask can address (64 pre-Hopper)
};

// Runs one launch with `mask` and reports which SMs ran at least one block.
// Implementations: CudaProbe (cuda_probe.hpp) on the GPU, fakes in tests.
class SmProbe {
 public:
  virtual ~SmProbe() = default;
  virtual ProbeInfo info() const = 0;
  // An error means the launch could not be made or did not finish (for the
  // real probe: the watchdog fired); calibration stops at the first one.
  virtual Result<std::set<int>> sms_seen(const SlotMask& mask) = 0;
};

struct CalibrateOptions {
  int slot_count = 0;           // slots to probe; 0 = info().mask_slots (<= 128)
  int retries = 2;              // re-measurements of a slot whose answer is inconsistent
  bool verify_positive = true;  // step 3 (off only in tests of step 2)
};

struct CalibrateStats {
  int launches = 0;         // masks emitted (probe calls)
  int bootstrap_masks = 0;  // masks emitted before a live slot was proven
  int retried = 0;          // re-measurements made
  double seconds = 0;       // wall time of calibrate()
};

// Measures the slot map. `stats` (optional) receives counts.
Result<SlotMap> calibrate(SmProbe& probe, const CalibrateOptions& options, CalibrateStats* stats = nullptr);

// Groups of `group_size` consecutive slots (9 on the H100: one per GPC, it
// seems) with the number of live TPCs each holds; for `lithos calibrate`.
struct SlotGroup {
  int first_slot = 0;
  int live = 0;
  std::vector<int> tpcs;  // logical TPCs, in slot order
};
std::vector<SlotGroup> slot_groups(const SlotMap& map, int group_size);

}  // namespace lithos::gpu
