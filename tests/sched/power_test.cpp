#include "sched/power.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/rng.hpp"

namespace lithos::sched {
namespace {

// Duration at clock f of a kernel taking d0 at f_max = 1980 MHz with
// sensitivity s.
Duration at_clock(double d0_ns, double s, int f) {
  return Duration(static_cast<Duration::rep>(std::llround(d0_ns * (1.0 + s * (1980.0 / f - 1.0)))));
}

// 16 exact executions (the default min_samples) over 1980..1530 MHz (a
// spread of 450): the conservative value is the exact one (no residual).
void teach(PowerGovernor& g, KernelId k, double s) {
  for (int i = 0; i < 16; ++i) {
    const int f = 1980 - 30 * i;
    g.observe(k, f, at_clock(1e6, s, f));
  }
}

constexpr KernelId kCompute = 1;  // s = 1
constexpr KernelId kMemory = 2;   // s = 0
constexpr KernelId kLight = 3;    // s = 0.3

TEST(DvfsLearning, NeedsEnoughSamplesOverARealClockSpread) {
  DvfsPolicy p;  // min_samples 16, min_spread_mhz 150
  for (int i = 0; i < 40; ++i) p.observe(1, 1980, at_clock(1e6, 1.0, 1980));
  EXPECT_EQ(p.sensitivity(1), std::nullopt);  // one clock
  for (int i = 0; i < 40; ++i) p.observe(2, i % 2 == 0 ? 1980 : 1890, at_clock(1e6, 1.0, i % 2 == 0 ? 1980 : 1890));
  EXPECT_EQ(p.sensitivity(2), std::nullopt);  // a spread of 90 MHz only
  for (int i = 0; i < 15; ++i) {
    const int f = i % 2 == 0 ? 1980 : 1500;
    p.observe(3, f, at_clock(1e6, 1.0, f));
  }
  EXPECT_EQ(p.sensitivity(3), std::nullopt);  // 15 samples
  p.observe(3, 1500, at_clock(1e6, 1.0, 1500));
  ASSERT_TRUE(p.sensitivity(3).has_value());
  EXPECT_NEAR(*p.sensitivity(3), 1.0, 1e-6);
  EXPECT_EQ(p.kernels_learned(), 1u);
  EXPECT_EQ(p.kernels_seen(), 3u);
}

// With noise the value used is the fit's upper bound: above the point
// estimate (z = 0) and, for these seeds, above the true value.
TEST(DvfsLearning, TheValueUsedErrsHigh) {
  DvfsConfig point;
  point.confidence_z = 0.0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    DvfsPolicy conservative, estimate(point);
    Rng rng(seed);
    for (int i = 0; i < 32; ++i) {
      const int f = 1980 - 15 * static_cast<int>(rng.uniform() * 30);
      const Duration d = at_clock(1e6 * (1.0 + 0.1 * (rng.uniform() - 0.5)), 0.3, f);
      conservative.observe(7, f, d);
      estimate.observe(7, f, d);
    }
    ASSERT_TRUE(conservative.sensitivity(7).has_value()) << seed;
    EXPECT_GT(*conservative.sensitivity(7), *estimate.sensitivity(7)) << seed;
    EXPECT_GT(*conservative.sensitivity(7), 0.3) << seed;
    EXPECT_LE(*conservative.sensitivity(7), 1.0) << seed;
  }
}

TEST(PowerGovernor, ChoosesFromTheWorkWeightsAndRoundsUp) {
  PowerGovernor g;  // k = 0.05, f_max 1980, 15 MHz steps
  teach(g, kCompute, 1.0);
  teach(g, kMemory, 0.0);
  teach(g, kLight, 0.3);
  // S = 1: 1980 / 1.05 = 1885.7 -> 1890 (rounded up, not to 1875).
  std::vector<DvfsWork> w = {{kCompute, 5.0}};
  PowerDecision d = g.decide(time_at(ms(0)), w);
  EXPECT_EQ(d.chosen_mhz, 1890);
  EXPECT_TRUE(d.changed);
  EXPECT_NEAR(d.sensitivity, 1.0, 1e-9);
  // S = 0.3: 1980 / (1 + 1/6) = 1697.1 -> 1710.
  w = {{kLight, 1.0}};
  d = g.decide(time_at(ms(600)), w);
  EXPECT_NEAR(d.sensitivity, 0.3, 1e-4);
  EXPECT_EQ(d.chosen_mhz, 1710);
  // Weights: 1/4 compute, 3/4 memory: S = 0.25: 1980 / 1.2 = 1650.
  w = {{kCompute, 1.0}, {kMemory, 3.0}};
  d = g.decide(time_at(ms(1200)), w);
  EXPECT_NEAR(d.sensitivity, 0.25, 1e-9);
  EXPECT_EQ(d.chosen_mhz, 1650);
  EXPECT_EQ(g.changes(), 3u);
  EXPECT_EQ(g.cap_mhz(), 1650);
}

TEST(PowerGovernor, AnUnseenKernelForcesFmax) {
  PowerGovernor g;
  teach(g, kCompute, 1.0);
  std::vector<DvfsWork> w = {{kCompute, 1.0}};
  EXPECT_EQ(g.decide(time_at(ms(0)), w).chosen_mhz, 1890);
  w = {{kCompute, 100.0}, {99, 0.001}};  // 99 never observed
  const PowerDecision d = g.decide(time_at(ms(600)), w);
  EXPECT_TRUE(d.unseen_kernel);
  EXPECT_EQ(d.chosen_mhz, 1980);
  // Seen at one clock only: still unseen.
  for (int i = 0; i < 20; ++i) g.observe(98, 1980, us(100));
  w = {{98, 1.0}};
  EXPECT_EQ(g.decide(time_at(ms(1200)), w).chosen_mhz, 1980);
}

TEST(PowerGovernor, ChangesAreRateLimited) {
  PowerGovernor g;  // min_interval 500 ms
  teach(g, kCompute, 1.0);
  teach(g, kMemory, 0.0);
  std::vector<DvfsWork> compute = {{kCompute, 1.0}}, memory = {{kMemory, 1.0}};
  EXPECT_EQ(g.decide(time_at(ms(0)), compute).chosen_mhz, 1890);
  PowerDecision d = g.decide(time_at(ms(100)), memory);  // wants 345: too soon
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.chosen_mhz, 1890);
  d = g.decide(time_at(ms(499)), memory);
  EXPECT_EQ(d.chosen_mhz, 1890);
  d = g.decide(time_at(ms(500)), memory);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.chosen_mhz, 345);
  EXPECT_EQ(g.changes(), 2u);
  EXPECT_EQ(g.decisions(), 4u);
  // due(): every decide_interval (100 ms).
  EXPECT_FALSE(g.due(time_at(ms(550))));
  EXPECT_TRUE(g.due(time_at(ms(600))));
}

