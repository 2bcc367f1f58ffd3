// Test helper: splits an LZ4 frame (what the lz4 program writes) into its
// raw blocks, so that the blocks can be fed to lz4_block_decompress. Frame
// layout: magic 0x184D2204, FLG, BD, [content size 8], [dictionary id 4],
// header checksum 1; then blocks, each a 4-byte size word (high bit:
// stored uncompressed), the data and [a 4-byte block checksum]; a zero size
// word ends the frame, followed by [a 4-byte content checksum].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cubin/bytes.hpp"

namespace lithos::cubin::testing {

struct Lz4FrameBlock {
  ByteView data;
  bool compressed = false;
};

struct Lz4Frame {
  std::size_t block_max = 0;  // the frame's maximum block size
  bool independent = false;   // blocks decode without their predecessors
  std::vector<Lz4FrameBlock> blocks;
};

// Parses every frame of `in`; nullopt when it is not a well-formed sequence
// of LZ4 frames.
inline std::optional<std::vector<Lz4Frame>> parse_lz4_frames(ByteView in) {
  ByteReader r(in);
  std::vector<Lz4Frame> frames;
  std::size_t pos = 0;
  while (pos < in.size()) {
    if (r.u32(pos) != 0x184D2204u) return std::nullopt;
    const std::uint8_t flg = r.u8(pos + 4), bd = r.u8(pos + 5);
    if (!r.ok() || (flg >> 6) != 1) return std::nullopt;
    const unsigned bmax = (bd >> 4) & 7u;
    if (bmax < 4) return std::nullopt;
    Lz4Frame f;
    f.block_max = std::size_t{1} << (8 + 2 * bmax);
    f.independent = (flg >> 5) & 1u;
    const bool block_checksum = (flg >> 4) & 1u, content_size = (flg >> 3) & 1u;
    const bool content_checksum = (flg >> 2) & 1u, dict_id = flg & 1u;
    pos += 7u + (content_size ? 8u : 0u) + (dict_id ? 4u : 0u);
    for (;;) {
      const std::uint32_t word = r.u32(pos);
      if (!r.ok()) return std::nullopt;
      pos += 4;
      if (word == 0) break;
      const std::size_t size = word & 0x7FFFFFFFu;
      const ByteView data = r.slice(pos, size);
      if (!r.ok()) return std::nullopt;
      f.blocks.push_back({data, (word & 0x80000000u) == 0});
      pos += size + (block_checksum ? 4u : 0u);
    }
    pos += content_checksum ? 4u : 0u;
    if (pos > in.size()) return std::nullopt;
    frames.push_back(std::move(f));
  }
  return frames;
}

}  // namespace lithos::cubin::testing
