// A Zstandard decoder (RFC 8878), written for this project from the RFC.
// (Over 600 lines: the format's literals, sequences and entropy tables are
// one decoder.)
//
// Frames are decoded one after another into one output buffer; skippable
// frames are skipped. Within a frame, blocks are raw, RLE or compressed; a
// compressed block holds a literals section (raw, RLE, or Huffman-coded in
// one or four streams, with the Huffman table given or reused from the
// previous block) and a sequences section (literal length, match length and
// offset codes, each FSE-coded with a predefined, RLE, described or reused
// table). Every size, table and offset is checked: malformed input gives an
// error Status. Output is capped by max_output and by the frame's declared
// content size, so memory use is bounded by the cap (plus fixed tables).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "cubin/decompress.hpp"
#include "cubin/match_copy.hpp"
#include "cubin/zstd_bits.hpp"

namespace lithos::cubin {
namespace {

using zstd_detail::BackwardBits;
using zstd_detail::ForwardBits;
using zstd_detail::highbit;

constexpr std::uint32_t kFrameMagic = 0xFD2FB528u;
constexpr std::uint32_t kSkippableMagic = 0x184D2A50u;  // low 4 bits free
constexpr std::size_t kBlockSizeMax = std::size_t{128} << 10;
constexpr int kHufMaxBits = 12;

Status corrupt(const char* what) { return Status::invalid_argument(std::string("zstd: ") + what); }

// ---------------------------------------------------------------------------
// FSE tables

struct FseEntry {
  std::uint16_t base;  // next state = base + bits read
  std::uint8_t symbol;
  std::uint8_t bits;
};

struct FseTable {
  int log = 0;
  std::array<FseEntry, 512> e{};
};

// Builds the decoding table for normalized counts norm[0..nsym) (-1 means
// "less than 1", taking one cell at the top) summing to 1 << log.
bool build_fse(FseTable& t, const std::int16_t* norm, std::size_t nsym, int log) {
  if (log < 5 || log > 9 || nsym == 0 || nsym > 256) return false;
  const std::uint32_t size = 1u << log;
  std::uint32_t sum = 0;
  for (std::size_t s = 0; s < nsym; ++s) {
    if (norm[s] < -1) return false;
    sum += norm[s] == -1 ? 1u : static_cast<std::uint32_t>(norm[s]);
  }
  if (sum != size) return false;
  t.log = log;
  std::array<std::uint16_t, 256> next{};
  int high = static_cast<int>(size) - 1;
  for (std::size_t s = 0; s < nsym; ++s) {
    if (norm[s] == -1) {
      t.e[static_cast<std::size_t>(high--)].symbol = static_cast<std::uint8_t>(s);
      next[s] = 1;
    } else {
      next[s] = static_cast<std::uint16_t>(norm[s]);
    }
  }
  const std::uint32_t step = (size >> 1) + (size >> 3) + 3, mask = size - 1;
  std::uint32_t pos = 0;
  for (std::size_t s = 0; s < nsym; ++s) {
    for (int i = 0; i < norm[s]; ++i) {
      t.e[pos].symbol = static_cast<std::uint8_t>(s);
      do {
        pos = (pos + step) & mask;
      } while (static_cast<int>(pos) > high);
    }
  }
  if (pos != 0) return false;
  for (std::uint32_t u = 0; u < size; ++u) {
    FseEntry& e = t.e[u];
    const std::uint32_t x = next[e.symbol]++;
    const int bits = log - highbit(x);
    e.bits = static_cast<std::uint8_t>(bits);
    e.base = static_cast<std::uint16_t>((x << bits) - size);
  }
  return true;
}

void build_rle(FseTable& t, std::uint8_t symbol) {
  t.log = 0;
  t.e[0] = FseEntry{0, symbol, 0};
}

// Reads an FSE table description from the front of `src` (accuracy log at
// most max_log, symbols at most max_symbol) and builds its table; *used is
// the number of bytes it took.
Status read_fse(ByteView src, int max_log, std::size_t max_symbol, FseTable& t, std::size_t* used) {
  ForwardBits br(src);
  const int log = static_cast<int>(br.read(4)) + 5;
  if (log > max_log) return corrupt("FSE accuracy log too large");
  std::array<std::int16_t, 256> norm{};
  int remaining = (1 << log) + 1;
  int threshold = 1 << log;
  int nbits = log + 1;
  std::size_t sym = 0;
  bool prev_zero = false;
  while (remaining > 1) {
    if (sym > max_symbol) return corrupt("FSE table has too many symbols");
    if (prev_zero) {
      std::size_t n0 = sym;
      for (;;) {
        const std::uint32_t r = br.read(2);
        n0 += r;
        if (n0 > max_symbol) return corrupt("FSE table has too many symbols");
        if (r != 3) break;
      }
      sym = n0;  // norm[] already holds zeros there
    }
    const int max = (2 * threshold - 1) - remaining;
    int count;
    const int low = static_cast<int>(br.peek(nbits - 1));
    if (low < max) {
      count = low;
      br.skip(nbits - 1);
    } else {
      count = static_cast<int>(br.peek(nbits));
      if (count >= threshold) count -= max;
      br.skip(nbits);
    }
    --count;  // stored as count + 1 so that -1 can be written
    remaining -= count < 0 ? -count : count;
    norm[sym++] = static_cast<std::int16_t>(count);
    prev_zero = count == 0;
    while (remaining < threshold) {
      --nbits;
      threshold >>= 1;
    }
  }
  if (remaining != 1) return corrupt("FSE table probabilities do not add up");
  if (br.bytes_used() > src.size()) return corrupt("truncated FSE table description");
  if (!build_fse(t, norm.data(), sym, log)) return corrupt("invalid FSE table");
  *used = br.bytes_used();
  return Status::ok();
}

// The predefined distributions of RFC 8878 section 3.1.1.3.2.2.
constexpr std::int16_t kLlDefault[36] = {4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,  1,  2,  2,
                                         2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1};
constexpr std::int16_t kMlDefault[53] = {1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1,  1,  1,  1,  1,  1,  1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  1,  1,  1,  1,  1,  1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1};
constexpr std::int16_t kOfDefault[29] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 1,  1,  1,  1,  1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1};

// Literal length and match length codes: baseline and extra bits.
constexpr std::uint32_t kLlBase[36] = {0,  1,  2,   3,   4,   5,    6,    7,    8,    9,     10,    11,
                                       12, 13, 14,  15,  16,  18,   20,   22,   24,   28,    32,    40,
                                       48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
constexpr std::uint8_t kLlBits[36] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  0,  0,  0,  0,  1,  1,
                                      1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
constexpr std::uint32_t kMlBase[53] = {3,  4,   5,   6,   7,    8,    9,    10,   11,    12,    13,   14, 15, 16,
                                       17, 18,  19,  20,  21,   22,   23,   24,   25,    26,    27,   28, 29, 30,
                                       31, 32,  33,  34,  35,   37,   39,   41,   43,    47,    51,   59, 67, 83,
                                       99, 131, 259, 515, 1027, 2051, 4099, 8195, 16387, 32771, 65539};
constexpr std::uint8_t kMlBits[53] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  0,  0,  0,  0,  0,  0, 0,
                                      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  0,  0,  0,  1,  1,  1, 1,
                                      2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

constexpr std::size_t kLlMaxSymbol = 35, kMlMaxSymbol = 52, kOfMaxSymbol = 31;
constexpr int kLlMaxLog = 9, kMlMaxLog = 9, kOfMaxLog = 8;

// ---------------------------------------------------------------------------
// Huffman tables

struct HufEntry {
  std::uint8_t symbol;
  std::uint8_t bits;
};

struct HufTable {
  int max_bits = 0;
  std::array<HufEntry, std::size_t{1} << kHufMaxBits> e{};
};

// Builds the table from the weights of symbols 0..n-1 (the last symbol's
// weight is implied and appended here).
Status build_huffman(HufTable& t, std::array<std::uint8_t, 256>& w, std::size_t n) {
  if (n == 0 || n > 255) return corrupt("bad Huffman weight count");
  std::uint32_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (w[i] > kHufMaxBits) return corrupt("Huffman weight too large");
    if (w[i] != 0) total += 1u << (w[i] - 1);
  }
  if (total == 0) return corrupt("Huffman weights all zero");
  const int max_bits = highbit(total) + 1;
  if (max_bits > kHufMaxBits) return corrupt("Huffman code too long");
  const std::uint32_t rest = (1u << max_bits) - total;
  if ((rest & (rest - 1)) != 0) return corrupt("Huffman weights do not complete a code");
  w[n] = static_cast<std::uint8_t>(highbit(rest) + 1);
  const std::size_t nsym = n + 1;
  t.max_bits = max_bits;
  std::uint32_t pos = 0;
  for (int weight = 1; weight <= max_bits; ++weight) {
    const std::uint32_t span = 1u << (weight - 1);
    const auto bits = static_cast<std::uint8_t>(max_bits + 1 - weight);
    for (std::size_t s = 0; s < nsym; ++s) {
      if (w[s] != weight) continue;
      for (std::uint32_t i = 0; i < span; ++i) t.e[pos + i] = HufEntry{static_cast<std::uint8_t>(s), bits};
      pos += span;
    }
  }
  if (pos != (1u << max_bits)) return corrupt("Huffman table incomplete");
  return Status::ok();
}

// Reads a Huffman tree description from the front of src into t; *used is
// the bytes it took.
Status read_huffman_tree(ByteView src, HufTable& t, std::size_t* used) {
  if (src.empty()) return corrupt("missing Huffman tree description");
  const std::uint8_t header = src[0];
  std::array<std::uint8_t, 256> w{};
  std::size_t n = 0;
  if (header < 128) {
    // FSE-compressed weights, two interleaved states.
    const std::size_t csize = header;
    if (csize == 0 || csize > src.size() - 1) return corrupt("bad Huffman weights size");
    const ByteView fs = src.subspan(1, csize);
    FseTable table;
    std::size_t hdr = 0;
    LITHOS_RETURN_IF_ERROR(read_fse(fs, 6, 255, table, &hdr));
    BackwardBits br;
    if (!br.init(fs.subspan(hdr))) return corrupt("bad Huffman weights bitstream");
    std::uint32_t s1 = static_cast<std::uint32_t>(br.read(table.log));
    std::uint32_t s2 = static_cast<std::uint32_t>(br.read(table.log));
    for (;;) {
      if (n >= 255) return corrupt("too many Huffman weights");
      w[n++] = table.e[s1].symbol;
      s1 = table.e[s1].base + static_cast<std::uint32_t>(br.read(table.e[s1].bits));
      if (br.overflowed()) {
        if (n >= 255) return corrupt("too many Huffman weights");
        w[n++] = table.e[s2].symbol;
        break;
      }
      if (n >= 255) return corrupt("too many Huffman weights");
      w[n++] = table.e[s2].symbol;
      s2 = table.e[s2].base + static_cast<std::uint32_t>(br.read(table.e[s2].bits));
      if (br.overflowed()) {
        if (n >= 255) return corrupt("too many Huffman weights");
        w[n++] = table.e[s1].symbol;
        break;
      }
    }
    *used = 1 + csize;
  } else {
    n = header - 127u;
    const std::size_t bytes = (n + 1) / 2;
    if (bytes > src.size() - 1) return corrupt("truncated Huffman weights");
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t b = src[1 + i / 2];
      w[i] = static_cast<std::uint8_t>((i % 2 == 0) ? (b >> 4) : (b & 15));
    }
    *used = 1 + bytes;
  }
  return build_huffman(t, w, n);
}

