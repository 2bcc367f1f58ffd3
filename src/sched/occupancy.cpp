#include "sched/occupancy.hpp"

#include <algorithm>

namespace lithos::sched {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// Every SM since Maxwell (GP100 aside) is split into 4 sub-partitions, each
// with a quarter of the register file, and a warp's registers come from its
// own sub-partition: the register limit is warps per sub-partition times 4
// (CUDA's cudaOccMaxBlocksPerSMRegsLimit).
constexpr std::int64_t kSubPartitionsPerSm = 4;
// Shared memory is given to blocks in 128-byte units (compute capability
// 7.0 to 9.0; cudaOccSMemAllocationGranularity).
constexpr std::int64_t kSmemAllocUnit = 128;
}  // namespace

int blocks_per_sm(const DeviceShape& dev, const LaunchDesc& launch) {
  const std::int64_t threads = static_cast<std::int64_t>(launch.block.count());
  if (threads <= 0 || threads > 1024) return 0;
  const std::int64_t warps = ceil_div(threads, dev.warp_size);
  std::int64_t limit = dev.max_blocks_per_sm;
  limit = std::min(limit, dev.max_warps_per_sm / warps);
  limit = std::min<std::int64_t>(limit, dev.max_threads_per_sm / (warps * dev.warp_size));
  const std::int64_t regs = std::max<std::int64_t>(launch.regs_per_thread, 1);
  if (regs > dev.max_regs_per_thread) return 0;
  const std::int64_t regs_per_warp = round_up(regs * dev.warp_size, dev.reg_alloc_unit);
  const std::int64_t warps_per_sub_partition = dev.regs_per_sm / kSubPartitionsPerSm / regs_per_warp;
  limit = std::min(limit, warps_per_sub_partition * kSubPartitionsPerSm / warps);
  if (launch.smem_per_block > static_cast<std::uint32_t>(dev.smem_per_block_max)) return 0;
  const std::int64_t smem =
      round_up(static_cast<std::int64_t>(launch.smem_per_block) + dev.smem_reserved_per_block, kSmemAllocUnit);
  // A block using no shared memory (possible without a reservation) is not
  // limited by it.
  if (smem > 0) limit = std::min(limit, dev.smem_per_sm / smem);
  return static_cast<int>(std::max<std::int64_t>(limit, 0));
}

int blocks_per_tpc(const DeviceShape& dev, const LaunchDesc& launch) {
  return std::max(1, blocks_per_sm(dev, launch) * dev.sms_per_tpc);
}

std::uint64_t waves(std::uint64_t blocks, int per_tpc, int tpcs) {
  const std::uint64_t per_wave =
      static_cast<std::uint64_t>(std::max(per_tpc, 1)) * static_cast<std::uint64_t>(std::max(tpcs, 1));
  return std::max<std::uint64_t>(1, (blocks + per_wave - 1) / per_wave);
}

int occupancy_tpc_bound(const DeviceShape& dev, std::uint64_t blocks, int per_tpc) {
  const std::uint64_t p = static_cast<std::uint64_t>(std::max(per_tpc, 1));
  const std::uint64_t need = std::max<std::uint64_t>(1, (blocks + p - 1) / p);
  return static_cast<int>(std::min<std::uint64_t>(need, static_cast<std::uint64_t>(dev.tpcs)));
}

}  // namespace lithos::sched
