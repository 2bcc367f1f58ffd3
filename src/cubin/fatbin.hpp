// Fatbins: the containers nvcc puts device code in (docs/cubin-format.md,
// "Fatbin"), the runtime's wrapper around them, and recognising what a
// memory image handed to cuModuleLoadData holds.
//
//   fatbin header (16 bytes)  u32 magic 0xBA55ED50, u16 version (1),
//                             u16 header size (16), u64 size of the entries
//   entries, back to back     each a header (64 bytes or more) and its
//                             payload (padded to 8 bytes)
// Several fatbins may follow one another in one blob (a host object's
// .nv_fatbin section); zero padding between them is skipped.
//
// Entry header (little-endian, offsets in bytes):
//   0x00 u16 kind          1 PTX, 2 ELF (cubin), 8 LTO IR (-dlto)
//   0x02 u16 version       0x0101
//   0x04 u32 header size   0x40; more when an identifier or options follow
//   0x08 u64 payload size  bytes of payload after the header (padded to 8)
//   0x10 u32 compressed    compressed bytes in the payload (0: not compressed)
//   0x14 u32 options       offset in this header of {u32 offset, u32 size} of
//                          an options string (ptxas options for PTX, a
//                          .nv.compat-like blob for sm_100+ ELF); 0: none
//   0x18 u16 minor, u16 major  ELF: code version [1,8]; PTX: ISA [9,0]
//   0x1c u32 arch          SM number (90 = sm_90 / compute_90)
//   0x20 u32 identifier offset, 0x24 u32 identifier size (in this header)
//   0x28 u64 flags         see FatbinFlags
//   0x30 u64 (zero)
//   0x38 u64 uncompressed size (0 when not compressed)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "cubin/bytes.hpp"

namespace lithos::cubin {

inline constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
inline constexpr std::uint32_t kFatbinWrapperMagic = 0x466243B1;
inline constexpr std::uint64_t kFatbinHeaderSize = 16;
inline constexpr std::uint64_t kFatbinEntryHeaderSize = 64;

namespace fatbin_kind {
inline constexpr std::uint16_t kPtx = 1;
inline constexpr std::uint16_t kElf = 2;
inline constexpr std::uint16_t kLtoIr = 8;
}  // namespace fatbin_kind

namespace fatbin_flags {
inline constexpr std::uint64_t k64Bit = 0x1;
inline constexpr std::uint64_t kDebug = 0x2;  // -G
inline constexpr std::uint64_t kHostLinux = 0x10;
inline constexpr std::uint64_t kCompressedLz4 = 0x2000;     // --compress-mode=speed (CUDA 13)
inline constexpr std::uint64_t kCompressedZstd = 0x8000;    // --compress-mode=balance/size/default
inline constexpr std::uint64_t kArchSpecific = 0x100000;    // sm_90a / compute_90a
inline constexpr std::uint64_t kFamilySpecific = 0x200000;  // sm_100f / compute_100f
// Set on sm_100+ ELF entries, which also carry an options blob.
inline constexpr std::uint64_t kSm100Extra = 0x1000000;
inline constexpr std::uint64_t kCompressed = kCompressedLz4 | kCompressedZstd;
}  // namespace fatbin_flags

struct FatbinEntry {
  std::uint16_t kind = fatbin_kind::kElf;
  std::uint16_t version = 0x0101;
  std::uint32_t compressed_size = 0;
  std::uint16_t minor = 0;
  std::uint16_t major = 0;
  std::uint32_t arch = 0;
  std::uint64_t flags = 0;
  std::uint64_t reserved = 0;  // header offset 0x30
  std::uint64_t uncompressed_size = 0;
  // The whole entry header as parsed (at least 64 bytes): write() copies
  // it and overwrites the fields above, so identifier and options travel.
  Bytes header;
  // The payload as stored, padding included (header field 0x08 bytes).
  Bytes payload;
  std::uint64_t offset = 0;  // of the entry header in the parsed blob (informational)

  bool is_ptx() const { return kind == fatbin_kind::kPtx; }
  bool is_elf() const { return kind == fatbin_kind::kElf; }
  bool is_compressed() const { return (flags & fatbin_flags::kCompressed) != 0; }
  bool arch_specific() const { return (flags & fatbin_flags::kArchSpecific) != 0; }
  bool family_specific() const { return (flags & fatbin_flags::kFamilySpecific) != 0; }

