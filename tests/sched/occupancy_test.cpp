#include "sched/occupancy.hpp"

#include <gtest/gtest.h>

namespace lithos::sched {
namespace {

// H100 SXM shape (types.hpp): 2048 threads, 64 warps, 32 blocks, 65536
// registers in 4 sub-partitions of 16384, 256-register allocation unit per
// warp, 228 KiB = 233472 bytes of shared memory per SM, 1 KiB reserved per
// block, shared memory allocated in 128-byte units.
LaunchDesc launch(std::uint32_t threads, std::uint32_t regs, std::uint32_t smem = 0) {
  LaunchDesc l;
  l.grid = {1000, 1, 1};
  l.block = {threads, 1, 1};
  l.regs_per_thread = regs;
  l.smem_per_block = smem;
  return l;
}

const DeviceShape kH100 = DeviceShape::h100_sxm();

TEST(Occupancy, ThreadLimitH100) {
  // 256 threads = 8 warps. Threads: 2048/256 = 8. Warps: 64/8 = 8.
  // Registers: 32*32 = 1024 per warp (a multiple of 256); 16384/1024 = 16
  // warps per sub-partition, 64 per SM, 64/8 = 8. Blocks: 32. Smem: 1024 B
  // reserved, 233472/1024 = 228. min = 8.
  EXPECT_EQ(blocks_per_sm(kH100, launch(256, 32)), 8);
  // 1024 threads, 16 regs: threads 2048/1024 = 2; regs 512/warp -> 32 warps
  // per sub-partition, 128/32 = 4. min = 2.
  EXPECT_EQ(blocks_per_sm(kH100, launch(1024, 16)), 2);
  // 96 threads = 3 warps, 16 regs: warps 64/3 = 21; threads 2048/96 = 21;
  // regs 512/warp -> 128 warps / 3 = 42; blocks 32. min = 21.
  EXPECT_EQ(blocks_per_sm(kH100, launch(96, 16)), 21);
}

TEST(Occupancy, ThreadLimitCountsWholeWarps) {
  // 33 threads occupy 2 warps: 2048/(2*32) = 32 by threads, not 2048/33 =
  // 62. The block limit (32) is raised to 64 so that it does not hide this.
  DeviceShape dev = kH100;
  dev.max_blocks_per_sm = 64;
  EXPECT_EQ(blocks_per_sm(dev, launch(33, 16)), 32);
}

TEST(Occupancy, WarpLimitSeparateFromThreads) {
  // A device with 1536 threads but 64 warp slots: 128 threads = 4 warps;
  // threads 1536/128 = 12, warps 64/4 = 16 -> 12.
  DeviceShape dev = kH100;
  dev.max_threads_per_sm = 1536;
  EXPECT_EQ(blocks_per_sm(dev, launch(128, 16)), 12);
  // And 48 warp slots with 2048 threads: warps 48/4 = 12, threads 16 -> 12.
  dev = kH100;
  dev.max_warps_per_sm = 48;
  EXPECT_EQ(blocks_per_sm(dev, launch(128, 16)), 12);
}

TEST(Occupancy, BlockLimit) {
  // 32 threads = 1 warp, 16 regs: threads 64, warps 64, regs 16384/512 = 32
  // per sub-partition -> 128 warps -> 128; the 32-block limit binds.
  EXPECT_EQ(blocks_per_sm(kH100, launch(32, 16)), 32);
  EXPECT_EQ(blocks_per_sm(kH100, launch(64, 16)), 32);  // 2 warps: 32 by warps too
}

TEST(Occupancy, RegisterLimitH100) {
  // 128 threads x 255 regs: 255*32 = 8160 -> 8192 per warp (32 units of
  // 256); 16384/8192 = 2 warps per sub-partition, 8 per SM; 8/4 warps = 2.
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 255)), 2);
  // 256 threads x 64 regs: 2048 per warp, 16384/2048 = 8 -> 32 warps; 32/8 = 4.
  EXPECT_EQ(blocks_per_sm(kH100, launch(256, 64)), 4);
  // Allocation granularity: 33 regs -> 1056 -> 1280 per warp (5 units);
  // 16384/1280 = 12 warps per sub-partition, 48 per SM; 256 threads = 8
  // warps -> 6 (without rounding, 1056: 15*4 = 60 warps -> 7).
  EXPECT_EQ(blocks_per_sm(kH100, launch(256, 33)), 6);
}

TEST(Occupancy, RegistersAreAllocatedPerSubPartition) {
  // CUDA's occupancy calculator (cudaOccMaxBlocksPerSMRegsLimit): each warp
  // takes its registers from one of 4 sub-partitions of 16384.
  // 64 threads x 200 regs: 6400 per warp; 16384/6400 = 2 warps per
  // sub-partition -> 8 per SM; 8/2 = 4 (65536/12800 would say 5).
  EXPECT_EQ(blocks_per_sm(kH100, launch(64, 200)), 4);
  // 288 threads (9 warps) x 176 regs: 5632 per warp; 16384/5632 = 2 -> 8
  // warps per SM < 9: the block cannot be resident at all, although
  // 9*5632 = 50688 <= 65536.
  EXPECT_EQ(blocks_per_sm(kH100, launch(288, 176)), 0);
}