// Decodes one Huffman stream of exactly out_size symbols.
Status decode_huffman_stream(const HufTable& t, ByteView stream, std::uint8_t* out, std::size_t out_size) {
  BackwardBits br;
  if (!br.init(stream)) return corrupt("bad Huffman stream");
  const int max_bits = t.max_bits;
  for (std::size_t i = 0; i < out_size; ++i) {
    const HufEntry e = t.e[br.peek(max_bits)];
    br.skip(e.bits);
    out[i] = e.symbol;
  }
  if (!br.done()) return corrupt("Huffman stream not consumed exactly");
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Frame decoding

struct Context {
  HufTable huf;
  bool have_huf = false;
  FseTable ll, of, ml;
  bool have_ll = false, have_of = false, have_ml = false;
  std::uint64_t rep[3] = {1, 4, 8};
  std::array<std::uint8_t, kBlockSizeMax> lit_buf{};

  void reset_frame() {
    have_huf = have_ll = have_of = have_ml = false;
    rep[0] = 1;
    rep[1] = 4;
    rep[2] = 8;
  }
};

// Parses the literals section at the front of `block`; *lits views the
// literals (in the block or in ctx.lit_buf), *used is the section's size.
Status decode_literals(Context& ctx, ByteView block, std::size_t block_max, ByteView* lits, std::size_t* used) {
  if (block.empty()) return corrupt("empty compressed block");
  const std::uint8_t b0 = block[0];
  const unsigned type = b0 & 3u, format = (b0 >> 2) & 3u;
  if (type <= 1) {  // raw or RLE
    std::size_t hsize, regen;
    if ((format & 1u) == 0) {
      hsize = 1;
      regen = b0 >> 3;
    } else if (format == 1) {
      hsize = 2;
      if (block.size() < hsize) return corrupt("truncated literals header");
      regen = (b0 >> 4) + (static_cast<std::size_t>(block[1]) << 4);
    } else {
      hsize = 3;
      if (block.size() < hsize) return corrupt("truncated literals header");
      regen = (b0 >> 4) + (static_cast<std::size_t>(block[1]) << 4) + (static_cast<std::size_t>(block[2]) << 12);
    }
    if (regen > block_max) return corrupt("literals larger than the block maximum");
    if (type == 0) {
      if (block.size() - hsize < regen) return corrupt("truncated raw literals");
      *lits = block.subspan(hsize, regen);
      *used = hsize + regen;
    } else {
      if (block.size() - hsize < 1) return corrupt("truncated RLE literals");
      std::memset(ctx.lit_buf.data(), block[hsize], regen);
      *lits = ByteView(ctx.lit_buf.data(), regen);
      *used = hsize + 1;
    }
    return Status::ok();
  }

  // Huffman-coded (type 2 with a tree, type 3 reusing the previous tree).
  const std::size_t hsize = format <= 1 ? 3 : format == 2 ? 4 : 5;
  const int size_bits = format <= 1 ? 10 : format == 2 ? 14 : 18;
  const std::size_t streams = format == 0 ? 1 : 4;
  if (block.size() < hsize) return corrupt("truncated literals header");
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < hsize; ++i) h |= static_cast<std::uint64_t>(block[i]) << (8 * i);
  const std::size_t regen = static_cast<std::size_t>((h >> 4) & zstd_detail::low_mask(size_bits));
  const std::size_t csize = static_cast<std::size_t>((h >> (4 + size_bits)) & zstd_detail::low_mask(size_bits));
  if (regen > block_max) return corrupt("literals larger than the block maximum");
  if (csize > block.size() - hsize) return corrupt("truncated compressed literals");
  ByteView c = block.subspan(hsize, csize);
  if (type == 2) {
    std::size_t tree = 0;
    ctx.have_huf = false;
    LITHOS_RETURN_IF_ERROR(read_huffman_tree(c, ctx.huf, &tree));
    ctx.have_huf = true;
    c = c.subspan(tree);
  } else if (!ctx.have_huf) {
    return corrupt("treeless literals without a previous Huffman table");
  }
  std::uint8_t* out = ctx.lit_buf.data();
  if (streams == 1) {
    LITHOS_RETURN_IF_ERROR(decode_huffman_stream(ctx.huf, c, out, regen));
  } else {
    if (c.size() < 6) return corrupt("truncated Huffman jump table");
    const std::size_t s1 = c[0] | (static_cast<std::size_t>(c[1]) << 8);
    const std::size_t s2 = c[2] | (static_cast<std::size_t>(c[3]) << 8);
    const std::size_t s3 = c[4] | (static_cast<std::size_t>(c[5]) << 8);
    const std::size_t total = c.size() - 6;
    if (s1 + s2 + s3 > total) return corrupt("bad Huffman jump table");
    const std::size_t s4 = total - s1 - s2 - s3;
    const std::size_t seg = (regen + 3) / 4;
    if (3 * seg > regen) return corrupt("too few literals for four streams");
    const std::size_t last = regen - 3 * seg;
    const ByteView d = c.subspan(6);
    LITHOS_RETURN_IF_ERROR(decode_huffman_stream(ctx.huf, d.subspan(0, s1), out, seg));
    LITHOS_RETURN_IF_ERROR(decode_huffman_stream(ctx.huf, d.subspan(s1, s2), out + seg, seg));
    LITHOS_RETURN_IF_ERROR(decode_huffman_stream(ctx.huf, d.subspan(s1 + s2, s3), out + 2 * seg, seg));
    LITHOS_RETURN_IF_ERROR(decode_huffman_stream(ctx.huf, d.subspan(s1 + s2 + s3, s4), out + 3 * seg, last));
  }
  *lits = ByteView(out, regen);
  *used = hsize + csize;
  return Status::ok();
}

