#include "sched/dvfs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace lithos::sched {

namespace {
// The H100's lowest graphics clock and its step between supported clocks.
constexpr int kDefaultLowestMhz = 345;
constexpr int kDefaultStepMhz = 15;
constexpr std::size_t kMaxKernels = 65536;
}  // namespace

// Supported clocks are kept ascending and unique. Clocks above f_max (or not
// positive) are outside the model, whose slowdown f_max/f - 1 must not be
// negative, and are dropped; f_max itself is always supported.
DvfsPolicy::DvfsPolicy(DvfsConfig config) : config_(std::move(config)) {
  if (config_.supported_mhz.empty()) {
    for (int f = config_.f_max_mhz; f >= kDefaultLowestMhz; f -= kDefaultStepMhz) supported_.push_back(f);
  } else {
    supported_ = config_.supported_mhz;
  }
  std::erase_if(supported_, [this](int f) { return f <= 0 || f > config_.f_max_mhz; });
  supported_.push_back(config_.f_max_mhz);
  std::sort(supported_.begin(), supported_.end());
  supported_.erase(std::unique(supported_.begin(), supported_.end()), supported_.end());
}

// An execution at a clock that is not positive (not known) carries no
// information about the clock's effect and is ignored.
void DvfsPolicy::observe(KernelId kernel, int clock_mhz, Duration duration) {
  if (clock_mhz <= 0) return;
  const double x = static_cast<double>(config_.f_max_mhz) / static_cast<double>(clock_mhz);
  const double y = static_cast<double>(duration.count());
  // A map of a bounded size: a flood of distinct kernels cannot grow it
  // without end (those past the bound are never learnt, so run at f_max).
  auto it = fits_.find(kernel);
  if (it == fits_.end()) {
    if (fits_.size() >= kMaxKernels) return;
    it = fits_.emplace(kernel, Fit{}).first;
  }
  Fit& f = it->second;
  if (f.n == 0) {
    f.lo_mhz = f.hi_mhz = clock_mhz;
  } else {
    f.lo_mhz = std::min(f.lo_mhz, clock_mhz);
    f.hi_mhz = std::max(f.hi_mhz, clock_mhz);
  }
  f.n += 1;
  f.syy += y * y;
  f.sx += x;
  f.sy += y;
  f.sxx += x * x;
  f.sxy += x * y;
}

// Least squares d = a + c*x, then the upper bound of the header: s = (c +
// z*se(c)) / (a + c), clamped to [0, 1]. A fit whose duration at f_max,
// a + c, is not positive is meaningless; the kernel is then treated as
// fully clock-bound (s = 1), the choice that never costs it speed.
std::optional<double> DvfsPolicy::sensitivity(KernelId kernel) const {
  const auto it = fits_.find(kernel);
  if (it == fits_.end()) return std::nullopt;
  const Fit& f = it->second;
  const int spread = f.hi_mhz - f.lo_mhz;
  if (spread <= 0 || spread < config_.min_spread_mhz || f.n < static_cast<double>(config_.min_samples)) {
    return std::nullopt;
  }
  const double cxx = f.sxx - f.sx * f.sx / f.n;  // > 0: the clocks differ
  if (!(cxx > 0.0)) return std::nullopt;         // rounding of nearly equal clocks
  const double cxy = f.sxy - f.sx * f.sy / f.n;
  const double cyy = f.syy - f.sy * f.sy / f.n;
  const double c = cxy / cxx;
  const double a = (f.sy - c * f.sx) / f.n;
  const double d0 = a + c;
  if (!(d0 > 0.0)) return 1.0;
  double se = 0.0;
  if (f.n > 2.0) {
    const double rss = std::max(cyy - c * cxy, 0.0);
    se = std::sqrt(rss / (f.n - 2.0) / cxx);
  }
  const double s = (c + std::max(config_.confidence_z, 0.0) * se) / d0;
  if (!std::isfinite(s)) return 1.0;
  return std::clamp(s, 0.0, 1.0);
}

std::size_t DvfsPolicy::kernels_learned() const {
  std::size_t n = 0;
  for (const auto& [k, f] : fits_)
    if (sensitivity(k).has_value()) ++n;
  return n;
}

// Negative weights count as 0; when no weight is positive, the work counts
// equally. With an unseen kernel the choice is f_max and S is left at 0 (it
// is not computed).
DvfsDecision DvfsPolicy::choose(std::span<const DvfsWork> work) const {
  DvfsDecision d;
  d.mhz = config_.f_max_mhz;
  if (work.empty()) return d;
  double total = 0.0;
  for (const DvfsWork& w : work) total += std::max(w.weight, 0.0);
  double weighted = 0.0;
  for (const DvfsWork& w : work) {
    const std::optional<double> s = sensitivity(w.kernel);
    if (!s.has_value()) {
      d.unseen_kernel = true;
      return d;
    }
    weighted += (total > 0.0 ? std::max(w.weight, 0.0) : 1.0) * *s;
  }
  d.aggregate_sensitivity = weighted / (total > 0.0 ? total : static_cast<double>(work.size()));
  // S == 0: the work does not slow down at all; the lowest clock (target 0).
  // A negative tolerance is taken as none (f_max).
  const double k = std::max(config_.tolerated_slowdown, 0.0);
  const double target = d.aggregate_sensitivity > 0.0
                            ? static_cast<double>(config_.f_max_mhz) / (1.0 + k / d.aggregate_sensitivity)
                            : 0.0;
  d.mhz = round_up_supported(target);
  return d;
}

// Within min_interval of the last change nothing changes; nor when the target
// is less than min_step_mhz away from the current clock (or equal to it).
std::optional<int> DvfsPolicy::maybe_change(Time now, int current_mhz, std::span<const DvfsWork> work) {
  if (last_change_.has_value() && now - *last_change_ < config_.min_interval) return std::nullopt;
  const int target = choose(work).mhz;
  if (target == current_mhz || std::abs(target - current_mhz) < config_.min_step_mhz) return std::nullopt;
  last_change_ = now;
  return target;
}

int DvfsPolicy::round_up_supported(double mhz) const {
  const auto it = std::lower_bound(supported_.begin(), supported_.end(), mhz,
                                   [](int f, double v) { return static_cast<double>(f) < v; });
  return it == supported_.end() ? config_.f_max_mhz : *it;
}

}  // namespace lithos::sched
