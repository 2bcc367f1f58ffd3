// The GPU model's rules, one at a time, with durations computed by hand.
#include "sim/gpu_model.hpp"

#include <gtest/gtest.h>

#include "common/rng.hpp"

namespace lithos::sim {
namespace {

GpuModelConfig config() {
  GpuModelConfig c;
  c.tpcs = 66;
  c.launch_latency_us = 4.0;
  c.stream_gap_us = 1.0;
  c.per_atom_cost_us = 15.0;
  return c;
}

HwAtom atom(sched::AtomId id, std::uint32_t stream, std::uint64_t blocks, int per_tpc, double block_us,
            sched::TpcSet allowed = sched::TpcSet::first(66)) {
  HwAtom a;
  a.atom = id;
  a.stream = stream;
  a.allowed = allowed;
  a.blocks = blocks;
  a.blocks_per_tpc = per_tpc;
  a.block_time = us(block_us);
  a.serial = us(2);
  return a;
}

std::vector<HwCompletion> run_all(GpuModel& m) {
  std::vector<HwCompletion> all;
  while (m.next_event_time() != kTimeNever) m.advance(kTimeNever - Duration(1), all);
  return all;
}

// Two one-wave kernels of 100 us blocks, atom 0 on TPCs 0-32 and atom 1 on
// 33-65, moving `share_a` and `share_b` of the device's bandwidth alone;
// their completions.
std::vector<HwCompletion> run_halves(double share_a, double share_b) {
  GpuModel m(config(), 2);
  HwAtom a = atom(0, 0, 33, 1, 100.0, sched::TpcSet::range(0, 33));
  HwAtom b = atom(1, 1, 33, 1, 100.0, sched::TpcSet::range(33, 66));
  a.mem_share = share_a;
  b.mem_share = share_b;
  m.submit(a, Time{});
  m.submit(b, Time{});
  auto done = run_all(m);
  EXPECT_EQ(m.conservation_violations(), 0U);
  EXPECT_EQ(m.time_violations(), 0U);
  return done;
}

TEST(GpuModel, OneKernelTakesWavesTimesBlockTimePlusSerial) {
  GpuModel m(config(), 1);
  // 264 blocks at 2 per TPC on 66 TPCs: 2 waves of 10 us, then 2 us serial.
  m.submit(atom(0, 0, 264, 2, 10.0), Time{});
  auto done = run_all(m);
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].start, time_at(us(4)));         // launch latency
  EXPECT_EQ(done[0].end, time_at(us(4 + 20 + 2)));  // 2 waves + serial
}

TEST(GpuModel, FewerTpcsMeanMoreWaves) {
  GpuModel m(config(), 1);
  // The same kernel confined to 11 TPCs: 264 / 22 = 12 waves.
  m.submit(atom(0, 0, 264, 2, 10.0, sched::TpcSet::range(0, 11)), Time{});
  auto done = run_all(m);
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].end - done[0].start, us(12 * 10 + 2));
}

TEST(GpuModel, StreamRunsInOrderWithGap) {
  GpuModel m(config(), 1);
  m.submit(atom(0, 0, 66, 1, 10.0), Time{});
  m.submit(atom(1, 0, 66, 1, 10.0), Time{});
  auto done = run_all(m);
  ASSERT_EQ(done.size(), 2U);
  EXPECT_EQ(done[0].end, time_at(us(4 + 10 + 2)));
  EXPECT_EQ(done[1].start, time_at(us(16 + 1)));  // predecessor's end + gap
  EXPECT_EQ(done[1].end, time_at(us(17 + 12)));
}

TEST(GpuModel, SplitAtomsPayPerAtomCost) {
  GpuModel m(config(), 1);
  HwAtom a = atom(0, 0, 66, 1, 10.0);
  a.split = true;
  m.submit(a, Time{});
  auto done = run_all(m);
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].start, time_at(us(4 + 15)));
}

