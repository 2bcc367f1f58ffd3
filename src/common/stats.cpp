#include "common/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lithos {

double percentile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return 0.0;
  q = std::clamp(q, 0.0, 100.0);
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = static_cast<std::size_t>(std::ceil(rank));
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, q);
}

double mean(std::span<const double> values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double stddev(std::span<const double> values) {
  if (values.size() < 2) return 0.0;
  const double m = mean(values);
  double acc = 0.0;
  for (double v : values) acc += (v - m) * (v - m);
  return std::sqrt(acc / static_cast<double>(values.size() - 1));
}

// Bucket 0 holds [0, 1); bucket 1 + e*kSubBuckets + s holds values in
// [2^e * (1 + s/k), 2^e * (1 + (s+1)/k)) for e >= 0.
int LogHistogram::bucket_of(double value) {
  if (!(value >= 1.0)) return 0;
  int exp = 0;
  const double frac = std::frexp(value, &exp);  // value = frac * 2^exp, frac in [0.5, 1)
  const int e = exp - 1;
  const int s = std::min(kSubBuckets - 1, static_cast<int>((frac * 2.0 - 1.0) * kSubBuckets));
  return 1 + e * kSubBuckets + s;
}

double LogHistogram::upper_edge(int bucket) {
  if (bucket == 0) return 1.0;
  const int e = (bucket - 1) / kSubBuckets;
  const int s = (bucket - 1) % kSubBuckets;
  return std::ldexp(1.0 + (s + 1.0) / kSubBuckets, e);
}

void LogHistogram::add(double value) {
  if (value < 0.0 || std::isnan(value)) value = 0.0;
  const auto b = static_cast<std::size_t>(bucket_of(value));
  if (b >= buckets_.size()) buckets_.resize(b + 1, 0);
  ++buckets_[b];
  ++count_;
  max_ = std::max(max_, value);
}

double LogHistogram::quantile(double q) const {
  if (count_ == 0) return 0.0;
  q = std::clamp(q, 0.0, 100.0);
  auto target = static_cast<std::uint64_t>(std::ceil(q / 100.0 * static_cast<double>(count_)));
  target = std::max<std::uint64_t>(target, 1);
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    seen += buckets_[b];
    if (seen >= target) return std::min(upper_edge(static_cast<int>(b)), max_);
  }
  return max_;
}

void LogHistogram::merge(const LogHistogram& other) {
  if (other.buckets_.size() > buckets_.size()) buckets_.resize(other.buckets_.size(), 0);
  for (std::size_t b = 0; b < other.buckets_.size(); ++b) buckets_[b] += other.buckets_[b];
  count_ += other.count_;
  max_ = std::max(max_, other.max_);
}

}  // namespace lithos
