// A cubin as an ELF64 model that can be edited and written back.
//
// A cubin is a little-endian ELF64 file for machine EM_CUDA (190). Cubin
// parses one with every offset, size and index checked (fuzzed: malformed
// input gives an error, never an out-of-bounds access), keeps every section's
// bytes, the symbol table and the program headers (with the sections each
// segment covers), and write() serialises it with the layout recomputed:
// sections placed in their original file order at their alignment, the
// section and program header tables rewritten, each segment's offset, filesz
// and memsz recomputed from the sections it covers, .symtab rebuilt from
// `symbols`, e_ident and e_flags kept. An unmodified cubin is written back
// byte for byte (gaps between sections, such as the zero padding ptxas
// leaves after .shstrtab, are kept while the layout around them does not
// change). Layout facts are in docs/cubin-format.md.
//
// Editing is by changing the public fields (section data, symbol sizes,
// sh_info) or with the helpers below; write() validates the result.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "cubin/bytes.hpp"

namespace lithos::cubin {

inline constexpr std::uint16_t kEmCuda = 190;
inline constexpr std::uint16_t kEtRel = 1;   // relocatable (nvcc -rdc=true -cubin)
inline constexpr std::uint16_t kEtExec = 2;  // linked cubin (what the driver loads)

// Section types.
inline constexpr std::uint32_t kShtNull = 0;
inline constexpr std::uint32_t kShtProgbits = 1;
inline constexpr std::uint32_t kShtSymtab = 2;
inline constexpr std::uint32_t kShtStrtab = 3;
inline constexpr std::uint32_t kShtRela = 4;
inline constexpr std::uint32_t kShtNote = 7;
inline constexpr std::uint32_t kShtNobits = 8;
inline constexpr std::uint32_t kShtRel = 9;
inline constexpr std::uint32_t kShtCudaInfo = 0x70000000;       // .nv.info, .nv.info.<kernel>
inline constexpr std::uint32_t kShtCudaCallgraph = 0x70000001;  // .nv.callgraph
inline constexpr std::uint32_t kShtCudaCompat = 0x70000086;     // .nv.compat (CUDA 13)
// In relocatable cubins (ET_REL) memory-space sections keep CUDA types;
// these hold no file bytes (like SHT_NOBITS), the others have contents.
inline constexpr std::uint32_t kShtCudaGlobal = 0x70000007;          // .nv.global
inline constexpr std::uint32_t kShtCudaShared = 0x7000000a;          // .nv.shared.<kernel>
inline constexpr std::uint32_t kShtCudaReservedShared = 0x70000015;  // .nv.merc.nv.shared.reserved.0 (sm_100+)
inline bool section_type_has_no_contents(std::uint32_t type) {
  return type == kShtNobits || type == kShtCudaGlobal || type == kShtCudaShared || type == kShtCudaReservedShared;
}

// Section flags.
inline constexpr std::uint64_t kShfWrite = 0x1;
inline constexpr std::uint64_t kShfAlloc = 0x2;
inline constexpr std::uint64_t kShfExecInstr = 0x4;
inline constexpr std::uint64_t kShfInfoLink = 0x40;

// Symbols.
inline constexpr std::uint8_t kSttNotype = 0;
inline constexpr std::uint8_t kSttObject = 1;
inline constexpr std::uint8_t kSttFunc = 2;
inline constexpr std::uint8_t kSttSection = 3;
inline constexpr std::uint8_t kStbLocal = 0;
inline constexpr std::uint8_t kStbGlobal = 1;
inline constexpr std::uint8_t kStbWeak = 2;
// st_other bit marking a kernel entry point (a __global__ function).
inline constexpr std::uint8_t kStoCudaEntry = 0x10;
inline constexpr std::uint16_t kShnUndef = 0;
inline constexpr std::uint16_t kShnLoReserve = 0xff00;
inline constexpr std::uint16_t kShnXindex = 0xffff;

// Program header types and flags.
inline constexpr std::uint32_t kPtLoad = 1;
inline constexpr std::uint32_t kPtPhdr = 6;
inline constexpr std::uint32_t kPfX = 1;
inline constexpr std::uint32_t kPfW = 2;
inline constexpr std::uint32_t kPfR = 4;

// Limits the parser enforces (a cubin is a few MiB at most).
inline constexpr std::uint64_t kMaxElfSectionAlign = 1u << 16;
inline constexpr std::uint64_t kMaxElfImageSize = 1ull << 30;

struct ElfSection {
  std::string name;
  std::uint32_t type = kShtProgbits;
  std::uint64_t flags = 0;
  std::uint64_t addr = 0;
  std::uint32_t link = 0;
  std::uint32_t info = 0;
  std::uint64_t align = 1;  // sh_addralign: 0 or a power of two
  std::uint64_t entsize = 0;
  Bytes data;                     // the contents; empty for SHT_NOBITS (and alike)
  std::uint64_t nobits_size = 0;  // sh_size of an SHT_NOBITS (or alike) section

