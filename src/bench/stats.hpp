// The statistics of `lithos bench` (definitions in docs/bench-protocol.md,
// section 2.2): per-repetition latency percentiles with unfinished requests
// as lower bounds, throughput, SLO attainment and goodput, spreads over
// repetitions, and the energy charged to each tenant.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"

namespace lithos::bench {

// One tenant's measurement window (a "rep" of the tenant protocol).
struct RepStats {
  std::vector<double> values_ms;    // finished latencies and unfinished lower bounds, ascending
  std::vector<double> finished_ms;  // finished latencies only, ascending
  std::size_t finished = 0;
  std::size_t unfinished = 0;
  std::size_t completed = 0;
  double window_s = 0.0;
  double p50_ms = 0.0;
  double p99_ms = 0.0;
  double p999_ms = 0.0;
  double throughput = 0.0;  // completed / window_s
};

// Parses and checks one raw rep ({"latencies_ms", "unfinished_ms",
// "completed", "window_s"}); malformed input is an error, never a crash.
Result<RepStats> rep_stats(const nlohmann::json& raw);

// Requests of the window that finished within `slo_ms` (unfinished ones miss):
// their share, and their number per second.
double slo_attainment(const RepStats& r, double slo_ms);
double goodput(const RepStats& r, double slo_ms);

// {"median", "min", "max", "n"} of the values, or null when there are none.
nlohmann::json spread(const std::vector<double>& values);
// The median of a spread JSON (nullopt for null).
std::optional<double> spread_median(const nlohmann::json& s);

// Energy charged to tenant i of a window: the window's energy split in
// proportion to the tenants' normalised throughputs (x_i = throughput over
// alone throughput), divided by the units tenant i completed. nullopt when
// something needed is missing or zero.
std::optional<double> energy_per_unit(double window_energy_j, const std::vector<std::optional<double>>& norm_throughput,
                                      std::size_t i, std::size_t completed);

// `n` evenly spaced quantiles (0..100 %) of ascending values, for CDF plots.
std::vector<double> cdf_points(const std::vector<double>& sorted, std::size_t n);

}  // namespace lithos::bench
