#include "cubin/fatbin.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "cubin/container_util.hpp"
#include "cubin/decompress.hpp"

namespace lithos::cubin {
namespace {

using detail::align_up;
using detail::hex;

Status bad(const std::string& what) { return Status::invalid_argument("fatbin: " + what); }

// Entry header field offsets.
constexpr std::uint64_t kOffKind = 0x00;
constexpr std::uint64_t kOffVersion = 0x02;
constexpr std::uint64_t kOffHeaderSize = 0x04;
constexpr std::uint64_t kOffPayloadSize = 0x08;
constexpr std::uint64_t kOffCompressedSize = 0x10;
constexpr std::uint64_t kOffOptions = 0x14;
constexpr std::uint64_t kOffMinor = 0x18;
constexpr std::uint64_t kOffMajor = 0x1a;
constexpr std::uint64_t kOffArch = 0x1c;
constexpr std::uint64_t kOffIdentOffset = 0x20;
constexpr std::uint64_t kOffIdentSize = 0x24;
constexpr std::uint64_t kOffFlags = 0x28;
constexpr std::uint64_t kOffReserved = 0x30;
constexpr std::uint64_t kOffUncompressedSize = 0x38;

// A string stored inside an entry header: `size` bytes at `offset`, cut at
// the first NUL; empty when it does not fit.
std::string header_string(const Bytes& header, std::uint64_t offset, std::uint64_t size) {
  if (offset < kFatbinEntryHeaderSize || offset > header.size() || size > header.size() - offset) return {};
  const auto* p = reinterpret_cast<const char*>(header.data() + offset);
  const auto n = static_cast<std::size_t>(size);
  const void* nul = std::memchr(p, 0, n);
  return std::string(p, nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - p) : n);
}

Result<Fatbin> parse_at(ByteView blob, std::uint64_t at, std::uint64_t* end_out) {
  ByteReader r(blob);
  if (!r.has(at, kFatbinHeaderSize)) return bad("truncated header at " + hex(at));
  if (r.u32(at) != kFatbinMagic) return bad("no fatbin magic at " + hex(at));
  Fatbin f;
  f.offset = at;
  f.version = r.u16(at + 4);
  const std::uint64_t hs = r.u16(at + 6);
  const std::uint64_t size = r.u64(at + 8);
  if (hs < kFatbinHeaderSize || !r.has(at, hs)) return bad("header size " + std::to_string(hs));
  const ByteView extra = r.slice(at + kFatbinHeaderSize, hs - kFatbinHeaderSize);
  f.header_extra.assign(extra.begin(), extra.end());
  if (!r.has(at + hs, size)) return bad("entries (" + hex(size) + " bytes) run past the end");
  std::uint64_t o = at + hs;
  const std::uint64_t end = o + size;
  while (o < end) {
    const std::string where = "entry at " + hex(o);
    if (end - o < kFatbinEntryHeaderSize) return bad(where + ": truncated header");
    FatbinEntry e;
    e.offset = o;
    e.kind = r.u16(o + kOffKind);
    e.version = r.u16(o + kOffVersion);
    const std::uint64_t ehs = r.u32(o + kOffHeaderSize);
    const std::uint64_t psize = r.u64(o + kOffPayloadSize);
    e.compressed_size = r.u32(o + kOffCompressedSize);
    e.minor = r.u16(o + kOffMinor);
    e.major = r.u16(o + kOffMajor);
    e.arch = r.u32(o + kOffArch);
    e.flags = r.u64(o + kOffFlags);
    e.reserved = r.u64(o + kOffReserved);
    e.uncompressed_size = r.u64(o + kOffUncompressedSize);
    if (ehs < kFatbinEntryHeaderSize || ehs > end - o) return bad(where + ": header size " + hex(ehs));
    if (psize > end - o - ehs) return bad(where + ": payload (" + hex(psize) + " bytes) runs past the fatbin");
    if (e.is_compressed() && e.compressed_size > psize) {
      return bad(where + ": compressed size " + hex(e.compressed_size) + " exceeds the payload");
    }
    const ByteView h = r.slice(o, ehs);
    e.header.assign(h.begin(), h.end());
    const ByteView p = r.slice(o + ehs, psize);
    e.payload.assign(p.begin(), p.end());
    f.entries.push_back(std::move(e));
    o += ehs + psize;
  }
  if (!r.ok()) return bad("truncated");
  *end_out = end;
  return f;
}

// Reads parts of an image: from a view, or from process memory.
struct ViewSource {
  ByteView view;
  std::optional<ByteView> read(std::uint64_t off, std::uint64_t len) const {
    if (off > view.size() || len > view.size() - off) return std::nullopt;
    return view.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(len));
  }
  // Length of the NUL-terminated text, NUL included.
  std::optional<std::uint64_t> text_size() const {
    if (view.empty()) return std::nullopt;
    const void* nul = std::memchr(view.data(), 0, view.size());
    if (nul == nullptr) return std::nullopt;
    return static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(nul) - view.data()) + 1;
  }
};

