// Tests of the container readers and writers: fatbins (fatbin.hpp), the
// cubin ELF model (elf.hpp) and .nv.info attributes (nvinfo.hpp), on
// fixtures nvcc compiles at build time (tests/cubin/container.cmake) and on
// hand-made malformed inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cubin/elf.hpp"
#include "cubin/fatbin.hpp"
#include "cubin/nvinfo.hpp"

namespace lithos::cubin {
namespace {

#ifdef LITHOS_CUBIN_FIXTURES
constexpr const char* kFixtures = LITHOS_CUBIN_FIXTURES;
#else
constexpr const char* kFixtures = nullptr;
#endif

#define REQUIRE_FIXTURES() \
  if (kFixtures == nullptr) GTEST_SKIP() << "no nvcc: fixtures were not compiled"

Bytes read_fixture(const std::string& name) {
  std::ifstream f(std::string(kFixtures) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read fixture " << name;
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

const std::vector<std::string> kCubins = {
    "kernels.sm90.cubin", "coop.sm90.cubin", "cluster.sm90.cubin",     "misc.sm90.cubin",       "kernels.sm80.cubin",
    "coop.sm80.cubin",    "misc.sm80.cubin", "kernels.rdc.sm90.cubin", "coop.debug.sm90.cubin", "kernels.sm100.cubin"};

unsigned sm_of(const std::string& name) {
  if (name.find("sm100") != std::string::npos) return 100;
  return name.find("sm80") != std::string::npos ? 80 : 90;
}
const std::vector<std::string> kFatbins = {"kernels.plain.fatbin",   "kernels.zstd.fatbin", "kernels.lz4.fatbin",
                                           "kernels.balance.fatbin", "coop.debug.fatbin",   "coop.plain.fatbin",
                                           "coop.zstd.fatbin",       "coop.lz4.fatbin"};

Cubin parse_ok(ByteView bytes) {
  auto c = Cubin::parse(bytes);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return c.is_ok() ? std::move(*c) : Cubin{};
}

Bytes trim_zeros(Bytes b) {
  while (!b.empty() && b.back() == 0) b.pop_back();
  return b;
}

// e_phoff / e_shoff and the raw section offsets of a written image.
struct RawLayout {
  std::uint64_t phoff = 0, shoff = 0;
  std::vector<std::uint64_t> offsets;
};
RawLayout raw_layout(const Bytes& image) {
  RawLayout l;
  ByteReader r(image);
  l.phoff = r.u64(32);
  l.shoff = r.u64(40);
  const std::uint16_t shnum = r.u16(60);
  for (std::uint16_t i = 0; i < shnum; ++i) l.offsets.push_back(r.u64(l.shoff + i * 64u + 24));
  return l;
}

// ---------------------------------------------------------------------------
// Parsing and byte-identical round trips of every fixture.

TEST(CubinContainer, ParsesEveryCubinFixture) {
  REQUIRE_FIXTURES();
  for (const std::string& name : kCubins) {
    SCOPED_TRACE(name);
    const Bytes bytes = read_fixture(name);
    const Cubin c = parse_ok(bytes);
    EXPECT_EQ(c.machine, kEmCuda);
    EXPECT_EQ(c.abi_version(), 8);
    EXPECT_EQ(c.sm_arch(), sm_of(name));
    EXPECT_EQ(c.virtual_arch(), c.sm_arch());
    EXPECT_FALSE(c.arch_specific());
    EXPECT_EQ(c.type, name.find("rdc") != std::string::npos ? kEtRel : kEtExec);
    EXPECT_NE(c.symtab, 0u);
    const auto kernels = c.kernels();
    EXPECT_FALSE(kernels.empty());
    for (const CubinKernel& k : kernels) {
      SCOPED_TRACE(k.name);
      EXPECT_EQ(c.sections[k.text].name, ".text." + k.name);
      ASSERT_TRUE(k.nvinfo.has_value());
      EXPECT_EQ(c.sections[*k.nvinfo].info, k.text);
      ASSERT_TRUE(k.constant0.has_value());
      EXPECT_EQ(c.sections[*k.constant0].name, ".nv.constant0." + k.name);
      if (c.type == kEtExec) {
        EXPECT_EQ(c.symbols[k.symbol].size, c.sections[k.text].size());
      }
    }
    for (std::uint32_t i = 0; i < c.sections.size(); ++i) {
      if (c.sections[i].type != kShtCudaInfo && c.sections[i].type != kShtCudaCompat) continue;
      auto info = read_nvinfo(c, i);
      EXPECT_TRUE(info.is_ok()) << c.sections[i].name << ": " << info.status().to_string();
    }
    auto rel = c.relocations();
    EXPECT_TRUE(rel.is_ok()) << rel.status().to_string();
  }
}

TEST(CubinContainer, CubinRoundTripIsByteIdentical) {
  REQUIRE_FIXTURES();
  for (const std::string& name : kCubins) {
    SCOPED_TRACE(name);
    const Bytes bytes = read_fixture(name);
    const Cubin c = parse_ok(bytes);
    auto out = c.write();
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(out->size(), bytes.size());
    EXPECT_TRUE(*out == bytes);
    // And the model parses back the same.
    const Cubin again = parse_ok(*out);
    ASSERT_EQ(again.sections.size(), c.sections.size());
    for (std::size_t i = 0; i < c.sections.size(); ++i) {
      EXPECT_EQ(again.sections[i].name, c.sections[i].name);
      EXPECT_EQ(again.sections[i].data, c.sections[i].data);
      EXPECT_EQ(again.sections[i].flags, c.sections[i].flags);
    }
    ASSERT_EQ(again.segments.size(), c.segments.size());
    for (std::size_t i = 0; i < c.segments.size(); ++i) {
      EXPECT_EQ(again.segments[i].sections, c.segments[i].sections);
      EXPECT_EQ(again.segments[i].covers_program_headers, c.segments[i].covers_program_headers);
    }
  }
}

TEST(CubinContainer, NvInfoRoundTripIsByteIdentical) {
  REQUIRE_FIXTURES();
  for (const std::string& name : kCubins) {
    SCOPED_TRACE(name);
    const Cubin c = parse_ok(read_fixture(name));
    for (const ElfSection& s : c.sections) {
      if (s.type != kShtCudaInfo && s.type != kShtCudaCompat) continue;
      auto info = parse_nvinfo(s.data);
      ASSERT_TRUE(info.is_ok()) << s.name;
      auto out = write_nvinfo(*info);
      ASSERT_TRUE(out.is_ok());
      EXPECT_EQ(*out, s.data) << s.name;
    }
  }
}

TEST(FatbinContainer, ParsesEveryFatbinFixture) {
  REQUIRE_FIXTURES();
  for (const std::string& name : kFatbins) {
    SCOPED_TRACE(name);
    const Bytes bytes = read_fixture(name);
    auto fbs = parse_fatbins(bytes);
    ASSERT_TRUE(fbs.is_ok()) << fbs.status().to_string();
    ASSERT_EQ(fbs->size(), 1u);
    const Fatbin& fb = fbs->front();
    EXPECT_EQ(fb.version, 1);
    for (const FatbinEntry& e : fb.entries) {
      EXPECT_NE(e.flags & fatbin_flags::k64Bit, 0u);
      EXPECT_NE(e.flags & fatbin_flags::kHostLinux, 0u);
      EXPECT_EQ(e.payload.size() % 8, 0u);
      auto plain = e.decompress();
      ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
      if (e.is_elf()) {
        const Cubin c = parse_ok(*plain);
        EXPECT_EQ(c.sm_arch(), e.arch);
        EXPECT_EQ(e.major, 1);
        EXPECT_EQ(e.minor, 8);
      } else {
        ASSERT_TRUE(e.is_ptx());
        EXPECT_EQ(detect_image_kind(*plain), ImageKind::kPtx);
        EXPECT_EQ(e.major, 9);  // PTX ISA 9.0
      }
    }
    if (name == "coop.debug.fatbin") {
      ASSERT_EQ(fb.entries.size(), 1u);
      EXPECT_NE(fb.entries[0].flags & fatbin_flags::kDebug, 0u);
      EXPECT_NE(fb.entries[0].identifier().find("coop.cu"), std::string::npos);
      continue;
    }
    // -gencode sm_80, sm_90 and compute_90: in nvcc's order.
    ASSERT_EQ(fb.entries.size(), 3u);
    EXPECT_TRUE(fb.entries[0].is_elf());
    EXPECT_EQ(fb.entries[0].arch, 80u);
    EXPECT_TRUE(fb.entries[1].is_ptx());
    EXPECT_EQ(fb.entries[1].arch, 90u);
    EXPECT_TRUE(fb.entries[2].is_elf());
    EXPECT_EQ(fb.entries[2].arch, 90u);
    const bool zstd = name.find("zstd") != std::string::npos, lz4 = name.find("lz4") != std::string::npos;
    for (const FatbinEntry& e : fb.entries) {
      EXPECT_EQ((e.flags & fatbin_flags::kCompressedZstd) != 0,
                zstd || (name.find("balance") != std::string::npos && e.is_ptx()));
      EXPECT_EQ((e.flags & fatbin_flags::kCompressedLz4) != 0, lz4);
      if (e.is_compressed()) {
        EXPECT_GT(e.compressed_size, 0u);
        EXPECT_GT(e.uncompressed_size, 0u);
        EXPECT_LE(e.compressed_size, e.payload.size());
      } else {
        EXPECT_EQ(e.compressed_size, 0u);
        EXPECT_EQ(e.uncompressed_size, 0u);
      }
    }
  }
}

TEST(FatbinContainer, RoundTripIsByteIdentical) {
  REQUIRE_FIXTURES();
  for (const std::string& name : kFatbins) {
    SCOPED_TRACE(name);
    const Bytes bytes = read_fixture(name);
    auto fbs = parse_fatbins(bytes);
    ASSERT_TRUE(fbs.is_ok());
    auto out = write_fatbins(*fbs);
    ASSERT_TRUE(out.is_ok());
    EXPECT_TRUE(*out == bytes);
  }
}

TEST(FatbinContainer, CompressedEntriesDecompressToThePlainOnes) {
  REQUIRE_FIXTURES();
  for (const std::string& base : {std::string("kernels"), std::string("coop")}) {
    auto plain = parse_fatbin(read_fixture(base + ".plain.fatbin"));
    ASSERT_TRUE(plain.is_ok());
    for (const std::string& mode : {std::string("zstd"), std::string("lz4"), std::string("balance")}) {
      if (base == "coop" && mode == "balance") continue;
      SCOPED_TRACE(base + "." + mode);
      auto packed = parse_fatbin(read_fixture(base + "." + mode + ".fatbin"));
      ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
      ASSERT_EQ(packed->entries.size(), plain->entries.size());
      std::size_t compressed = 0;
      for (std::size_t i = 0; i < plain->entries.size(); ++i) {
        const FatbinEntry& a = plain->entries[i];
        const FatbinEntry& b = packed->entries[i];
        EXPECT_EQ(a.kind, b.kind);
        EXPECT_EQ(a.arch, b.arch);
        if (b.is_compressed()) ++compressed;
        auto da = a.decompress();
        auto db = b.decompress();
        ASSERT_TRUE(da.is_ok()) << da.status().to_string();
        ASSERT_TRUE(db.is_ok()) << db.status().to_string();
        // Plain payloads are padded to 8 bytes; compressed ones record the
        // exact size. The images themselves are equal.
        EXPECT_TRUE(trim_zeros(*da) == trim_zeros(*db)) << "entry " << i;
        if (a.is_elf()) {
          auto ia = probe_image(*da), ib = probe_image(*db);
          ASSERT_TRUE(ia.is_ok() && ib.is_ok());
          EXPECT_EQ(ia->size, ib->size);
        }
      }
      EXPECT_GT(compressed, 0u);
    }
  }
}

// ---------------------------------------------------------------------------
// What the atomizer reads.

TEST(CubinContainer, KernelsOfTheMainFixture) {
  REQUIRE_FIXTURES();
  const Cubin c = parse_ok(read_fixture("kernels.sm90.cubin"));
  std::set<std::string> names;
  for (const CubinKernel& k : c.kernels()) names.insert(k.name);
  const std::set<std::string> expected = {"saxpy",
                                          "transpose2d",
                                          "fill3d",
                                          "reduce_dyn",
                                          "stencil_static",
                                          "many_params",
                                          "calls_device",
                                          "bounded",
                                          "_Z7scale_tIfEvPT_S0_i",
                                          "_Z7scale_tIdEvPT_S0_i",
                                          "no_params"};
  EXPECT_EQ(names, expected);
  // The non-inlined device function lives inside its caller's text and is
  // not an entry.
  const auto poly = c.find_symbol("$calls_device$_Z4polyfi");
  ASSERT_TRUE(poly.has_value());
  EXPECT_EQ(c.symbols[*poly].type(), kSttFunc);
  EXPECT_FALSE(c.symbols[*poly].is_kernel());
  EXPECT_EQ(c.sections[c.symbols[*poly].shndx].name, ".text.calls_device");
  // On sm_90 the text section's sh_info is the symbol index alone.
  for (const CubinKernel& k : c.kernels()) {
    EXPECT_EQ(c.sections[k.text].info, k.symbol) << k.name;
    EXPECT_EQ(c.sections[k.text].align, 128u);
    EXPECT_EQ(c.sections[k.text].flags, kShfAlloc | kShfExecInstr);
  }
}

TEST(CubinContainer, ParameterLayoutOfManyParams) {
  REQUIRE_FIXTURES();
  struct Expect {
    std::uint16_t offset, size;
  };
  // char, short, int, long long, float, double, Params (32 bytes, align 8),
  // two pointers, unsigned char, float2, Double4 (32 bytes, align 16).
  const std::vector<Expect> expected = {{0x00, 1},  {0x02, 2}, {0x04, 4}, {0x08, 8}, {0x10, 4}, {0x18, 8},
                                        {0x20, 32}, {0x40, 8}, {0x48, 8}, {0x50, 1}, {0x58, 8}, {0x60, 32}};
  for (const auto& [file, cbank_offset] : {std::pair<std::string, std::uint16_t>{"kernels.sm90.cubin", 0x210},
                                           std::pair<std::string, std::uint16_t>{"kernels.sm80.cubin", 0x160}}) {
    SCOPED_TRACE(file);
    const Cubin c = parse_ok(read_fixture(file));
    const auto k = c.find_kernel("many_params");
    ASSERT_TRUE(k.has_value());
    auto info = read_nvinfo(c, *k->nvinfo);
    ASSERT_TRUE(info.is_ok());
    auto params = info->kparams();
    ASSERT_TRUE(params.is_ok());
    ASSERT_EQ(params->size(), expected.size());
    for (std::size_t i = 0; i < params->size(); ++i) {
      const KParamInfo& p = (*params)[i];
      const std::size_t ordinal = expected.size() - 1 - i;  // descending order
      EXPECT_EQ(p.ordinal, ordinal);
      EXPECT_EQ(p.offset, expected[ordinal].offset) << "param " << ordinal;
      EXPECT_EQ(p.size, expected[ordinal].size) << "param " << ordinal;
      EXPECT_EQ(p.index, 0u);
      EXPECT_EQ(p.cbank, 0x1f);
      EXPECT_EQ(p.space, 0);
      EXPECT_FALSE(p.smem_space);
      EXPECT_EQ(KParamInfo::decode(p.index, p.ordinal | (std::uint32_t{p.offset} << 16), p.flags_word()), p);
    }
    auto cb = info->param_cbank();
    ASSERT_TRUE(cb.is_ok() && cb->has_value());
    EXPECT_EQ((*cb)->offset, cbank_offset);
    EXPECT_EQ((*cb)->size, 0x80);
    EXPECT_EQ(c.symbols[(*cb)->symbol].name, ".nv.constant0.many_params");
    EXPECT_EQ(c.symbols[(*cb)->symbol].type(), kSttSection);
    EXPECT_EQ(info->cbank_param_size(), 0x80);
    // .nv.constant0.<kernel>: the driver's area, then the parameters.
    EXPECT_EQ(c.sections[*k->constant0].size(), std::uint64_t{cbank_offset} + 0x80);
    EXPECT_EQ(info->exit_instr_offsets().size(), 1u);
  }
}

TEST(CubinContainer, LaunchAttributes) {
  REQUIRE_FIXTURES();
  const Cubin coop = parse_ok(read_fixture("coop.sm90.cubin"));
  for (const char* name : {"coop_sum", "coop_tile"}) {
    const auto k = coop.find_kernel(name);
    ASSERT_TRUE(k.has_value());
    auto info = read_nvinfo(coop, *k->nvinfo);
    ASSERT_TRUE(info.is_ok());
    EXPECT_TRUE(info->uses_cooperative_groups()) << name;
    EXPECT_FALSE(info->uses_clusters()) << name;
    auto grid = kernel_uses_grid_sync(coop, *k);
    ASSERT_TRUE(grid.is_ok());
    EXPECT_EQ(*grid, std::string(name) == "coop_sum") << name;
  }
  // Without grid.sync(): no kernel of the other fixtures; on sm_80 the
  // answer is the conservative one (cooperative-groups attributes).
  for (const char* file : {"kernels.sm90.cubin", "cluster.sm90.cubin", "misc.sm90.cubin", "kernels.sm80.cubin"}) {
    const Cubin c = parse_ok(read_fixture(file));
    for (const CubinKernel& k : c.kernels()) {
      auto grid = kernel_uses_grid_sync(c, k);
      ASSERT_TRUE(grid.is_ok());
      EXPECT_FALSE(*grid) << file << " " << k.name;
    }
  }
  const Cubin coop80 = parse_ok(read_fixture("coop.sm80.cubin"));
  EXPECT_TRUE(*kernel_uses_grid_sync(coop80, *coop80.find_kernel("coop_sum")));
  EXPECT_TRUE(*kernel_uses_grid_sync(coop80, *coop80.find_kernel("coop_tile")));

  const Cubin cl = parse_ok(read_fixture("cluster.sm90.cubin"));
  auto info_of = [&](const char* name) {
    const auto k = cl.find_kernel(name);
    EXPECT_TRUE(k.has_value()) << name;
    auto info = read_nvinfo(cl, *k->nvinfo);
    EXPECT_TRUE(info.is_ok());
    return *info;
  };
  const NvInfo fixed = info_of("cluster_fixed");
  EXPECT_TRUE(fixed.explicit_cluster());
  EXPECT_EQ(fixed.cluster_dims(), (std::array<std::uint32_t, 3>{2, 1, 1}));
  const NvInfo bounded = info_of("cluster_bounded");
  EXPECT_EQ(bounded.cluster_dims(), (std::array<std::uint32_t, 3>{4, 2, 1}));
  EXPECT_EQ(bounded.max_threads(), (std::array<std::uint32_t, 3>{256, 1, 1}));
  const NvInfo dynamic = info_of("cluster_dynamic");
  EXPECT_FALSE(dynamic.uses_clusters());
  const NvInfo limited = info_of("cluster_rank_limited");
  EXPECT_TRUE(limited.uses_clusters());
  EXPECT_FALSE(limited.explicit_cluster());
  EXPECT_EQ(limited.max_cluster_rank(), 8u);

  const Cubin misc = parse_ok(read_fixture("misc.sm90.cubin"));
  const auto hello = misc.find_kernel("says_hello");
  ASSERT_TRUE(hello.has_value());
  auto hinfo = read_nvinfo(misc, *hello->nvinfo);
  ASSERT_TRUE(hinfo.is_ok());
  const auto ext = hinfo->find(eiattr::kExterns);
  ASSERT_TRUE(ext.has_value());
  EXPECT_EQ(misc.symbols[hinfo->records[*ext].words().at(0)].name, "vprintf");
  EXPECT_TRUE(hinfo->has(eiattr::kSyscallOffsets));
  const auto capped = misc.find_kernel("stack_user");
  ASSERT_TRUE(capped.has_value());
  auto cinfo = read_nvinfo(misc, *capped->nvinfo);
  ASSERT_TRUE(cinfo.is_ok());
  EXPECT_EQ(cinfo->maxreg_count(), 32);
  const auto mt = misc.find_kernel("max_threads_kernel");
  ASSERT_TRUE(mt.has_value());
  auto minfo = read_nvinfo(misc, *mt->nvinfo);
  ASSERT_TRUE(minfo.is_ok());
  EXPECT_EQ(minfo->max_threads(), (std::array<std::uint32_t, 3>{1024, 1, 1}));
  EXPECT_STREQ(eiattr_name(eiattr::kKparamInfo), "EIATTR_KPARAM_INFO");
  EXPECT_STREQ(eiattr_name(eiattr::kCtaPerCluster), "EIATTR_CTA_PER_CLUSTER");
  EXPECT_EQ(eiattr_name(0xee), nullptr);
}

TEST(CubinContainer, RegisterCounts) {
  REQUIRE_FIXTURES();
  for (const char* file : {"kernels.sm90.cubin", "kernels.sm80.cubin"}) {
    SCOPED_TRACE(file);
    Cubin c = parse_ok(read_fixture(file));
    const auto g = global_nvinfo_section(c);
    ASSERT_TRUE(g.has_value());
    auto global = read_nvinfo(c, *g);
    ASSERT_TRUE(global.is_ok());
    for (const CubinKernel& k : c.kernels()) {
      const auto regs = global->regcount(k.symbol);
      ASSERT_TRUE(regs.has_value()) << k.name;
      EXPECT_EQ(kernel_regcount(c, k), regs);
      // sm_80: also in sh_info bits 24..31; sm_90 (CUDA 13): not there.
      EXPECT_EQ(Cubin::sh_info_regcount(c.sections[k.text].info), c.sm_arch() == 80 ? *regs : 0u) << k.name;
    }
    const CubinKernel saxpy = *c.find_kernel("saxpy");
    const std::uint32_t before = *kernel_regcount(c, saxpy);
    ASSERT_TRUE(set_kernel_regcount(c, saxpy, before + 8).is_ok());
    EXPECT_EQ(kernel_regcount(c, saxpy), before + 8);
    EXPECT_EQ(Cubin::sh_info_regcount(c.sections[saxpy.text].info), c.sm_arch() == 80 ? before + 8 : 0u);
    EXPECT_EQ(c.sections[saxpy.text].info & 0xffffffu, saxpy.symbol);
    auto out = c.write();
    ASSERT_TRUE(out.is_ok());
    const Cubin again = parse_ok(*out);
    EXPECT_EQ(kernel_regcount(again, *again.find_kernel("saxpy")), before + 8);
  }
}

TEST(CubinContainer, Relocations) {
  REQUIRE_FIXTURES();
  for (const std::string& name : kCubins) {
    SCOPED_TRACE(name);
    const Cubin c = parse_ok(read_fixture(name));
    auto all = c.relocations();
    ASSERT_TRUE(all.is_ok()) << all.status().to_string();
    for (const ElfRelocationSection& rs : *all) {
      EXPECT_EQ(c.sections[rs.section].name, (rs.has_addend ? ".rela" : ".rel") + c.sections[rs.target].name);
    }
    // ptxas never relocates a kernel's first instruction here.
    for (const CubinKernel& k : c.kernels()) {
      auto first = c.relocations_in(k.text, 0, 16);
      ASSERT_TRUE(first.is_ok());
      EXPECT_TRUE(first->empty()) << k.name;
    }
  }
  // The relocatable cubin has relocations in kernel text (g_counter, the
  // call to poly).
  const Cubin rdc = parse_ok(read_fixture("kernels.rdc.sm90.cubin"));
  auto all = rdc.relocations();
  ASSERT_TRUE(all.is_ok());
  std::size_t in_text = 0;
  for (const ElfRelocationSection& rs : *all) {
    if (rdc.sections[rs.target].name.starts_with(".text.")) in_text += rs.relocations.size();
  }
  EXPECT_GT(in_text, 0u);
}

// ---------------------------------------------------------------------------
// The rewrite the atomizer makes, checked structurally.

struct Rewrite {
  std::string kernel;
  std::uint64_t text_growth = 256;
  std::uint64_t constant_growth = 8;
};

void check_rewrite(const std::string& file, const Rewrite& rw) {
  SCOPED_TRACE(file + " / " + rw.kernel);
  const Bytes original_bytes = read_fixture(file);
  const Cubin original = parse_ok(original_bytes);
  Cubin c = original;
  const auto k = c.find_kernel(rw.kernel);
  ASSERT_TRUE(k.has_value());
  ASSERT_TRUE(k->nvinfo && k->constant0);

  // (a) append to the text, (d) grow the symbol.
  Bytes extra(static_cast<std::size_t>(rw.text_growth));
  for (std::size_t i = 0; i < extra.size(); ++i) extra[i] = static_cast<std::uint8_t>(0xa0 + i % 16);
  ASSERT_TRUE(c.append_to_section(k->text, extra).is_ok());
  c.symbols[k->symbol].size += rw.text_growth;
  // (b) grow .nv.constant0.<kernel>.
  const std::uint64_t const_size = c.sections[*k->constant0].size();
  ASSERT_TRUE(c.resize_section(*k->constant0, const_size + rw.constant_growth).is_ok());
  // (c) one more parameter.
  auto info = read_nvinfo(c, *k->nvinfo);
  ASSERT_TRUE(info.is_ok());
  auto params = info->kparams();
  ASSERT_TRUE(params.is_ok());
  auto cb = info->param_cbank();
  ASSERT_TRUE(cb.is_ok());
  const std::uint16_t old_size = cb->has_value() ? (*cb)->size : 0;
  KParamInfo added;
  added.ordinal = static_cast<std::uint16_t>(params->size());
  added.offset = static_cast<std::uint16_t>((old_size + 7u) & ~7u);
  added.size = 8;
  ASSERT_TRUE(info->add_kparam(added).is_ok());
  ParamCbank ncb = cb->value_or(ParamCbank{});
  ncb.size = static_cast<std::uint16_t>(added.offset + 8);
  ASSERT_TRUE(info->set_param_cbank(ncb).is_ok());
  ASSERT_TRUE(info->set_cbank_param_size(ncb.size).is_ok());
  ASSERT_TRUE(write_nvinfo(c, *k->nvinfo, *info).is_ok());

  auto out = c.write();
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  auto probed = probe_image(*out);
  ASSERT_TRUE(probed.is_ok());
  EXPECT_EQ(probed->size, out->size());
  const Cubin r = parse_ok(*out);
  ASSERT_EQ(r.sections.size(), original.sections.size());

  // Every section: same header fields; contents unchanged except the three
  // rewritten ones.
  for (std::size_t i = 0; i < r.sections.size(); ++i) {
    const ElfSection &a = original.sections[i], &b = r.sections[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.type, a.type);
    EXPECT_EQ(b.flags, a.flags);
    EXPECT_EQ(b.addr, a.addr);
    EXPECT_EQ(b.link, a.link);
    EXPECT_EQ(b.info, a.info);
    EXPECT_EQ(b.align, a.align);
    EXPECT_EQ(b.entsize, a.entsize);
    if (i == k->text) {
      Bytes expect = a.data;
      expect.insert(expect.end(), extra.begin(), extra.end());
      EXPECT_EQ(b.data, expect);
    } else if (i == *k->constant0) {
      Bytes expect = a.data;
      expect.resize(expect.size() + static_cast<std::size_t>(rw.constant_growth), 0);
      EXPECT_EQ(b.data, expect);
    } else if (i == *k->nvinfo) {
      EXPECT_EQ(b.data, c.sections[i].data);
    } else if (i == r.symtab) {
      EXPECT_EQ(b.data.size(), a.data.size());  // rebuilt: one symbol's size differs
    } else if (!b.is_nobits()) {
      EXPECT_EQ(b.data, a.data);
    } else {
      EXPECT_EQ(b.nobits_size, a.nobits_size);
    }
  }
  // Symbols: only the kernel's size changed.
  ASSERT_EQ(r.symbols.size(), original.symbols.size());
  for (std::size_t i = 0; i < r.symbols.size(); ++i) {
    const ElfSymbol &a = original.symbols[i], &b = r.symbols[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.value, a.value);
    EXPECT_EQ(b.size, i == k->symbol ? a.size + rw.text_growth : a.size);
    EXPECT_EQ(b.info, a.info);
    EXPECT_EQ(b.other, a.other);
    EXPECT_EQ(b.shndx, a.shndx);
  }
  EXPECT_EQ(r.flags, original.flags);
  EXPECT_TRUE(std::equal(r.ident.begin(), r.ident.end(), original.ident.begin()));

  // Layout: aligned, in the original file order, no overlaps, everything
  // before the first grown section where it was.
  const RawLayout before = raw_layout(original_bytes), after = raw_layout(*out);
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 1; i < r.sections.size(); ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t x, std::uint32_t y) { return before.offsets[x] < before.offsets[y]; });
  const std::uint64_t first_change =
      std::min({before.offsets[k->text], before.offsets[*k->constant0], before.offsets[*k->nvinfo]});
  std::uint64_t prev_end = 64, prev_offset = 0;
  for (std::uint32_t i : order) {
    const ElfSection& s = r.sections[i];
    SCOPED_TRACE(s.name);
    const std::uint64_t off = after.offsets[i];
    if (s.align > 1) {
      EXPECT_EQ(off % s.align, 0u);
    }
    EXPECT_GE(off, prev_offset);  // same order
    prev_offset = off;
    if (before.offsets[i] + (s.is_nobits() ? 0 : s.size()) <= first_change && i != k->text && i != *k->constant0 &&
        i != *k->nvinfo) {
      EXPECT_EQ(off, before.offsets[i]);
    }
    if (s.is_nobits() || s.size() == 0) continue;
    EXPECT_GE(off, prev_end);  // no overlap
    prev_end = off + s.size();
  }
  EXPECT_GE(after.shoff, prev_end);
  EXPECT_GE(after.phoff, after.shoff + r.sections.size() * 64);
  EXPECT_EQ(after.phoff % 8, 0u);

  // Segments: the same coverage, offsets and sizes matching the sections.
  ASSERT_EQ(r.segments.size(), original.segments.size());
  for (std::size_t i = 0; i < r.segments.size(); ++i) {
    const ElfSegment &a = original.segments[i], &b = r.segments[i];
    SCOPED_TRACE("segment " + std::to_string(i));
    EXPECT_EQ(b.type, a.type);
    EXPECT_EQ(b.flags, a.flags);
    EXPECT_EQ(b.align, a.align);
    EXPECT_EQ(b.covers_program_headers, a.covers_program_headers);
    EXPECT_EQ(b.sections, a.sections);
    if (b.covers_program_headers) {
      EXPECT_EQ(b.offset, after.phoff);
      EXPECT_EQ(b.filesz, r.segments.size() * 56);
      continue;
    }
    std::uint64_t file_bytes = 0, lo = UINT64_MAX, hi = 0, nobits = 0;
    for (std::uint32_t s : b.sections) {
      const ElfSection& sec = r.sections[s];
      if (sec.is_nobits()) {
        nobits = ((nobits + std::max<std::uint64_t>(sec.align, 1) - 1) / std::max<std::uint64_t>(sec.align, 1)) *
                     std::max<std::uint64_t>(sec.align, 1) +
                 sec.nobits_size;
        continue;
      }
      if (sec.size() == 0) continue;
      file_bytes += sec.size();
      lo = std::min(lo, after.offsets[s]);
      hi = std::max(hi, after.offsets[s] + sec.size());
    }
    if (file_bytes > 0) {
      EXPECT_EQ(b.offset, lo);
      EXPECT_EQ(b.filesz, hi - lo);
      EXPECT_GE(b.filesz, file_bytes);
    } else {
      EXPECT_EQ(b.filesz, 0u);
    }
    if (nobits == 0) {
      EXPECT_EQ(b.memsz, b.filesz);
    }
    // What grew shows in the segment that holds it: the text's bytes are
    // inside it (alignment padding before later sections may absorb or add
    // a little, so the size is bounded, not exact).
    const bool has_text = std::find(b.sections.begin(), b.sections.end(), k->text) != b.sections.end();
    if (has_text) {
      EXPECT_GE(after.offsets[k->text], b.offset);
      EXPECT_LE(after.offsets[k->text] + r.sections[k->text].size(), b.offset + b.filesz);
      EXPECT_GE(b.filesz + 256, a.filesz + rw.text_growth);
      EXPECT_LE(b.filesz, a.filesz + rw.text_growth + 256);
    }
  }

  // Attributes read back.
  const auto rk = r.find_kernel(rw.kernel);
  ASSERT_TRUE(rk.has_value());
  auto rinfo = read_nvinfo(r, *rk->nvinfo);
  ASSERT_TRUE(rinfo.is_ok());
  auto rparams = rinfo->kparams();
  ASSERT_TRUE(rparams.is_ok());
  ASSERT_EQ(rparams->size(), params->size() + 1);
  EXPECT_EQ(rparams->front(), added);  // highest ordinal first
  for (std::size_t i = 0; i < params->size(); ++i) EXPECT_EQ((*rparams)[i + 1], (*params)[i]);
  auto rcb = rinfo->param_cbank();
  ASSERT_TRUE(rcb.is_ok() && rcb->has_value());
  EXPECT_EQ(**rcb, ncb);
  EXPECT_EQ(rinfo->cbank_param_size(), ncb.size);
  EXPECT_EQ(r.sections[*rk->constant0].size(), const_size + rw.constant_growth);
  EXPECT_EQ(r.symbols[rk->symbol].size, r.sections[rk->text].size());

  // The rewritten image round-trips byte for byte too.
  auto again = r.write();
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(*again == *out);
}

TEST(CubinRewrite, GrowTextConstantsAndParameters) {
  REQUIRE_FIXTURES();
  check_rewrite("kernels.sm90.cubin", {"saxpy"});
  check_rewrite("kernels.sm90.cubin", {"many_params"});
  check_rewrite("kernels.sm90.cubin", {"no_params"});  // no parameter attributes before
  check_rewrite("kernels.sm90.cubin", {"calls_device", 16 * 5, 12});
  check_rewrite("coop.sm90.cubin", {"coop_sum"});
  check_rewrite("cluster.sm90.cubin", {"cluster_fixed"});
  check_rewrite("misc.sm90.cubin", {"says_hello", 384, 8});
  check_rewrite("kernels.sm80.cubin", {"fill3d"});
}

TEST(CubinRewrite, AddedSectionAndRenamedSymbol) {
  REQUIRE_FIXTURES();
  Cubin c = parse_ok(read_fixture("coop.sm90.cubin"));
  ElfSection extra;
  extra.name = ".lithos.note";
  extra.type = kShtProgbits;
  extra.align = 16;
  extra.data = Bytes(40, 0x5a);
  auto idx = c.add_section(extra);
  ASSERT_TRUE(idx.is_ok());
  const auto sym = c.find_symbol("coop_tile");
  ASSERT_TRUE(sym.has_value());
  c.symbols[*sym].name = "coop_tile_renamed";
  auto out = c.write();
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const Cubin r = parse_ok(*out);
  const auto found = r.find_section(".lithos.note");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, *idx);
  EXPECT_EQ(r.sections[*found].data, extra.data);
  EXPECT_EQ(r.sections[*found].file_offset % 16, 0u);
  EXPECT_TRUE(r.find_symbol("coop_tile_renamed").has_value());
  EXPECT_TRUE(r.find_kernel("coop_sum").has_value());
}

// ---------------------------------------------------------------------------
// Fatbin rebuild and entry choice.

TEST(FatbinContainer, RebuildWithAReplacedEntry) {
  REQUIRE_FIXTURES();
  // A rewritten sm_90 cubin to put in.
  Cubin c = parse_ok(read_fixture("kernels.sm90.cubin"));
  const auto k = c.find_kernel("saxpy");
  ASSERT_TRUE(k.has_value());
  ASSERT_TRUE(c.append_to_section(k->text, Bytes(128, 0x11)).is_ok());
  c.symbols[k->symbol].size += 128;
  auto replacement = c.write();
  ASSERT_TRUE(replacement.is_ok());

  for (const char* file : {"kernels.plain.fatbin", "kernels.zstd.fatbin", "kernels.lz4.fatbin"}) {
    SCOPED_TRACE(file);
    auto fb = parse_fatbin(read_fixture(file));
    ASSERT_TRUE(fb.is_ok());
    const auto pick = select_entry(*fb, 90);
    ASSERT_TRUE(pick.has_value());
    ASSERT_EQ(fb->entries[*pick].arch, 90u);
    ASSERT_TRUE(fb->entries[*pick].is_elf());
    Fatbin rebuilt = *fb;
    ASSERT_TRUE(rebuilt.entries[*pick].set_plain_payload(*replacement).is_ok());
    auto bytes = write_fatbin(rebuilt);
    ASSERT_TRUE(bytes.is_ok());
    auto info = probe_image(*bytes);
    ASSERT_TRUE(info.is_ok());
    EXPECT_EQ(info->kind, ImageKind::kFatbin);
    EXPECT_EQ(info->size, bytes->size());

    auto back = parse_fatbin(*bytes);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    ASSERT_EQ(back->entries.size(), fb->entries.size());
    for (std::size_t i = 0; i < fb->entries.size(); ++i) {
      const FatbinEntry &a = fb->entries[i], &b = back->entries[i];
      EXPECT_EQ(b.kind, a.kind);
      EXPECT_EQ(b.arch, a.arch);
      EXPECT_EQ(b.header.size(), a.header.size());
      if (i == *pick) {
        EXPECT_FALSE(b.is_compressed());
        EXPECT_EQ(b.compressed_size, 0u);
        EXPECT_EQ(b.uncompressed_size, 0u);
        EXPECT_EQ(b.flags, a.flags & ~fatbin_flags::kCompressed);
        auto plain = b.decompress();
        ASSERT_TRUE(plain.is_ok());
        EXPECT_TRUE(trim_zeros(*plain) == trim_zeros(*replacement));
        const Cubin pc = parse_ok(*plain);
        EXPECT_EQ(pc.sections[k->text].size(), c.sections[k->text].size());
      } else {
        EXPECT_EQ(b.flags, a.flags);
        EXPECT_EQ(b.payload, a.payload);
        EXPECT_EQ(b.header, a.header);
      }
    }
    EXPECT_EQ(select_entry(*back, 90), pick);
  }
}

TEST(FatbinContainer, SelectsTheEntryTheDriverWould) {
  REQUIRE_FIXTURES();
  auto fb = parse_fatbin(read_fixture("kernels.plain.fatbin"));
  ASSERT_TRUE(fb.is_ok());
  // Entries: 0 sm_80 ELF, 1 compute_90 PTX, 2 sm_90 ELF.
  EXPECT_EQ(select_entry(*fb, 90), 2u);
  EXPECT_EQ(select_entry(*fb, 80), 0u);
  EXPECT_EQ(select_entry(*fb, 86), 0u);  // sm_80 SASS runs on 8.6
  EXPECT_EQ(select_entry(*fb, 89), 0u);
  EXPECT_EQ(select_entry(*fb, 100), 1u);  // JIT from compute_90
  EXPECT_EQ(select_entry(*fb, 120), 1u);
  EXPECT_EQ(select_entry(*fb, 75), std::nullopt);

  // Synthetic: arch-specific and family-specific entries.
  auto entry = [](std::uint16_t kind, std::uint32_t arch, std::uint64_t extra_flags) {
    FatbinEntry e;
    e.kind = kind;
    e.arch = arch;
    e.flags = fatbin_flags::k64Bit | fatbin_flags::kHostLinux | extra_flags;
    e.header.assign(64, 0);
    e.payload.assign(8, 0);
    return e;
  };
  Fatbin s;
  s.entries.push_back(entry(fatbin_kind::kElf, 90, fatbin_flags::kArchSpecific));  // sm_90a
  s.entries.push_back(entry(fatbin_kind::kPtx, 90, fatbin_flags::kArchSpecific));  // compute_90a
  s.entries.push_back(entry(fatbin_kind::kElf, 100, fatbin_flags::kFamilySpecific));
  s.entries.push_back(entry(fatbin_kind::kPtx, 100, fatbin_flags::kFamilySpecific));
  s.entries.push_back(entry(fatbin_kind::kElf, 90, 0));
  EXPECT_EQ(select_entry(s, 90), 0u);   // the "a" build first
  EXPECT_EQ(select_entry(s, 103), 2u);  // sm_100f SASS on 10.3
  EXPECT_EQ(select_entry(s, 100), 2u);
  EXPECT_EQ(select_entry(s, 120), std::nullopt);  // 90a/100f PTX: not for 12.0
  s.entries[0].flags &= ~fatbin_flags::k64Bit;
  EXPECT_EQ(select_entry(s, 90), 4u);
  Fatbin lto;
  lto.entries.push_back(entry(fatbin_kind::kLtoIr, 90, 0));
  EXPECT_EQ(select_entry(lto, 90), std::nullopt);
}

TEST(FatbinContainer, SeveralFatbinsBackToBack) {
  REQUIRE_FIXTURES();
  const Bytes a = read_fixture("coop.plain.fatbin"), b = read_fixture("coop.zstd.fatbin");
  Bytes blob = a;
  blob.resize(blob.size() + 8, 0);  // padding between them
  blob.insert(blob.end(), b.begin(), b.end());
  blob.resize(blob.size() + 16, 0);  // and after
  auto all = parse_fatbins(blob);
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].offset, 0u);
  EXPECT_EQ((*all)[1].offset, a.size() + 8);
  auto out = write_fatbins(*all);
  ASSERT_TRUE(out.is_ok());
  Bytes expect = a;
  expect.insert(expect.end(), b.begin(), b.end());
  EXPECT_TRUE(*out == expect);
  auto first = parse_fatbin(blob);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->entries.size(), 3u);
}