  // Where the section lay in the parsed image (informational; write()
  // recomputes every offset). 0 for a section added after parsing.
  std::uint64_t file_offset = 0;
  // Offset of the name in .shstrtab when parsed (a hint, as for symbols).
  std::uint32_t name_offset = 0;

  // SHT_NOBITS, or a CUDA type that likewise occupies no file bytes.
  bool is_nobits() const { return section_type_has_no_contents(type); }
  std::uint64_t size() const { return is_nobits() ? nobits_size : data.size(); }
};

struct ElfSymbol {
  std::string name;
  std::uint64_t value = 0;
  std::uint64_t size = 0;
  std::uint8_t info = 0;  // (bind << 4) | type
  std::uint8_t other = 0;
  std::uint16_t shndx = 0;

  std::uint8_t type() const { return static_cast<std::uint8_t>(info & 0xf); }
  std::uint8_t bind() const { return static_cast<std::uint8_t>(info >> 4); }
  bool is_kernel() const { return type() == kSttFunc && (other & kStoCudaEntry) != 0; }

  // Offset of the name in the string table when parsed (a hint: write()
  // keeps it when the name there is unchanged, else appends the name).
  std::uint32_t name_offset = 0;
};

struct ElfSegment {
  std::uint32_t type = kPtLoad;
  std::uint32_t flags = 0;
  std::uint64_t vaddr = 0;
  std::uint64_t paddr = 0;
  std::uint64_t align = 0;
  // The sections this segment covers (indices into Cubin::sections), in
  // index order: allocated sections whose bytes lie inside [offset,
  // offset+filesz), and allocated SHT_NOBITS sections placed at its end
  // (offset + filesz) when memsz > filesz or the segment has no file bytes.
  std::vector<std::uint32_t> sections;
  // The segment is the program header table itself (PT_PHDR and the LOAD
  // that ptxas emits for it).
  bool covers_program_headers = false;
  // As parsed. write() recomputes them for a segment that covers sections
  // (offset: the first covered section with bytes; filesz: to the end of the
  // last; its SHT_NOBITS sections are placed at that end; memsz: filesz plus
  // the SHT_NOBITS sizes there, summed in index order at their alignment; a
  // segment without file bytes sits at its first empty section) or the
  // program header table, and keeps them otherwise, unless an edit moved
  // sections into the kept extent: then it covers those, as a reader of the
  // output finds; write() fails if an edit shrank the file under a kept
  // extent. What write() gives parses back to the same segments: writing it
  // again gives the same bytes.
  std::uint64_t offset = 0;
  std::uint64_t filesz = 0;
  std::uint64_t memsz = 0;
};

struct ElfRelocation {
  std::uint64_t offset = 0;  // in the target section
  std::uint32_t type = 0;    // R_CUDA_* (ELF64_R_TYPE)
  std::uint32_t symbol = 0;  // index into Cubin::symbols (ELF64_R_SYM)
  std::int64_t addend = 0;   // 0 for SHT_REL
};

struct ElfRelocationSection {
  std::uint32_t section = 0;  // the SHT_REL/SHT_RELA section itself
  std::uint32_t target = 0;   // the section it patches (sh_info)
  bool has_addend = false;    // SHT_RELA
  std::vector<ElfRelocation> relocations;
};

struct CubinKernel {
  std::string name;
  std::uint32_t symbol = 0;                // index into Cubin::symbols
  std::uint32_t text = 0;                  // its .text.<name> section (st_shndx)
  std::optional<std::uint32_t> nvinfo;     // .nv.info.<name>
  std::optional<std::uint32_t> constant0;  // .nv.constant0.<name>
};

class Cubin {
 public:
  // Parses and validates an ELF64 little-endian EM_CUDA image. `image` may
  // be longer than the ELF (trailing bytes are ignored); the ELF ends with
  // its last section or header table, and a segment reaching past that end
  // is refused.
  static Result<Cubin> parse(ByteView image);

  // Serialises with the layout recomputed (see the top of this file).
  Result<Bytes> write() const;

