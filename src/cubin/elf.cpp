// The cubin's ELF: a reader that keeps every byte it does not understand,
// and a writer that lays sections and segments out again (docs/cubin-format.md).
// (Over 600 lines: the reader's checks of every header and the writer's
// layout belong together, so that what parses writes back the same.)
#include "cubin/elf.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "cubin/container_util.hpp"

namespace lithos::cubin {
namespace {

using detail::align_up;
using detail::hex;
using detail::is_pow2_or_zero;

constexpr std::uint64_t kEhdrSize = 64;
constexpr std::uint64_t kShdrSize = 64;
constexpr std::uint64_t kPhdrSize = 56;
constexpr std::uint64_t kSymSize = 24;
constexpr std::uint64_t kTableAlign = 8;

Status bad(const std::string& what) { return Status::invalid_argument("cubin: " + what); }

// One thing occupying file bytes (or, when empty, a file position).
struct Placed {
  Cubin::LayoutItem::Kind kind;
  std::uint32_t section;
  std::uint64_t offset;
  std::uint64_t size;  // bytes in the file
  std::uint64_t align;
};

bool covers_section(const ElfSegment& seg, const ElfSection& s, std::uint64_t offset) {
  if ((s.flags & kShfAlloc) == 0) return false;
  const std::uint64_t end = seg.offset + seg.filesz;  // checked against the image size
  if (s.is_nobits()) {
    if (seg.filesz == 0) return offset == seg.offset;
    return seg.memsz > seg.filesz && offset == end;
  }
  const std::uint64_t size = s.data.size();
  if (size == 0) return offset >= seg.offset && offset < end;
  return offset >= seg.offset && offset <= end && size <= end - offset;
}

// Interns `name` in a string table: keeps `hint` when the table already
// holds the name there, else appends it.
Result<std::uint32_t> intern(Bytes& table, const std::string& name, std::uint32_t hint) {
  const std::uint64_t n = name.size();
  if (hint < table.size() && n < table.size() - hint && table[hint + n] == 0 &&
      std::memcmp(table.data() + hint, name.data(), n) == 0) {
    return hint;
  }
  if (name.empty() && !table.empty() && table[0] == 0) return std::uint32_t{0};
  if (table.size() + n + 1 > UINT32_MAX) return bad("string table too large");
  const auto at = static_cast<std::uint32_t>(table.size());
  table.insert(table.end(), name.begin(), name.end());
  table.push_back(0);
  return at;
}

Result<Cubin> parse_impl(ByteView image) {
  ByteReader r(image);
  if (image.size() < kEhdrSize) return bad("shorter than an ELF header");
  static constexpr std::uint8_t kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (std::memcmp(image.data(), kMagic, 4) != 0) return bad("no ELF magic");
  if (image[4] != 2) return bad("not ELF64");
  if (image[5] != 1) return bad("not little-endian");
  if (image[6] != 1) return bad("unknown ELF version");

  Cubin c;
  std::memcpy(c.ident.data(), image.data(), 16);
  c.type = r.u16(16);
  c.machine = r.u16(18);
  c.version = r.u32(20);
  c.entry = r.u64(24);
  const std::uint64_t phoff = r.u64(32);
  const std::uint64_t shoff = r.u64(40);
  c.flags = r.u32(48);
  const std::uint16_t ehsize = r.u16(52);
  c.phentsize = r.u16(54);
  const std::uint16_t phnum = r.u16(56);
  c.shentsize = r.u16(58);
  const std::uint16_t shnum = r.u16(60);
  c.shstrndx = r.u16(62);
  if (!r.ok()) return bad("truncated ELF header");
  if (c.machine != kEmCuda) return bad("e_machine " + std::to_string(c.machine) + " is not EM_CUDA (190)");
  if (ehsize != kEhdrSize) return bad("e_ehsize " + std::to_string(ehsize));
  if (phnum > 0 && c.phentsize != kPhdrSize) return bad("e_phentsize " + std::to_string(c.phentsize));
  if (shnum > 0 && c.shentsize != kShdrSize) return bad("e_shentsize " + std::to_string(c.shentsize));
  if (shnum == 0 && shoff != 0) return bad("extended section numbering is not supported");
  if (shnum >= kShnLoReserve) return bad("too many sections");
  if (shnum == 0 ? c.shstrndx != 0 : c.shstrndx >= shnum) return bad("e_shstrndx out of range");
  if (shnum > 0 && !r.has(shoff, std::uint64_t{shnum} * kShdrSize)) return bad("section header table out of bounds");
  if (phnum > 0 && !r.has(phoff, std::uint64_t{phnum} * kPhdrSize)) return bad("program header table out of bounds");

  // Section headers.
  std::vector<std::uint32_t> name_offsets(shnum);
  std::vector<std::uint64_t> offsets(shnum), sizes(shnum);
  c.sections.resize(shnum);
  for (std::uint32_t i = 0; i < shnum; ++i) {
    const std::uint64_t h = shoff + i * kShdrSize;
    ElfSection& s = c.sections[i];
    name_offsets[i] = r.u32(h);
    s.type = r.u32(h + 4);
    s.flags = r.u64(h + 8);
    s.addr = r.u64(h + 16);
    offsets[i] = r.u64(h + 24);
    sizes[i] = r.u64(h + 32);
    s.link = r.u32(h + 40);
    s.info = r.u32(h + 44);
    s.align = r.u64(h + 48);
    s.entsize = r.u64(h + 56);
    s.file_offset = offsets[i];
    s.name_offset = name_offsets[i];
    const std::string where = "section " + std::to_string(i);
    if (!is_pow2_or_zero(s.align) || s.align > kMaxElfSectionAlign) {
      return bad(where + ": alignment " + hex(s.align));
    }
    if (s.is_nobits()) {
      s.nobits_size = sizes[i];
    } else {
      if (!r.has(offsets[i], sizes[i])) return bad(where + ": contents out of bounds");
      const ByteView d = r.slice(offsets[i], sizes[i]);
      s.data.assign(d.begin(), d.end());
    }
  }
  if (!r.ok()) return bad("truncated section header table");

  // Names.
  if (shnum > 0) {
    const ElfSection& strtab = c.sections[c.shstrndx];
    if (strtab.type != kShtStrtab) return bad("e_shstrndx is not a string table");
    ByteReader names(strtab.data);
    for (std::uint32_t i = 0; i < shnum; ++i) {
      c.sections[i].name = names.cstring(name_offsets[i], strtab.data.size());
      if (!names.ok()) return bad("section " + std::to_string(i) + ": name out of bounds");
    }
  }

  // Nothing with bytes in the file may overlap anything else.
  std::vector<Placed> placed;
  placed.reserve(std::size_t{shnum} + 2);
  for (std::uint32_t i = 0; i < shnum; ++i) {
    const ElfSection& s = c.sections[i];
    if (i == 0 && s.type == kShtNull && s.size() == 0) continue;
    const std::uint64_t in_file = s.is_nobits() ? 0 : s.data.size();
    placed.push_back({Cubin::LayoutItem::kSection, i, offsets[i], in_file, std::max<std::uint64_t>(s.align, 1)});
  }
  if (shnum > 0) placed.push_back({Cubin::LayoutItem::kSectionHeaders, 0, shoff, shnum * kShdrSize, kTableAlign});
  if (phnum > 0) placed.push_back({Cubin::LayoutItem::kProgramHeaders, 0, phoff, phnum * kPhdrSize, kTableAlign});
  // File order; at one offset, empty items first, then by kind and index.
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    return (a.size > 0) < (b.size > 0);
  });
  std::uint64_t cursor = kEhdrSize;
  const Placed* last = nullptr;  // the last item with bytes
  for (const Placed& p : placed) {
    Cubin::LayoutItem item;
    item.kind = p.kind;
    item.section = p.section;
    if (p.size > 0 && last != nullptr && p.kind == Cubin::LayoutItem::kSection &&
        last->kind == Cubin::LayoutItem::kSection && p.offset == last->offset && p.size == last->size) {
      item.placement = Cubin::LayoutItem::kAlias;  // exactly the bytes of another section
      item.extra = last->section;
      c.layout.push_back(std::move(item));
      continue;
    }
    if (p.size > 0 && p.offset < cursor) {
      return bad((p.kind == Cubin::LayoutItem::kSection ? "section " + std::to_string(p.section)
                                                        : std::string("header table")) +
                 " overlaps earlier contents at " + hex(p.offset));
    }
    const std::uint64_t natural = align_up(cursor, p.align);
    if (p.offset < cursor) {
      item.placement = Cubin::LayoutItem::kPinned;  // empty, inside earlier bytes
      item.extra = p.offset;
    } else if (p.offset >= natural) {
      item.placement = Cubin::LayoutItem::kAligned;
      item.extra = p.offset - natural;
    } else {
      item.placement = Cubin::LayoutItem::kUnaligned;
      item.extra = p.offset - cursor;
    }
    if (p.size > 0) {
      const ByteView gap = r.slice(cursor, p.offset - cursor);
      item.gap.assign(gap.begin(), gap.end());
      cursor = p.offset + p.size;
      last = &p;
    }
    c.layout.push_back(std::move(item));
  }
  // The ELF ends with its last section or header table. Bytes after that
  // (an image may be longer) are not part of it: an in-memory image is cut
  // there (probe_image_in_memory) and the writer keeps none of them, so no
  // segment may reach into them. (An empty section may lie there: it has no
  // bytes, and the writer places it at most at the end of its output.)
  const std::uint64_t elf_end = cursor;

