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

std::size_t SizeKeyHash::operator()(const SizeKey& k) const noexcept {
  std::uint64_t h = k.kernel * 0x9e3779b97f4a7c15ULL;
  for (std::uint32_t v : {k.grid.x, k.grid.y, k.grid.z}) h = (h ^ v) * 0x100000001b3ULL + (h >> 29);
  return static_cast<std::size_t>(h);
}

const char* size_source_name(SizeSource s) {
  switch (s) {
    case SizeSource::kFull: return "full";
    case SizeSource::kOccupancy: return "occupancy";
    case SizeSource::kModel: return "model";
    case SizeSource::kProbe: return "probe";
  }
  return "full";
}

RightSizer::RightSizer(RightSizeConfig config) : config_(config) {}

RightSizeStats& RightSizer::stats_of(TenantId tenant) {
  if (tenant >= stats_.size()) stats_.resize(static_cast<std::size_t>(tenant) + 1);
  return stats_[tenant];
}

const RightSizeStats& RightSizer::stats(TenantId tenant) const {
  static const RightSizeStats kNone;
  return tenant < stats_.size() ? stats_[tenant] : kNone;
}

std::optional<LatencyFit> RightSizer::trusted(const KeyState& k) const {
  std::optional<LatencyFit> f = k.acc.fit();
  if (f && f->r2 < config_.min_r2) return std::nullopt;
  return f;
}

SizeChoice RightSizer::choose(TenantId tenant, const SizeKey& key, int full, int occupancy, double slip) {
  full = std::max(full, 1);
  const int top = std::clamp(occupancy, 1, full);
  KeyState& k = keys_[key];
  RightSizeStats& st = stats_of(tenant);
  ++k.seen;
  ++st.executions;
  k.top = top;
  SizeChoice c{.tpcs = top, .source = top < full ? SizeSource::kOccupancy : SizeSource::kFull};
  if (const std::optional<LatencyFit> f = trusted(k)) {
    if (k.acc.distinct_tpcs() == 2) {
      const int t = smallest_tpcs_within_slip(*f, slip, top);
      if (t < top) c = SizeChoice{.tpcs = t, .source = SizeSource::kModel};
    }
  } else if (top > 1 && config_.probe_budget > 0.0 && k.top_n >= config_.probe_after &&
             (k.last_probe == 0 || k.seen - k.last_probe >= std::max<std::uint64_t>(config_.probe_every, 1))) {
    const long long p = std::llround(config_.probe_fraction * static_cast<double>(top));
    const int probe = static_cast<int>(std::clamp<long long>(p, 1, top - 1));
    // Predicted extra time: the (untrusted) fit's, else the key's mean on
    // what it can use, scaled as pure work (l = m / t: the worst case).
    double extra = 0.0;
    if (const std::optional<LatencyFit> loose = k.acc.fit()) {
      extra = static_cast<double>((loose->at(probe) - loose->at(top)).count());
    } else {
      extra = k.top_ns / static_cast<double>(k.top_n) * (static_cast<double>(top) / probe - 1.0);
    }
    extra = std::max(extra, 0.0);
    if (st.probe_cost_ns + extra <= config_.probe_budget * st.busy_ns) {
      k.last_probe = k.seen;
      ++st.probes;
      st.probe_cost_ns += extra;
      c = SizeChoice{.tpcs = probe, .source = SizeSource::kProbe, .probe_cost = Duration(std::llround(extra))};
    }
  }
  if (c.source == SizeSource::kOccupancy) ++st.by_occupancy;
  if (c.source == SizeSource::kModel) ++st.by_model;
  return c;
}

void RightSizer::observe(TenantId tenant, const SizeKey& key, int full, int tpcs, int used, SizeSource source,
                         Duration ran, bool account, bool timed) {
  RightSizeStats& st = stats_of(tenant);
  const double ns = static_cast<double>(std::max(ran, Duration{0}).count());
  if (account) {
    st.busy_ns += ns;
    st.allocated_tpc_ns += static_cast<double>(std::max(full, tpcs)) * ns;
  }
  KeyState& k = keys_[key];
  used = std::max(used, 1);
  const bool sized = source == SizeSource::kOccupancy || source == SizeSource::kModel;
  if (sized) {
    full = std::max(full, tpcs);
    if (account) st.saved_tpc_ns += static_cast<double>(full - tpcs) * ns;
    // The reference: what it takes on what it can use (k.top), by the fit
    // or the key's own mean there.
    double ref = 0.0;
    if (const std::optional<LatencyFit> f = trusted(k); f && k.acc.distinct_tpcs() == 2) {
      ref = static_cast<double>(f->at(k.top).count());
    } else if (k.top_n > 0) {
      ref = k.top_ns / static_cast<double>(k.top_n);
    }
    if (timed && ref > 0.0) {
      ++st.measured;
      st.measured_ns += ns;
      st.reference_ns += ref;
    }
  }
  if (!timed) return;
  k.acc.add(used, ran);
  if (k.top == 0 || used >= k.top) {
    ++k.top_n;
    k.top_ns += ns;
  }
}

std::optional<LatencyFit> RightSizer::fit(const SizeKey& key) const {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return it->second.acc.fit();
}

}  // namespace lithos::sched
