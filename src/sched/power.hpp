// The power governor (LithOS section "power management") and its energy
// model: what lithosd runs around DvfsPolicy (dvfs.hpp), pure C++ (no OS
// calls, no NVML; the daemon's src/daemon/power.* reads and sets clocks).
//
// Work. The clock follows the work on the GPU: every decision takes the
// atoms in flight (EngineState::atoms, weight = predicted duration) and the
// atoms that completed since the last decision (weight = measured duration),
// summed per kernel; each kernel's weight is its share of that runtime
// (DvfsWork). Without work the choice is f_max.
//
// Learning. Every completed atom feeds DvfsPolicy::observe(kernel, clock it
// ran at, duration per wave): the daemon gives the SM clock it last sampled,
// and the duration is divided by the atom's waves (its blocks over what its
// TPCs hold at once) so that atoms of one kernel of different sizes fit one
// line. DvfsPolicy's conservative rule decides when a sensitivity is used.
//
// Decisions. decide() runs every decide_interval; DvfsPolicy::maybe_change
// limits changes to one per min_interval and min_step_mhz. The chosen clock
// is a cap (the actuator locks [lowest supported, chosen]), so under it the
// GPU runs at min(chosen, the clock it would run at anyway).
//
// Energy model (stated; modelled_energy_j). Over an interval of T seconds
// in which the GPU ran at f_run (sampled) and drew E_meas joules (NVML's
// energy counter), P = E_meas / T. Under a cap f the GPU would have run at
// f' = min(f, f_run), drawing
//   P(f') = P_idle + max(P - P_idle, 0) * (f' / f_run)^a
// (dynamic power ~ f * V^2 with V roughly linear in f near the top of the
// V-f curve gives a ~ 3; a = 2.5 by default, leaving room for the flat
// part of the curve; P_idle the GPU's idle draw, 70 W for an H100 SXM by
// default), for a time stretched by the sensitivity model,
//   T(f') = T * (1 + S (f_max/f' - 1)) / (1 + S (f_max/f_run - 1)),
// the whole interval stretched (idle time too: the modelled energy errs
// high, the saving low). The modelled saving is E_meas - P(f') T(f'); it is
// 0 where the cap does not bind (f >= f_run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/time.hpp"
#include "sched/dvfs.hpp"
#include "sched/engine.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct EnergyModelConfig {
  double idle_w = 70.0;   // P_idle
  double exponent = 2.5;  // a
};

// The energy (J) of an interval of `seconds` measured at `measured_j` while
// the GPU ran at `f_run_mhz`, modelled under a cap of `cap_mhz` with the
// aggregate sensitivity `s` of its work (the header's formula). Returns
// `measured_j` where the cap does not bind or an input is not positive.
double modelled_energy_j(const EnergyModelConfig& m, double measured_j, double seconds, int f_run_mhz, int cap_mhz,
                         double s, int f_max_mhz);

struct PowerConfig {
  DvfsConfig dvfs;
  EnergyModelConfig energy;
  Duration decide_interval = ms(100);
};

// One decision of the governor.
struct PowerDecision {
  Time at{};
  int chosen_mhz = 0;          // the cap wanted now (would-set in dry-run)
  double sensitivity = 0.0;    // S of the work
  bool unseen_kernel = false;  // forced to f_max by a kernel not learnt yet
  bool changed = false;        // the cap moved (rate-limited by DvfsPolicy)
  std::size_t kernels = 0;     // distinct kernels in the work
};

class PowerGovernor {
 public:
  explicit PowerGovernor(PowerConfig config = {});

  // Atom `a` (still in flight: read before Engine::atom_finished) ran from
  // `start` to `end` at `clock_mhz` (0: not known; nothing is learnt).
  void completed(const InflightAtom& a, Time start, Time end, int clock_mhz);
  // The same for a kernel directly: `duration` per wave.
  void observe(KernelId kernel, int clock_mhz, Duration duration) { policy_.observe(kernel, clock_mhz, duration); }

  // Whether a decision is due at `now`.
  bool due(Time now) const { return !last_decision_ || now - *last_decision_ >= config_.decide_interval; }
  // Decides from the atoms in flight in `state` and those completed since
  // the last decision (forgotten now).
  PowerDecision decide(Time now, const EngineState& state);
  // The same from given work (tests, the simulator).
  PowerDecision decide(Time now, std::span<const DvfsWork> work);

  // Accounts an interval of `seconds` in which the GPU drew `measured_j`
  // at `f_run_mhz`, under the cap and S of the last decision.
  void account(double seconds, double measured_j, int f_run_mhz);

  int cap_mhz() const { return cap_mhz_; }
  int f_max_mhz() const { return config_.dvfs.f_max_mhz; }
  const PowerDecision& last() const { return last_; }
  const DvfsPolicy& policy() const { return policy_; }
  const PowerConfig& config() const { return config_; }
  std::uint64_t decisions() const { return decisions_; }
  std::uint64_t changes() const { return changes_; }
  double measured_j() const { return measured_j_; }
  double modelled_j() const { return modelled_j_; }
  double saving_j() const { return measured_j_ - modelled_j_; }

  // The waves of an atom: its blocks over what its TPCs hold at once, at least 1.
  static double waves(const InflightAtom& a);

 private:
  void weigh(KernelId kernel, double ns);
  PowerDecision decide_work(Time now, std::span<const DvfsWork> work, bool too_many);

  PowerConfig config_;
  DvfsPolicy policy_;
  std::unordered_map<KernelId, double> window_;  // completed runtime per kernel since the last decision, ns
  std::vector<DvfsWork> work_;                   // scratch
  bool overflow_ = false;                        // a kernel did not fit in window_
  std::optional<Time> last_decision_;
  PowerDecision last_;
  int cap_mhz_ = 0;
  std::uint64_t decisions_ = 0, changes_ = 0;
  double measured_j_ = 0.0, modelled_j_ = 0.0;
};

}  // namespace lithos::sched