// ---------------------------------------------------------------------------
// Image kinds and sizes.

TEST(ImageProbe, KindsAndSizes) {
  REQUIRE_FIXTURES();
  const Bytes cubin = read_fixture("kernels.sm90.cubin");
  const Bytes fatbin = read_fixture("kernels.zstd.fatbin");
  const Bytes ptx = read_fixture("kernels.sm90.ptx");
  EXPECT_EQ(detect_image_kind(cubin), ImageKind::kElf);
  EXPECT_EQ(detect_image_kind(fatbin), ImageKind::kFatbin);
  EXPECT_EQ(detect_image_kind(ptx), ImageKind::kPtx);
  EXPECT_EQ(detect_image_kind(ByteView(ptx).first(16)), ImageKind::kPtx);

  // In a view longer than the image, the size is the image's.
  for (const Bytes* img : {&cubin, &fatbin}) {
    Bytes longer = *img;
    longer.resize(longer.size() + 100, 0xcc);
    auto info = probe_image(longer);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->size, img->size());
    auto mem = probe_image_in_memory(longer.data());
    ASSERT_TRUE(mem.is_ok());
    EXPECT_EQ(mem->size, img->size());
    EXPECT_EQ(mem->kind, info->kind);
  }
  std::string text(ptx.begin(), ptx.end());
  auto pinfo = probe_image_in_memory(text.c_str());
  ASSERT_TRUE(pinfo.is_ok());
  EXPECT_EQ(pinfo->kind, ImageKind::kPtx);
  EXPECT_EQ(pinfo->size, std::strlen(text.c_str()) + 1);
  EXPECT_FALSE(probe_image(ptx).is_ok());  // the file has no terminating NUL
  Bytes ptx0 = ptx;
  ptx0.push_back(0);
  auto pv = probe_image(ptx0);
  ASSERT_TRUE(pv.is_ok());
  EXPECT_EQ(pv->size, ptx0.size());

  // The runtime's wrapper around the fatbin.
  struct {
    std::uint32_t magic, version;
    const void* data;
    const void* filename;
  } wrapper{kFatbinWrapperMagic, 1, fatbin.data(), nullptr};
  EXPECT_EQ(detect_image_kind(ByteView(reinterpret_cast<const std::uint8_t*>(&wrapper), sizeof wrapper)),
            ImageKind::kFatbinWrapper);
  auto w = probe_image_in_memory(&wrapper);
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(w->kind, ImageKind::kFatbinWrapper);
  EXPECT_EQ(w->size, kFatbinWrapperSize);
  EXPECT_EQ(w->wrapped, reinterpret_cast<std::uintptr_t>(fatbin.data()));
  auto inner = probe_image_in_memory(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(w->wrapped)));
  ASSERT_TRUE(inner.is_ok());
  EXPECT_EQ(inner->size, fatbin.size());

  const std::string junk = "\x01\x02 not an image";
  EXPECT_EQ(detect_image_kind(ByteView(reinterpret_cast<const std::uint8_t*>(junk.data()), junk.size())),
            ImageKind::kUnknown);
  EXPECT_FALSE(probe_image_in_memory(junk.c_str()).is_ok());
  EXPECT_EQ(detect_image_kind(Bytes{' ', '\n', 'x'}), ImageKind::kUnknown);
}

