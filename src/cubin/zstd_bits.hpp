// Bit readers for the Zstandard decoder (zstd.cpp). Private to src/cubin.
//
// Zstandard's entropy-coded streams (Huffman literals, FSE sequences, FSE
// Huffman weights) are written forwards and read backwards: the last byte
// holds a 1 marker above the final bits, and the decoder reads from the top
// of the stream downwards. FSE table descriptions are read forwards, from
// the low bit of the first byte.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cubin/bytes.hpp"

namespace lithos::cubin::zstd_detail {

// Index of the highest set bit of v (v != 0).
inline int highbit(std::uint32_t v) { return 31 - std::countl_zero(v); }

inline std::uint64_t low_mask(int n) { return (std::uint64_t{1} << n) - 1; }  // n <= 63

// Reads a backward bitstream. Bits past the start of the stream read as
// zero and mark the reader as overflowed; done() says whether the stream
// was consumed exactly.
class BackwardBits {
 public:
  // False when the stream is empty or its last byte lacks the end marker.
  bool init(ByteView s) {
    p_ = s.data();
    left_ = s.size();
    c_ = 0;
    avail_ = 0;
    over_ = false;
    if (left_ == 0) return false;
    const std::uint8_t last = p_[left_ - 1];
    if (last == 0) return false;
    refill();
    avail_ -= 8 - highbit(last);  // the zeros above the marker and the marker
    return true;
  }

  // Loads whole bytes until at least 56 bits are held or the stream ends.
  void refill() {
    if (avail_ > 56) return;
    std::size_t k = static_cast<std::size_t>(63 - avail_) >> 3;
    if (k > left_) k = left_;
    if (k == 0) return;
    std::uint64_t v = 0;
    if (left_ >= 8) {
      std::memcpy(&v, p_ + left_ - 8, 8);
      v >>= 64 - 8 * k;
    } else {
      for (std::size_t i = 0; i < k; ++i) v |= static_cast<std::uint64_t>(p_[left_ - k + i]) << (8 * i);
    }
    c_ = (c_ << (8 * k)) | v;
    avail_ += static_cast<int>(8 * k);
    left_ -= k;
  }

  // The next n bits (0 <= n <= 56), consumed.
  std::uint64_t read(int n) {
    if (avail_ < n) {
      refill();
      if (avail_ < n) {
        const std::uint64_t v = (c_ << (n - avail_)) & low_mask(n);
        avail_ = 0;
        over_ = true;
        return v;
      }
    }
    avail_ -= n;
    return (c_ >> avail_) & low_mask(n);
  }

  // The next n bits (1 <= n <= 56) without consuming them; zeros past the
  // start of the stream.
  std::uint64_t peek(int n) {
    if (avail_ < n) refill();
    if (avail_ >= n) return (c_ >> (avail_ - n)) & low_mask(n);
    return (c_ << (n - avail_)) & low_mask(n);
  }
  void skip(int n) {
    if (n > avail_) {
      over_ = true;
      avail_ = 0;
    } else {
      avail_ -= n;
    }
  }

  bool overflowed() const { return over_; }
  // Every bit read, none past the start.
  bool done() const { return left_ == 0 && avail_ == 0 && !over_; }

 private:
  const std::uint8_t* p_ = nullptr;
  std::size_t left_ = 0;  // bytes [0, left_) not yet loaded
  std::uint64_t c_ = 0;   // the low avail_ bits are the next to read, highest first
  int avail_ = 0;
  bool over_ = false;
};

// Reads a forward bitstream (FSE table descriptions); zeros past the end.
class ForwardBits {
 public:
  explicit ForwardBits(ByteView s) : s_(s) {}
  // The next n bits (n <= 24) without consuming them.
  std::uint32_t peek(int n) const {
    const std::size_t byte = pos_ >> 3;
    std::uint64_t w = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      if (byte + i < s_.size()) w |= static_cast<std::uint64_t>(s_[byte + i]) << (8 * i);
    }
    return static_cast<std::uint32_t>((w >> (pos_ & 7)) & low_mask(n));
  }
  void skip(int n) { pos_ += static_cast<std::size_t>(n); }
  std::uint32_t read(int n) {
    const std::uint32_t v = peek(n);
    skip(n);
    return v;
  }
  // Whole bytes touched so far.
  std::size_t bytes_used() const { return (pos_ + 7) >> 3; }

 private:
  ByteView s_;
  std::size_t pos_ = 0;
};

}  // namespace lithos::cubin::zstd_detail
