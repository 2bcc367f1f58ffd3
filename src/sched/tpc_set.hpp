// TpcSet: a set of logical TPCs (texture processing clusters, pairs of SMs).
//
// Logical TPC k is the pair of SMs 2k and 2k+1 as the hardware numbers them
// (%smid). An H100 SXM has 66; the set holds up to 128, the width of the
// Hopper launch-descriptor mask. Physical mask slots are not the same as
// logical TPCs: only the gpu/ adapter maps one onto the other.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace lithos::sched {

inline constexpr int kMaxTpcs = 128;

class TpcSet {
 public:
  constexpr TpcSet() = default;

  // {lo, lo+1, ..., hi-1}; empty when hi <= lo. Bounds are clamped to [0, 128].
  static constexpr TpcSet range(int lo, int hi) {
    TpcSet s;
    lo = lo < 0 ? 0 : lo;
    hi = hi > kMaxTpcs ? kMaxTpcs : hi;
    for (int w = 0; w < 2; ++w) {
      const int wlo = w * 64;
      const int a = lo > wlo ? lo - wlo : 0;
      const int b = hi - wlo < 64 ? hi - wlo : 64;
      if (b > a) s.words_[static_cast<unsigned>(w)] = span_bits(a, b);
    }
    return s;
  }
  // {0, ..., n-1}: every TPC of a device with n TPCs.
  static constexpr TpcSet first(int n) { return range(0, n); }
  static constexpr TpcSet from_words(std::uint64_t lo, std::uint64_t hi) {
    TpcSet s;
    s.words_ = {lo, hi};
    return s;
  }

  // Parses "0-7,12,20-23" (inclusive ranges); whitespace is ignored; the
  // empty string is the empty set. Rejects ids >= `limit`.
  static Result<TpcSet> parse(std::string_view text, int limit = kMaxTpcs);

  constexpr bool test(int tpc) const { return tpc >= 0 && tpc < kMaxTpcs && ((word_of(tpc) >> bit(tpc)) & 1U) != 0; }
  constexpr void set(int tpc) {
    if (tpc >= 0 && tpc < kMaxTpcs) words_[static_cast<unsigned>(tpc >> 6)] |= std::uint64_t{1} << bit(tpc);
  }
  constexpr void reset(int tpc) {
    if (tpc >= 0 && tpc < kMaxTpcs) words_[static_cast<unsigned>(tpc >> 6)] &= ~(std::uint64_t{1} << bit(tpc));
  }
  constexpr int count() const { return std::popcount(words_[0]) + std::popcount(words_[1]); }
  constexpr bool empty() const { return (words_[0] | words_[1]) == 0; }
  constexpr bool contains(const TpcSet& o) const { return (o & *this) == o; }
  constexpr bool intersects(const TpcSet& o) const {
    return ((words_[0] & o.words_[0]) | (words_[1] & o.words_[1])) != 0;
  }
  // Lowest member, or -1 when empty.
  constexpr int lowest() const {
    if (words_[0] != 0) return std::countr_zero(words_[0]);
    if (words_[1] != 0) return 64 + std::countr_zero(words_[1]);
    return -1;
  }
  // The n lowest members (all of them when n >= count()).
  constexpr TpcSet take_lowest(int n) const {
    if (n <= 0) return {};
    const int low = std::popcount(words_[0]);
    if (n >= low + std::popcount(words_[1])) return *this;
    if (n >= low) return from_words(words_[0], lowest_bits(words_[1], n - low));
    return from_words(lowest_bits(words_[0], n), 0);
  }
  // Calls f(tpc) for each member in ascending order.
  template <class F>
  constexpr void for_each(F&& f) const {
    for (unsigned i = 0; i < 2; ++i) {
      std::uint64_t w = words_[i];
      while (w != 0) {
        f(static_cast<int>(i * 64) + std::countr_zero(w));
        w &= w - 1;
      }
    }
  }

  constexpr std::uint64_t word(unsigned i) const { return words_[i & 1U]; }

  friend constexpr TpcSet operator|(TpcSet a, const TpcSet& b) { return a |= b; }
  friend constexpr TpcSet operator&(TpcSet a, const TpcSet& b) { return a &= b; }
  // Set difference: members of a not in b.
  friend constexpr TpcSet operator-(TpcSet a, const TpcSet& b) { return a -= b; }
  constexpr TpcSet& operator|=(const TpcSet& o) {
    words_[0] |= o.words_[0];
    words_[1] |= o.words_[1];
    return *this;
  }
  constexpr TpcSet& operator&=(const TpcSet& o) {
    words_[0] &= o.words_[0];
    words_[1] &= o.words_[1];
    return *this;
  }
  constexpr TpcSet& operator-=(const TpcSet& o) {
    words_[0] &= ~o.words_[0];
    words_[1] &= ~o.words_[1];
    return *this;
  }
  friend constexpr bool operator==(const TpcSet&, const TpcSet&) = default;

  // "0-7,12,20-23"; "" for the empty set. parse(to_string()) round-trips.
  std::string to_string() const;

 private:
  // The n lowest set bits of w.
  static constexpr std::uint64_t lowest_bits(std::uint64_t w, int n) {
    std::uint64_t rest = w;
    for (int i = 0; i < n; ++i) rest &= rest - 1;
    return w ^ rest;
  }
  static constexpr std::uint64_t span_bits(int a, int b) {  // bits [a, b), 0 <= a < b <= 64
    const std::uint64_t hi = b == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1;
    const std::uint64_t lo = (std::uint64_t{1} << a) - 1;
    return hi & ~lo;
  }
  constexpr std::uint64_t word_of(int tpc) const { return words_[static_cast<unsigned>(tpc >> 6)]; }
  static constexpr unsigned bit(int tpc) { return static_cast<unsigned>(tpc & 63); }
  std::array<std::uint64_t, 2> words_{};
};

}  // namespace lithos::sched
