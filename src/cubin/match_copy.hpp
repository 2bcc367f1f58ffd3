// LZ77 match copy shared by the LZ4 and Zstandard decoders (lz4.cpp,
// zstd.cpp). Private to src/cubin.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lithos::cubin::detail {

// Copies a match of `len` bytes from `offset` back; the source may overlap.
inline void copy_match(std::uint8_t* d, std::size_t offset, std::size_t len) {
  const std::uint8_t* s = d - offset;
  if (offset >= len) {
    std::memcpy(d, s, len);
  } else if (offset == 1) {
    std::memset(d, *s, len);
  } else {
    // Each chunk copies from a whole number of periods back and never reads
    // what it writes, so the chunks double in size.
    std::size_t done = 0;
    while (done < len) {
      const std::size_t dist = done + offset;
      const std::size_t n = std::min(dist, len - done);
      std::memcpy(d + done, d + done - dist, n);
      done += n;
    }
  }
}

}  // namespace lithos::cubin::detail
