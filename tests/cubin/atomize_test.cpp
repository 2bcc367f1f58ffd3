// The sm_90 splicer and the atomizing rewrite, checked structurally with the
// project's own readers on code compiled here by nvcc/ptxas.
#include "cubin/atomize.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "cubin/elf.hpp"
#include "cubin/fatbin.hpp"
#include "cubin/nvinfo.hpp"
#include "cubin/sass90.hpp"

namespace lithos::cubin {
namespace {

using sass90::Instr;

Bytes fixture(const std::string& name) {
  std::ifstream f(std::string(LITHOS_CUBIN_FIXTURES) + "/" + name, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

Instr at(const Bytes& text, std::uint64_t off) {
  Instr i;
  std::memcpy(&i.lo, text.data() + off, 8);
  std::memcpy(&i.hi, text.data() + off + 8, 8);
  return i;
}

const ElfSection& text_of(const Cubin& c, const std::string& kernel) {
  const auto k = c.find_kernel(kernel);
  EXPECT_TRUE(k.has_value()) << kernel;
  return c.sections[k->text];
}

// ---- sass90 ------------------------------------------------------------------

TEST(Sass90, BranchEncodingMatchesPtxasWords) {
  // (offset of the BRA, target, low word, bits 64..81 of the high word) as
  // ptxas 13.0 wrote them (docs/atomizer.md, "Encoding facts").
  struct Case {
    std::uint64_t from, to, lo, hi_offset_bits;
  };
  const Case cases[] = {
      {0xa0, 0xa0, 0xfffffffc00fc7947ull, 0x3ffff},    // BRA to itself
      {0x1360, 0x70, 0xffffffec00407947ull, 0x3ffff},  // backward over 300 stores (guard bits differ)
      {0x50, 0x5b0, 0x0000000400547947ull, 0},         // forward
      {0x50, 0x1370, 0x0000001000c47947ull, 0},
  };
  for (const auto& c : cases) {
    const Instr i = sass90::bra(c.from, c.to);
    EXPECT_EQ(i.lo & ~0xf000ull, c.lo & ~0xf000ull) << std::hex << c.from << "->" << c.to;
    EXPECT_EQ(i.hi & 0x3ffffull, c.hi_offset_bits);
    EXPECT_EQ(sass90::bra_target(i, c.from), c.to);
  }
  EXPECT_FALSE(sass90::bra_target(sass90::nop(), 0).has_value());
}

TEST(Sass90, EveryPtxasBranchDecodesToAnInstruction) {
  const Bytes img = fixture("branches.cubin");
  auto c = Cubin::parse(img);
  ASSERT_TRUE(c) << c.status().to_string();
  const Bytes& text = text_of(*c, "branches").data;
  int branches = 0;
  for (std::uint64_t off = 0; off < text.size(); off += 16) {
    const Instr i = at(text, off);
    const auto t = sass90::bra_target(i, off);
    if (!t) continue;
    ++branches;
    EXPECT_LT(*t, text.size());
    EXPECT_EQ(*t % 16, 0u);
    // Re-encoding the decoded target gives the same offset bits.
    const Instr again = sass90::bra(off, *t);
    EXPECT_EQ(again.lo & 0xffffffffffff0000ull, i.lo & 0xffffffffffff0000ull);
    EXPECT_EQ(again.hi & 0x3ffffull, i.hi & 0x3ffffull);
  }
  EXPECT_GE(branches, 3);  // forward, backward, the final BRA-to-self
}

TEST(Sass90, AtomCheckEqualsPtxasAtEveryOffset) {
  for (const int pad : {0, 8, 1000, 4096}) {
    const Bytes img = fixture("atom_check." + std::to_string(pad) + ".cubin");
    auto c = Cubin::parse(img);
    ASSERT_TRUE(c) << pad << ": " << c.status().to_string();
    const Bytes& text = text_of(*c, "atom_check").data;
    const std::uint32_t bounds = 0x210u + static_cast<std::uint32_t>(pad);
    const std::vector<Instr> check = sass90::atom_check(bounds);
    ASSERT_GE(text.size(), (check.size() + 1) * 16);
    // ptxas puts the stack-pointer load first; the check follows.
    for (std::size_t i = 0; i < check.size(); ++i) {
      EXPECT_EQ(at(text, 16 * (i + 1)), check[i]) << "pad " << pad << " instruction " << i;
    }
    EXPECT_EQ(sass90::opcode(check[sass90::kAtomCheckExitIndex]), sass90::op::kExit);
  }
}

TEST(Sass90, PreludeEndsWithTheDisplacedInstructionAndABranchBack) {
  const Instr first{0x00000a00ff017b82ull, 0x3c0fe20000000800ull};  // LDC R1, c[0x0][0x28] with reuse bits
  ASSERT_TRUE(sass90::displaceable(first));
  const auto p = sass90::prelude(0x228, first, 0x400);
  ASSERT_EQ(p.size(), sass90::atom_check(0x228).size() + 2);
  EXPECT_EQ(p[p.size() - 2].lo, first.lo);
  EXPECT_EQ(p[p.size() - 2].hi, first.hi & ~(0xfull << 58));  // reuse hints cleared
  EXPECT_EQ(sass90::bra_target(p.back(), 0x400 + 16 * (p.size() - 1)), 16u);
  EXPECT_FALSE(sass90::displaceable(sass90::bra(0, 0x100)));
  EXPECT_FALSE(sass90::displaceable(Instr{0x000000000000794dull, 0}));  // EXIT
}

// ---- atomize_cubin --------------------------------------------------------------

struct Checked {
  int patched = 0;
};

// Every structural promise of atomize.hpp, for every kernel of `before`.
Checked check_rewrite(const Bytes& before_img, const AtomizedCubin& out) {
  Checked r;
  auto before = Cubin::parse(before_img);
  auto after = Cubin::parse(out.image);
  EXPECT_TRUE(before && after);
  if (!before || !after) return r;
  std::map<std::string, const KernelPatch*> by_name;
  for (const auto& k : out.kernels) by_name[k.name] = &k;
  EXPECT_EQ(before->kernels().size(), out.kernels.size());
  std::map<std::string, bool> touched;
  for (const CubinKernel& kb : before->kernels()) {
    const KernelPatch* p = by_name[kb.name];
    EXPECT_NE(p, nullptr) << kb.name;
    if (p == nullptr || !p->patched()) continue;
    ++r.patched;
    const auto ka = after->find_kernel(kb.name);
    EXPECT_TRUE(ka.has_value());
    if (!ka) continue;
    const Bytes& tb = before->sections[kb.text].data;
    const Bytes& ta = after->sections[ka->text].data;
    touched[before->sections[kb.text].name] = true;
    // Original code unchanged after the first instruction; prelude appended.
    EXPECT_GT(ta.size(), tb.size());
    EXPECT_EQ(ta.size() % 128, 0u);
    EXPECT_TRUE(std::equal(tb.begin() + 16, tb.end(), ta.begin() + 16)) << kb.name;
    const auto stub = sass90::bra_target(at(ta, 0), 0);
    EXPECT_TRUE(stub.has_value());
    if (!stub) continue;
    EXPECT_GE(*stub, tb.size());
    auto info_b = read_nvinfo(*before, *kb.nvinfo);
    auto info_a = read_nvinfo(*after, *ka->nvinfo);
    EXPECT_TRUE(info_b && info_a);
    if (!info_b || !info_a) continue;
    touched[before->sections[*kb.nvinfo].name] = true;
    const auto cb = *info_a->param_cbank();
    EXPECT_TRUE(cb.has_value());
    const auto expect_pre = sass90::prelude(cb->offset + p->bounds_offset, at(tb, 0), *stub);
    for (std::size_t i = 0; i < expect_pre.size(); ++i) EXPECT_EQ(at(ta, *stub + 16 * i), expect_pre[i]);
    // Parameters: one more, 8 bytes at bounds_offset, sizes agree.
    auto pa = info_a->kparams();
    auto pb = info_b->kparams();
    EXPECT_EQ(pa->size(), pb->size() + 1);
    bool found = false;
    for (const auto& kp : *pa) {
      if (kp.ordinal == p->param_count) {
        found = true;
        EXPECT_EQ(kp.offset, p->bounds_offset);
        EXPECT_EQ(kp.size, 8);
      }
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(p->bounds_offset % 8, 0u);
    EXPECT_GE(p->bounds_offset, p->param_bytes);
    EXPECT_EQ(cb->size, p->bounds_offset + 8);
    EXPECT_EQ(info_a->cbank_param_size(), p->bounds_offset + 8);
    if (ka->constant0) {
      EXPECT_GE(after->sections[*ka->constant0].size(), cb->offset + p->bounds_offset + 8u);
      touched[before->sections[*kb.constant0].name] = true;
    }
    // EXIT offsets: the old ones plus the prelude's; each names an EXIT.
    const auto exits = info_a->exit_instr_offsets();
    EXPECT_EQ(exits.size(), info_b->exit_instr_offsets().size() + 1);
    for (const auto e : exits) EXPECT_EQ(sass90::opcode(at(ta, e)), sass90::op::kExit) << kb.name << " @" << e;
    EXPECT_GE(after->symbols[ka->symbol].size, ta.size());
    EXPECT_GE(kernel_regcount(*after, *ka).value_or(0), sass90::kAtomCheckRegs);
  }
  // Everything else is untouched (the global .nv.info may change only in
  // REGCOUNT, the symbol table only in sizes).
  for (const ElfSection& sb : before->sections) {
    if (touched.count(sb.name) != 0 || sb.name == ".nv.info" || sb.name == ".symtab") continue;
    const auto ia = after->find_section(sb.name);
    EXPECT_TRUE(ia.has_value()) << sb.name;
    if (ia) {
      EXPECT_EQ(after->sections[*ia].data, sb.data) << sb.name;
    }
  }
  return r;
}

TEST(Atomize, RewritesEveryKernelOfTheCorpus) {
  const Bytes img = fixture("corpus_kernels.sm90.cubin");
  ASSERT_FALSE(img.empty());
  auto out = atomize_cubin(img);
  ASSERT_TRUE(out) << out.status().to_string();
  EXPECT_EQ(out->kernels.size(), 4u);
  EXPECT_EQ(check_rewrite(img, *out).patched, 4);
  for (const auto& k : out->kernels) {
    if (k.name == "many_params") {
      EXPECT_EQ(k.param_count, 9u);
      EXPECT_EQ(k.bounds_offset % 8, 0u);
    }
  }
}

TEST(Atomize, RewritesTheContainerFixtures) {
  for (const char* name : {"kernels.sm90.cubin", "coop.sm90.cubin", "cluster.sm90.cubin", "misc.sm90.cubin"}) {
    const Bytes img = fixture(name);
    ASSERT_FALSE(img.empty()) << name;
    auto out = atomize_cubin(img);
    ASSERT_TRUE(out) << name << ": " << out.status().to_string();
    const Checked c = check_rewrite(img, *out);
    EXPECT_GT(c.patched, 0) << name;
    // Atomizing again is refused or adds another parameter, never corrupts.
    auto twice = atomize_cubin(out->image);
    if (twice) {
      EXPECT_TRUE(Cubin::parse(twice->image));
    }
  }
}

TEST(Atomize, ClusterDimsComeFromTheAttributes) {
  auto out = atomize_cubin(fixture("cluster.sm90.cubin"));
  ASSERT_TRUE(out);
  bool any = false;
  for (const auto& k : out->kernels) any = any || k.cluster[0] > 0;
  EXPECT_TRUE(any);
}

TEST(Atomize, RefusesOtherArchitecturesAndGarbage) {
  auto sm80 = atomize_cubin(fixture("kernels.sm80.cubin"));
  EXPECT_FALSE(sm80);
  EXPECT_FALSE(atomize_cubin(Bytes{1, 2, 3}));
  Bytes img = fixture("corpus_kernels.sm90.cubin");
  img.resize(img.size() / 2);
  EXPECT_FALSE(atomize_cubin(img));
}

TEST(AtomizeImage, FatbinsOfEveryCompressionGiveTheSameCubin) {
  const Bytes plain = fixture("kernels.plain.fatbin");
  auto a = atomize_image(plain.data(), 90, nullptr);
  ASSERT_TRUE(a) << a.status().to_string();
  EXPECT_EQ(a->source, ImageSource::kFatbin);
  EXPECT_FALSE(a->from_compressed);
  for (const char* name : {"kernels.zstd.fatbin", "kernels.lz4.fatbin"}) {
    const Bytes f = fixture(name);
    auto b = atomize_image(f.data(), 90, nullptr);
    ASSERT_TRUE(b) << name << ": " << b.status().to_string();
    EXPECT_TRUE(b->from_compressed) << name;
    EXPECT_EQ(b->cubin.image, a->cubin.image) << name;
  }
  // The cubin inside equals the one nvcc writes alone, rewritten.
  auto direct = atomize_cubin(fixture("kernels.sm90.cubin"));
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->kernels.size(), a->cubin.kernels.size());
}

TEST(AtomizeImage, PtxIsHandedBackForJit) {
  Bytes ptx = fixture("kernels.sm90.ptx");
  ASSERT_FALSE(ptx.empty());
  ptx.push_back(0);
  std::string out;
  auto r = atomize_image(ptx.data(), 90, &out);
  EXPECT_FALSE(r);
  EXPECT_NE(out.find(".entry"), std::string::npos);
  // A fatbin on a device with no SASS for it hands back its PTX too.
  const Bytes fb = fixture("kernels.zstd.fatbin");
  std::string from_fatbin;
  EXPECT_FALSE(atomize_image(fb.data(), 100, &from_fatbin));
  EXPECT_NE(from_fatbin.find(".entry"), std::string::npos);
  EXPECT_FALSE(atomize_image(fb.data(), 0, nullptr));  // unknown device
}

}  // namespace
}  // namespace lithos::cubin
