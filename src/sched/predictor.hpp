// Online latency predictor (LithOS section "latency predictor").
//
// No offline profiling: every prediction comes from earlier executions seen
// in this process. The key is the kernel plus its ordinal on its queue since
// the queue's last synchronisation, because the same function recurs with
// different shapes inside one model step, and position in the step tells the
// shapes apart.
//
// Model: for each key, an exponentially weighted mean of the *wave time*,
// the observed duration divided by the number of waves the observed range
// needed on the TPCs it had. A prediction for another block count or TPC
// count multiplies the wave time by that case's wave count, i.e. linear
// scaling with TPC count, quantised to whole waves (what "unseen operators
// assume linear scaling" means here). A key never seen falls back to the
// kernel's entry at any ordinal; a kernel never seen has no prediction.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/stats.hpp"
#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct PredictionKey {
  KernelId kernel = 0;
  std::uint32_t ordinal = 0;
  friend bool operator==(const PredictionKey&, const PredictionKey&) = default;
};

// Hash of a PredictionKey. Kernel ids are small integers in the simulator and
// hashes in the runtime; mixing both fields through a multiply-xorshift
// finaliser spreads either over a table.
struct PredictionKeyHash {
  std::size_t operator()(const PredictionKey& k) const noexcept;
};

struct PredictorConfig {
  double ewma_alpha = 0.25;          // weight of the newest sample
  Duration miss_threshold = us(50);  // a prediction off by more than this is a miss
  std::uint32_t max_ordinal = 4095;  // ordinals above this share one key
};

// Error statistics over every observation that had a prediction before it.
struct PredictorStats {
  std::uint64_t observations = 0;  // observe() calls
  std::uint64_t predicted = 0;     // of those, how many had a prediction
  std::uint64_t misses = 0;        // |error| > miss_threshold
  double miss_share = 0.0;         // misses / predicted (0 when predicted == 0)
  double mean_abs_error_us = 0.0;
  double p99_abs_error_us = 0.0;
};

class LatencyPredictor {
 public:
  explicit LatencyPredictor(PredictorConfig config = {});

  // Predicted duration of `blocks` blocks of the keyed kernel on `tpcs` TPCs
  // holding `blocks_per_tpc` resident blocks each; nullopt when the kernel was
  // never observed.
  std::optional<Duration> predict(const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc, int tpcs) const;

  // Records one observed execution of `blocks` blocks on `tpcs` TPCs. Before
  // updating the model, compares `actual` with what predict() returned for
  // the same arguments and adds the error to the statistics of `cls`.
  void observe(const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc, int tpcs, Duration actual,
               PriorityClass cls);

  PredictorStats stats(PriorityClass cls) const;
  std::size_t entries() const { return by_key_.size(); }

  // The model (not the error statistics) as text, for a cache file: one
  // entry per line, keys in ascending order, wave times exact (hex floats):
  //   k <kernel, hex> <ordinal> <wave ns> <samples>   (a kernel at an ordinal)
  //   K <kernel, hex> <wave ns> <samples>             (a kernel at any ordinal)
  std::string save() const;
  // Loads save()'s text: each entry replaces this model's entry of the same
  // key; others stay. Blank lines and lines starting with '#' are skipped.
  // Errors (invalid_argument) name the line; then nothing is changed.
  Status load(std::string_view text);
  const PredictorConfig& config() const { return config_; }

 private:
  struct Entry {
    double wave_ns = 0.0;
    std::uint64_t samples = 0;
  };
  struct ErrorStats {
    std::uint64_t observations = 0;
    std::uint64_t predicted = 0;
    std::uint64_t misses = 0;
    double abs_error_sum_ns = 0.0;
    LogHistogram abs_error_ns;
  };
  PredictionKey clamp(const PredictionKey& key) const;
  const Entry* find(const PredictionKey& key) const;

  PredictorConfig config_;
  std::unordered_map<PredictionKey, Entry, PredictionKeyHash> by_key_;
  std::unordered_map<KernelId, Entry> by_kernel_;
  std::array<ErrorStats, 2> errors_;  // by PriorityClass
};

}  // namespace lithos::sched