  // Symbols.
  for (std::uint32_t i = 0; i < shnum; ++i) {
    if (c.sections[i].type != kShtSymtab) continue;
    c.symtab = i;
    break;
  }
  if (c.symtab != 0) {
    const ElfSection& st = c.sections[c.symtab];
    if (st.entsize != kSymSize) return bad(".symtab entry size " + std::to_string(st.entsize));
    if (st.data.size() % kSymSize != 0) return bad(".symtab size is not a multiple of 24");
    if (st.link >= shnum || st.link == c.symtab || c.sections[st.link].type != kShtStrtab) {
      return bad(".symtab sh_link is not a string table");
    }
    const Bytes& strtab = c.sections[st.link].data;
    ByteReader sr(st.data);
    ByteReader names(strtab);
    const std::uint64_t count = st.data.size() / kSymSize;
    c.symbols.resize(static_cast<std::size_t>(count));
    for (std::uint64_t k = 0; k < count; ++k) {
      ElfSymbol& sym = c.symbols[static_cast<std::size_t>(k)];
      const std::uint64_t o = k * kSymSize;
      sym.name_offset = sr.u32(o);
      sym.info = sr.u8(o + 4);
      sym.other = sr.u8(o + 5);
      sym.shndx = sr.u16(o + 6);
      sym.value = sr.u64(o + 8);
      sym.size = sr.u64(o + 16);
      sym.name = names.cstring(sym.name_offset, strtab.size());
      if (!names.ok()) return bad("symbol " + std::to_string(k) + ": name out of bounds");
      if (sym.shndx == kShnXindex) return bad("symbol " + std::to_string(k) + ": SHN_XINDEX is not supported");
      if (sym.shndx >= shnum && sym.shndx < kShnLoReserve) {
        return bad("symbol " + std::to_string(k) + ": section index " + std::to_string(sym.shndx));
      }
    }
    if (!sr.ok()) return bad("truncated .symtab");
  }

