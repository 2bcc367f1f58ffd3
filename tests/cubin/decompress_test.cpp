// Tests of the LZ4 block and Zstandard decoders and XXH64.
//
// Compressed files made at build time by the zstd and lz4 programs
// (decompress.cmake) must decompress to their inputs bit for bit; hand-made
// frames and blocks check each format feature and each malformation that
// must be refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cubin/decompress.hpp"
#include "decompress_lz4frame.hpp"

namespace lithos::cubin {
namespace {

Bytes str(const std::string& s) { return Bytes(s.begin(), s.end()); }
Bytes bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(static_cast<std::uint8_t>(x));
  return b;
}
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

// ---------------------------------------------------------------------------
// XXH64

TEST(Xxh64, KnownValues) {
  EXPECT_EQ(xxh64(str("")), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64(str("a")), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh64(str("abc")), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(xxh64(str("Nobody inspects the spammish repetition")), 0xFBCEA83C8A378BF1ull);
  EXPECT_EQ(xxh64(str(std::string(31, 'y'))), 0xC8E1705517AA9600ull);  // below one 32-byte stripe
  EXPECT_EQ(xxh64(str(std::string(32, 'z'))), 0x5F25DC5A433D2361ull);  // exactly one
  EXPECT_EQ(xxh64(str(""), 1), 0xD5AFBA1336A3BE4Bull);
  EXPECT_EQ(xxh64(str("abc"), 1), 0xBEA9CA8199328908ull);
  EXPECT_EQ(xxh64(str("Nobody inspects the spammish repetition"), 0x9E3779B97F4A7C15ull), 0xEB8B157CA26CBF34ull);
}

// ---------------------------------------------------------------------------
// LZ4 blocks, by hand

TEST(Lz4Block, LiteralsOnly) {
  const auto r = lz4_block_decompress(cat({bytes({0x50}), str("hello")}), 5);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "hello");
}

TEST(Lz4Block, EmptyBlock) {
  EXPECT_TRUE(lz4_block_decompress({}, 0).is_ok());
  const auto r = lz4_block_decompress(bytes({0x00}), 0);  // one token, no literals
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->empty());
  EXPECT_FALSE(lz4_block_decompress({}, 1).is_ok());
}

TEST(Lz4Block, MatchAndOverlap) {
  // "abc", then a 6-byte match 3 back (overlapping itself), then an empty
  // last sequence.
  const auto r = lz4_block_decompress(cat({bytes({0x32}), str("abc"), bytes({3, 0, 0x00})}), 9);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abcabcabc");
}

TEST(Lz4Block, LongLengths) {
  // Literal length 15 + 0: 15 literals; then a run of their last byte
  // (offset 1) of match length 15 + 255 + 16 + 4 = 290; then 15 + 1 = 16
  // literals.
  const Bytes block = cat({bytes({0xFF, 0x00}), str("0123456789abcde"), bytes({0x01, 0x00, 0xFF, 0x10}),
                           bytes({0xF0, 0x01}), str("ABCDEFGHIJKLMNOP")});
  const auto r = lz4_block_decompress(block, 15 + 290 + 16);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "0123456789abcde" + std::string(290, 'e') + "ABCDEFGHIJKLMNOP");
}

TEST(Lz4Block, PeriodicOverlap) {
  // Offset 2 repeated 1000 bytes: exercises the growing-chunk overlap copy.
  const Bytes block = cat({bytes({0x2F}), str("xy"), bytes({2, 0, 0xFF, 0xFF, 0xFF, 0xC4, 0x00})});
  const std::size_t n = 2 + 15 + 255 * 3 + 0xC4 + 4;
  const auto r = lz4_block_decompress(block, n);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::string want;
  for (std::size_t i = 0; i < n; ++i) want += (i % 2 == 0) ? 'x' : 'y';
  EXPECT_EQ(text(*r), want);
}

