// Statistics used by the simulator, the predictor and the benchmarks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lithos {

// Percentile of `sorted` (ascending) by linear interpolation between closest
// ranks (the method NumPy calls 'linear'); q in [0, 100]. Empty input -> 0.
double percentile_sorted(std::span<const double> sorted, double q);

// Sorts a copy and returns the percentile.
double percentile(std::vector<double> values, double q);

double mean(std::span<const double> values);
// Sample standard deviation (n - 1); 0 for fewer than two values.
double stddev(std::span<const double> values);

// A streaming histogram of non-negative values with bounded relative error
// (log-linear buckets: 2^e split into kSubBuckets). Used where keeping every
// sample would be too much, e.g. the predictor's running error statistics.
class LogHistogram {
 public:
  static constexpr int kSubBuckets = 64;  // relative error <= 1/64
  void add(double value);
  std::uint64_t count() const { return count_; }
  // Value at quantile q in [0, 100]; the upper edge of the bucket holding it.
  double quantile(double q) const;
  double max() const { return max_; }
  void merge(const LogHistogram& other);

 private:
  static int bucket_of(double value);
  static double upper_edge(int bucket);
  std::vector<std::uint64_t> buckets_;
  std::uint64_t count_ = 0;
  double max_ = 0.0;
};

}  // namespace lithos
