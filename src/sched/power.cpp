#include "sched/power.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace lithos::sched {

namespace {
// Distinct kernels remembered between two decisions; past it the decision
// is f_max (as for an unseen kernel).
constexpr std::size_t kMaxWindowKernels = 4096;
}  // namespace

double modelled_energy_j(const EnergyModelConfig& m, double measured_j, double seconds, int f_run_mhz, int cap_mhz,
                         double s, int f_max_mhz) {
  if (!(seconds > 0.0) || !(measured_j > 0.0) || f_run_mhz <= 0 || cap_mhz <= 0 || f_max_mhz <= 0) return measured_j;
  const int f = std::min(cap_mhz, f_run_mhz);
  if (f >= f_run_mhz) return measured_j;
  const double p = measured_j / seconds;
  const double dynamic = std::max(p - m.idle_w, 0.0);
  const double ratio = static_cast<double>(f) / static_cast<double>(f_run_mhz);
  const double p_f = std::min(p, m.idle_w) + dynamic * std::pow(ratio, m.exponent);
  const double sens = std::clamp(s, 0.0, 1.0);
  const double fmax = static_cast<double>(f_max_mhz);
  const double stretch = (1.0 + sens * (fmax / static_cast<double>(f) - 1.0)) /
                         (1.0 + sens * std::max(fmax / static_cast<double>(f_run_mhz) - 1.0, 0.0));
  return p_f * seconds * stretch;
}

PowerGovernor::PowerGovernor(PowerConfig config)
    : config_(std::move(config)), policy_(config_.dvfs), cap_mhz_(config_.dvfs.f_max_mhz) {
  last_.chosen_mhz = cap_mhz_;
}

double PowerGovernor::waves(const InflightAtom& a) {
  const double at_once =
      static_cast<double>(std::max(a.tpcs.count(), 1)) * static_cast<double>(std::max(a.blocks_per_tpc, 1));
  return std::max(std::ceil(static_cast<double>(a.blocks) / at_once), 1.0);
}

void PowerGovernor::completed(const InflightAtom& a, Time start, Time end, int clock_mhz) {
  if (end < start) return;
  const Duration d = end - start;
  weigh(a.key.kernel, static_cast<double>(d.count()));
  if (clock_mhz > 0) {
    const auto per_wave = static_cast<Duration::rep>(std::llround(static_cast<double>(d.count()) / waves(a)));
    policy_.observe(a.key.kernel, clock_mhz, Duration(per_wave));
  }
}

void PowerGovernor::weigh(KernelId kernel, double ns) {
  const auto it = window_.find(kernel);
  if (it != window_.end()) {
    it->second += ns;
  } else if (window_.size() < kMaxWindowKernels) {
    window_.emplace(kernel, ns);
  } else {
    overflow_ = true;
  }
}

PowerDecision PowerGovernor::decide(Time now, const EngineState& state) {
  for (const InflightAtom& a : state.atoms) {
    if (a.live) weigh(a.key.kernel, static_cast<double>(std::max<Duration::rep>(a.predicted.count(), 0)));
  }
  work_.clear();
  for (const auto& [k, ns] : window_) work_.push_back({.kernel = k, .weight = ns});
  window_.clear();
  const bool overflow = std::exchange(overflow_, false);
  return decide_work(now, work_, overflow);
}

PowerDecision PowerGovernor::decide(Time now, std::span<const DvfsWork> work) { return decide_work(now, work, false); }

// `too_many`: more kernels than the window holds, taken as an unseen one
// (f_max: the choice over no work).
PowerDecision PowerGovernor::decide_work(Time now, std::span<const DvfsWork> work, bool too_many) {
  last_decision_ = now;
  ++decisions_;
  PowerDecision d;
  d.at = now;
  d.kernels = work.size();
  if (too_many) work = {};
  const DvfsDecision choice = policy_.choose(work);
  d.sensitivity = choice.aggregate_sensitivity;
  d.unseen_kernel = choice.unseen_kernel || too_many;
  if (const std::optional<int> to = policy_.maybe_change(now, cap_mhz_, work)) {
    cap_mhz_ = *to;
    d.changed = true;
    ++changes_;
  }
  d.chosen_mhz = cap_mhz_;
  last_ = d;
  return d;
}

void PowerGovernor::account(double seconds, double measured_j, int f_run_mhz) {
  if (!(seconds > 0.0) || !(measured_j >= 0.0) || !std::isfinite(measured_j)) return;
  measured_j_ += measured_j;
  modelled_j_ +=
      modelled_energy_j(config_.energy, measured_j, seconds, f_run_mhz, cap_mhz_, last_.sensitivity, f_max_mhz());
}

}  // namespace lithos::sched
