// The raw LZ4 block format: a run of sequences, each a token byte (literal
// length in the high nibble, match length - 4 in the low one, 15 meaning
// "more length bytes follow, each added, until one is not 255"), the
// literals, and a 2-byte little-endian offset back into the output. The last
// sequence has literals only and ends the block. Written from the format's
// description; every length and offset is checked against the buffers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "cubin/decompress.hpp"
#include "cubin/match_copy.hpp"

namespace lithos::cubin {
namespace {

// Reads an LZ4 length extension at in[*pos...], adding it to *len. False on
// a truncated input or a length beyond `limit`.
bool read_length(const std::uint8_t* in, std::size_t size, std::size_t* pos, std::size_t* len, std::size_t limit) {
  for (;;) {
    if (*pos >= size) return false;
    const std::uint8_t b = in[(*pos)++];
    *len += b;
    if (*len > limit) return false;
    if (b != 255) return true;
  }
}

Result<Bytes> decode(ByteView input, std::size_t out_size) {
  Bytes out(out_size);
  const std::uint8_t* in = input.data();
  const std::size_t in_size = input.size();
  std::uint8_t* dst = out.data();
  std::size_t ip = 0, op = 0;
  if (in_size == 0) {
    if (out_size == 0) return out;
    return Status::invalid_argument("lz4: empty block");
  }
  for (;;) {
    if (ip >= in_size) return Status::invalid_argument("lz4: truncated block (no token)");
    const std::uint8_t token = in[ip++];
    std::size_t lit = token >> 4;
    if (lit == 15 && !read_length(in, in_size, &ip, &lit, out_size)) {
      return Status::invalid_argument("lz4: bad literal length");
    }
    if (lit > in_size - ip) return Status::invalid_argument("lz4: literals run past the end of the block");
    if (lit > out_size - op) return Status::invalid_argument("lz4: output larger than the declared size");
    if (lit != 0) std::memcpy(dst + op, in + ip, lit);
    ip += lit;
    op += lit;
    if (ip == in_size) break;  // the last sequence has no match
    if (in_size - ip < 2) return Status::invalid_argument("lz4: truncated match offset");
    const std::size_t offset = static_cast<std::size_t>(in[ip]) | (static_cast<std::size_t>(in[ip + 1]) << 8);
    ip += 2;
    if (offset == 0) return Status::invalid_argument("lz4: zero match offset");
    if (offset > op) return Status::invalid_argument("lz4: match offset before the start of the output");
    std::size_t len = token & 15u;
    if (len == 15 && !read_length(in, in_size, &ip, &len, out_size)) {
      return Status::invalid_argument("lz4: bad match length");
    }
    len += 4;
    if (len > out_size - op) return Status::invalid_argument("lz4: output larger than the declared size");
    detail::copy_match(dst + op, offset, len);
    op += len;
  }
  if (op != out_size) return Status::invalid_argument("lz4: output smaller than the declared size");
  return out;
}

}  // namespace

Result<Bytes> lz4_block_decompress(ByteView input, std::uint64_t decompressed_size) {
  if (decompressed_size > kMaxDecompressed) return Status::out_of_range("lz4: declared size too large");
  // Each input byte yields at most 255 output bytes (a length extension),
  // so a larger claim cannot be honest: refuse it before allocating.
  if (decompressed_size > (static_cast<std::uint64_t>(input.size()) + 1) * 255 + 16) {
    return Status::invalid_argument("lz4: declared size impossible for the block's length");
  }
  try {
    return decode(input, static_cast<std::size_t>(decompressed_size));
  } catch (const std::bad_alloc&) {
    return Status::out_of_range("lz4: out of memory");
  } catch (...) {
    return Status::internal("lz4: unexpected exception");
  }
}

}  // namespace lithos::cubin