// ---------------------------------------------------------------------------
// Malformed inputs.

template <class T>
void put_at(Bytes& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}
template <class T>
T get_at(const Bytes& b, std::size_t at) {
  T v{};
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

TEST(Malformed, TruncatedInputsFail) {
  REQUIRE_FIXTURES();
  const Bytes cubin = read_fixture("coop.sm90.cubin");
  for (std::size_t n = 0; n < cubin.size(); n += (n < 256 ? 1 : 97)) {
    EXPECT_FALSE(Cubin::parse(ByteView(cubin).first(n)).is_ok()) << n;
    EXPECT_FALSE(probe_image(ByteView(cubin).first(n)).is_ok()) << n;
  }
  const Bytes fatbin = read_fixture("coop.zstd.fatbin");
  for (std::size_t n = 0; n < fatbin.size(); n += (n < 256 ? 1 : 61)) {
    EXPECT_FALSE(parse_fatbin(ByteView(fatbin).first(n)).is_ok()) << n;
  }
  const Cubin c = parse_ok(cubin);
  const ElfSection& info = c.sections[*c.find_kernel("coop_sum")->nvinfo];
  for (std::size_t n = 1; n < info.data.size(); ++n) {
    auto r = parse_nvinfo(ByteView(info.data).first(n));
    // A cut can fall between records; then it parses (fewer records).
    if (r.is_ok()) {
      auto w = write_nvinfo(*r);
      ASSERT_TRUE(w.is_ok());
      EXPECT_EQ(w->size(), n);
    }
  }
  EXPECT_FALSE(parse_nvinfo(Bytes{0x04, 0x17, 0x0c, 0x00, 1, 2, 3}).is_ok());  // SVAL runs past the end
  EXPECT_FALSE(parse_nvinfo(Bytes{0x03, 0x19}).is_ok());                       // truncated record
  EXPECT_FALSE(parse_nvinfo(Bytes{0x07, 0x19, 0, 0}).is_ok());                 // unknown format
  EXPECT_FALSE(parse_nvinfo(Bytes{0x00, 0x19, 0, 0}).is_ok());
}

TEST(Malformed, BadCubinHeadersAndTables) {
  REQUIRE_FIXTURES();
  const Bytes good = read_fixture("coop.sm90.cubin");
  ASSERT_TRUE(Cubin::parse(good).is_ok());
  const std::uint64_t shoff = get_at<std::uint64_t>(good, 40);
  const std::uint16_t shnum = get_at<std::uint16_t>(good, 60);
  auto shdr = [&](std::size_t i, std::size_t field) { return static_cast<std::size_t>(shoff + i * 64 + field); };
  auto expect_bad = [](const Bytes& b, const char* what) {
    auto r = Cubin::parse(b);
    EXPECT_FALSE(r.is_ok()) << what;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what;
    }
  };
  Bytes b;
  b = good;
  b[4] = 1;
  expect_bad(b, "ELF32");
  b = good;
  b[5] = 2;
  expect_bad(b, "big-endian");
  b = good;
  put_at<std::uint16_t>(b, 18, 62);
  expect_bad(b, "x86-64 machine");
  b = good;
  put_at<std::uint16_t>(b, 60, 0xfeff);
  expect_bad(b, "absurd section count");
  b = good;
  put_at<std::uint16_t>(b, 56, 0xffff);
  expect_bad(b, "absurd segment count");
  b = good;
  put_at<std::uint64_t>(b, 40, ~0ull - 10);
  expect_bad(b, "e_shoff overflow");
  b = good;
  put_at<std::uint64_t>(b, 32, good.size() - 8);
  expect_bad(b, "e_phoff past the end");
  b = good;
  put_at<std::uint16_t>(b, 62, shnum);
  expect_bad(b, "e_shstrndx");
  b = good;
  put_at<std::uint16_t>(b, 58, 40);
  expect_bad(b, "e_shentsize");
  b = good;
  put_at<std::uint16_t>(b, 52, 52);
  expect_bad(b, "e_ehsize");
  // A section whose contents lie past the end, or overflow.
  b = good;
  put_at<std::uint64_t>(b, shdr(4, 24), good.size() - 4);
  expect_bad(b, "section past the end");
  b = good;
  put_at<std::uint64_t>(b, shdr(4, 32), ~0ull);
  expect_bad(b, "section size overflow");
  // Overlapping sections: .debug_frame moved onto .symtab.
  b = good;
  put_at<std::uint64_t>(b, shdr(4, 24), get_at<std::uint64_t>(good, shdr(3, 24)) + 8);
  expect_bad(b, "overlap");
  // A section over the section header table.
  b = good;
  put_at<std::uint64_t>(b, shdr(4, 24), shoff);
  expect_bad(b, "overlaps the header table");
  b = good;
  put_at<std::uint64_t>(b, shdr(4, 48), 3);
  expect_bad(b, "alignment 3");
  b = good;
  put_at<std::uint32_t>(b, shdr(4, 0), 0xfffffff0u);
  expect_bad(b, "section name offset");
  // The symbol table.
  b = good;
  put_at<std::uint64_t>(b, shdr(3, 56), 16);
  expect_bad(b, "symtab entsize");
  b = good;
  put_at<std::uint32_t>(b, shdr(3, 40), 3);
  expect_bad(b, "symtab link to itself");
  {
    const std::uint64_t symoff = get_at<std::uint64_t>(good, shdr(3, 24));
    b = good;
    put_at<std::uint16_t>(b, static_cast<std::size_t>(symoff + 24 * 5 + 6), 0x2000);
    expect_bad(b, "symbol section index");
    b = good;
    put_at<std::uint32_t>(b, static_cast<std::size_t>(symoff + 24 * 5), 0x7fffffffu);
    expect_bad(b, "symbol name offset");
  }
  // Relocations that point outside their target are caught on demand.
  {
    Cubin c = parse_ok(good);
    const auto rela = c.find_section(".rela.debug_frame");
    ASSERT_TRUE(rela.has_value());
    put_at<std::uint64_t>(c.sections[*rela].data, 0, 1u << 30);
    EXPECT_FALSE(c.relocations().is_ok());
    c.sections[*rela].data.pop_back();  // no longer a whole number of entries
    EXPECT_FALSE(c.relocations().is_ok());
  }
  // The writer refuses an inconsistent model.
  {
    Cubin c = parse_ok(good);
    c.sections[5].align = 6;
    EXPECT_FALSE(c.write().is_ok());
    c = parse_ok(good);
    c.symbols[3].shndx = 999;
    EXPECT_FALSE(c.write().is_ok());
    c = parse_ok(good);
    c.sections[15].data.push_back(1);  // .nv.shared.reserved.0 is SHT_NOBITS
    ASSERT_TRUE(c.sections[15].is_nobits());
    EXPECT_FALSE(c.write().is_ok());
    c = parse_ok(good);
    EXPECT_FALSE(c.append_to_section(15, Bytes{1}).is_ok());
    EXPECT_FALSE(c.resize_section(999, 1).is_ok());
    EXPECT_FALSE(c.set_sh_info_regcount(13, 256).is_ok());
  }
}