TEST(GpuModel, EarlierKernelKeepsTpcsAtEqualPriority) {
  // A long kernel of many waves, then a short one on another stream: the
  // short one gets TPCs only once the long one has issued all its blocks
  // (head-of-line blocking, as on real hardware without priorities).
  GpuModel m(config(), 2);
  m.submit(atom(0, 0, 66 * 10, 1, 100.0), Time{});  // 10 waves of 100 us
  m.submit(atom(1, 1, 66, 1, 5.0), time_at(us(50)));
  auto done = run_all(m);
  ASSERT_EQ(done.size(), 2U);
  const auto& small = done[0].atom == 1 ? done[0] : done[1];
  EXPECT_GE(small.start, time_at(us(4 + 900)));  // after the 10th wave started
}

TEST(GpuModel, HigherPriorityTakesTpcsAtTheNextBlockBoundary) {
  GpuModel m(config(), 2);
  m.submit(atom(0, 0, 66 * 10, 1, 100.0), Time{});
  HwAtom hp = atom(1, 1, 66, 1, 5.0);
  hp.priority = sched::HwPriority::kHigh;
  m.submit(hp, time_at(us(50)));
  auto done = run_all(m);
  const auto& small = done[0].atom == 1 ? done[0] : done[1];
  EXPECT_EQ(small.start, time_at(us(104)));  // the first wave's end
  EXPECT_EQ(small.end, time_at(us(104 + 5 + 2)));
}

// A GPU that honours no priorities (lithosd without stream priorities):
// the high-priority kernel waits like an equal one, behind every block of
// the kernel that became ready first.
TEST(GpuModel, WithoutPrioritiesTheEarlierKernelKeepsTpcs) {
  GpuModelConfig c = config();
  c.priorities = false;
  GpuModel m(c, 2);
  m.submit(atom(0, 0, 66 * 10, 1, 100.0), Time{});
  HwAtom hp = atom(1, 1, 66, 1, 5.0);
  hp.priority = sched::HwPriority::kHigh;
  m.submit(hp, time_at(us(50)));
  auto done = run_all(m);
  ASSERT_EQ(done.size(), 2U);
  const auto& small = done[0].atom == 1 ? done[0] : done[1];
  EXPECT_EQ(small.start, time_at(us(4 + 1000)));  // the long kernel's last wave's end
}

TEST(GpuModel, DisjointMasksRunSideBySide) {
  GpuModel m(config(), 2);
  m.submit(atom(0, 0, 66 * 10, 1, 100.0, sched::TpcSet::range(0, 33)), Time{});
  m.submit(atom(1, 1, 33, 1, 5.0, sched::TpcSet::range(33, 66)), time_at(us(50)));
  auto done = run_all(m);
  const auto& small = done[0].atom == 1 ? done[0] : done[1];
  EXPECT_EQ(small.start, time_at(us(54)));  // no wait at all
}

// 3000 atoms of random shapes, masks, priorities (and memory shares, with
// `memory`) on 6 streams: every one completes, no TPC is left idle under a
// ready atom, time never runs backwards, every TPC is released.
void run_random_workload(std::uint64_t seed, bool memory) {
  GpuModel m(config(), 6);
  m.set_window(Time{}, time_at(ms(100)));
  Rng rng(seed);
  Time now{};
  std::vector<HwCompletion> done;
  for (sched::AtomId i = 0; i < 3000; ++i) {
    const auto stream = static_cast<std::uint32_t>(rng.below(6));
    const int lo = static_cast<int>(rng.below(60));
    const int hi = lo + 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(66 - lo)));
    HwAtom a = atom(i, stream, 1 + rng.below(2000), 1 + static_cast<int>(rng.below(8)),
                    1.0 + static_cast<double>(rng.below(50)), sched::TpcSet::range(lo, hi));
    a.priority = static_cast<sched::HwPriority>(rng.below(3));
    if (memory) a.mem_share = static_cast<double>(rng.below(11)) / 10.0;
    m.submit(a, now);
    now += us(static_cast<double>(rng.below(20)));
    m.advance(now, done);
  }
  auto rest = run_all(m);
  done.insert(done.end(), rest.begin(), rest.end());
  EXPECT_EQ(done.size(), 3000U);
  EXPECT_EQ(m.conservation_violations(), 0U);
  EXPECT_EQ(m.time_violations(), 0U);
  EXPECT_EQ(m.free_tpcs(), sched::TpcSet::first(66));  // everything released
  for (const auto& c : done) EXPECT_LE(c.start, c.end);
}