  // ---- ELF header (kept as parsed) ----
  std::array<std::uint8_t, 16> ident{};
  std::uint16_t type = kEtExec;
  std::uint16_t machine = kEmCuda;
  std::uint32_t version = 1;
  std::uint64_t entry = 0;
  std::uint32_t flags = 0;  // e_flags
  std::uint16_t shstrndx = 0;
  // e_phentsize/e_shentsize written when there are no program headers or no
  // sections (otherwise they must be 56 and 64).
  std::uint16_t phentsize = 56;
  std::uint16_t shentsize = 64;

  std::vector<ElfSection> sections;  // index 0 is the null section
  // The symbols of `symtab` (entry 0 included). write() rebuilds that
  // section's contents from this vector.
  std::vector<ElfSymbol> symbols;
  std::uint32_t symtab = 0;  // index of the SHT_SYMTAB section, 0 if none
  std::vector<ElfSegment> segments;

  // ---- Architecture (docs/cubin-format.md, "e_flags") ----
  std::uint8_t abi_version() const { return ident[8]; }
  // The real SM (90 for sm_90 and sm_90a): e_flags bits 8..15 in the
  // CUDA 12.8+/13 ABI (EI_ABIVERSION 8), bits 0..7 before (ABI 7).
  unsigned sm_arch() const;
  // The virtual architecture the code was compiled from (compute_XX): from
  // .note.nv.cuinfo in ABI 8, e_flags bits 16..23 in ABI 7; 0 if unknown.
  unsigned virtual_arch() const;
  // Arch-specific code (sm_90a): .nv.compat attribute 9 is 1.
  bool arch_specific() const;

  // ---- Lookups ----
  std::optional<std::uint32_t> find_section(std::string_view name) const;
  std::optional<std::uint32_t> find_symbol(std::string_view name) const;
  // Kernels: STT_FUNC symbols with STO_CUDA_ENTRY in st_other, defined in a
  // section; in symbol order.
  std::vector<CubinKernel> kernels() const;
  std::optional<CubinKernel> find_kernel(std::string_view name) const;
  // Every SHT_REL/SHT_RELA section, validated (symbol and target indices,
  // offsets inside the target section unless it is SHT_NOBITS).
  Result<std::vector<ElfRelocationSection>> relocations() const;
  // Relocations that patch bytes [offset, offset + length) of `section`;
  // only the relocation sections targeting `section` are read and validated.
  Result<std::vector<ElfRelocation>> relocations_in(std::uint32_t section, std::uint64_t offset,
                                                    std::uint64_t length) const;

  // ---- Register count in a text section's sh_info ----
  // Toolkits put the register count in bits 24..31 of sh_info of
  // .text.<kernel> (bits 0..23: the kernel's symbol index). CUDA 13 does so
  // up to sm_89; for sm_90 and later it writes 0 there and the count is only
  // in .nv.info (EIATTR_REGCOUNT; see nvinfo.hpp).
  static std::uint32_t sh_info_regcount(std::uint32_t sh_info) { return sh_info >> 24; }
  Status set_sh_info_regcount(std::uint32_t section, std::uint32_t regcount);

  // ---- Edits ----
  // Appends bytes to a section (not SHT_NOBITS).
  Status append_to_section(std::uint32_t section, ByteView bytes);
  // Resizes a section: zero-fills when growing (SHT_NOBITS: sets its size).
  Status resize_section(std::uint32_t section, std::uint64_t size);
  // Adds a section at the end of the section table (placed in the file
  // after every existing section); returns its index.
  Result<std::uint32_t> add_section(ElfSection section);

  // ---- Layout the writer keeps (not meant to be edited) ----
  // Items of the file after the ELF header in their original order, and
  // where each lay relative to the end of the previous one: placed at its
  // alignment plus `extra` bytes (kAligned), `extra` bytes after the previous
  // end ignoring its alignment (kUnaligned: the input was misaligned), or, for
  // an empty item that lay inside earlier bytes, at offset `extra` as long as
  // that is not past the new end (kPinned), or sharing the bytes of section
  // `extra` (kAlias: sm_100+ cubins give a .nv.merc.* clone exactly the
  // bytes of the section it clones; kept while both still hold the same
  // contents, placed on its own otherwise). `gap` holds the original bytes
  // between the previous end and the item; they are written again while the
  // gap keeps its length, zeros otherwise.
  struct LayoutItem {
    enum Kind : std::uint8_t { kSection, kSectionHeaders, kProgramHeaders };
    enum Placement : std::uint8_t { kAligned, kUnaligned, kPinned, kAlias };
    Kind kind = kSection;
    Placement placement = kAligned;
    std::uint32_t section = 0;
    std::uint64_t extra = 0;
    Bytes gap;
  };
  std::vector<LayoutItem> layout;

 private:
  Status validate_for_write() const;
};

}  // namespace lithos::cubin
