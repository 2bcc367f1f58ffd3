// Internal helpers shared by the container readers and writers (fatbin.cpp,
// elf.cpp, nvinfo.cpp). Not part of the library's interface.
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "common/status.hpp"

namespace lithos::cubin::detail {

inline bool is_pow2_or_zero(std::uint64_t v) { return (v & (v - 1)) == 0; }

// Rounds up to a multiple of `align` (0 and 1: unchanged). Saturates
// instead of wrapping; callers bound their sizes well below 2^63.
inline std::uint64_t align_up(std::uint64_t v, std::uint64_t align) {
  if (align <= 1) return v;
  const std::uint64_t r = v % align;
  if (r == 0) return v;
  const std::uint64_t add = align - r;
  return v > UINT64_MAX - add ? UINT64_MAX : v + add;
}

inline std::string hex(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), kDigits[v & 0xf]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

// Runs `f` (returning Status or Result<T>) so that no exception leaves the
// library: an allocation failure becomes kUnavailable, anything else
// kInternal. The cubin code is linked into an LD_PRELOAD library. The
// messages are short enough for std::string's inline buffer, so building
// them allocates nothing.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {
    return Status::unavailable("out of memory");
  } catch (...) {
    return Status::internal("exception");
  }
}

}  // namespace lithos::cubin::detail