// Reads one sequence table description (mode 0 predefined, 1 RLE, 2 FSE,
// 3 repeat) at src[*pos...].
Status read_seq_table(unsigned mode, ByteView src, std::size_t* pos, FseTable& t, bool& have, const std::int16_t* dflt,
                      std::size_t dflt_n, int dflt_log, int max_log, std::size_t max_symbol) {
  switch (mode) {
    case 0:
      if (!build_fse(t, dflt, dflt_n, dflt_log)) return Status::internal("zstd: bad predefined table");
      break;
    case 1: {
      if (*pos >= src.size()) return corrupt("truncated RLE sequence table");
      const std::uint8_t sym = src[(*pos)++];
      if (sym > max_symbol) return corrupt("RLE sequence symbol out of range");
      build_rle(t, sym);
      break;
    }
    case 2: {
      std::size_t used = 0;
      have = false;
      LITHOS_RETURN_IF_ERROR(read_fse(src.subspan(*pos), max_log, max_symbol, t, &used));
      *pos += used;
      break;
    }
    default:
      if (!have) return corrupt("repeated sequence table without a previous one");
      break;
  }
  have = true;
  return Status::ok();
}

struct Output {
  Bytes& out;
  std::size_t frame_start;  // where the current frame's output begins
  std::size_t limit;        // out may not grow beyond this (frame size or max_output)
  bool limit_is_fcs;        // limit comes from the declared content size
};

