// Fuzz target for the LZ4 and Zstandard decoders (src/cubin/{lz4,zstd}.cpp).
// Every input goes to both: whole to zstd_decompress (with a generous and a
// small output cap), and to lz4_block_decompress as a 4-byte little-endian
// decompressed size followed by the block (the layout of the .lz4seed seeds).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "cubin/decompress.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace lithos::cubin;
  const ByteView in(data, size);

  const auto big = zstd_decompress(in, 1u << 22);
  if (big.is_ok() && big->size() > (1u << 22)) std::abort();
  const auto small = zstd_decompress(in, 1000);
  if (small.is_ok()) {
    // A small cap may only turn success into failure, never change output.
    if (small->size() > 1000 || !big.is_ok() || *small != *big) std::abort();
  }

  if (size >= 4) {
    const std::uint64_t claimed = static_cast<std::uint64_t>(data[0]) | (static_cast<std::uint64_t>(data[1]) << 8) |
                                  (static_cast<std::uint64_t>(data[2]) << 16) |
                                  (static_cast<std::uint64_t>(data[3]) << 24);
    const auto out = lz4_block_decompress(in.subspan(4), claimed);
    if (out.is_ok() && out->size() != claimed) std::abort();
  }
  (void)xxh64(in, size);
  return 0;
}