  // Segments and what they cover.
  c.segments.resize(phnum);
  for (std::uint32_t i = 0; i < phnum; ++i) {
    const std::uint64_t h = phoff + i * kPhdrSize;
    ElfSegment& seg = c.segments[i];
    seg.type = r.u32(h);
    seg.flags = r.u32(h + 4);
    seg.offset = r.u64(h + 8);
    seg.vaddr = r.u64(h + 16);
    seg.paddr = r.u64(h + 24);
    seg.filesz = r.u64(h + 32);
    seg.memsz = r.u64(h + 40);
    seg.align = r.u64(h + 48);
    if (!r.ok()) return bad("truncated program header table");
    if (seg.offset > elf_end || seg.filesz > elf_end - seg.offset) {
      return bad("segment " + std::to_string(i) + ": out of bounds (the ELF ends at " + hex(elf_end) + ")");
    }
    if (seg.offset == phoff && seg.filesz == phnum * kPhdrSize) {
      seg.covers_program_headers = true;
      continue;
    }
    for (std::uint32_t k = 1; k < shnum; ++k) {
      if (covers_section(seg, c.sections[k], offsets[k])) seg.sections.push_back(k);
    }
  }
  return c;
}

}  // namespace

Result<Cubin> Cubin::parse(ByteView image) {
  return detail::guarded([&]() -> Result<Cubin> { return parse_impl(image); });
}

Status Cubin::validate_for_write() const {
  if (sections.size() >= kShnLoReserve) return bad("too many sections");
  if (sections.empty() ? shstrndx != 0 : shstrndx >= sections.size()) return bad("e_shstrndx out of range");
  if (!sections.empty() && (sections[shstrndx].type != kShtStrtab)) return bad("e_shstrndx is not a string table");
  if (segments.size() >= 0xffff) return bad("too many segments");
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const ElfSection& s = sections[i];
    if (!is_pow2_or_zero(s.align) || s.align > kMaxElfSectionAlign) {
      return bad("section " + std::to_string(i) + ": alignment " + hex(s.align));
    }
    if (s.is_nobits() && !s.data.empty()) return bad("section " + std::to_string(i) + ": SHT_NOBITS with data");
  }
  if (symtab != 0 || !symbols.empty()) {
    if (symtab == 0 || symtab >= sections.size() || sections[symtab].type != kShtSymtab) {
      return bad("symbols without a .symtab section");
    }
    const ElfSection& st = sections[symtab];
    if (st.link >= sections.size() || st.link == symtab || sections[st.link].type != kShtStrtab) {
      return bad(".symtab sh_link is not a string table");
    }
    for (std::size_t k = 0; k < symbols.size(); ++k) {
      const std::uint16_t ndx = symbols[k].shndx;
      if (ndx == kShnXindex || (ndx >= sections.size() && ndx < kShnLoReserve)) {
        return bad("symbol " + std::to_string(k) + ": section index " + std::to_string(ndx));
      }
    }
  }
  for (std::size_t i = 0; i < segments.size(); ++i) {
    for (std::uint32_t k : segments[i].sections) {
      if (k >= sections.size()) return bad("segment " + std::to_string(i) + ": section index " + std::to_string(k));
    }
  }
  return Status::ok();
}

