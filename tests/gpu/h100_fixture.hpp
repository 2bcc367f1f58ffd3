// The H100 slot map of ../shared/docs/h100-facts.md §1, typed in as test data.
//
// What the facts state: slot 0 -> SMs 0,1; 1 -> 16,17; 2 -> 32,33;
// 3 -> 48,49; slots 4-8 dead; 9 -> 2,3; 10 -> 18,19; 17, 26, 35, 44, 53
// dead; 62 -> 120,121; 63 -> 14,15; 64 -> 30,31; 71 -> 122,123; slots 0-71
// reach 62 TPCs in groups of 9 holding 4, 8 or 9; SMs 124-131 (TPCs 62-65)
// answer to slots >= 72.
// The slots in between follow the model that fits every stated fact: logical
// TPCs are dealt round-robin over the eight 9-slot groups, skipping groups
// that have run out (group 0 holds 4, groups 1-5 hold 8, groups 6-7 hold 9).
// `lithos calibrate` on the lent H100 (2026-11-21, docs/gpu.md) measured
// exactly this for slots 0-71, and TPCs 62, 63, 64, 65 behind slots 75, 78,
// 81 and 83; every other slot is dead.
#pragma once

#include <array>
#include <cstdint>

#include "gpu/slot_map.hpp"

namespace lithos::gpu::testing {

inline SlotMap h100_slot_map() {
  SlotMap m;
  m.gpu_uuid = "GPU-00000000-1111-2222-3333-444444444444";
  m.gpu_name = "NVIDIA H100 80GB HBM3";
  m.driver_version = "580.159.04";
  m.sm_count = 132;
  m.slot_count = 128;
  constexpr std::array<int, 8> kLive = {4, 8, 8, 8, 8, 8, 9, 9};
  std::array<int, 8> used{};
  int tpc = 0;
  while (tpc < 62) {
    for (int g = 0; g < 8 && tpc < 62; ++g) {
      if (used[static_cast<std::size_t>(g)] == kLive[static_cast<std::size_t>(g)]) continue;
      const int slot = 9 * g + used[static_cast<std::size_t>(g)]++;
      m.tpc_of_slot[static_cast<std::size_t>(slot)] = static_cast<std::int16_t>(tpc++);
    }
  }
  constexpr std::array<int, 4> kHighSlots = {75, 78, 81, 83};  // TPCs 62-65, measured
  for (int i = 0; i < 4; ++i) {
    m.tpc_of_slot[static_cast<std::size_t>(kHighSlots[static_cast<std::size_t>(i)])] =
        static_cast<std::int16_t>(62 + i);
  }
  return m;
}

// The topology measured on the H100 on 2026-11-24 (docs/gpu.md "Topology
// (GPCs)"): the live TPCs of each 9-slot group 0-7 are one GPC; TPCs 62, 63,
// 64 and 65 (slots 75, 78, 81, 83) never share a cluster with any other TPC
// and are one-TPC domains. GPCs in slot order, as discover_topology() gives
// them.
inline constexpr char kH100TopologyText[] =
    "0,8,16,24;1,9,17,25,32,39,46,53;2,10,18,26,33,40,47,54;3,11,19,27,34,41,48,55;4,12,20,28,35,42,49,56;"
    "5,13,21,29,36,43,50,57;6,14,22,30,37,44,51,58,60;7,15,23,31,38,45,52,59,61;62;63;64;65";
inline sched::Topology h100_topology() { return sched::Topology::parse(kH100TopologyText).value(); }

}  // namespace lithos::gpu::testing
