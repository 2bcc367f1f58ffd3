#include "bench/stats.hpp"

#include <algorithm>
#include <cmath>

#include "common/stats.hpp"

namespace lithos::bench {

using nlohmann::json;

namespace {

Status read_ms_array(const json& raw, const char* key, std::vector<double>& out) {
  if (!raw.contains(key)) return Status::ok();
  const json& a = raw.at(key);
  if (!a.is_array()) return Status::invalid_argument(std::string("'") + key + "' is not an array");
  for (const json& v : a) {
    if (!v.is_number()) return Status::invalid_argument(std::string("'") + key + "' holds a non-number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0.0) {
      return Status::invalid_argument(std::string("'") + key + "' holds a negative or non-finite latency");
    }
    out.push_back(d);
  }
  return Status::ok();
}

}  // namespace

Result<RepStats> rep_stats(const json& raw) {
  if (!raw.is_object()) return Status::invalid_argument("a rep is not an object");
  RepStats r;
  std::vector<double> unfinished;
  LITHOS_RETURN_IF_ERROR(read_ms_array(raw, "latencies_ms", r.values_ms));
  LITHOS_RETURN_IF_ERROR(read_ms_array(raw, "unfinished_ms", unfinished));
  r.finished = r.values_ms.size();
  r.unfinished = unfinished.size();
  r.finished_ms = r.values_ms;
  std::sort(r.finished_ms.begin(), r.finished_ms.end());
  r.values_ms.insert(r.values_ms.end(), unfinished.begin(), unfinished.end());
  std::sort(r.values_ms.begin(), r.values_ms.end());
  if (!raw.contains("window_s") || !raw["window_s"].is_number() || !(raw["window_s"].get<double>() > 0.0)) {
    return Status::invalid_argument("a rep needs 'window_s' > 0");
  }
  r.window_s = raw["window_s"].get<double>();
  if (!raw.contains("completed") || !raw["completed"].is_number_integer() || raw["completed"].get<long long>() < 0) {
    return Status::invalid_argument("a rep needs 'completed' >= 0");
  }
  r.completed = raw["completed"].get<std::size_t>();
  r.p50_ms = percentile_sorted(r.values_ms, 50.0);
  r.p99_ms = percentile_sorted(r.values_ms, 99.0);
  r.p999_ms = percentile_sorted(r.values_ms, 99.9);
  r.throughput = static_cast<double>(r.completed) / r.window_s;
  return r;
}

double slo_attainment(const RepStats& r, double slo_ms) {
  const std::size_t total = r.finished + r.unfinished;
  if (total == 0) return 0.0;
  // Unfinished requests miss whatever their lower bound says.
  const auto hits = static_cast<std::size_t>(std::upper_bound(r.finished_ms.begin(), r.finished_ms.end(), slo_ms) -
                                             r.finished_ms.begin());
  return static_cast<double>(hits) / static_cast<double>(total);
}

double goodput(const RepStats& r, double slo_ms) {
  const std::size_t total = r.finished + r.unfinished;
  return slo_attainment(r, slo_ms) * static_cast<double>(total) / r.window_s;
}

json spread(const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values) {
    if (std::isfinite(x)) v.push_back(x);
  }
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  return {{"median", percentile_sorted(v, 50.0)}, {"min", v.front()}, {"max", v.back()}, {"n", v.size()}};
}

std::optional<double> spread_median(const json& s) {
  if (!s.is_object() || !s.contains("median") || !s["median"].is_number()) return std::nullopt;
  return s["median"].get<double>();
}

std::optional<double> energy_per_unit(double window_energy_j, const std::vector<std::optional<double>>& norm_throughput,
                                      std::size_t i, std::size_t completed) {
  if (i >= norm_throughput.size() || completed == 0 || !norm_throughput[i] || !(window_energy_j > 0.0)) {
    return std::nullopt;
  }
  double sum = 0.0;
  for (const auto& x : norm_throughput) {
    if (!x) return std::nullopt;
    sum += *x;
  }
  if (!(sum > 0.0)) return std::nullopt;
  return window_energy_j * (*norm_throughput[i] / sum) / static_cast<double>(completed);
}

std::vector<double> cdf_points(const std::vector<double>& sorted, std::size_t n) {
  std::vector<double> out;
  if (sorted.empty() || n == 0) return out;
  out.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double q = n == 1 ? 50.0 : 100.0 * static_cast<double>(k) / static_cast<double>(n - 1);
    out.push_back(percentile_sorted(sorted, q));
  }
  return out;
}

}  // namespace lithos::bench
