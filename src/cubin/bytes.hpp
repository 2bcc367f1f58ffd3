// Bounds-checked little-endian access to untrusted byte buffers. Every
// parser in cubin/ reads through ByteReader, so malformed input (a fuzzer's,
// or a corrupt image handed to the driver) gives an error, never a read
// outside the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace lithos::cubin {

using Bytes = std::vector<std::uint8_t>;
using ByteView = std::span<const std::uint8_t>;

// Reads little-endian integers at absolute offsets. A read that does not
// fit sets ok() to false and returns 0; callers check ok() once after a
// group of reads.
class ByteReader {
 public:
  explicit ByteReader(ByteView data) : data_(data) {}

  std::size_t size() const { return data_.size(); }
  bool ok() const { return ok_; }
  ByteView data() const { return data_; }

  bool has(std::uint64_t offset, std::uint64_t length) const {
    return offset <= data_.size() && length <= data_.size() - offset;
  }

  template <class T>
  T read(std::uint64_t offset) {
    if (!has(offset, sizeof(T))) {
      ok_ = false;
      return T{};
    }
    T v{};
    std::memcpy(&v, data_.data() + offset, sizeof(T));
    return v;
  }
  std::uint8_t u8(std::uint64_t o) { return read<std::uint8_t>(o); }
  std::uint16_t u16(std::uint64_t o) { return read<std::uint16_t>(o); }
  std::uint32_t u32(std::uint64_t o) { return read<std::uint32_t>(o); }
  std::uint64_t u64(std::uint64_t o) { return read<std::uint64_t>(o); }

  // A sub-view, or an empty view (and ok() false) when it does not fit.
  ByteView slice(std::uint64_t offset, std::uint64_t length) {
    if (!has(offset, length)) {
      ok_ = false;
      return {};
    }
    return data_.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
  }

  // NUL-terminated string starting at offset within [offset, limit); empty
  // and ok() false when no NUL is found before limit or the buffer's end.
  std::string cstring(std::uint64_t offset, std::uint64_t limit) {
    if (limit > data_.size()) limit = data_.size();
    for (std::uint64_t i = offset; i < limit; ++i) {
      if (data_[static_cast<std::size_t>(i)] == 0) {
        return {reinterpret_cast<const char*>(data_.data() + offset), static_cast<std::size_t>(i - offset)};
      }
    }
    ok_ = false;
    return {};
  }

 private:
  ByteView data_;
  bool ok_ = true;
};

// Writes `value` at `offset` (ignored when it does not fit).
template <class T>
void put(Bytes& out, std::size_t offset, T value) {
  if (offset > out.size() || out.size() - offset < sizeof(T)) return;
  std::uint8_t* p = out.data();
  if (p == nullptr) return;
  std::memcpy(p + offset, &value, sizeof(T));
}
template <class T>
void append(Bytes& out, T value) {
  const std::size_t at = out.size();
  out.resize(at + sizeof(T));
  put(out, at, value);
}

}  // namespace lithos::cubin