TEST(Malformed, BadFatbins) {
  REQUIRE_FIXTURES();
  const Bytes good = read_fixture("coop.zstd.fatbin");
  ASSERT_TRUE(parse_fatbin(good).is_ok());
  auto expect_bad = [](const Bytes& b, const char* what) { EXPECT_FALSE(parse_fatbins(b).is_ok()) << what; };
  Bytes b;
  b = good;
  b[0] ^= 1;
  expect_bad(b, "magic");
  b = good;
  put_at<std::uint16_t>(b, 6, 8);
  expect_bad(b, "header size < 16");
  b = good;
  put_at<std::uint64_t>(b, 8, good.size());
  expect_bad(b, "size past the end");
  b = good;
  put_at<std::uint64_t>(b, 8, ~0ull);
  expect_bad(b, "size overflow");
  b = good;
  put_at<std::uint32_t>(b, 16 + 4, 32);
  expect_bad(b, "entry header size < 64");
  b = good;
  put_at<std::uint32_t>(b, 16 + 4, 0x7fffffff);
  expect_bad(b, "entry header size past the end");
  b = good;
  put_at<std::uint64_t>(b, 16 + 8, ~0ull - 4);
  expect_bad(b, "payload size overflow");
  b = good;
  put_at<std::uint32_t>(b, 16 + 0x10, 0x7fffffff);
  expect_bad(b, "compressed size > payload");
  b = good;
  b.push_back(0x50);
  expect_bad(b, "trailing garbage");
  // A corrupt compressed payload parses but does not decompress.
  b = good;
  b[16 + 64 + 40] ^= 0xff;
  b[16 + 64 + 41] ^= 0xff;
  auto fb = parse_fatbin(b);
  ASSERT_TRUE(fb.is_ok());
  EXPECT_FALSE(fb->entries[0].decompress().is_ok());
  // Both compression flags.
  fb = parse_fatbin(good);
  ASSERT_TRUE(fb.is_ok());
  fb->entries[0].flags |= fatbin_flags::kCompressedLz4;
  EXPECT_FALSE(fb->entries[0].decompress().is_ok());
  // A wrong uncompressed size.
  fb = parse_fatbin(good);
  fb->entries[0].uncompressed_size += 8;
  EXPECT_FALSE(fb->entries[0].decompress().is_ok());

  EXPECT_FALSE(parse_fatbin_wrapper(Bytes(24, 0)).is_ok());
  EXPECT_FALSE(parse_fatbin_wrapper(Bytes(10, 0)).is_ok());
}