TEST(Lz4Block, Malformed) {
  const Bytes good = cat({bytes({0x32}), str("abc"), bytes({3, 0, 0x00})});
  ASSERT_TRUE(lz4_block_decompress(good, 9).is_ok());
  EXPECT_FALSE(lz4_block_decompress(good, 8).is_ok());   // output larger than declared
  EXPECT_FALSE(lz4_block_decompress(good, 10).is_ok());  // smaller than declared
  // Every truncation fails.
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(lz4_block_decompress(ByteView(good).first(n), 9).is_ok()) << n;
  }
  EXPECT_FALSE(lz4_block_decompress(cat({bytes({0x32}), str("abc"), bytes({0, 0, 0x00})}), 9).is_ok());  // offset 0
  EXPECT_FALSE(lz4_block_decompress(cat({bytes({0x32}), str("abc"), bytes({4, 0, 0x00})}), 9).is_ok());  // before start
  EXPECT_FALSE(lz4_block_decompress(cat({bytes({0x32}), str("abc"), bytes({0, 1, 0x00})}), 9).is_ok());  // far before
  // Literal length claims more than the block holds.
  EXPECT_FALSE(lz4_block_decompress(cat({bytes({0x90}), str("abc")}), 9).is_ok());
  // Length extensions that never end (literal and match).
  EXPECT_FALSE(lz4_block_decompress(bytes({0xF0, 0xFF, 0xFF, 0xFF}), 1000).is_ok());
  EXPECT_FALSE(lz4_block_decompress(cat({bytes({0x1F}), str("a"), bytes({1, 0, 0xFF, 0xFF})}), 1000).is_ok());
  // Trailing bytes after the output is complete.
  EXPECT_FALSE(lz4_block_decompress(cat({good, bytes({0x10, 'z'})}), 9).is_ok());
  // Sizes no block of this length can produce, and sizes above the cap.
  EXPECT_FALSE(lz4_block_decompress(good, 1u << 20).is_ok());
  EXPECT_FALSE(lz4_block_decompress(good, kMaxDecompressed + 1).is_ok());
  EXPECT_FALSE(lz4_block_decompress(good, ~std::uint64_t{0}).is_ok());
}

// ---------------------------------------------------------------------------
// Zstandard, by hand

// A backward bitstream whose fields the decoder reads in the given order
// (value, bits): the first field read sits just below the end marker.
Bytes backward_stream(const std::vector<std::pair<std::uint64_t, int>>& reads) {
  std::vector<int> bits;  // from the lowest bit of the first byte up
  for (auto it = reads.rbegin(); it != reads.rend(); ++it) {
    for (int i = 0; i < it->second; ++i) bits.push_back(static_cast<int>((it->first >> i) & 1u));
  }
  bits.push_back(1);  // end marker
  Bytes out((bits.size() + 7) / 8, 0);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    if (bits[i] != 0) out[i / 8] = static_cast<std::uint8_t>(out[i / 8] | (1u << (i % 8)));
  }
  return out;
}

const Bytes kMagic = bytes({0x28, 0xB5, 0x2F, 0xFD});

Bytes block_header(bool last, int type, std::size_t size) {
  const std::uint32_t v =
      (last ? 1u : 0u) | (static_cast<std::uint32_t>(type) << 1) | (static_cast<std::uint32_t>(size) << 3);
  return bytes({static_cast<int>(v & 0xFF), static_cast<int>((v >> 8) & 0xFF), static_cast<int>(v >> 16)});
}
Bytes raw_block(bool last, const std::string& s) { return cat({block_header(last, 0, s.size()), str(s)}); }
Bytes compressed_block(bool last, const Bytes& content) {
  return cat({block_header(last, 2, content.size()), content});
}

// A frame without content size or checksum, 128 KiB window.
Bytes frame(std::initializer_list<Bytes> blocks) { return cat({kMagic, bytes({0x00, 7 << 3}), cat(blocks)}); }
// A single-segment frame with a 1-byte content size.
Bytes sized_frame(int size, std::initializer_list<Bytes> blocks) {
  return cat({kMagic, bytes({0x20, size}), cat(blocks)});
}

// Raw literals section (under 4096 bytes).
Bytes raw_literals(const std::string& s) {
  if (s.size() < 32) return cat({bytes({static_cast<int>(s.size() << 3)}), str(s)});
  return cat({bytes({static_cast<int>(((s.size() & 15) << 4) | 4), static_cast<int>(s.size() >> 4)}), str(s)});
}
// Sequences section header with all three codes in RLE mode.
Bytes rle_sequences(int nseq, int ll_code, int of_code, int ml_code) {
  return bytes({nseq, 0x54, ll_code, of_code, ml_code});
}

Result<Bytes> zstd(ByteView in, std::uint64_t max = kMaxDecompressed) { return zstd_decompress(in, max); }

TEST(Zstd, RawAndRleBlocks) {
  const Bytes f = sized_frame(9, {raw_block(false, "abc"), block_header(true, 1, 6), bytes({'z'})});
  const auto r = zstd(f);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abczzzzzz");
  // A frame without a declared size.
  const auto r2 = zstd(frame({raw_block(true, "hello")}));
  ASSERT_TRUE(r2.is_ok()) << r2.status().to_string();
  EXPECT_EQ(text(*r2), "hello");
}

