// Hardware right-sizing (LithOS section "hardware right-sizing"): give each
// kernel the fewest TPCs that keep its latency within a slip k of what it
// would take on its full allocation.
//
// The occupancy bound (occupancy.hpp) caps what a kernel can use at all.
// Below it, latency is modelled as l(t) = m / t + b and fitted by least
// squares on x = 1/t from observed executions; the choice is the smallest t
// with l(t) <= k * l(t_max). Taking the occupancy bound alone as the answer
// was measured to hurt (+121% P99 in a public reproduction); the fit is what
// works.
//
// Probe schedule (left open by the paper; ours): the first execution of a key
// runs on the full allocation, the second on `probe_fraction` of it; after
// that, the fitted answer is used once the fit has R^2 >= min_r2, and every
// execution keeps refining the fit.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "common/time.hpp"
#include "sched/predictor.hpp"

namespace lithos::sched {

struct LatencyFit {
  double m_ns = 0.0;  // work term: latency on one TPC minus b
  double b_ns = 0.0;  // part that does not shrink with more TPCs
  double r2 = 0.0;    // coefficient of determination of the fit
  std::uint64_t samples = 0;
  Duration at(int tpcs) const;
};

// Running least-squares sums for l = m * (1/t) + b.
class FitAccumulator {
 public:
  void add(int tpcs, Duration latency);
  // nullopt until samples at two or more distinct TPC counts exist. m and b
  // are clamped at 0 (a negative work term is noise).
  std::optional<LatencyFit> fit() const;
  std::uint64_t samples() const { return n_; }
  // Distinct TPC counts seen, capped at 2: 0, 1, or 2 for "two or more",
  // which is all a fit needs to know.
  int distinct_tpcs() const;

 private:
  std::uint64_t n_ = 0;
  double sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0, syy_ = 0;
  int first_t_ = 0;
  bool varied_ = false;
};

// Smallest t in [min_tpcs, max_tpcs] with fit.at(t) <= slip * fit.at(max_tpcs).
int smallest_tpcs_within_slip(const LatencyFit& fit, double slip, int max_tpcs, int min_tpcs = 1);

struct RightSizeConfig {
  double slip = 1.1;             // tolerated latency ratio (the paper's k)
  double probe_fraction = 0.25;  // second probe at this share of the full allocation
  double min_r2 = 0.8;           // below this the fit is not trusted: full allocation
};

class RightSizer {
 public:
  explicit RightSizer(RightSizeConfig config = {});
  // TPC count for the next execution of `key`, given the most it can use
  // (min of its allocation and occupancy bound). Always in [1, max_useful].
  int choose(const PredictionKey& key, int max_useful) const;
  void observe(const PredictionKey& key, int tpcs, Duration latency);
  std::optional<LatencyFit> fit(const PredictionKey& key) const;
  const RightSizeConfig& config() const { return config_; }

 private:
  RightSizeConfig config_;
  std::unordered_map<PredictionKey, FitAccumulator, PredictionKeyHash> fits_;
};

}  // namespace lithos::sched