// The work of a decision: the atoms in flight (predicted duration) and
// those completed since the last decision (measured), per kernel; the
// completed ones are forgotten after it. Completions teach per wave.
TEST(PowerGovernor, WorkComesFromInFlightAndCompletedAtoms) {
  PowerGovernor g;
  teach(g, kCompute, 1.0);
  teach(g, kMemory, 0.0);
  EngineConfig ec;
  EngineState state(ec);
  InflightAtom a;
  a.live = true;
  a.key.kernel = kCompute;
  a.predicted = us(100);
  state.atoms.push_back(a);
  InflightAtom m = a;
  m.key.kernel = kMemory;
  m.live = false;  // not in flight: not counted
  state.atoms.push_back(m);
  // Completed memory-bound work of 300 us: S = 100 / 400 = 0.25 -> 1650.
  InflightAtom done;
  done.key.kernel = kMemory;
  done.blocks = 1;
  done.tpcs = TpcSet::range(0, 1);
  g.completed(done, time_at(us(0)), time_at(us(300)), 0);
  PowerDecision d = g.decide(time_at(ms(0)), state);
  EXPECT_EQ(d.kernels, 2u);
  EXPECT_NEAR(d.sensitivity, 0.25, 1e-9);
  EXPECT_EQ(d.chosen_mhz, 1650);
  // The completion is forgotten: the in-flight compute atom alone.
  d = g.decide(time_at(ms(600)), state);
  EXPECT_EQ(d.kernels, 1u);
  EXPECT_EQ(d.chosen_mhz, 1890);
  // Nothing at all: f_max.
  state.atoms[0].live = false;
  EXPECT_EQ(g.decide(time_at(ms(1200)), state).chosen_mhz, 1980);

  // An atom of 4 waves (8 blocks on 2 TPCs holding 1 each) taking 4 ms at
  // each clock teaches 1 ms per wave, flat: s = 0.
  InflightAtom big;
  big.key.kernel = 50;
  big.blocks = 8;
  big.tpcs = TpcSet::range(0, 2);
  EXPECT_DOUBLE_EQ(PowerGovernor::waves(big), 4.0);
  for (int i = 0; i < 16; ++i) g.completed(big, time_at(ms(0)), time_at(ms(4)), 1980 - 30 * i);
  ASSERT_TRUE(g.policy().sensitivity(50).has_value());
  EXPECT_NEAR(*g.policy().sensitivity(50), 0.0, 1e-9);
}