TEST(Zstd, ContentChecksum) {
  const std::uint32_t sum = static_cast<std::uint32_t>(xxh64(str("hello")));
  auto make = [](std::uint32_t s) {
    return cat({kMagic, bytes({0x24, 5}), raw_block(true, "hello"),
                bytes({static_cast<int>(s & 0xFF), static_cast<int>((s >> 8) & 0xFF),
                       static_cast<int>((s >> 16) & 0xFF), static_cast<int>(s >> 24)})});
  };
  const auto ok = zstd(make(sum));
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(text(*ok), "hello");
  EXPECT_FALSE(zstd(make(sum ^ 1)).is_ok());
  EXPECT_FALSE(zstd(make(sum ^ 0x80000000u)).is_ok());
  const Bytes good = make(sum);
  EXPECT_FALSE(zstd(ByteView(good).first(good.size() - 1)).is_ok());  // truncated checksum
}

TEST(Zstd, FrameHeaderFields) {
  // 2-byte content size (value + 256), no window descriptor.
  const std::string s300(300, 'q');
  auto r = zstd(cat({kMagic, bytes({0x60, 300 - 256, 0}), raw_block(true, s300)}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), s300);
  // 4- and 8-byte content sizes with a window descriptor.
  r = zstd(cat({kMagic, bytes({0x80, 7 << 3, 5, 0, 0, 0}), raw_block(true, "hello")}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  r = zstd(cat({kMagic, bytes({0xC0, 7 << 3, 5, 0, 0, 0, 0, 0, 0, 0}), raw_block(true, "hello")}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // A dictionary id of zero means no dictionary; any other is refused.
  r = zstd(cat({kMagic, bytes({0x21, 0, 5}), raw_block(true, "hello")}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_FALSE(zstd(cat({kMagic, bytes({0x21, 7, 5}), raw_block(true, "hello")})).is_ok());
  EXPECT_FALSE(zstd(cat({kMagic, bytes({0x22, 7, 0, 5}), raw_block(true, "hello")})).is_ok());
  EXPECT_FALSE(zstd(cat({kMagic, bytes({0x23, 0, 0, 0, 1, 5}), raw_block(true, "hello")})).is_ok());
  // The reserved bit.
  EXPECT_FALSE(zstd(cat({kMagic, bytes({0x28, 5}), raw_block(true, "hello")})).is_ok());
  // The unused bit is ignored.
  EXPECT_TRUE(zstd(cat({kMagic, bytes({0x30, 5}), raw_block(true, "hello")})).is_ok());
}

TEST(Zstd, DeclaredSizeChecked) {
  EXPECT_FALSE(zstd(sized_frame(4, {raw_block(true, "hello")})).is_ok());
  EXPECT_FALSE(zstd(sized_frame(6, {raw_block(true, "hello")})).is_ok());
  EXPECT_FALSE(zstd(sized_frame(4, {raw_block(false, "he"), raw_block(true, "llo")})).is_ok());
  // A declared size beyond max_output is refused before decoding.
  const auto r = zstd(cat({kMagic, bytes({0xC0, 7 << 3, 0, 0, 0, 0, 0, 0, 0, 0x40}), raw_block(true, "hello")}));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

TEST(Zstd, MaxOutput) {
  const Bytes f = frame({raw_block(false, "hello"), block_header(true, 1, 1000), bytes({'!'})});
  EXPECT_EQ(zstd(f, 1005).status().code(), StatusCode::kOk);
  const auto r = zstd(f, 1004);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(zstd(f, 0).is_ok());
  // The cap counts every frame's output together.
  const Bytes two = cat({f, f});
  EXPECT_TRUE(zstd(two, 2010).is_ok());
  EXPECT_FALSE(zstd(two, 2009).is_ok());
}

TEST(Zstd, BlockSizeLimits) {
  // A 1 KiB window (descriptor 0) limits blocks to 1 KiB.
  const std::string big(1025, 'b');
  EXPECT_FALSE(zstd(cat({kMagic, bytes({0x00, 0x00}), raw_block(true, big)})).is_ok());
  EXPECT_TRUE(zstd(cat({kMagic, bytes({0x00, 0x00}), raw_block(true, big.substr(1))})).is_ok());
  EXPECT_FALSE(zstd(cat({kMagic, bytes({0x00, 0x00}), block_header(true, 1, 1025), bytes({'x'})})).is_ok());
  // No block exceeds 128 KiB, whatever the window.
  EXPECT_FALSE(zstd(frame({block_header(true, 1, (std::size_t{128} << 10) + 1), bytes({'x'})})).is_ok());
  EXPECT_TRUE(
      zstd(cat({kMagic, bytes({0x00, 10 << 3}), block_header(true, 1, std::size_t{128} << 10), bytes({'x'})})).is_ok());
  // Reserved block type.
  EXPECT_FALSE(zstd(frame({block_header(true, 3, 1), bytes({'x'})})).is_ok());
}

TEST(Zstd, SkippableAndMultipleFrames) {
  const Bytes skip = cat({bytes({0x5E, 0x2A, 0x4D, 0x18, 3, 0, 0, 0}), str("xyz")});
  auto r = zstd(skip);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->empty());
  r = zstd(cat({frame({raw_block(true, "ab")}), skip, sized_frame(2, {raw_block(true, "cd")}), skip}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abcd");
  EXPECT_FALSE(zstd(ByteView(skip).first(skip.size() - 1)).is_ok());
  EXPECT_FALSE(zstd(ByteView(skip).first(7)).is_ok());
  EXPECT_FALSE(zstd(cat({frame({raw_block(true, "ab")}), bytes({0x28, 0xB5})})).is_ok());  // trailing bytes
  EXPECT_FALSE(zstd(cat({frame({raw_block(true, "ab")}), bytes({1, 2, 3, 4, 5})})).is_ok());
  EXPECT_FALSE(zstd({}).is_ok());
  EXPECT_FALSE(zstd(str("not zstd")).is_ok());
}

TEST(Zstd, SequencesWithRleTables) {
  // "abc", then a 3-byte match at offset 3 (offset code 2: 4 + 2 extra bits
  // = 6, minus 3). Literal length code 3 and match length code 0 have no
  // extra bits.
  const Bytes block = cat({raw_literals("abc"), rle_sequences(1, 3, 2, 0), backward_stream({{2, 2}})});
  auto r = zstd(frame({compressed_block(true, block)}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abcabc");
  // Literals left after the last sequence are appended.
  r = zstd(frame(
      {compressed_block(true, cat({raw_literals("abcXY"), rle_sequences(1, 3, 2, 0), backward_stream({{2, 2}})}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abcabcXY");
  // Two sequences, each with its own extra bits (match length code 32:
  // 35 + 1 bit): offset 3 and length 36, then offset 4 (value 7) and 35.
  r = zstd(frame({compressed_block(true, cat({raw_literals("abcdef"), rle_sequences(2, 3, 2, 32),
                                              backward_stream({{2, 2}, {1, 1}, {3, 2}, {0, 1}})}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::string want = "abc";
  for (int i = 0; i < 36; ++i) want += want[want.size() - 3];
  want += "def";
  for (int i = 0; i < 35; ++i) want += want[want.size() - 4];
  EXPECT_EQ(text(*r), want);
}

TEST(Zstd, RepeatOffsets) {
  // Offset value 1 with literals: repeat offset 1, initially 1.
  auto r =
      zstd(frame({compressed_block(true, cat({raw_literals("abc"), rle_sequences(1, 3, 0, 0), backward_stream({})}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abcccc");
  // Without literals offset value 1 means repeat offset 2 (initially 4),
  // reaching into the previous block of the frame.
  r = zstd(frame({raw_block(false, "wxyz"),
                  compressed_block(true, cat({raw_literals(""), rle_sequences(1, 0, 0, 0), backward_stream({})}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "wxyzwxy");
  // Offset value 2 without literals: repeat offset 3 (initially 8).
  r = zstd(frame({raw_block(false, "01234567"), compressed_block(true, cat({raw_literals(""), rle_sequences(1, 0, 1, 0),
                                                                            backward_stream({{0, 1}})}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "01234567012");
  // Offset value 3 without literals: repeat offset 1 minus 1. Offset code
  // 1 (value 2 + 1 bit): first value 2, repeat offset 3 = 8, which becomes
  // repeat offset 1; then value 3, offset 8 - 1 = 7.
  r = zstd(frame(
      {raw_block(false, "0123456789"),
       compressed_block(true, cat({raw_literals(""), rle_sequences(2, 0, 1, 0), backward_stream({{0, 1}, {1, 1}})}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "0123456789234678");
  // Offset value 3 without literals while repeat offset 1 is 1: offset 0.
  EXPECT_FALSE(
      zstd(frame({raw_block(false, "wxyz"), compressed_block(true, cat({raw_literals(""), rle_sequences(1, 0, 1, 0),
                                                                        backward_stream({{1, 1}})}))}))
          .is_ok());
  // Repeat offsets are reset by each frame: offset 8 is before this frame.
  EXPECT_FALSE(zstd(cat({frame({raw_block(true, "0123456789")}),
                         frame({raw_block(false, "wxyz"),
                                compressed_block(true, cat({raw_literals(""), rle_sequences(1, 0, 1, 0),
                                                            backward_stream({{0, 1}})}))})}))
                   .is_ok());
}

TEST(Zstd, SequenceErrors) {
  auto one = [](const Bytes& literals, const Bytes& seqs) {
    return zstd(frame({compressed_block(true, cat({literals, seqs}))}));
  };
  // Offset 10 with only 3 bytes produced (code 3: 8 + 5 = 13, minus 3).
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 3, 3, 0), backward_stream({{5, 3}})})).is_ok());
  // Offset into the previous frame's output.
  EXPECT_FALSE(zstd(cat({frame({raw_block(true, "0123456789")}),
                         frame({compressed_block(true, cat({raw_literals("abc"), rle_sequences(1, 3, 3, 0),
                                                            backward_stream({{5, 3}})}))})}))
                   .is_ok());
  // More literals than the literals section holds (code 5: 5 literals).
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 5, 2, 0), backward_stream({{2, 2}})})).is_ok());
  // Bits left over, and bits missing.
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 3, 2, 0), backward_stream({{2, 2}, {1, 1}})})).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 3, 2, 0), backward_stream({{0, 1}})})).is_ok());
  // No end marker.
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 3, 2, 0), bytes({0x00})})).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), rle_sequences(1, 3, 2, 0)).is_ok());
  // Reserved bits in the modes byte; RLE symbols out of range.
  EXPECT_FALSE(one(raw_literals("abc"), cat({bytes({1, 0x55, 3, 2, 0}), backward_stream({{2, 2}})})).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 36, 2, 0), backward_stream({{2, 2}})})).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 3, 32, 0), backward_stream({{2, 2}})})).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), cat({rle_sequences(1, 3, 2, 53), backward_stream({{2, 2}})})).is_ok());
  // Repeat mode with no previous table.
  EXPECT_FALSE(one(raw_literals("abc"), cat({bytes({1, 0xFC}), backward_stream({{2, 2}})})).is_ok());
  // Missing sequences section; bytes after an empty one.
  EXPECT_FALSE(one(raw_literals("abc"), {}).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), bytes({0, 0})).is_ok());
  const auto r = one(raw_literals("abc"), bytes({0}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abc");
  // Truncated sequence counts.
  EXPECT_FALSE(one(raw_literals("abc"), bytes({0x80})).is_ok());
  EXPECT_FALSE(one(raw_literals("abc"), bytes({0xFF, 0})).is_ok());
}

TEST(Zstd, ManySequences) {
  // 0x7F00 sequences (the 3-byte count form), each without literals and
  // with offset value 1: repeat offset 2, which swaps the first two repeat
  // offsets every time (4, 1, 4, 1, ...). No extra bits at all.
  const std::size_t n = 0x7F00;
  const Bytes seqs = cat({bytes({255, 0, 0, 0x54, 0, 0, 0}), backward_stream({})});
  const auto r = zstd(frame({raw_block(false, "abcd"), compressed_block(true, cat({raw_literals(""), seqs}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::string want = "abcd";
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t offset = i % 2 == 0 ? 4 : 1;
    for (int k = 0; k < 3; ++k) want += want[want.size() - offset];
  }
  EXPECT_EQ(text(*r), want);
  // The largest count (0x17EFF) overflows a 128 KiB block.
  const Bytes more = cat({bytes({255, 0xFF, 0xFF, 0x54, 0, 0, 0}), backward_stream({})});
  EXPECT_FALSE(zstd(frame({raw_block(false, "abcd"), compressed_block(true, cat({raw_literals(""), more}))})).is_ok());
}

TEST(Zstd, RepeatModeReusesTables) {
  // Block 1 sets RLE tables; block 2 repeats them (modes 0xFC).
  const Bytes b1 = cat({raw_literals("abc"), rle_sequences(1, 3, 2, 0), backward_stream({{2, 2}})});
  const Bytes b2 = cat({raw_literals("xyz"), bytes({1, 0xFC}), backward_stream({{2, 2}})});
  const auto r = zstd(frame({compressed_block(false, b1), compressed_block(true, b2)}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "abcabcxyzxyz");
}

TEST(Zstd, PredefinedTables) {
  // All three codes in predefined mode (modes 0x00). In the predefined
  // tables state 0 of literal lengths is code 0, of offsets code 0 and of
  // match lengths code 0 (RFC 8878 appendix A): with 0-bit initial states
  // of accuracy 6, 5 and 6 all zero, the sequence is LL 0, offset value 1,
  // ML 3: without literals that is repeat offset 2 = 4.
  const Bytes seqs = cat({bytes({1, 0x00}), backward_stream({{0, 6}, {0, 5}, {0, 6}})});
  const auto r = zstd(frame({raw_block(false, "wxyz"), compressed_block(true, cat({raw_literals(""), seqs}))}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "wxyzwxy");
}

// Huffman literals with the direct weight representation: weights for
// symbols 0..97, only 'a' (97) with weight 1; 'b' (98) takes the implied
// last weight 1. Both codes are 1 bit: 'a' = 0, 'b' = 1.
Bytes ab_tree() {
  Bytes t = {static_cast<std::uint8_t>(127 + 98)};
  Bytes w(49, 0);
  w[48] = 0x01;  // symbol 97 is odd: the low nibble
  return cat({t, w});
}
Bytes ab_stream(const std::string& s) {
  std::vector<std::pair<std::uint64_t, int>> reads;
  for (char c : s) reads.push_back({c == 'b' ? 1u : 0u, 1});
  return backward_stream(reads);
}
// Compressed literals header, 1 stream (format 0) or 4 (format 1), 10-bit sizes.
Bytes huf_header(int type, bool four, std::size_t regen, std::size_t csize) {
  const std::uint32_t h = static_cast<std::uint32_t>(type) | (four ? 4u : 0u) |
                          (static_cast<std::uint32_t>(regen) << 4) | (static_cast<std::uint32_t>(csize) << 14);
  return bytes({static_cast<int>(h & 0xFF), static_cast<int>((h >> 8) & 0xFF), static_cast<int>(h >> 16)});
}

TEST(Zstd, HuffmanLiteralsDirectWeights) {
  const std::string lit = "abbaabab";
  const Bytes body = cat({ab_tree(), ab_stream(lit)});
  const Bytes b1 = cat({huf_header(2, false, lit.size(), body.size()), body, bytes({0})});
  // Four streams, reusing the tree (treeless, type 3): 12 literals in
  // streams of 3, 3, 3 and 3.
  const std::string lit2 = "bbbaaababbab";
  const Bytes s1 = ab_stream(lit2.substr(0, 3)), s2 = ab_stream(lit2.substr(3, 3)), s3 = ab_stream(lit2.substr(6, 3)),
              s4 = ab_stream(lit2.substr(9));
  const Bytes jump =
      bytes({static_cast<int>(s1.size()), 0, static_cast<int>(s2.size()), 0, static_cast<int>(s3.size()), 0});
  const Bytes body2 = cat({jump, s1, s2, s3, s4});
  const Bytes b2 = cat({huf_header(3, true, lit2.size(), body2.size()), body2, bytes({0})});
  const auto r = zstd(frame({compressed_block(false, b1), compressed_block(true, b2)}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), lit + lit2);

  // Treeless literals need an earlier tree in the same frame.
  EXPECT_FALSE(zstd(frame({compressed_block(true, b2)})).is_ok());
  EXPECT_FALSE(zstd(cat({frame({compressed_block(true, b1)}), frame({compressed_block(true, b2)})})).is_ok());
  // A stream with a bit too many or too few.
  auto with_stream = [&](const Bytes& stream) {
    const Bytes b = cat({ab_tree(), stream});
    return zstd(frame({compressed_block(true, cat({huf_header(2, false, lit.size(), b.size()), b, bytes({0})}))}));
  };
  EXPECT_TRUE(with_stream(ab_stream(lit)).is_ok());
  EXPECT_FALSE(with_stream(ab_stream(lit + "a")).is_ok());
  EXPECT_FALSE(with_stream(ab_stream(lit.substr(1))).is_ok());
  // Compressed size beyond the block.
  EXPECT_FALSE(
      zstd(frame({compressed_block(true, cat({huf_header(2, false, lit.size(), body.size() + 2), body}))})).is_ok());
  // A bad jump table (stream sizes past the end).
  Bytes bad_jump = body2;
  bad_jump[0] = 0xFF;
  EXPECT_FALSE(zstd(frame({compressed_block(false, b1),
                           compressed_block(
                               true, cat({huf_header(3, true, lit2.size(), bad_jump.size()), bad_jump, bytes({0})}))}))
                   .is_ok());
}

TEST(Zstd, HuffmanBadTrees) {
  auto with_tree = [](const Bytes& tree) {
    const Bytes b = cat({tree, bytes({0x01})});
    return zstd(frame({compressed_block(true, cat({huf_header(2, false, 0, b.size()), b, bytes({0})}))}));
  };
  // Weights 2, 2, 1 sum to 5: no last weight completes a power of two.
  EXPECT_FALSE(with_tree(bytes({127 + 3, 0x22, 0x10})).is_ok());
  // All zero.
  EXPECT_FALSE(with_tree(bytes({127 + 2, 0x00})).is_ok());
  // A weight above the maximum.
  EXPECT_FALSE(with_tree(bytes({127 + 1, 0xD0})).is_ok());
  // Truncated direct weights; empty FSE weights.
  EXPECT_FALSE(with_tree(bytes({127 + 100, 0x10})).is_ok());
  EXPECT_FALSE(with_tree(bytes({0})).is_ok());
  // A valid 2-symbol tree for contrast.
  EXPECT_TRUE(with_tree(bytes({127 + 1, 0x10})).is_ok());
}

TEST(Zstd, LiteralsHeaders) {
  auto one = [](const Bytes& literals) { return zstd(frame({compressed_block(true, cat({literals, bytes({0})}))})); };
  // Raw with 2- and 3-byte headers; RLE.
  const std::string s100(100, 'r');
  auto r = one(cat({bytes({(100 & 15) << 4 | 4, 100 >> 4}), str(s100)}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), s100);
  r = one(cat({bytes({(100 & 15) << 4 | 12, (100 >> 4) & 0xFF, 0}), str(s100)}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), s100);
  r = one(bytes({(7 << 3) | 1, 'k'}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(text(*r), "kkkkkkk");
  r = one(bytes({(3000 & 15) << 4 | 13, (3000 >> 4) & 0xFF, 0, 'k'}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->size(), 3000u);
  // Truncated raw literals; literals larger than a block.
  EXPECT_FALSE(one(cat({bytes({(100 & 15) << 4 | 4, 100 >> 4}), str("short")})).is_ok());
  EXPECT_FALSE(one(bytes({1 << 4 | 13, 0, 0x20, 'k'})).is_ok());  // 0x20001 RLE literals
  EXPECT_FALSE(zstd(frame({compressed_block(true, {})})).is_ok());
}

// ---------------------------------------------------------------------------
// Files compressed by the zstd and lz4 programs

struct Case {
  std::string kind, compressed, original;
};

Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  Bytes b(static_cast<std::size_t>(std::max<std::streamoff>(f.tellg(), 0)));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return b;
}

std::vector<Case> manifest() {
  std::vector<Case> cases;
  std::ifstream f(std::string(LITHOS_DECOMPRESS_DATA) + "/manifest.txt");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    Case c;
    if (ls >> c.kind >> c.compressed >> c.original) cases.push_back(c);
  }
  return cases;
}

std::string data_path(const std::string& name) { return std::string(LITHOS_DECOMPRESS_DATA) + "/" + name; }

TEST(ZstdFiles, DecompressBitForBit) {
  int n = 0;
  for (const Case& c : manifest()) {
    if (c.kind != "zstd") continue;
    SCOPED_TRACE(c.compressed);
    const Bytes in = read_file(data_path(c.compressed)), want = read_file(data_path(c.original));
    const auto start = std::chrono::steady_clock::now();
    const auto r = zstd_decompress(in);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(*r == want) << "output differs (" << r->size() << " bytes, want " << want.size() << ")";
    std::printf("  %-22s %9zu -> %9zu bytes  %7.1f ms\n", c.compressed.c_str(), in.size(), r->size(), ms);
    // Exactly the output size is allowed; one byte less is not.
    EXPECT_TRUE(zstd_decompress(in, want.size()).is_ok());
    if (!want.empty()) {
      EXPECT_FALSE(zstd_decompress(in, want.size() - 1).is_ok());
    }
    ++n;
  }
  if (n == 0) GTEST_SKIP() << "no compressed test data (zstd program missing at build time)";
}

TEST(ZstdFiles, TruncationsFail) {
  int n = 0;
  for (const Case& c : manifest()) {
    if (c.kind != "zstd" || c.compressed.find("multi") != std::string::npos) continue;  // single frames only
    SCOPED_TRACE(c.compressed);
    const Bytes in = read_file(data_path(c.compressed));
    const std::size_t out_size = zstd_decompress(in).value().size();
    // Every prefix of small files; of larger ones a spread of prefixes and
    // the last 8 (cut checksums and last blocks). Files of over 1 MiB are
    // left out: decoding them over and over is slow under the sanitizers.
    if (out_size > (1u << 20)) continue;
    const bool small = in.size() <= 4096 && out_size <= 65536;
    for (std::size_t len = 0; len < in.size(); ++len) {
      if (!small && len % (in.size() / 5 + 1) != 0 && len + 8 < in.size()) continue;
      EXPECT_FALSE(zstd_decompress(ByteView(in).first(len)).is_ok()) << "prefix " << len;
    }
    ++n;
  }
  if (n == 0) GTEST_SKIP() << "no compressed test data";
}

TEST(ZstdFiles, CorruptionsAreCaughtOrHarmless) {
  // Flipped bits in checksummed frames: an error, or (a bit the decoder
  // ignores) the original output. Never anything else.
  int n = 0;
  for (const char* name : {"small-1.zst", "small-19.zst", "smallrep-19.zst", "tiny-3.zst", "medium-19.zst"}) {
    const std::string path = data_path(name);
    if (!std::ifstream(path).good()) continue;
    SCOPED_TRACE(name);
    const Bytes in = read_file(path);
    const Bytes want = zstd_decompress(in).value();
    std::uint64_t s = 12345;
    for (int i = 0; i < 300; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      Bytes bad = in;
      const std::size_t at = static_cast<std::size_t>((s >> 20) % bad.size());
      bad[at] = static_cast<std::uint8_t>(bad[at] ^ (1u << ((s >> 8) & 7)));
      const auto r = zstd_decompress(bad);
      if (r.is_ok()) {
        EXPECT_TRUE(*r == want) << "flip at byte " << at << " gave different output";
      }
    }
    ++n;
  }
  if (n == 0) GTEST_SKIP() << "no compressed test data";
}

TEST(Lz4Files, BlocksDecompressBitForBit) {
  int files = 0, compressed_blocks = 0;
  for (const Case& c : manifest()) {
    if (c.kind != "lz4") continue;
    SCOPED_TRACE(c.compressed);
    const Bytes in = read_file(data_path(c.compressed)), want = read_file(data_path(c.original));
    const auto frames = testing::parse_lz4_frames(in);
    ASSERT_TRUE(frames.has_value()) << "not an LZ4 frame";
    ASSERT_EQ(frames->size(), 1u);
    const testing::Lz4Frame& f = frames->front();
    ASSERT_TRUE(f.independent) << "blocks must be independent (-BI)";
    std::size_t offset = 0;
    for (const testing::Lz4FrameBlock& b : f.blocks) {
      ASSERT_LT(offset, want.size());
      const std::size_t size = std::min(f.block_max, want.size() - offset);
      const ByteView expect = ByteView(want).subspan(offset, size);
      if (b.compressed) {
        const auto r = lz4_block_decompress(b.data, size);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string() << " (block at output offset " << offset << ")";
        EXPECT_TRUE(std::equal(r->begin(), r->end(), expect.begin(), expect.end())) << "block at " << offset;
        EXPECT_FALSE(lz4_block_decompress(b.data, size - 1).is_ok());
        EXPECT_FALSE(lz4_block_decompress(b.data, size + 1).is_ok());
        EXPECT_FALSE(lz4_block_decompress(b.data.first(b.data.size() - 1), size).is_ok());
        ++compressed_blocks;
      } else {
        EXPECT_TRUE(std::equal(b.data.begin(), b.data.end(), expect.begin(), expect.end()));
      }
      offset += size;
    }
    EXPECT_EQ(offset, want.size());
    ++files;
  }
  if (files == 0) GTEST_SKIP() << "no compressed test data (lz4 program missing at build time)";
  EXPECT_GT(compressed_blocks, 20);
}

TEST(Lz4Files, CorruptBlocksNeverOverrun) {
  // Flipped bits in real blocks: either an error or exactly `size` bytes.
  const std::string path = data_path("text-1.lz4");
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no compressed test data";
  const Bytes in = read_file(path);
  const auto frames = testing::parse_lz4_frames(in);
  ASSERT_TRUE(frames.has_value());
  const testing::Lz4FrameBlock& b = frames->front().blocks.front();
  ASSERT_TRUE(b.compressed);
  const std::size_t size = frames->front().block_max;
  std::uint64_t s = 99;
  for (int i = 0; i < 2000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    Bytes bad(b.data.begin(), b.data.end());
    const std::size_t at = static_cast<std::size_t>((s >> 20) % bad.size());
    bad[at] = static_cast<std::uint8_t>(bad[at] ^ (1u << ((s >> 8) & 7)));
    const auto r = lz4_block_decompress(bad, size);
    if (r.is_ok()) {
      EXPECT_EQ(r->size(), size);
    }
  }
}

}  // namespace
}  // namespace lithos::cubin