TEST(GpuModel, RandomWorkloadConservesWorkAndTime) { run_random_workload(3, false); }

// Memory (gpu_model.hpp): two kernels that each fill their own half of the
// GPU ask for 0.8 + 0.6 = 1.4 of the bandwidth: each is slowed on its
// memory-bound part, A to 1 / (0.2 + 0.8 x 1.4) of its speed (132 us for
// its 100 us wave), B to 1 / (0.4 + 0.6 x 1.4) (124 us); once B is done, A
// runs the rest of its wave at full speed.
TEST(GpuModel, MemoryBoundKernelsOnDisjointTpcsSlowEachOther) {
  const auto done = run_halves(0.8, 0.6);
  ASSERT_EQ(done.size(), 2U);
  const auto& da = done[0].atom == 0 ? done[0] : done[1];
  const auto& db = done[0].atom == 0 ? done[1] : done[0];
  EXPECT_EQ(db.end, time_at(us(4 + 124 + 2)));
  // A: 124 us at 1/1.32 is 93.94 us of its wave; 6.061 us left at full speed.
  EXPECT_EQ(da.end, time_at(us(4 + 124 + 2)) + Duration(6061));
}

// Below the device's bandwidth nothing slows: a memory-bound kernel alone,
// beside one that moves no memory, or beside one on a small part of its own
// footprint (it asks in proportion: 0.6 x 2 x 11 / 66 = 0.2, with 0.7: 0.9).
TEST(GpuModel, MemoryDemandBelowTheDeviceChangesNothing) {
  {
    GpuModel m(config(), 1);
    HwAtom a = atom(0, 0, 66, 1, 100.0);
    a.mem_share = 1.0;
    m.submit(a, Time{});
    auto done = run_all(m);
    ASSERT_EQ(done.size(), 1U);
    EXPECT_EQ(done[0].end, time_at(us(4 + 100 + 2)));
  }
  {
    const auto done = run_halves(1.0, 0.0);
    ASSERT_EQ(done.size(), 2U);
    for (const auto& d : done) EXPECT_EQ(d.end, time_at(us(4 + 100 + 2))) << d.atom;
  }
  {
    GpuModel m(config(), 2);
    HwAtom a = atom(0, 0, 66, 1, 100.0, sched::TpcSet::range(0, 11));  // 6 waves on 11 of its 66 TPCs
    HwAtom b = atom(1, 1, 33, 1, 100.0, sched::TpcSet::range(11, 44));
    a.mem_share = 0.6;
    b.mem_share = 0.7;
    m.submit(a, Time{});
    m.submit(b, Time{});
    auto done = run_all(m);
    ASSERT_EQ(done.size(), 2U);
    for (const auto& d : done) {
      EXPECT_EQ(d.end, time_at(us(4 + (d.atom == 0 ? 600 : 100) + 2))) << d.atom;
    }
  }
}

TEST(GpuModel, RandomWorkloadWithMemoryConservesWorkAndTime) { run_random_workload(5, true); }

TEST(GpuModel, BusyTimeIsCountedInsideTheWindowOnly) {
  GpuModel m(config(), 1);
  m.set_window(time_at(us(0)), time_at(us(14)));
  // 66 TPCs busy from 4 us to 24 us (2 waves of 10): 10 us fall in the window.
  m.submit(atom(0, 0, 132, 1, 10.0), Time{});
  run_all(m);
  EXPECT_DOUBLE_EQ(m.busy_tpc_ns(), 66.0 * 10'000.0);
}

}  // namespace
}  // namespace lithos::sim