// The stated model: P(f') = P_idle + (P - P_idle) (f'/f_run)^a over a time
// stretched by 1 + S (f_max/f' - 1) relative to f_run.
TEST(EnergyModel, Arithmetic) {
  const EnergyModelConfig m{.idle_w = 70.0, .exponent = 2.5};
  // 300 W for 2 s at 1980 MHz; a cap of 1584 (0.8 f_max), S = 0.5.
  const double p_f = 70.0 + 230.0 * std::pow(0.8, 2.5);
  const double stretch = 1.0 + 0.5 * (1980.0 / 1584.0 - 1.0);
  EXPECT_NEAR(modelled_energy_j(m, 600.0, 2.0, 1980, 1584, 0.5, 1980), p_f * 2.0 * stretch, 1e-9);
  // A GPU already below f_max (1800): the stretch is relative to it.
  const double p_g = 70.0 + 230.0 * std::pow(1584.0 / 1800.0, 2.5);
  const double stretch_g = (1.0 + 0.5 * (1980.0 / 1584.0 - 1.0)) / (1.0 + 0.5 * (1980.0 / 1800.0 - 1.0));
  EXPECT_NEAR(modelled_energy_j(m, 600.0, 2.0, 1800, 1584, 0.5, 1980), p_g * 2.0 * stretch_g, 1e-9);
  // A cap that does not bind changes nothing.
  EXPECT_DOUBLE_EQ(modelled_energy_j(m, 600.0, 2.0, 1500, 1584, 0.5, 1980), 600.0);
  EXPECT_DOUBLE_EQ(modelled_energy_j(m, 600.0, 2.0, 1980, 1980, 0.5, 1980), 600.0);
  // Below idle power nothing scales: only the stretch.
  EXPECT_NEAR(modelled_energy_j(m, 50.0, 1.0, 1980, 990, 0.0, 1980), 50.0, 1e-9);
  // S = 1 at half the clock: twice the time.
  EXPECT_NEAR(modelled_energy_j(m, 100.0, 1.0, 1980, 990, 1.0, 1980), (70.0 + 30.0 * std::pow(0.5, 2.5)) * 2.0, 1e-9);
  // Nonsense in, the measurement out.
  EXPECT_DOUBLE_EQ(modelled_energy_j(m, 600.0, 0.0, 1980, 990, 1.0, 1980), 600.0);
  EXPECT_DOUBLE_EQ(modelled_energy_j(m, 600.0, 1.0, 0, 990, 1.0, 1980), 600.0);
}

TEST(EnergyModel, TheGovernorAccountsUnderItsDecisions) {
  PowerGovernor g;
  teach(g, kMemory, 0.0);
  g.account(1.0, 300.0, 1980);  // no cap yet: as measured
  EXPECT_DOUBLE_EQ(g.saving_j(), 0.0);
  std::vector<DvfsWork> w = {{kMemory, 1.0}};
  ASSERT_EQ(g.decide(time_at(ms(0)), w).chosen_mhz, 345);
  g.account(1.0, 300.0, 1980);
  const double modelled = 70.0 + 230.0 * std::pow(345.0 / 1980.0, 2.5);  // S = 0: no stretch
  EXPECT_NEAR(g.measured_j(), 600.0, 1e-9);
  EXPECT_NEAR(g.modelled_j(), 300.0 + modelled, 1e-9);
  EXPECT_NEAR(g.saving_j(), 300.0 - modelled, 1e-9);
}

}  // namespace
}  // namespace lithos::sched
