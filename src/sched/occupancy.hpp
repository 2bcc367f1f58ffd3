// Occupancy: how many blocks of a launch fit on one SM / TPC at once, and
// how many TPCs a launch can use at all (its occupancy bound).
#pragma once

#include <cstdint>

#include "sched/types.hpp"

namespace lithos::sched {

// Resident blocks per SM for this launch, limited by threads, warps, blocks,
// registers and shared memory (the CUDA occupancy calculator's rules).
// Returns 0 when one block does not fit at all (the launch would fail).
int blocks_per_sm(const DeviceShape& dev, const LaunchDesc& launch);

// blocks_per_sm * sms_per_tpc, at least 1.
int blocks_per_tpc(const DeviceShape& dev, const LaunchDesc& launch);

// Number of full passes ("waves") needed to run `blocks` blocks on `tpcs`
// TPCs holding `per_tpc` blocks each. At least 1 for a non-empty grid.
std::uint64_t waves(std::uint64_t blocks, int per_tpc, int tpcs);

// The most TPCs a range of `blocks` blocks can keep busy:
// ceil(blocks / per_tpc), capped at dev.tpcs.
int occupancy_tpc_bound(const DeviceShape& dev, std::uint64_t blocks, int per_tpc);

}  // namespace lithos::sched