Status over_limit(const Output& o, std::size_t block_max, std::size_t want) {
  if (want > block_max) return corrupt("block larger than the block maximum");
  if (o.limit_is_fcs) return corrupt("frame larger than its declared content size");
  return Status::out_of_range("zstd: output larger than the allowed maximum");
}

// Decodes one compressed block, appending its output to o.out.
Status decode_compressed_block(Context& ctx, ByteView block, std::size_t block_max, Output& o) {
  if (block.size() > block_max) return corrupt("compressed block larger than the block maximum");
  ByteView lits;
  std::size_t pos = 0;
  LITHOS_RETURN_IF_ERROR(decode_literals(ctx, block, block_max, &lits, &pos));

  // Sequences section header.
  if (pos >= block.size()) return corrupt("missing sequences section");
  std::size_t nseq = block[pos++];
  if (nseq >= 128) {
    if (nseq < 255) {
      if (pos >= block.size()) return corrupt("truncated sequence count");
      nseq = ((nseq - 128) << 8) + block[pos++];
    } else {
      if (block.size() - pos < 2) return corrupt("truncated sequence count");
      nseq = block[pos] + (static_cast<std::size_t>(block[pos + 1]) << 8) + 0x7F00;
      pos += 2;
    }
  }

  const std::size_t base = o.out.size();
  const std::size_t room = std::min(block_max, o.limit - base);
  if (nseq == 0) {
    if (pos != block.size()) return corrupt("bytes after an empty sequences section");
    if (lits.size() > room) return over_limit(o, block_max, lits.size());
    o.out.insert(o.out.end(), lits.begin(), lits.end());
    return Status::ok();
  }

  if (pos >= block.size()) return corrupt("missing sequence compression modes");
  const std::uint8_t modes = block[pos++];
  if ((modes & 3u) != 0) return corrupt("reserved bits set in sequence compression modes");
  LITHOS_RETURN_IF_ERROR(
      read_seq_table((modes >> 6) & 3u, block, &pos, ctx.ll, ctx.have_ll, kLlDefault, 36, 6, kLlMaxLog, kLlMaxSymbol));
  LITHOS_RETURN_IF_ERROR(
      read_seq_table((modes >> 4) & 3u, block, &pos, ctx.of, ctx.have_of, kOfDefault, 29, 5, kOfMaxLog, kOfMaxSymbol));
  LITHOS_RETURN_IF_ERROR(
      read_seq_table((modes >> 2) & 3u, block, &pos, ctx.ml, ctx.have_ml, kMlDefault, 53, 6, kMlMaxLog, kMlMaxSymbol));

  BackwardBits br;
  if (!br.init(block.subspan(pos))) return corrupt("bad sequences bitstream");
  const FseTable& ll = ctx.ll;
  const FseTable& of = ctx.of;
  const FseTable& ml = ctx.ml;
  std::uint32_t ls = static_cast<std::uint32_t>(br.read(ll.log));
  std::uint32_t os = static_cast<std::uint32_t>(br.read(of.log));
  std::uint32_t ms = static_cast<std::uint32_t>(br.read(ml.log));

  o.out.resize(base + room);
  std::uint8_t* const dst = o.out.data() + base;
  const std::size_t history = base - o.frame_start;  // earlier output of this frame
  const std::uint8_t* lp = lits.data();
  std::size_t lit_left = lits.size();
  std::size_t op = 0;
  std::uint64_t* rep = ctx.rep;

  for (std::size_t i = 0; i < nseq; ++i) {
    const FseEntry le = ll.e[ls], oe = of.e[os], me = ml.e[ms];
    // Extra bits: offset, then match length, then literal length.
    const std::uint32_t ofc = oe.symbol;
    const std::uint64_t ofv = (std::uint64_t{1} << ofc) + br.read(static_cast<int>(ofc));
    const std::size_t mlen = kMlBase[me.symbol] + static_cast<std::size_t>(br.read(kMlBits[me.symbol]));
    const std::size_t llen = kLlBase[le.symbol] + static_cast<std::size_t>(br.read(kLlBits[le.symbol]));

    std::uint64_t offset;
    if (ofv > 3) {
      offset = ofv - 3;
      rep[2] = rep[1];
      rep[1] = rep[0];
      rep[0] = offset;
    } else {
      const std::uint64_t idx = ofv - 1 + (llen == 0 ? 1 : 0);
      if (idx == 0) {
        offset = rep[0];
      } else {
        offset = idx == 3 ? rep[0] - 1 : rep[idx];
        if (idx != 1) rep[2] = rep[1];
        rep[1] = rep[0];
        rep[0] = offset;
      }
    }

    if (i + 1 < nseq) {  // no state update after the last sequence
      ls = le.base + static_cast<std::uint32_t>(br.read(le.bits));
      ms = me.base + static_cast<std::uint32_t>(br.read(me.bits));
      os = oe.base + static_cast<std::uint32_t>(br.read(oe.bits));
    }

    if (llen > lit_left) return corrupt("sequence uses more literals than decoded");
    if (llen + mlen > room - op) return over_limit(o, block_max, op + llen + mlen);
    if (llen != 0) std::memcpy(dst + op, lp, llen);
    lp += llen;
    lit_left -= llen;
    op += llen;
    if (offset == 0 || offset > history + op) return corrupt("match offset before the start of the frame");
    detail::copy_match(dst + op, static_cast<std::size_t>(offset), mlen);
    op += mlen;
  }
  if (!br.done()) return corrupt("sequences bitstream not consumed exactly");
  if (lit_left > room - op) return over_limit(o, block_max, op + lit_left);
  if (lit_left != 0) std::memcpy(dst + op, lp, lit_left);
  op += lit_left;
  o.out.resize(base + op);
  return Status::ok();
}