Result<Bytes> Cubin::write() const {
  return detail::guarded([&]() -> Result<Bytes> {
    LITHOS_RETURN_IF_ERROR(validate_for_write());
    const std::size_t n = sections.size();

    // String tables and the symbol table, rebuilt on copies.
    std::map<std::uint32_t, Bytes> rebuilt;
    auto table = [&](std::uint32_t index) -> Bytes& {
      auto it = rebuilt.find(index);
      if (it == rebuilt.end()) it = rebuilt.emplace(index, sections[index].data).first;
      return it->second;
    };
    std::vector<std::uint32_t> name_offsets(n, 0);
    if (n > 0) {
      Bytes& shstr = table(shstrndx);
      for (std::size_t i = 0; i < n; ++i) {
        auto off = intern(shstr, sections[i].name, sections[i].name_offset);
        if (!off.is_ok()) return off.status();
        name_offsets[i] = *off;
      }
    }
    if (symtab != 0) {
      const std::uint32_t strndx = sections[symtab].link;
      Bytes sym_data(symbols.size() * kSymSize);
      for (std::size_t k = 0; k < symbols.size(); ++k) {
        const ElfSymbol& s = symbols[k];
        auto off = intern(table(strndx), s.name, s.name_offset);
        if (!off.is_ok()) return off.status();
        const std::size_t o = k * kSymSize;
        put<std::uint32_t>(sym_data, o, *off);
        put<std::uint8_t>(sym_data, o + 4, s.info);
        put<std::uint8_t>(sym_data, o + 5, s.other);
        put<std::uint16_t>(sym_data, o + 6, s.shndx);
        put<std::uint64_t>(sym_data, o + 8, s.value);
        put<std::uint64_t>(sym_data, o + 16, s.size);
      }
      rebuilt[symtab] = std::move(sym_data);
    }
    auto contents = [&](std::size_t i) -> const Bytes& {
      auto it = rebuilt.find(static_cast<std::uint32_t>(i));
      return it == rebuilt.end() ? sections[i].data : it->second;
    };

    // File order: the parsed layout, then sections added since, before the
    // section header table.
    std::vector<LayoutItem> items;
    std::vector<bool> seen(n, false);
    bool have_sht = false, have_pht = false;
    for (const LayoutItem& it : layout) {
      if (it.kind == LayoutItem::kSection) {
        if (it.section >= n || seen[it.section]) continue;
        seen[it.section] = true;
      } else if (it.kind == LayoutItem::kSectionHeaders) {
        if (n == 0 || have_sht) continue;
        have_sht = true;
      } else {
        if (segments.empty() || have_pht) continue;
        have_pht = true;
      }
      items.push_back(it);
    }
    auto sht_pos = std::find_if(items.begin(), items.end(),
                                [](const LayoutItem& it) { return it.kind == LayoutItem::kSectionHeaders; });
    std::vector<LayoutItem> added;
    for (std::size_t i = 0; i < n; ++i) {
      if (seen[i]) continue;
      if (i == 0 && sections[0].type == kShtNull && sections[0].size() == 0) continue;
      LayoutItem it;
      it.section = static_cast<std::uint32_t>(i);
      added.push_back(std::move(it));
    }
    sht_pos = items.insert(sht_pos, added.begin(), added.end());
    if (n > 0 && !have_sht) {
      LayoutItem it;
      it.kind = LayoutItem::kSectionHeaders;
      items.push_back(std::move(it));
    }
    if (!segments.empty() && !have_pht) {
      LayoutItem it;
      it.kind = LayoutItem::kProgramHeaders;
      items.push_back(std::move(it));
    }

    // Offsets.
    std::vector<std::uint64_t> offsets(n, 0);
    std::uint64_t shoff = 0, phoff = 0;
    std::uint64_t cursor = kEhdrSize;
    struct GapWrite {
      std::uint64_t at;
      const Bytes* bytes;
    };
    std::vector<GapWrite> gaps;
    std::vector<bool> placed(n, false);
    std::vector<bool> aliased(n, false);  // shares its bytes with an earlier section
    for (const LayoutItem& it : items) {
      std::uint64_t size = 0, align = kTableAlign;
      if (it.kind == LayoutItem::kSection) {
        const ElfSection& s = sections[it.section];
        size = s.is_nobits() ? 0 : contents(it.section).size();
        align = std::max<std::uint64_t>(s.align, 1);
      } else if (it.kind == LayoutItem::kSectionHeaders) {
        size = n * kShdrSize;
      } else {
        size = segments.size() * kPhdrSize;
      }
      if (it.placement == LayoutItem::kAlias && it.kind == LayoutItem::kSection && it.extra < n && placed[it.extra] &&
          !aliased[it.extra] && size > 0 && !sections[it.extra].is_nobits() &&
          contents(it.section) == contents(static_cast<std::size_t>(it.extra))) {
        offsets[it.section] = offsets[it.extra];
        placed[it.section] = aliased[it.section] = true;
        continue;
      }
      std::uint64_t at = 0;
      switch (it.placement) {
        case LayoutItem::kAligned: at = align_up(cursor, align) + it.extra; break;
        case LayoutItem::kUnaligned: at = cursor + it.extra; break;
        case LayoutItem::kPinned: at = size == 0 ? std::min(it.extra, cursor) : align_up(cursor, align); break;
        case LayoutItem::kAlias: at = align_up(cursor, align); break;  // no longer the same bytes
      }
      if (at > kMaxElfImageSize || size > kMaxElfImageSize - at) return bad("image too large");
      if (size > 0) {
        if (at - cursor == it.gap.size() && !it.gap.empty()) gaps.push_back({cursor, &it.gap});
        cursor = at + size;
      }
      if (it.kind == LayoutItem::kSection) {
        offsets[it.section] = at;
        placed[it.section] = true;
      } else if (it.kind == LayoutItem::kSectionHeaders) {
        shoff = at;
      } else {
        phoff = at;
      }
    }
    const std::uint64_t total = cursor;
    // An empty section lies at most at the end of the file (a reader refuses
    // one past it): one placed at its alignment after the last bytes may
    // have come to lie past the end when an edit moved that end.
    for (std::size_t i = 0; i < n; ++i) {
      offsets[i] = std::min(offsets[i], total);
    }

    Bytes out(static_cast<std::size_t>(total), 0);
    std::copy(ident.begin(), ident.end(), out.begin());
    put<std::uint16_t>(out, 16, type);
    put<std::uint16_t>(out, 18, machine);
    put<std::uint32_t>(out, 20, version);
    put<std::uint64_t>(out, 24, entry);
    put<std::uint64_t>(out, 32, phoff);
    put<std::uint64_t>(out, 40, shoff);
    put<std::uint32_t>(out, 48, flags);
    put<std::uint16_t>(out, 52, static_cast<std::uint16_t>(kEhdrSize));
    put<std::uint16_t>(out, 54, segments.empty() ? phentsize : static_cast<std::uint16_t>(kPhdrSize));
    put<std::uint16_t>(out, 56, static_cast<std::uint16_t>(segments.size()));
    put<std::uint16_t>(out, 58, n == 0 ? shentsize : static_cast<std::uint16_t>(kShdrSize));
    put<std::uint16_t>(out, 60, static_cast<std::uint16_t>(n));
    put<std::uint16_t>(out, 62, shstrndx);
    for (const GapWrite& g : gaps) std::memcpy(out.data() + g.at, g.bytes->data(), g.bytes->size());

    // Program headers. A reader (parse) takes a segment's SHT_NOBITS
    // sections to be those that lie at the end of its file bytes (at its
    // offset when it has none), so the writer puts them there and counts in
    // memsz exactly the ones a reader will find there. A segment that
    // covered no section keeps its extent, unless sections have come to lie
    // in it (an edit moved them): then it covers those, as a reader would
    // find. The output parses back to the same segments, and writing that
    // gives the same bytes again.
    struct Extent {
      std::uint64_t off, filesz;
      bool any_file;
    };
    std::vector<std::vector<std::uint32_t>> covered(segments.size());
    std::vector<Extent> extents(segments.size());
    // Sections with bytes set the file extent; empty ones only place a
    // segment that has nothing else.
    auto extent_of = [&](std::size_t i) {
      const ElfSegment& seg = segments[i];
      if (seg.covers_program_headers) return Extent{phoff, segments.size() * kPhdrSize, true};
      if (covered[i].empty()) return Extent{seg.offset, seg.filesz, seg.filesz > 0};
      std::uint64_t lo = UINT64_MAX, hi = 0;
      for (std::uint32_t k : covered[i]) {
        if (sections[k].is_nobits() || contents(k).empty()) continue;
        lo = std::min(lo, offsets[k]);
        hi = std::max(hi, offsets[k] + contents(k).size());
      }
      return hi > 0 ? Extent{lo, hi - lo, true} : Extent{seg.offset, 0, false};
    };
    // SHT_NOBITS sections a segment with bytes covers go to its end (the
    // first such segment's, should several claim one).
    std::vector<bool> anchored(n, false);
    auto anchor = [&](std::size_t i) {
      if (segments[i].covers_program_headers || !extents[i].any_file) return;
      for (std::uint32_t k : covered[i]) {
        if (!sections[k].is_nobits() || anchored[k]) continue;
        offsets[k] = extents[i].off + extents[i].filesz;
        anchored[k] = true;
      }
    };
    for (std::size_t i = 0; i < segments.size(); ++i) {
      covered[i] = segments[i].sections;
      extents[i] = extent_of(i);
      anchor(i);
    }
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const ElfSegment& seg = segments[i];
      if (seg.covers_program_headers || !seg.sections.empty()) continue;
      for (std::uint32_t k = 1; k < n; ++k) {
        if (covers_section(seg, sections[k], offsets[k])) covered[i].push_back(k);
      }
      if (covered[i].empty()) continue;
      extents[i] = extent_of(i);
      anchor(i);
    }
    // Section headers and contents.
    for (std::size_t i = 0; i < n; ++i) {
      const ElfSection& s = sections[i];
      const Bytes& d = contents(i);
      if (!s.is_nobits() && !d.empty()) std::memcpy(out.data() + offsets[i], d.data(), d.size());
      const std::size_t h = static_cast<std::size_t>(shoff + i * kShdrSize);
      put<std::uint32_t>(out, h, name_offsets[i]);
      put<std::uint32_t>(out, h + 4, s.type);
      put<std::uint64_t>(out, h + 8, s.flags);
      put<std::uint64_t>(out, h + 16, s.addr);
      put<std::uint64_t>(out, h + 24, offsets[i]);
      put<std::uint64_t>(out, h + 32, s.is_nobits() ? s.nobits_size : static_cast<std::uint64_t>(d.size()));
      put<std::uint32_t>(out, h + 40, s.link);
      put<std::uint32_t>(out, h + 44, s.info);
      put<std::uint64_t>(out, h + 48, s.align);
      put<std::uint64_t>(out, h + 56, s.entsize);
    }

    // Program headers.
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const ElfSegment& seg = segments[i];
      Extent& e = extents[i];
      std::uint64_t memsz = seg.memsz;
      if (seg.covers_program_headers) {
        memsz = e.filesz;
      } else if (!covered[i].empty()) {
        if (!e.any_file) {  // a segment without file bytes sits at its first empty section
          e.filesz = 0;
          e.off = UINT64_MAX;
          for (std::uint32_t k : covered[i]) e.off = std::min(e.off, offsets[k]);
        }
        // filesz plus SHT_NOBITS sizes at their alignment, in index order:
        // those of its own that lie at its end; and when that makes memsz
        // exceed filesz (or it has no file bytes), a reader takes every
        // allocated SHT_NOBITS section there as covered, so all of them.
        const std::uint64_t end = e.off + e.filesz;
        auto nobits_at_end = [&](std::size_t k) {
          const ElfSection& s = sections[k];
          return s.is_nobits() && (s.flags & kShfAlloc) != 0 && offsets[k] == end;
        };
        auto add = [&](std::uint64_t m, std::size_t k) {
          m = align_up(m, sections[k].align);
          return sections[k].nobits_size > UINT64_MAX - m ? UINT64_MAX : m + sections[k].nobits_size;
        };
        std::uint64_t own = e.filesz;
        for (std::uint32_t k : covered[i]) {
          if (nobits_at_end(k)) own = add(own, k);
        }
        memsz = e.filesz;
        if (!e.any_file || own > e.filesz) {
          for (std::size_t k = 1; k < n; ++k) {
            if (nobits_at_end(k)) memsz = add(memsz, k);
          }
        }
      }
      const std::uint64_t off = e.off, filesz = e.filesz;
      if (off > total || filesz > total - off) {  // a kept extent the file no longer reaches
        return bad("segment " + std::to_string(i) + " covers no section and lies past the end of the file (at " +
                   hex(off) + ", " + hex(filesz) + " bytes; the file ends at " + hex(total) + ")");
      }
      const std::size_t h = static_cast<std::size_t>(phoff + i * kPhdrSize);
      put<std::uint32_t>(out, h, seg.type);
      put<std::uint32_t>(out, h + 4, seg.flags);
      put<std::uint64_t>(out, h + 8, off);
      put<std::uint64_t>(out, h + 16, seg.vaddr);
      put<std::uint64_t>(out, h + 24, seg.paddr);
      put<std::uint64_t>(out, h + 32, filesz);
      put<std::uint64_t>(out, h + 40, memsz);
      put<std::uint64_t>(out, h + 48, seg.align);
    }
    return out;
  });
}

