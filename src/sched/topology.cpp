#include "sched/topology.hpp"

namespace lithos::sched {

Result<Topology> Topology::from_gpcs(const TpcSet* gpcs, int count) {
  if (count < 0 || count > kMaxGpcs) {
    return Status::invalid_argument("a topology holds at most " + std::to_string(kMaxGpcs) + " GPCs, not " +
                                    std::to_string(count));
  }
  Topology t;
  TpcSet seen;
  for (int i = 0; i < count; ++i) {
    const TpcSet& g = gpcs[i];
    if (g.empty()) return Status::invalid_argument("GPC " + std::to_string(i) + " is empty");
    if (seen.intersects(g)) {
      return Status::invalid_argument("GPC " + std::to_string(i) + " (" + g.to_string() +
                                      ") shares TPCs with an earlier GPC: " + (seen & g).to_string());
    }
    seen |= g;
    t.gpcs_[static_cast<std::size_t>(i)] = g;
  }
  t.count_ = count;
  return t;
}

Result<Topology> Topology::parse(std::string_view text, int limit) {
  std::array<TpcSet, kMaxGpcs> sets{};
  int n = 0;
  while (!text.empty()) {
    const auto semi = text.find(';');
    const std::string_view item = text.substr(0, semi);
    if (n == kMaxGpcs) return Status::invalid_argument("more than " + std::to_string(kMaxGpcs) + " GPCs");
    auto s = TpcSet::parse(item, limit);
    if (!s) return Status::invalid_argument("GPC " + std::to_string(n) + ": " + s.status().message());
    sets[static_cast<std::size_t>(n++)] = s.value();
    if (semi == std::string_view::npos) break;
    text.remove_prefix(semi + 1);
    if (text.empty()) return Status::invalid_argument("a topology ends with ';'");
  }
  return from_gpcs(sets.data(), n);
}

std::string Topology::to_string() const {
  std::string out;
  for (int i = 0; i < count_; ++i) {
    if (i > 0) out += ';';
    out += gpcs_[static_cast<std::size_t>(i)].to_string();
  }
  return out;
}

TpcSet Topology::tpcs() const {
  TpcSet all;
  for (int i = 0; i < count_; ++i) all |= gpcs_[static_cast<std::size_t>(i)];
  return all;
}

int Topology::gpc_of(int tpc) const {
  for (int i = 0; i < count_; ++i) {
    if (gpcs_[static_cast<std::size_t>(i)].test(tpc)) return i;
  }
  return -1;
}

int Topology::max_in_one_gpc(const TpcSet& set) const {
  int best = 0;
  for (int i = 0; i < count_; ++i) {
    const int n = (gpcs_[static_cast<std::size_t>(i)] & set).count();
    if (n > best) best = n;
  }
  return best;
}

}  // namespace lithos::sched
