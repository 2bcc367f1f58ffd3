#include "sched/predictor.hpp"

#include <algorithm>
#include <cmath>

#include "sched/occupancy.hpp"

namespace lithos::sched {

namespace {

// Duration of `waves` waves at `wave_ns` each, to the nearest nanosecond.
Duration scaled(double wave_ns, double wave_count) {
  return Duration(static_cast<Duration::rep>(std::llround(wave_ns * wave_count)));
}

// The first sample sets the mean; later ones move it by alpha.
void update(double& mean_ns, std::uint64_t& samples, double sample_ns, double alpha) {
  mean_ns = samples == 0 ? sample_ns : mean_ns + alpha * (sample_ns - mean_ns);
  ++samples;
}

std::size_t class_index(PriorityClass cls) { return static_cast<std::size_t>(cls); }

}  // namespace

std::size_t PredictionKeyHash::operator()(const PredictionKey& k) const noexcept {
  std::uint64_t h = k.kernel ^ (std::uint64_t{k.ordinal} * 0x9E3779B97F4A7C15ULL);
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ULL;
  h ^= h >> 32;
  return static_cast<std::size_t>(h);
}

LatencyPredictor::LatencyPredictor(PredictorConfig config) : config_(config) {}

// Ordinals 0..max_ordinal are keys of their own; every larger ordinal maps to
// max_ordinal + 1, one key shared by all of them (no overflow: an ordinal
// above max_ordinal means max_ordinal < UINT32_MAX).
PredictionKey LatencyPredictor::clamp(const PredictionKey& key) const {
  if (key.ordinal <= config_.max_ordinal) return key;
  return {key.kernel, config_.max_ordinal + 1};
}

// The key's own entry, else the kernel's entry over all ordinals, else none.
const LatencyPredictor::Entry* LatencyPredictor::find(const PredictionKey& key) const {
  if (const auto it = by_key_.find(key); it != by_key_.end()) return &it->second;
  if (const auto it = by_kernel_.find(key.kernel); it != by_kernel_.end()) return &it->second;
  return nullptr;
}

std::optional<Duration> LatencyPredictor::predict(const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc,
                                                  int tpcs) const {
  const Entry* e = find(clamp(key));
  if (e == nullptr) return std::nullopt;
  return scaled(e->wave_ns, static_cast<double>(waves(blocks, blocks_per_tpc, tpcs)));
}

void LatencyPredictor::observe(const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc, int tpcs,
                               Duration actual, PriorityClass cls) {
  const PredictionKey k = clamp(key);
  const double wave_count = static_cast<double>(waves(blocks, blocks_per_tpc, tpcs));
  // One lookup per map: both entries are created here (samples == 0) and
  // updated below, so no entry is ever left empty between calls, and the
  // prediction below is exactly what predict() returned before this call.
  Entry& own = by_key_[k];
  Entry& kernel = by_kernel_[k.kernel];
  const Entry* model = own.samples > 0 ? &own : (kernel.samples > 0 ? &kernel : nullptr);

  ErrorStats& err = errors_[class_index(cls)];
  ++err.observations;
  if (model != nullptr) {
    const std::int64_t diff = (actual - scaled(model->wave_ns, wave_count)).count();
    const std::int64_t abs_error = diff < 0 ? -diff : diff;
    ++err.predicted;
    if (abs_error > config_.miss_threshold.count()) ++err.misses;
    err.abs_error_sum_ns += static_cast<double>(abs_error);
    err.abs_error_ns.add(static_cast<double>(abs_error));
  }

  // A negative duration can only come from a caller's clock error; it is
  // recorded as zero rather than dragging the mean below zero.
  const double wave_ns = std::max(0.0, static_cast<double>(actual.count())) / wave_count;
  update(own.wave_ns, own.samples, wave_ns, config_.ewma_alpha);
  update(kernel.wave_ns, kernel.samples, wave_ns, config_.ewma_alpha);
}

PredictorStats LatencyPredictor::stats(PriorityClass cls) const {
  const ErrorStats& err = errors_[class_index(cls)];
  PredictorStats s;
  s.observations = err.observations;
  s.predicted = err.predicted;
  s.misses = err.misses;
  if (err.predicted > 0) {
    const double n = static_cast<double>(err.predicted);
    s.miss_share = static_cast<double>(err.misses) / n;
    s.mean_abs_error_us = err.abs_error_sum_ns / n / 1e3;
    s.p99_abs_error_us = err.abs_error_ns.quantile(99.0) / 1e3;
  }
  return s;
}

}  // namespace lithos::sched