// Decodes the frame at in[*pos...] (its magic number already checked),
// appending to out.
Status decode_frame(Context& ctx, ByteReader& in, std::size_t* pos, Bytes& out, std::uint64_t max_output) {
  std::size_t p = *pos + 4;
  const std::uint8_t fhd = in.u8(p++);
  if (!in.ok()) return corrupt("truncated frame header");
  const unsigned fcs_flag = fhd >> 6;
  const bool single_segment = (fhd >> 5) & 1u;
  const bool has_checksum = (fhd >> 2) & 1u;
  const unsigned did_flag = fhd & 3u;
  if ((fhd >> 3) & 1u) return corrupt("reserved bit set in frame header");

  std::uint64_t window = 0;
  if (!single_segment) {
    const std::uint8_t wd = in.u8(p++);
    const unsigned exponent = wd >> 3, mantissa = wd & 7u;
    const std::uint64_t wbase = std::uint64_t{1} << (10 + exponent);
    window = wbase + (wbase >> 3) * mantissa;
  }
  std::uint32_t dict_id = 0;
  switch (did_flag) {
    case 1:
      dict_id = in.u8(p);
      p += 1;
      break;
    case 2:
      dict_id = in.u16(p);
      p += 2;
      break;
    case 3:
      dict_id = in.u32(p);
      p += 4;
      break;
    default: break;
  }
  bool has_fcs = true;
  std::uint64_t fcs = 0;
  switch (fcs_flag) {
    case 0:
      if (single_segment) {
        fcs = in.u8(p);
        p += 1;
      } else {
        has_fcs = false;
      }
      break;
    case 1:
      fcs = in.u16(p) + 256u;
      p += 2;
      break;
    case 2:
      fcs = in.u32(p);
      p += 4;
      break;
    default:
      fcs = in.u64(p);
      p += 8;
      break;
  }
  if (!in.ok()) return corrupt("truncated frame header");
  if (dict_id != 0) return Status::invalid_argument("zstd: frames that need a dictionary are not supported");
  if (single_segment) window = fcs;

  const std::size_t frame_start = out.size();
  if (has_fcs && fcs > max_output - frame_start) {
    return Status::out_of_range("zstd: frame content size larger than the allowed maximum");
  }
  const std::size_t block_max = static_cast<std::size_t>(std::min<std::uint64_t>(window, kBlockSizeMax));
  Output o{out, frame_start,
           has_fcs ? frame_start + static_cast<std::size_t>(fcs) : static_cast<std::size_t>(max_output), has_fcs};
  if (has_fcs) out.reserve(frame_start + static_cast<std::size_t>(std::min<std::uint64_t>(fcs, 64u << 20)));
  ctx.reset_frame();

  for (;;) {
    const std::uint32_t bh = static_cast<std::uint32_t>(in.u8(p)) | (static_cast<std::uint32_t>(in.u8(p + 1)) << 8) |
                             (static_cast<std::uint32_t>(in.u8(p + 2)) << 16);
    if (!in.ok()) return corrupt("truncated block header");
    p += 3;
    const bool last = bh & 1u;
    const unsigned type = (bh >> 1) & 3u;
    const std::size_t bsize = bh >> 3;
    const std::size_t room = o.limit - out.size();
    switch (type) {
      case 0: {  // raw
        if (bsize > block_max) return corrupt("raw block larger than the block maximum");
        const ByteView data = in.slice(p, bsize);
        if (!in.ok()) return corrupt("truncated raw block");
        if (bsize > room) return over_limit(o, block_max, bsize);
        out.insert(out.end(), data.begin(), data.end());
        p += bsize;
        break;
      }
      case 1: {  // RLE: one byte repeated bsize times
        if (bsize > block_max) return corrupt("RLE block larger than the block maximum");
        const std::uint8_t b = in.u8(p);
        if (!in.ok()) return corrupt("truncated RLE block");
        if (bsize > room) return over_limit(o, block_max, bsize);
        out.resize(out.size() + bsize, b);
        p += 1;
        break;
      }
      case 2: {
        const ByteView data = in.slice(p, bsize);
        if (!in.ok()) return corrupt("truncated compressed block");
        LITHOS_RETURN_IF_ERROR(decode_compressed_block(ctx, data, block_max, o));
        p += bsize;
        break;
      }
      default: return corrupt("reserved block type");
    }
    if (last) break;
  }

  const std::size_t produced = out.size() - frame_start;
  if (has_fcs && produced != fcs) return corrupt("frame smaller than its declared content size");
  if (has_checksum) {
    const std::uint32_t want = in.u32(p);
    if (!in.ok()) return corrupt("truncated content checksum");
    p += 4;
    const auto got = static_cast<std::uint32_t>(xxh64(ByteView(out.data() + frame_start, produced)));
    if (got != want) return corrupt("content checksum mismatch");
  }
  *pos = p;
  return Status::ok();
}