  // The identifier (source file name with -G / -lineinfo, or fatbinary
  // --ident) and the options string, from the header; empty when absent.
  std::string identifier() const;
  std::string options() const;

  // The stored payload bytes that hold the (compressed or plain) image:
  // compressed_size bytes when compressed, else the whole payload.
  ByteView stored() const;
  // The plain cubin/PTX: decompressed (LZ4 block or Zstandard, checked
  // against uncompressed_size), or the payload itself.
  Result<Bytes> decompress() const;
  // Replaces the payload with a plain (uncompressed) image: clears the
  // compression flags and sizes; pads with zeros to 8 bytes (PTX gets a
  // terminating NUL when it lacks one).
  Status set_plain_payload(ByteView image);
};

struct Fatbin {
  std::uint16_t version = 1;
  Bytes header_extra;  // header bytes beyond 16, as parsed (none in practice)
  std::vector<FatbinEntry> entries;
  std::uint64_t offset = 0;  // in the parsed blob (informational)
};

// The first fatbin of `blob` (the blob may continue after it).
Result<Fatbin> parse_fatbin(ByteView blob);
// Every fatbin of a blob, back to back, zero padding between them skipped.
Result<std::vector<Fatbin>> parse_fatbins(ByteView blob);
// Serialises with every size recomputed: entry header sizes kept, payload
// size field = payload bytes (padded to 8), fatbin size = sum of entries.
Result<Bytes> write_fatbin(const Fatbin& fatbin);
Result<Bytes> write_fatbins(const std::vector<Fatbin>& fatbins);

// Which entry the driver loads on a device of compute capability `sm`
// (major*10 + minor: 90 for H100, 86 for an RTX 3090):
//   1. an ELF entry whose arch equals sm (preferring an arch-specific "a"
//      build, then file order);
//   2. else an ELF entry of the same major with a lower minor, not
//      arch-specific (SASS runs on later minors of its major), the highest;
//   3. else a PTX entry for the driver to JIT: arch <= sm, and arch == sm
//      when arch-specific, same major when family-specific; the highest.
// LTO IR and entries without the 64-bit flag are never chosen. nullopt if
// nothing fits (the driver would fail with CUDA_ERROR_NO_BINARY_FOR_GPU).
std::optional<std::size_t> select_entry(const Fatbin& fatbin, unsigned sm);

// ---- The runtime's wrapper (__fatBinC_Wrapper_t, 24 bytes) ----
struct FatbinWrapper {
  std::uint32_t magic = kFatbinWrapperMagic;
  std::uint32_t version = 1;  // 1; 2 for prelinked (-rdc) images
  std::uint64_t data = 0;     // address of the fatbin
  std::uint64_t filename_or_fatbins = 0;
};
inline constexpr std::uint64_t kFatbinWrapperSize = 24;
Result<FatbinWrapper> parse_fatbin_wrapper(ByteView bytes);

// ---- What an image is ----
enum class ImageKind : std::uint8_t { kUnknown, kElf, kFatbin, kFatbinWrapper, kPtx };
const char* image_kind_name(ImageKind kind);

// From the first bytes (16 are enough for all but PTX, which is recognised
// as text that starts, after whitespace and comments, with a directive).
ImageKind detect_image_kind(ByteView first_bytes);

struct ImageInfo {
  ImageKind kind = ImageKind::kUnknown;
  // Bytes the image occupies: ELF: the end of the furthest of its header
  // tables and section contents; fatbin: 16 + header size field (the first
  // fatbin); wrapper: 24; PTX: its length including the terminating NUL.
  std::uint64_t size = 0;
  std::uint64_t wrapped = 0;  // wrapper: the address of the fatbin
};

// Kind and size of an image held in `bytes` (which may be longer); errors
// when the headers are malformed or the image runs past the view.
Result<ImageInfo> probe_image(ByteView bytes);
// The same for an image in this process's memory whose size is not known
// (what cuModuleLoadData gets): reads only the headers the size computation
// needs, so the caller must pass a pointer to a real image, as the driver
// requires. Sizes above `limit` are refused.
Result<ImageInfo> probe_image_in_memory(const void* image, std::uint64_t limit = 1ull << 30);

}  // namespace lithos::cubin
