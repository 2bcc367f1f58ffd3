// Fuzz target for the container readers and writers: every input goes
// through the image probe, the fatbin parser (and the decompressors of its
// entries), the cubin parser and the .nv.info parser; whatever parses is
// written back and parsed again, and writing that must give the same bytes
// again (the writers' output is a fixed point), for cubins, fatbins and
// .nv.info alike.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cubin/elf.hpp"
#include "cubin/fatbin.hpp"
#include "cubin/nvinfo.hpp"

namespace {

using namespace lithos::cubin;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_container: %s\n", what);
    std::abort();
  }
}

void fuzz_nvinfo(ByteView data) {
  auto info = parse_nvinfo(data);
  if (!info.is_ok()) return;
  auto out = write_nvinfo(*info);
  check(out.is_ok(), "write_nvinfo failed on parsed records");
  check(out->size() == data.size() && std::equal(out->begin(), out->end(), data.begin()),
        ".nv.info round trip differs");
  (void)info->kparams();
  (void)info->param_cbank();
  (void)info->exit_instr_offsets();
  (void)info->cluster_dims();
  (void)info->uses_cooperative_groups();
  (void)info->instr_offset_lists();
}

void fuzz_cubin(ByteView data) {
  auto cubin = Cubin::parse(data);
  if (!cubin.is_ok()) return;
  (void)cubin->sm_arch();
  (void)cubin->virtual_arch();
  (void)cubin->arch_specific();
  for (const CubinKernel& k : cubin->kernels()) {
    (void)kernel_regcount(*cubin, k);
    (void)cubin->relocations_in(k.text, 0, 16);
  }
  for (std::uint32_t i = 0; i < cubin->sections.size(); ++i) {
    if (cubin->sections[i].type == kShtCudaInfo) fuzz_nvinfo(cubin->sections[i].data);
  }
  auto out = cubin->write();
  if (!out.is_ok()) return;  // e.g. a valid input whose rewrite exceeds a limit
  auto again = Cubin::parse(*out);
  check(again.is_ok(), "the written cubin does not parse");
  check(again->sections.size() == cubin->sections.size(), "section count changed");
  for (std::size_t i = 0; i < cubin->sections.size(); ++i) {
    check(again->sections[i].data == cubin->sections[i].data || i == again->symtab, "section contents changed");
    check(again->sections[i].size() == cubin->sections[i].size(), "section size changed");
  }
  check(again->symbols.size() == cubin->symbols.size(), "symbol count changed");
  auto out2 = again->write();
  check(out2.is_ok(), "second write failed");
  check(*out2 == *out, "writer output is not a fixed point");
}

void fuzz_fatbin(ByteView data) {
  auto fatbins = parse_fatbins(data);
  if (!fatbins.is_ok()) return;
  for (const Fatbin& f : *fatbins) {
    (void)select_entry(f, 90);
    (void)select_entry(f, 86);
    for (const FatbinEntry& e : f.entries) {
      (void)e.identifier();
      (void)e.options();
      if (e.uncompressed_size > (16u << 20)) continue;  // keep each run cheap
      auto plain = e.decompress();
      if (plain.is_ok() && e.is_elf()) fuzz_cubin(*plain);
    }
  }
  auto out = write_fatbins(*fatbins);
  check(out.is_ok(), "write_fatbins failed on parsed fatbins");
  auto again = parse_fatbins(*out);
  check(again.is_ok(), "written fatbins do not parse");
  check(again->size() == fatbins->size(), "fatbin count changed");
  for (std::size_t i = 0; i < fatbins->size(); ++i) {
    check((*again)[i].entries.size() == (*fatbins)[i].entries.size(), "entry count changed");
  }
  auto out2 = write_fatbins(*again);
  check(out2.is_ok(), "second write_fatbins failed");
  check(*out2 == *out, "fatbin writer output is not a fixed point");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteView in(data, size);
  (void)detect_image_kind(in);
  auto info = probe_image(in);
  (void)info;
  fuzz_fatbin(in);
  fuzz_cubin(in);
  fuzz_nvinfo(in);
  if (size >= 4) fuzz_nvinfo(in.subspan(4));
  return 0;
}