// ---------------------------------------------------------------------------
// The writer's output is a fixed point: what it writes parses back to the
// same model, and writing that gives the same bytes (found by fuzzing,
// tests/cubin/fuzz_container.cpp).

// A small cubin written by hand: the ELF header, then the given sections
// (index 0, the null section, is added; `name` is an offset into .shstrtab,
// section 1), the section header table at `shoff` and one program header at
// `phoff`. Section contents are bytes 0x10, 0x11, ...
struct TinySection {
  std::uint32_t name, type;
  std::uint64_t flags, offset, size, align;
};
struct TinySegment {
  std::uint64_t offset, filesz, memsz;
};
Bytes tiny_cubin(const std::vector<TinySection>& sections, const TinySegment& seg, std::uint64_t shoff,
                 std::uint64_t phoff) {
  const std::size_t shnum = sections.size() + 1;
  Bytes b(static_cast<std::size_t>(std::max(shoff + shnum * 64, phoff + 56)), 0);
  const std::uint8_t ident[8] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  std::memcpy(b.data(), ident, sizeof ident);
  put_at<std::uint16_t>(b, 16, kEtExec);
  put_at<std::uint16_t>(b, 18, kEmCuda);
  put_at<std::uint32_t>(b, 20, 1);
  put_at<std::uint64_t>(b, 32, phoff);
  put_at<std::uint64_t>(b, 40, shoff);
  put_at<std::uint16_t>(b, 52, 64);
  put_at<std::uint16_t>(b, 54, 56);
  put_at<std::uint16_t>(b, 56, 1);
  put_at<std::uint16_t>(b, 58, 64);
  put_at<std::uint16_t>(b, 60, static_cast<std::uint16_t>(shnum));
  put_at<std::uint16_t>(b, 62, 1);  // e_shstrndx
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const TinySection& t = sections[i];
    if (t.type != kShtNobits && t.type != kShtStrtab) {
      for (std::uint64_t k = 0; k < t.size; ++k)
        b[static_cast<std::size_t>(t.offset + k)] = static_cast<std::uint8_t>(0x10 + k);
    }
    const std::size_t h = static_cast<std::size_t>(shoff + (i + 1) * 64);
    put_at<std::uint32_t>(b, h, t.name);
    put_at<std::uint32_t>(b, h + 4, t.type);
    put_at<std::uint64_t>(b, h + 8, t.flags);
    put_at<std::uint64_t>(b, h + 24, t.offset);
    put_at<std::uint64_t>(b, h + 32, t.size);
    put_at<std::uint64_t>(b, h + 48, t.align);
  }
  const std::size_t p = static_cast<std::size_t>(phoff);
  put_at<std::uint32_t>(b, p, kPtLoad);
  put_at<std::uint32_t>(b, p + 4, kPfR | kPfX);
  put_at<std::uint64_t>(b, p + 8, seg.offset);
  put_at<std::uint64_t>(b, p + 32, seg.filesz);
  put_at<std::uint64_t>(b, p + 40, seg.memsz);
  put_at<std::uint64_t>(b, p + 48, 8);
  return b;
}

