// Decompressors for fatbin entries: the LZ4 block format that older CUDA
// toolkits used and Zstandard (RFC 8878) that CUDA 13 uses. Written for
// this project (no third-party code may enter liblithos.so). Both treat the
// input as hostile: malformed data gives an error Status, never a crash, an
// out-of-bounds access or unbounded memory (the output is capped).
#pragma once

#include <cstdint>

#include "common/status.hpp"
#include "cubin/bytes.hpp"

namespace lithos::cubin {

// Output larger than this is refused (a cubin is a few MiB at most).
inline constexpr std::uint64_t kMaxDecompressed = 1ull << 30;

// One raw LZ4 block (no frame header) whose decompressed size is known
// (fatbin entries record it). Fails unless exactly `decompressed_size` bytes
// come out and the whole input is consumed.
Result<Bytes> lz4_block_decompress(ByteView input, std::uint64_t decompressed_size);

// One or more Zstandard frames (skippable frames are skipped), concatenated
// output. Checks the content checksum when a frame has one and the frame
// content size when it is declared. `max_output` caps the output.
Result<Bytes> zstd_decompress(ByteView input, std::uint64_t max_output = kMaxDecompressed);

// XXH64 of data with a seed (Zstandard's checksum is its low 32 bits).
std::uint64_t xxh64(ByteView data, std::uint64_t seed = 0);

}  // namespace lithos::cubin
