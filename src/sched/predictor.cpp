#include "sched/predictor.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <vector>

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

namespace {

void append_hex(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, 16);
  out.append(buf, r.ptr);
}
void append_dec(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
// Exact: the double's hex form (e.g. 1.8p+6), read back bit for bit.
void append_wave(std::string& out, double v) {
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::hex);
  out.append(buf, r.ptr);
}

// The space-separated fields of a line.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> f;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const std::size_t j = line.find(' ', i);
    const std::size_t e = j == std::string_view::npos ? line.size() : j;
    if (e > i) f.push_back(line.substr(i, e - i));
    i = e;
  }
  return f;
}

template <class T>
bool parse_int(std::string_view s, T* out, int base) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
bool parse_wave(std::string_view s, double* out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, std::chars_format::hex);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string LatencyPredictor::save() const {
  std::vector<std::pair<PredictionKey, Entry>> keyed(by_key_.begin(), by_key_.end());
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    return a.first.kernel != b.first.kernel ? a.first.kernel < b.first.kernel : a.first.ordinal < b.first.ordinal;
  });
  std::vector<std::pair<KernelId, Entry>> kernels(by_kernel_.begin(), by_kernel_.end());
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (const auto& [k, e] : keyed) {
    if (e.samples == 0) continue;
    out += "k ";
    append_hex(out, k.kernel);
    out += ' ';
    append_dec(out, k.ordinal);
    out += ' ';
    append_wave(out, e.wave_ns);
    out += ' ';
    append_dec(out, e.samples);
    out += '\n';
  }
  for (const auto& [k, e] : kernels) {
    if (e.samples == 0) continue;
    out += "K ";
    append_hex(out, k);
    out += ' ';
    append_wave(out, e.wave_ns);
    out += ' ';
    append_dec(out, e.samples);
    out += '\n';
  }
  return out;
}

Status LatencyPredictor::load(std::string_view text) {
  std::vector<std::pair<PredictionKey, Entry>> keyed;
  std::vector<std::pair<KernelId, Entry>> kernels;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const char* why) {
      return Status::invalid_argument("line " + std::to_string(line_no) + ": " + why + ": '" +
                                      std::string(line.substr(0, 80)) + "'");
    };
    const std::vector<std::string_view> f = fields_of(line);
    std::uint64_t kernel = 0, samples = 0;
    std::uint32_t ordinal = 0;
    double wave = 0;
    if (f.empty()) continue;
    if (f[0] == "k") {
      if (f.size() < 5 || !parse_int(f[1], &kernel, 16) || !parse_int(f[2], &ordinal, 10) || !parse_wave(f[3], &wave) ||
          !parse_int(f[4], &samples, 10))
        return bad("expected 'k KERNEL ORDINAL WAVE_NS SAMPLES'");
      if (f.size() > 5) return bad("trailing characters");
    } else if (f[0] == "K") {
      if (f.size() < 4 || !parse_int(f[1], &kernel, 16) || !parse_wave(f[2], &wave) || !parse_int(f[3], &samples, 10))
        return bad("expected 'K KERNEL WAVE_NS SAMPLES'");
      if (f.size() > 4) return bad("trailing characters");
    } else {
      return bad("unknown entry kind");
    }
    if (!std::isfinite(wave) || wave < 0 || samples == 0) return bad("wave time must be finite and >= 0, samples > 0");
    if (f[0] == "k") {
      if (ordinal > config_.max_ordinal + 1) return bad("ordinal beyond this predictor's maximum");
      keyed.push_back({{static_cast<KernelId>(kernel), ordinal}, Entry{wave, samples}});
    } else {
      kernels.push_back({static_cast<KernelId>(kernel), Entry{wave, samples}});
    }
  }
  for (const auto& [k, e] : keyed) by_key_[k] = e;
  for (const auto& [k, e] : kernels) by_kernel_[k] = e;
  return Status::ok();
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