struct MemorySource {
  const std::uint8_t* base;
  std::uint64_t limit;
  std::optional<ByteView> read(std::uint64_t off, std::uint64_t len) const {
    if (off > limit || len > limit - off) return std::nullopt;
    return ByteView(base + off, static_cast<std::size_t>(len));
  }
  std::optional<std::uint64_t> text_size() const {
    const std::size_t n = strnlen(reinterpret_cast<const char*>(base), static_cast<std::size_t>(limit));
    if (n >= limit) return std::nullopt;
    return static_cast<std::uint64_t>(n) + 1;
  }
};

template <class Source>
Result<ImageInfo> probe(const Source& src) {
  ImageInfo info;
  const auto head = src.read(0, 4);
  if (!head) {
    // Too short for a magic number: only (tiny) PTX remains possible.
    const auto all = src.text_size();
    if (all && detect_image_kind(*src.read(0, *all - 1)) == ImageKind::kPtx) {
      info.kind = ImageKind::kPtx;
      info.size = *all;
      return info;
    }
    return Status::invalid_argument("image: too short");
  }
  ByteReader h(*head);
  const std::uint32_t magic = h.u32(0);
  if (magic == kFatbinMagic) {
    const auto hdr = src.read(0, kFatbinHeaderSize);
    if (!hdr) return bad("truncated header");
    ByteReader r(*hdr);
    const std::uint64_t hs = r.u16(6), size = r.u64(8);
    if (hs < kFatbinHeaderSize) return bad("header size " + std::to_string(hs));
    if (size > UINT64_MAX - hs || !src.read(0, hs + size)) return bad("runs past the image");
    info.kind = ImageKind::kFatbin;
    info.size = hs + size;
    return info;
  }
  if (magic == kFatbinWrapperMagic) {
    const auto w = src.read(0, kFatbinWrapperSize);
    if (!w) return Status::invalid_argument("fatbin wrapper: truncated");
    auto parsed = parse_fatbin_wrapper(*w);
    if (!parsed.is_ok()) return parsed.status();
    info.kind = ImageKind::kFatbinWrapper;
    info.size = kFatbinWrapperSize;
    info.wrapped = parsed->data;
    return info;
  }
  static constexpr std::uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (std::memcmp(head->data(), kElfMagic, 4) == 0) {
    const auto eh = src.read(0, 64);
    if (!eh) return Status::invalid_argument("cubin: shorter than an ELF header");
    ByteReader r(*eh);
    if (r.u8(4) != 2 || r.u8(5) != 1) return Status::invalid_argument("cubin: not ELF64 little-endian");
    const std::uint64_t phoff = r.u64(32), shoff = r.u64(40);
    const std::uint64_t phentsize = r.u16(54), phnum = r.u16(56), shentsize = r.u16(58), shnum = r.u16(60);
    if ((phnum > 0 && phentsize != 56) || (shnum > 0 && shentsize != 64)) {
      return Status::invalid_argument("cubin: unexpected header table entry size");
    }
    std::uint64_t end = 64;
    auto extend = [&](std::uint64_t off, std::uint64_t len) -> bool {
      if (off > UINT64_MAX - len) return false;
      end = std::max(end, off + len);
      return true;
    };
    if (phnum > 0 && !extend(phoff, phnum * 56)) return Status::invalid_argument("cubin: bad e_phoff");
    if (shnum > 0) {
      if (!extend(shoff, shnum * 64)) return Status::invalid_argument("cubin: bad e_shoff");
      const auto sht = src.read(shoff, shnum * 64);
      if (!sht) return Status::invalid_argument("cubin: section header table runs past the image");
      ByteReader s(*sht);
      for (std::uint64_t i = 0; i < shnum; ++i) {
        const std::uint32_t type = s.u32(i * 64 + 4);
        if (type == 8) continue;  // SHT_NOBITS
        if (!extend(s.u64(i * 64 + 24), s.u64(i * 64 + 32))) {
          return Status::invalid_argument("cubin: section " + std::to_string(i) + " out of range");
        }
      }
    }
    if (!src.read(0, end)) return Status::invalid_argument("cubin: runs past the image");
    info.kind = ImageKind::kElf;
    info.size = end;
    return info;
  }
  const auto len = src.text_size();
  if (len && detect_image_kind(*src.read(0, *len - 1)) == ImageKind::kPtx) {
    info.kind = ImageKind::kPtx;
    info.size = *len;
    return info;
  }
  return Status::invalid_argument("image: not a cubin, fatbin, fatbin wrapper or PTX");
}