TEST(Occupancy, SharedMemoryLimitH100) {
  // 48 KiB: 49152 + 1024 = 50176 (a multiple of 128); 233472/50176 = 4.65 -> 4.
  // Threads 2048/128 = 16; regs 1024 per warp -> 16 per sub-partition -> 64
  // warps / 4 = 16; so shared memory binds.
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 32, 48 * 1024)), 4);
  // 100 KiB: 102400 + 1024 = 103424; 233472/103424 = 2.26 -> 2.
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 32, 100 * 1024)), 2);
  // The whole per-block maximum, 227 KiB: 232448 + 1024 = 233472 -> exactly 1.
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 32, 227 * 1024)), 1);
}

TEST(Occupancy, SharedMemoryIsAllocatedIn128ByteUnits) {
  // 45600 + 1024 = 46624 -> 46720 (365 units of 128); 5*46720 = 233600 >
  // 233472 -> 4 (unrounded, 5*46624 = 233120 would fit 5).
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 32, 45600)), 4);
  // 45568 + 1024 = 46592 = 364*128 exactly; 5*46592 = 232960 <= 233472 -> 5.
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 32, 45568)), 5);
}

TEST(Occupancy, NoSharedMemoryAndNoReservation) {
  // A device without the per-block reservation and a block using no shared
  // memory: shared memory sets no limit (and must not divide by zero).
  DeviceShape dev = kH100;
  dev.smem_reserved_per_block = 0;
  EXPECT_EQ(blocks_per_sm(dev, launch(256, 32, 0)), 8);
  // 1 byte is still a 128-byte unit: 233472/128 = 1824, other limits bind.
  EXPECT_EQ(blocks_per_sm(dev, launch(32, 16, 1)), 32);
}

TEST(Occupancy, BlocksThatCannotFit) {
  EXPECT_EQ(blocks_per_sm(kH100, launch(1025, 32)), 0);                 // > 1024 threads
  EXPECT_EQ(blocks_per_sm(kH100, launch(0, 32)), 0);                    // empty block
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 256)), 0);                 // > 255 regs/thread
  EXPECT_EQ(blocks_per_sm(kH100, launch(128, 32, 227 * 1024 + 1)), 0);  // > smem per block
  // 1024 threads x 128 regs: 4096 per warp, 4 per sub-partition -> 16 warps < 32.
  EXPECT_EQ(blocks_per_sm(kH100, launch(1024, 128)), 0);
  // 1024 threads x 64 regs: 2048 per warp, 8 per sub-partition -> 32 warps = 1 block.
  EXPECT_EQ(blocks_per_sm(kH100, launch(1024, 64)), 1);
  // Multi-dimensional blocks count all threads: 32x32x2 = 2048 > 1024.
  LaunchDesc l = launch(32, 32);
  l.block = {32, 32, 2};
  EXPECT_EQ(blocks_per_sm(kH100, l), 0);
  l.block = {16, 16, 4};  // 1024 threads, 32 regs: 1024/warp -> 64 warps / 32 = 2
  EXPECT_EQ(blocks_per_sm(kH100, l), 2);
}

TEST(Occupancy, ZeroRegistersCountAsOne) {
  // 1 reg -> 32 -> 256 per warp: no register limit below the others.
  EXPECT_EQ(blocks_per_sm(kH100, launch(256, 0)), 8);
}

TEST(Occupancy, BlocksPerTpc) {
  EXPECT_EQ(blocks_per_tpc(kH100, launch(256, 32)), 16);  // 8 per SM x 2 SMs
  EXPECT_EQ(blocks_per_tpc(kH100, launch(128, 255)), 4);
  EXPECT_EQ(blocks_per_tpc(kH100, launch(1025, 32)), 1);  // does not fit: still 1
}

TEST(Occupancy, Waves) {
  // 66 TPCs x 16 per TPC = 1056 blocks per wave.
  EXPECT_EQ(waves(1056, 16, 66), 1U);
  EXPECT_EQ(waves(1057, 16, 66), 2U);
  EXPECT_EQ(waves(1056, 16, 33), 2U);  // 528 per wave
  EXPECT_EQ(waves(1, 16, 66), 1U);
  EXPECT_EQ(waves(0, 16, 66), 1U);                          // never fewer than one
  EXPECT_EQ(waves(100, 0, 0), 100U);                        // per_tpc and tpcs count as at least 1
  EXPECT_EQ(waves(10'000'000'000ULL, 4, 66), 37'878'788U);  // ceil(1e10 / 264)
}

TEST(Occupancy, TpcBound) {
  EXPECT_EQ(occupancy_tpc_bound(kH100, 1, 16), 1);
  EXPECT_EQ(occupancy_tpc_bound(kH100, 160, 16), 10);
  EXPECT_EQ(occupancy_tpc_bound(kH100, 161, 16), 11);
  EXPECT_EQ(occupancy_tpc_bound(kH100, 100000, 16), 66);  // capped at the device
  EXPECT_EQ(occupancy_tpc_bound(kH100, 0, 16), 1);
  EXPECT_EQ(occupancy_tpc_bound(kH100, 5, 0), 5);  // per_tpc counts as 1
  DeviceShape small = kH100;
  small.tpcs = 8;
  EXPECT_EQ(occupancy_tpc_bound(small, 1000, 4), 8);
}

}  // namespace
}  // namespace lithos::sched
