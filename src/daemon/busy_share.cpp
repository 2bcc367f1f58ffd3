#include "daemon/busy_share.hpp"

#include <algorithm>

namespace lithos::daemon {

void share_busy_interval(std::uint64_t busy_from, std::uint64_t now, std::span<CoveredLaunch> covered) {
  if (covered.empty()) return;
  double known_sum = 0;
  std::size_t known = 0;
  for (const CoveredLaunch& c : covered) {
    if (c.predicted_ns > 0) {
      known_sum += c.predicted_ns;
      ++known;
    }
  }
  const double fallback = known > 0 ? known_sum / static_cast<double>(known) : 1.0;
  const auto weight = [&](const CoveredLaunch& c) { return c.predicted_ns > 0 ? c.predicted_ns : fallback; };
  double remaining = 0;
  for (const CoveredLaunch& c : covered) remaining += weight(c);

  std::uint64_t t = std::min(busy_from, now);
  for (std::size_t i = 0; i < covered.size(); ++i) {
    CoveredLaunch& c = covered[i];
    const std::uint64_t s = std::min(std::max(t, c.since_ns), now);
    const double w = weight(c);
    std::uint64_t e = now;
    if (i + 1 < covered.size() && remaining > w) {
      // Its share of what is left of the interval: the launches behind it
      // keep theirs, whatever idle gaps came before it.
      const double share = static_cast<double>(now - s) * (w / remaining);
      e = s + std::min(now - s, static_cast<std::uint64_t>(share));
    }
    remaining -= w;
    c.start_ns = s;
    c.end_ns = e;
    t = e;
  }
}

}  // namespace lithos::daemon