bool is_space(std::uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::string FatbinEntry::identifier() const {
  try {
    ByteReader r(header);
    return header_string(header, r.u32(kOffIdentOffset), r.u32(kOffIdentSize));
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

std::string FatbinEntry::options() const {
  try {
    ByteReader r(header);
    const std::uint64_t at = r.u32(kOffOptions);
    if (at < kFatbinEntryHeaderSize || !r.has(at, 8)) return {};
    return header_string(header, r.u32(at), r.u32(at + 4));
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

ByteView FatbinEntry::stored() const {
  if (is_compressed() && compressed_size <= payload.size()) return ByteView(payload).first(compressed_size);
  return payload;
}

Result<Bytes> FatbinEntry::decompress() const {
  return detail::guarded([&]() -> Result<Bytes> {
    const bool lz4 = (flags & fatbin_flags::kCompressedLz4) != 0;
    const bool zstd = (flags & fatbin_flags::kCompressedZstd) != 0;
    if (!lz4 && !zstd) return Bytes(payload);
    if (lz4 && zstd) return bad("entry flagged both LZ4 and Zstandard");
    if (compressed_size > payload.size()) return bad("compressed size exceeds the payload");
    if (uncompressed_size > kMaxDecompressed) return bad("uncompressed size " + hex(uncompressed_size));
    Result<Bytes> out = lz4 ? lz4_block_decompress(stored(), uncompressed_size)
                            : zstd_decompress(stored(), uncompressed_size != 0 ? uncompressed_size : kMaxDecompressed);
    if (!out.is_ok()) return out.status().with_context("fatbin entry");
    if (uncompressed_size != 0 && out->size() != uncompressed_size) {
      return bad("decompressed " + hex(out->size()) + " bytes, header says " + hex(uncompressed_size));
    }
    return out;
  });
}

Status FatbinEntry::set_plain_payload(ByteView image) {
  return detail::guarded([&]() -> Status {
    if (image.size() > kMaxDecompressed) return bad("payload too large");
    payload.assign(image.begin(), image.end());
    if (is_ptx() && (payload.empty() || payload.back() != 0)) payload.push_back(0);
    payload.resize(static_cast<std::size_t>(align_up(payload.size(), 8)), 0);
    flags &= ~fatbin_flags::kCompressed;
    compressed_size = 0;
    uncompressed_size = 0;
    return Status::ok();
  });
}

Result<Fatbin> parse_fatbin(ByteView blob) {
  return detail::guarded([&]() -> Result<Fatbin> {
    std::uint64_t end = 0;
    return parse_at(blob, 0, &end);
  });
}

Result<std::vector<Fatbin>> parse_fatbins(ByteView blob) {
  return detail::guarded([&]() -> Result<std::vector<Fatbin>> {
    std::vector<Fatbin> out;
    std::uint64_t o = 0;
    while (o < blob.size()) {
      while (o < blob.size() && blob[static_cast<std::size_t>(o)] == 0) ++o;
      if (o == blob.size()) break;
      std::uint64_t end = 0;
      auto f = parse_at(blob, o, &end);
      if (!f.is_ok()) return f.status();
      out.push_back(std::move(*f));
      o = end;
    }
    if (out.empty()) return bad("no fatbin in the blob");
    return out;
  });
}

Result<Bytes> write_fatbin(const Fatbin& fatbin) {
  return detail::guarded([&]() -> Result<Bytes> {
    const std::uint64_t hs = kFatbinHeaderSize + fatbin.header_extra.size();
    if (hs > 0xffff) return bad("header too large");
    std::uint64_t size = 0;
    for (const FatbinEntry& e : fatbin.entries) {
      const std::uint64_t ehs = std::max<std::uint64_t>(e.header.size(), kFatbinEntryHeaderSize);
      if (ehs > UINT32_MAX) return bad("entry header too large");
      if (e.payload.size() > kMaxDecompressed) return bad("entry payload too large");
      size += ehs + align_up(e.payload.size(), 8);
    }
    Bytes out;
    out.reserve(static_cast<std::size_t>(hs + size));
    append<std::uint32_t>(out, kFatbinMagic);
    append<std::uint16_t>(out, fatbin.version);
    append<std::uint16_t>(out, static_cast<std::uint16_t>(hs));
    append<std::uint64_t>(out, size);
    out.insert(out.end(), fatbin.header_extra.begin(), fatbin.header_extra.end());
    for (const FatbinEntry& e : fatbin.entries) {
      Bytes h = e.header;
      if (h.size() < kFatbinEntryHeaderSize) h.resize(kFatbinEntryHeaderSize, 0);
      const std::uint64_t psize = align_up(e.payload.size(), 8);
      put<std::uint16_t>(h, kOffKind, e.kind);
      put<std::uint16_t>(h, kOffVersion, e.version);
      put<std::uint32_t>(h, kOffHeaderSize, static_cast<std::uint32_t>(h.size()));
      put<std::uint64_t>(h, kOffPayloadSize, psize);
      put<std::uint32_t>(h, kOffCompressedSize, e.compressed_size);
      put<std::uint16_t>(h, kOffMinor, e.minor);
      put<std::uint16_t>(h, kOffMajor, e.major);
      put<std::uint32_t>(h, kOffArch, e.arch);
      put<std::uint64_t>(h, kOffFlags, e.flags);
      put<std::uint64_t>(h, kOffReserved, e.reserved);
      put<std::uint64_t>(h, kOffUncompressedSize, e.uncompressed_size);
      out.insert(out.end(), h.begin(), h.end());
      out.insert(out.end(), e.payload.begin(), e.payload.end());
      out.resize(static_cast<std::size_t>(out.size() + (psize - e.payload.size())), 0);
    }
    return out;
  });
}

Result<Bytes> write_fatbins(const std::vector<Fatbin>& fatbins) {
  return detail::guarded([&]() -> Result<Bytes> {
    Bytes out;
    for (const Fatbin& f : fatbins) {
      auto one = write_fatbin(f);
      if (!one.is_ok()) return one.status();
      out.insert(out.end(), one->begin(), one->end());
    }
    return out;
  });
}

std::optional<std::size_t> select_entry(const Fatbin& fatbin, unsigned sm) {
  const unsigned major = sm / 10, minor = sm % 10;
  std::optional<std::size_t> exact, exact_specific, compatible, ptx;
  unsigned compatible_arch = 0, ptx_arch = 0;
  for (std::size_t i = 0; i < fatbin.entries.size(); ++i) {
    const FatbinEntry& e = fatbin.entries[i];
    if ((e.flags & fatbin_flags::k64Bit) == 0) continue;
    const unsigned a = e.arch;
    if (e.is_elf()) {
      if (a == sm) {
        if (e.arch_specific()) {
          if (!exact_specific) exact_specific = i;
        } else if (!exact) {
          exact = i;
        }
      } else if (a / 10 == major && a % 10 < minor && !e.arch_specific() && (!compatible || a > compatible_arch)) {
        compatible = i;
        compatible_arch = a;
      }
    } else if (e.is_ptx()) {
      if (a > sm) continue;
      if (e.arch_specific() && a != sm) continue;
      if (e.family_specific() && a / 10 != major) continue;
      if (!ptx || a > ptx_arch) {
        ptx = i;
        ptx_arch = a;
      }
    }
  }
  if (exact_specific) return exact_specific;
  if (exact) return exact;
  if (compatible) return compatible;
  return ptx;
}

Result<FatbinWrapper> parse_fatbin_wrapper(ByteView bytes) {
  return detail::guarded([&]() -> Result<FatbinWrapper> {
    ByteReader r(bytes);
    FatbinWrapper w;
    w.magic = r.u32(0);
    w.version = r.u32(4);
    w.data = r.u64(8);
    w.filename_or_fatbins = r.u64(16);
    if (!r.ok()) return Status::invalid_argument("fatbin wrapper: truncated");
    if (w.magic != kFatbinWrapperMagic) return Status::invalid_argument("fatbin wrapper: bad magic");
    if (w.version != 1 && w.version != 2) {
      return Status::invalid_argument("fatbin wrapper: version " + std::to_string(w.version));
    }
    if (w.data == 0) return Status::invalid_argument("fatbin wrapper: null data pointer");
    return w;
  });
}

const char* image_kind_name(ImageKind kind) {
  switch (kind) {
    case ImageKind::kElf: return "cubin";
    case ImageKind::kFatbin: return "fatbin";
    case ImageKind::kFatbinWrapper: return "fatbin wrapper";
    case ImageKind::kPtx: return "ptx";
    case ImageKind::kUnknown: break;
  }
  return "unknown";
}

ImageKind detect_image_kind(ByteView b) {
  if (b.size() >= 4) {
    ByteReader r(b);
    const std::uint32_t magic = r.u32(0);
    if (magic == kFatbinMagic) return ImageKind::kFatbin;
    if (magic == kFatbinWrapperMagic) return ImageKind::kFatbinWrapper;
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') return ImageKind::kElf;
  }
  // PTX: text whose first token, after whitespace and comments, is a
  // directive (".version"). Running out of bytes after a leading comment
  // still counts (a short prefix of a PTX file); whitespace alone does not.
  std::size_t i = 0;
  bool saw_text = false;
  while (i < b.size()) {
    const std::uint8_t c = b[i];
    if (c == 0) return ImageKind::kUnknown;
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < b.size() && b[i + 1] == '/') {
      i += 2;
      while (i < b.size() && b[i] != '\n') {
        if (b[i] == 0) return ImageKind::kUnknown;
        ++i;
      }
      saw_text = true;
      continue;
    }
    if (c == '/' && i + 1 < b.size() && b[i + 1] == '*') {
      i += 2;
      while (i < b.size() && !(b[i] == '*' && i + 1 < b.size() && b[i + 1] == '/')) {
        if (b[i] == 0) return ImageKind::kUnknown;
        ++i;
      }
      i = std::min(b.size(), i + 2);
      saw_text = true;
      continue;
    }
    if (c == '/' && i + 1 == b.size()) return ImageKind::kPtx;  // cut inside "//"
    return c == '.' ? ImageKind::kPtx : ImageKind::kUnknown;
  }
  return saw_text ? ImageKind::kPtx : ImageKind::kUnknown;
}

Result<ImageInfo> probe_image(ByteView bytes) {
  return detail::guarded([&]() -> Result<ImageInfo> { return probe(ViewSource{bytes}); });
}

Result<ImageInfo> probe_image_in_memory(const void* image, std::uint64_t limit) {
  if (image == nullptr) return Status::invalid_argument("image: null pointer");
  return detail::guarded([&]() -> Result<ImageInfo> {
    return probe(MemorySource{static_cast<const std::uint8_t*>(image), limit});
  });
}

}  // namespace lithos::cubin