unsigned Cubin::sm_arch() const {
  if (abi_version() >= 8) return (flags >> 8) & 0xff;
  return flags & 0xff;
}

unsigned Cubin::virtual_arch() const {
  if (abi_version() < 8) return (flags >> 16) & 0xff;
  for (const ElfSection& s : sections) {
    if (s.type != kShtNote || s.name != ".note.nv.cuinfo") continue;
    ByteReader r(s.data);
    const std::uint32_t namesz = r.u32(0);
    const std::uint32_t descsz = r.u32(4);
    const std::uint64_t desc = 12 + align_up(namesz, 4);
    if (!r.ok() || descsz < 4) return 0;
    const std::uint16_t v = r.u16(desc + 2);
    return r.ok() ? v : 0;
  }
  return 0;
}

bool Cubin::arch_specific() const {
  for (const ElfSection& s : sections) {
    if (s.type != kShtCudaCompat) continue;
    // Records as in .nv.info: u8 format, u8 attribute, then a u16 value
    // (formats 1-3) or a u16 size and that many bytes (format 4).
    ByteReader r(s.data);
    std::uint64_t o = 0;
    while (r.has(o, 4)) {
      const std::uint8_t fmt = r.u8(o), attr = r.u8(o + 1);
      if (fmt == 4) {
        o += 4 + std::uint64_t{r.u16(o + 2)};
        continue;
      }
      if (fmt == 2 && attr == 9) return r.u8(o + 2) != 0;
      o += 4;
    }
  }
  return false;
}

