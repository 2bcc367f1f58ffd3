#include "sched/rightsize.hpp"

#include <algorithm>
#include <cmath>

namespace lithos::sched {

// TPC counts below 1 count as 1, here and in FitAccumulator::add: no kernel
// runs on fewer.
Duration LatencyFit::at(int tpcs) const {
  const double t = static_cast<double>(std::max(tpcs, 1));
  return Duration(static_cast<Duration::rep>(std::llround(m_ns / t + b_ns)));
}

void FitAccumulator::add(int tpcs, Duration latency) {
  const int t = std::max(tpcs, 1);
  const double x = 1.0 / static_cast<double>(t);
  const double y = static_cast<double>(latency.count());
  if (n_ == 0) {
    first_t_ = t;
  } else if (t != first_t_) {
    varied_ = true;
  }
  ++n_;
  sx_ += x;
  sy_ += y;
  sxx_ += x * x;
  sxy_ += x * y;
  syy_ += y * y;
}

int FitAccumulator::distinct_tpcs() const {
  if (n_ == 0) return 0;
  return varied_ ? 2 : 1;
}

// Least squares with m, b >= 0. When the unconstrained optimum has a negative
// term, the constrained optimum lies on that term's zero boundary (the
// problem is a convex quadratic): m < 0 refits b alone (the mean), b < 0
// refits m through the origin. Both cannot be negative, since the fitted
// line passes through (mean x, mean y) with both means positive.
std::optional<LatencyFit> FitAccumulator::fit() const {
  if (!varied_) return std::nullopt;
  const double n = static_cast<double>(n_);
  const double cxx = sxx_ - sx_ * sx_ / n;  // > 0: the x values differ
  const double cxy = sxy_ - sx_ * sy_ / n;
  const double cyy = syy_ - sy_ * sy_ / n;
  double m = cxy / cxx;
  double b = (sy_ - m * sx_) / n;
  if (m < 0.0) {
    m = 0.0;
    b = sy_ / n;
  } else if (b < 0.0) {
    b = 0.0;
    m = sxy_ / sxx_;
  }
  // Residual sum of squares of (m, b), expanded over the running sums.
  const double ss_res =
      std::max(0.0, syy_ - 2.0 * m * sxy_ - 2.0 * b * sy_ + m * m * sxx_ + 2.0 * m * b * sx_ + n * b * b);
  LatencyFit f;
  f.m_ns = m;
  f.b_ns = b;
  f.samples = n_;
  // Latencies that do not vary at all (to rounding) are fitted exactly by a
  // constant; R^2 is 0/0 there and taken as 1. Otherwise 1 - SSres/SStot,
  // clamped to [0, 1] (a constrained fit can do worse than the mean).
  f.r2 = cyy <= 1e-12 * syy_ ? 1.0 : std::clamp(1.0 - ss_res / cyy, 0.0, 1.0);
  return f;
}

// at(t) is non-increasing in t for m >= 0 (every fit FitAccumulator returns),
// so the t that satisfy the bound form a suffix of [min_tpcs, max_tpcs]: a
// binary search finds its start with the same comparison a linear scan would
// make. max_tpcs is raised to at least 1 and min_tpcs clamped into
// [1, max_tpcs]; when no t satisfies the bound (slip < 1), max_tpcs.
int smallest_tpcs_within_slip(const LatencyFit& fit, double slip, int max_tpcs, int min_tpcs) {
  max_tpcs = std::max(max_tpcs, 1);
  min_tpcs = std::clamp(min_tpcs, 1, max_tpcs);
  const double bound = slip * static_cast<double>(fit.at(max_tpcs).count());
  int lo = min_tpcs;
  int hi = max_tpcs;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (static_cast<double>(fit.at(mid).count()) <= bound) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

RightSizer::RightSizer(RightSizeConfig config) : config_(config) {}

// Until a fit exists the choice alternates between the full allocation (after
// an even number of observations, so first) and the probe (after an odd
// number, so second). The alternation matters when the first observations
// all landed on one TPC count (e.g. the caller could not grant the choice):
// the next choices still offer the other count, so a fit can form.
int RightSizer::choose(const PredictionKey& key, int max_useful) const {
  const int full = std::max(max_useful, 1);
  const auto it = fits_.find(key);
  if (it == fits_.end()) return full;
  const FitAccumulator& acc = it->second;
  const std::optional<LatencyFit> f = acc.fit();
  if (!f.has_value()) {
    if (acc.samples() % 2 == 0) return full;
    const long long probe = std::llround(config_.probe_fraction * static_cast<double>(full));
    return static_cast<int>(std::clamp<long long>(probe, 1, full));
  }
  if (f->r2 < config_.min_r2) return full;
  return smallest_tpcs_within_slip(*f, config_.slip, full);
}

void RightSizer::observe(const PredictionKey& key, int tpcs, Duration latency) { fits_[key].add(tpcs, latency); }

std::optional<LatencyFit> RightSizer::fit(const PredictionKey& key) const {
  const auto it = fits_.find(key);
  if (it == fits_.end()) return std::nullopt;
  return it->second.fit();
}

}  // namespace lithos::sched
