#include "sched/tpc_set.hpp"

#include <cctype>
#include <charconv>

namespace lithos::sched {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

Result<int> parse_id(std::string_view s, int limit) {
  s = trim(s);
  int v = 0;
  const auto* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) {
    return Status::invalid_argument("'" + std::string(s) + "' is not a TPC number");
  }
  if (v < 0 || v >= limit) {
    return Status::out_of_range("TPC " + std::to_string(v) + " is outside 0-" + std::to_string(limit - 1));
  }
  return v;
}

}  // namespace

Result<TpcSet> TpcSet::parse(std::string_view text, int limit) {
  if (limit > kMaxTpcs) limit = kMaxTpcs;
  TpcSet out;
  text = trim(text);
  if (text.empty()) return out;
  while (true) {
    const auto comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    const auto dash = item.find('-');
    if (dash == std::string_view::npos) {
      auto v = parse_id(item, limit);
      if (!v) return v.status();
      out.set(*v);
    } else {
      auto a = parse_id(item.substr(0, dash), limit);
      if (!a) return a.status();
      auto b = parse_id(item.substr(dash + 1), limit);
      if (!b) return b.status();
      if (*b < *a) return Status::invalid_argument("range '" + std::string(item) + "' runs backwards");
      out |= range(*a, *b + 1);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::string TpcSet::to_string() const {
  std::string out;
  int run_start = -1;
  int prev = -2;
  auto flush = [&] {
    if (run_start < 0) return;
    if (!out.empty()) out += ',';
    out += std::to_string(run_start);
    if (prev > run_start) {
      out += '-';
      out += std::to_string(prev);
    }
  };
  for_each([&](int t) {
    if (t != prev + 1) {
      flush();
      run_start = t;
    }
    prev = t;
  });
  flush();
  return out;
}

}  // namespace lithos::sched