std::optional<std::uint32_t> Cubin::find_section(std::string_view name) const {
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].name == name) return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

std::optional<std::uint32_t> Cubin::find_symbol(std::string_view name) const {
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].name == name) return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

std::vector<CubinKernel> Cubin::kernels() const {
  try {
    std::vector<CubinKernel> out;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      const ElfSymbol& s = symbols[i];
      if (!s.is_kernel() || s.shndx == kShnUndef || s.shndx >= sections.size()) continue;
      CubinKernel k;
      k.name = s.name;
      k.symbol = static_cast<std::uint32_t>(i);
      k.text = s.shndx;
      const std::string info_name = ".nv.info." + s.name;
      const std::string const_name = ".nv.constant0." + s.name;
      for (std::size_t j = 0; j < sections.size(); ++j) {
        const ElfSection& sec = sections[j];
        if (sec.type == kShtCudaInfo && sec.name == info_name) k.nvinfo = static_cast<std::uint32_t>(j);
        if (sec.name == const_name) k.constant0 = static_cast<std::uint32_t>(j);
      }
      for (std::size_t j = 0; j < sections.size(); ++j) {
        const ElfSection& sec = sections[j];
        if (sec.info != k.text) continue;
        if (!k.nvinfo && sec.type == kShtCudaInfo && (sec.flags & kShfInfoLink) != 0) {
          k.nvinfo = static_cast<std::uint32_t>(j);
        }
        if (!k.constant0 && sec.name.starts_with(".nv.constant0")) k.constant0 = static_cast<std::uint32_t>(j);
      }
      out.push_back(std::move(k));
    }
    return out;
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

std::optional<CubinKernel> Cubin::find_kernel(std::string_view name) const {
  try {
    for (CubinKernel& k : kernels()) {
      if (k.name == name) return std::move(k);
    }
    return std::nullopt;
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

namespace {

// Reads and validates relocation section `i` of `c` (an SHT_REL/SHT_RELA).
Result<ElfRelocationSection> read_relocation_section(const Cubin& c, std::size_t i) {
  const ElfSection& s = c.sections[i];
  const std::string where = "relocation section " + s.name;
  ElfRelocationSection rs;
  rs.section = static_cast<std::uint32_t>(i);
  rs.target = s.info;
  rs.has_addend = s.type == kShtRela;
  const std::uint64_t esize = rs.has_addend ? 24 : 16;
  if (s.entsize != esize) return bad(where + ": entry size " + std::to_string(s.entsize));
  if (s.data.size() % esize != 0) return bad(where + ": size is not a multiple of the entry size");
  if (s.link != c.symtab || c.symtab == 0) return bad(where + ": sh_link is not .symtab");
  if (rs.target == 0 || rs.target >= c.sections.size()) return bad(where + ": target section out of range");
  const ElfSection& target = c.sections[rs.target];
  ByteReader r(s.data);
  for (std::uint64_t o = 0; o < s.data.size(); o += esize) {
    ElfRelocation rel;
    rel.offset = r.u64(o);
    const std::uint64_t info = r.u64(o + 8);
    rel.type = static_cast<std::uint32_t>(info & 0xffffffffu);
    rel.symbol = static_cast<std::uint32_t>(info >> 32);
    rel.addend = rs.has_addend ? static_cast<std::int64_t>(r.u64(o + 16)) : 0;
    if (rel.symbol >= c.symbols.size()) return bad(where + ": symbol index " + std::to_string(rel.symbol));
    if (!target.is_nobits() && rel.offset >= target.data.size()) {
      return bad(where + ": offset " + hex(rel.offset) + " outside " + target.name);
    }
    rs.relocations.push_back(rel);
  }
  return rs;
}

bool is_relocation_section(const ElfSection& s) { return s.type == kShtRel || s.type == kShtRela; }

}  // namespace

Result<std::vector<ElfRelocationSection>> Cubin::relocations() const {
  return detail::guarded([&]() -> Result<std::vector<ElfRelocationSection>> {
    std::vector<ElfRelocationSection> out;
    for (std::size_t i = 0; i < sections.size(); ++i) {
      if (!is_relocation_section(sections[i])) continue;
      auto rs = read_relocation_section(*this, i);
      if (!rs) return rs.status();
      out.push_back(std::move(*rs));
    }
    return out;
  });
}

Result<std::vector<ElfRelocation>> Cubin::relocations_in(std::uint32_t section, std::uint64_t offset,
                                                         std::uint64_t length) const {
  // Only the relocation sections that patch `section` are read: a malformed
  // one elsewhere (seen in cuBLAS's cubins) does not concern it.
  return detail::guarded([&]() -> Result<std::vector<ElfRelocation>> {
    std::vector<ElfRelocation> out;
    for (std::size_t i = 0; i < sections.size(); ++i) {
      if (!is_relocation_section(sections[i]) || sections[i].info != section) continue;
      auto rs = read_relocation_section(*this, i);
      if (!rs) return rs.status();
      for (const ElfRelocation& rel : rs->relocations) {
        if (rel.offset >= offset && rel.offset - offset < length) out.push_back(rel);
      }
    }
    return out;
  });
}

Status Cubin::set_sh_info_regcount(std::uint32_t section, std::uint32_t regcount) {
  return detail::guarded([&]() -> Status {
    if (section >= sections.size()) return bad("section index out of range");
    if (regcount > 0xff) return bad("register count " + std::to_string(regcount) + " does not fit 8 bits");
    ElfSection& s = sections[section];
    s.info = (s.info & 0x00ffffffu) | (regcount << 24);
    return Status::ok();
  });
}

Status Cubin::append_to_section(std::uint32_t section, ByteView bytes) {
  return detail::guarded([&]() -> Status {
    if (section >= sections.size()) return bad("section index out of range");
    ElfSection& s = sections[section];
    if (s.is_nobits()) return bad("cannot append bytes to SHT_NOBITS section " + s.name);
    if (bytes.size() > kMaxElfImageSize || s.data.size() > kMaxElfImageSize - bytes.size()) {
      return bad("section too large");
    }
    s.data.insert(s.data.end(), bytes.begin(), bytes.end());
    return Status::ok();
  });
}

Status Cubin::resize_section(std::uint32_t section, std::uint64_t size) {
  return detail::guarded([&]() -> Status {
    if (section >= sections.size()) return bad("section index out of range");
    if (size > kMaxElfImageSize) return bad("section too large");
    ElfSection& s = sections[section];
    if (s.is_nobits()) {
      s.nobits_size = size;
    } else {
      s.data.resize(static_cast<std::size_t>(size), 0);
    }
    return Status::ok();
  });
}

Result<std::uint32_t> Cubin::add_section(ElfSection section) {
  return detail::guarded([&]() -> Result<std::uint32_t> {
    if (sections.size() + 1 >= kShnLoReserve) return bad("too many sections");
    if (!is_pow2_or_zero(section.align) || section.align > kMaxElfSectionAlign) return bad("bad alignment");
    if (section.is_nobits() && !section.data.empty()) return bad("SHT_NOBITS section with data");
    section.file_offset = 0;
    sections.push_back(std::move(section));
    return static_cast<std::uint32_t>(sections.size() - 1);
  });
}

}  // namespace lithos::cubin