// .shstrtab of the tiny cubins: offsets 1, 11, 19 and 27.
constexpr char kTinyNames[] = "\0.shstrtab\0.text.a\0.text.b\0.nv.shared.a";

Bytes with_names(Bytes b) {
  std::memcpy(b.data() + 64, kTinyNames, sizeof kTinyNames);
  return b;
}

// One LOAD reaching from .text.a (128, 32 bytes) past the end of its bytes
// to .nv.shared.a (SHT_NOBITS, 64 bytes at 256), which a reader takes as
// covered because it lies at the segment's end and memsz exceeds filesz.
Bytes segment_reaching_past_its_text() {
  return with_names(tiny_cubin({{1, kShtStrtab, 0, 64, sizeof kTinyNames, 1},
                                {11, kShtProgbits, kShfAlloc | kShfExecInstr, 128, 32, 128},
                                {27, kShtNobits, kShfAlloc | kShfWrite, 256, 64, 4}},
                               {128, 128, 192}, 256, 512));
}

TEST(CubinWriter, SegmentKeepsItsNobitsWhenItsFileExtentShrinks) {
  const Cubin c = parse_ok(segment_reaching_past_its_text());
  ASSERT_EQ(c.segments.size(), 1u);
  EXPECT_EQ(c.segments[0].sections, (std::vector<std::uint32_t>{2, 3}));
  // The writer recomputes the extent from the sections: filesz shrinks to
  // the text's 32 bytes. .nv.shared.k must then sit at the new end, or a
  // reader no longer counts it, and p_memsz changed at every rewrite.
  auto once = c.write();
  ASSERT_TRUE(once.is_ok()) << once.status().to_string();
  const Cubin again = parse_ok(*once);
  ASSERT_EQ(again.segments.size(), 1u);
  EXPECT_EQ(again.segments[0].offset, 128u);
  EXPECT_EQ(again.segments[0].filesz, 32u);
  EXPECT_EQ(again.segments[0].memsz, 32u + 64u);
  EXPECT_EQ(again.segments[0].sections, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(raw_layout(*once).offsets[3], 128u + 32u);  // .nv.shared.k's sh_offset
  auto twice = again.write();
  ASSERT_TRUE(twice.is_ok()) << twice.status().to_string();
  EXPECT_EQ(*twice, *once);
}

// A LOAD that covers no section ([384, 448): the section header table's
// bytes), kept as parsed; growing .text.a moves .text.b (32 bytes) to 384,
// into it. A reader of the output takes the segment to cover .text.b, so the
// writer must already give it .text.b's extent, or filesz changed at the
// next rewrite (found by fuzzing the atomizer, which grows text sections).
TEST(CubinWriter, SectionMovedIntoAKeptSegmentIsCovered) {
  Cubin c = parse_ok(with_names(tiny_cubin({{1, kShtStrtab, 0, 64, sizeof kTinyNames, 1},
                                            {11, kShtProgbits, kShfAlloc | kShfExecInstr, 128, 32, 128},
                                            {19, kShtProgbits, kShfAlloc | kShfExecInstr, 256, 32, 128}},
                                           {384, 64, 64}, 384, 640)));
  ASSERT_EQ(c.segments.size(), 1u);
  EXPECT_TRUE(c.segments[0].sections.empty());
  ASSERT_TRUE(c.resize_section(2, 160).is_ok());
  auto once = c.write();
  ASSERT_TRUE(once.is_ok()) << once.status().to_string();
  EXPECT_EQ(raw_layout(*once).offsets[3], 384u);
  const Cubin again = parse_ok(*once);
  ASSERT_EQ(again.segments.size(), 1u);
  EXPECT_EQ(again.segments[0].sections, (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(again.segments[0].offset, 384u);
  EXPECT_EQ(again.segments[0].filesz, 32u);
  auto twice = again.write();
  ASSERT_TRUE(twice.is_ok()) << twice.status().to_string();
  EXPECT_EQ(*twice, *once);
}

// Bytes after the ELF (its last section or header table) are not part of it:
// the parser ignores them and the writer keeps none. A segment reaching into
// them (here a LOAD at the program header table, which is last, three entries
// long while the table has one) is malformed: the rewrite pointed it outside
// the file (found by fuzz_atomize). The parser refuses it. An empty section
// placed there has no bytes: the writer puts it at the end of the file
// (before, past it, where a reader refuses it). The trailing bytes are dropped.
TEST(CubinWriter, SegmentPastTheEndOfTheElfIsRefused) {
  auto image = [](std::uint64_t seg_filesz, std::uint64_t text_b_offset) {
    Bytes b = with_names(tiny_cubin({{1, kShtStrtab, 0, 64, sizeof kTinyNames, 1},
                                     {11, kShtProgbits, kShfAlloc | kShfExecInstr, 128, 32, 128},
                                     {19, kShtProgbits, kShfAlloc | kShfExecInstr, text_b_offset, 0, 8}},
                                    {512, seg_filesz, seg_filesz}, 256, 512));
    EXPECT_EQ(b.size(), 512u + 56u);
    b.resize(b.size() + 112, 0xee);  // trailing bytes
    return b;
  };
  auto r = Cubin::parse(image(3 * 56, 160));
  EXPECT_FALSE(r.is_ok());
  if (!r.is_ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  for (const std::uint64_t text_b : {160u, 600u}) {
    const Bytes good = image(56, text_b);
    const Cubin c = parse_ok(good);
    ASSERT_EQ(c.segments.size(), 1u);
    EXPECT_TRUE(c.segments[0].covers_program_headers);
    auto once = c.write();
    ASSERT_TRUE(once.is_ok()) << once.status().to_string();
    ASSERT_EQ(once->size(), 568u);
    EXPECT_EQ(raw_layout(*once).offsets[3], std::min<std::uint64_t>(text_b, 568));
    const Cubin again = parse_ok(*once);
    auto twice = again.write();
    ASSERT_TRUE(twice.is_ok()) << twice.status().to_string();
    EXPECT_EQ(*twice, *once);
    if (text_b == 160) {
      EXPECT_EQ(*once, Bytes(good.begin(), good.end() - 112));
    }
  }
}

// An empty section at the end of the file (640, after the program header
// table), at its alignment (128). Growing .text.a by 8 bytes moves the end to
// 648; placed at its alignment the section would lie at 768, past the end,
// where a reader refuses it. The writer places it at the end.
TEST(CubinWriter, EmptySectionAtTheEndStaysInTheFile) {
  Cubin c = parse_ok(with_names(tiny_cubin({{1, kShtStrtab, 0, 64, sizeof kTinyNames, 1},
                                            {11, kShtProgbits, kShfAlloc | kShfExecInstr, 128, 32, 128},
                                            {19, kShtProgbits, kShfAlloc | kShfExecInstr, 640, 0, 128}},
                                           {128, 32, 32}, 256, 584)));
  ASSERT_TRUE(c.resize_section(2, 40).is_ok());
  auto once = c.write();
  ASSERT_TRUE(once.is_ok()) << once.status().to_string();
  EXPECT_EQ(once->size(), 648u);
  EXPECT_EQ(raw_layout(*once).offsets[3], 648u);
  const Cubin again = parse_ok(*once);
  auto twice = again.write();
  ASSERT_TRUE(twice.is_ok()) << twice.status().to_string();
  EXPECT_EQ(*twice, *once);
}

// A LOAD that covers no section ([400, 504): the last section header and the
// program header table) is kept as parsed. Emptying .text.a (128 bytes) moves
// both tables 152 bytes down and the file ends at 352: the kept extent lies
// past it. write() refuses rather than give an image a reader refuses.
TEST(CubinWriter, KeptSegmentPastTheEndOfTheFileIsAnError) {
  Cubin c = parse_ok(with_names(tiny_cubin(
      {{1, kShtStrtab, 0, 64, sizeof kTinyNames, 1}, {11, kShtProgbits, kShfAlloc | kShfExecInstr, 128, 128, 128}},
      {400, 104, 104}, 256, 448)));
  ASSERT_EQ(c.segments.size(), 1u);
  EXPECT_TRUE(c.segments[0].sections.empty());
  EXPECT_FALSE(c.segments[0].covers_program_headers);
  ASSERT_TRUE(c.write().is_ok());
  ASSERT_TRUE(c.resize_section(2, 0).is_ok());
  auto out = c.write();
  EXPECT_FALSE(out.is_ok());
  if (!out.is_ok()) {
    EXPECT_NE(out.status().message().find("segment 0"), std::string::npos) << out.status().to_string();
  }
}

}  // namespace
}  // namespace lithos::cubin
