// DVFS policy (LithOS section "power management"): one clock for the device,
// chosen from the work in flight.
//
// Per kernel, a sensitivity s in [0, 1] such that slowdown = s * (f_max/f - 1)
// (s = 1: compute-bound, runs proportionally slower; s = 0: memory-bound,
// clock does not matter). It is fitted from executions at two or more clocks:
// duration d(f) = d0 * (1 + s * (f_max/f - 1)) is linear in x = f_max/f,
// d = a + c*x with d0 = a + c and s = c / (a + c).
//
// Conservative learning (the value choose() uses errs high, towards f_max):
// a kernel's sensitivity is known only once it has min_samples executions
// whose clocks span at least min_spread_mhz (highest minus lowest; the
// clock varies by itself under power load, so dry-run learns too). The
// value is then the upper confidence bound of the fit,
//   s = (c + z * se(c)) / (a + c),  clamped to [0, 1],
// with se(c) = sqrt(RSS / (n - 2) / Sxx), the slope's standard error
// (0 for n <= 2, an exact fit) and z = confidence_z (2: about 97.5% one
// sided). A fit whose duration at f_max, a + c, is not positive gives 1.
//
// Choice: S = sum over in-flight work of w * s (w = that work's share of the
// in-flight runtime), f = f_max / (1 + k/S) for a tolerated slowdown k,
// rounded *up* to a supported clock so the slowdown stays within k. Any
// in-flight kernel with no sensitivity yet forces f_max. A change is made at
// most once per min_interval and only when the target differs from the
// current clock by at least min_step_mhz, because a clock change costs tens
// of milliseconds.
//
// This is policy only: PowerGovernor (power.hpp) runs it, and lithosd's
// src/daemon/power.* sets the clocks through NVML where the operator allows
// it (power = "on") or reports them (power = "dry-run").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/time.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct DvfsConfig {
  int f_max_mhz = 1980;
  std::vector<int> supported_mhz;    // empty: f_max down to 345 in 15 MHz steps (H100)
  double tolerated_slowdown = 0.05;  // k
  Duration min_interval = ms(500);
  int min_step_mhz = 30;
  // Conservative learning (above).
  int min_samples = 16;
  int min_spread_mhz = 150;
  double confidence_z = 2.0;
};

// One piece of in-flight work for the clock choice.
struct DvfsWork {
  KernelId kernel = 0;
  double weight = 0.0;  // share of in-flight runtime; need not sum to 1 (normalised)
};

struct DvfsDecision {
  int mhz = 0;
  double aggregate_sensitivity = 0.0;  // S
  bool unseen_kernel = false;          // forced to f_max by a kernel with no sensitivity
};

class DvfsPolicy {
 public:
  explicit DvfsPolicy(DvfsConfig config = {});

  // Records one execution of `kernel` at `clock_mhz` taking `duration`.
  void observe(KernelId kernel, int clock_mhz, Duration duration);
  // The conservative sensitivity (above): nullopt until the kernel has
  // min_samples executions over min_spread_mhz (and two distinct clocks).
  std::optional<double> sensitivity(KernelId kernel) const;
  // Kernels whose sensitivity is known, and kernels observed at all.
  std::size_t kernels_learned() const;
  std::size_t kernels_seen() const { return fits_.size(); }

  // Pure choice for this in-flight work (no rate limit). Empty work: f_max.
  DvfsDecision choose(std::span<const DvfsWork> work) const;

  // Rate-limited: the clock to switch to now, or nullopt to keep `current`.
  std::optional<int> maybe_change(Time now, int current_mhz, std::span<const DvfsWork> work);

  // Smallest supported clock >= mhz (f_max when none is).
  int round_up_supported(double mhz) const;
  const std::vector<int>& supported() const { return supported_; }

 private:
  struct Fit {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    int lo_mhz = 0, hi_mhz = 0;
  };
  DvfsConfig config_;
  std::vector<int> supported_;  // ascending
  std::unordered_map<KernelId, Fit> fits_;
  std::optional<Time> last_change_;
};

}  // namespace lithos::sched