Result<Bytes> decompress(ByteView input, std::uint64_t max_output) {
  if (input.empty()) return corrupt("empty input");
  auto ctx = std::make_unique<Context>();
  Bytes out;
  ByteReader in(input);
  std::size_t pos = 0;
  while (pos < input.size()) {
    const std::uint32_t magic = in.u32(pos);
    if (!in.ok()) return corrupt("trailing bytes after the last frame");
    if ((magic & 0xFFFFFFF0u) == kSkippableMagic) {
      const std::uint32_t size = in.u32(pos + 4);
      if (!in.ok() || !in.has(pos + 8, size)) return corrupt("truncated skippable frame");
      pos += 8 + static_cast<std::size_t>(size);
      continue;
    }
    if (magic != kFrameMagic)
      return corrupt(pos == 0 ? "not a Zstandard frame" : "trailing bytes after the last frame");
    LITHOS_RETURN_IF_ERROR(decode_frame(*ctx, in, &pos, out, max_output));
  }
  return out;
}

}  // namespace

Result<Bytes> zstd_decompress(ByteView input, std::uint64_t max_output) {
  try {
    return decompress(input, std::min(max_output, std::uint64_t{SIZE_MAX}));
  } catch (const std::bad_alloc&) {
    return Status::out_of_range("zstd: out of memory");
  } catch (...) {
    return Status::internal("zstd: unexpected exception");
  }
}

}  // namespace lithos::cubin
