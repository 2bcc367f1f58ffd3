#include "cubin/atomize.hpp"

#include <cstring>

#include "cubin/container_util.hpp"
#include "cubin/elf.hpp"
#include "cubin/fatbin.hpp"
#include "cubin/nvinfo.hpp"
#include "cubin/sass90.hpp"

namespace lithos::cubin {
namespace {

// Largest parameter buffer on sm_70 and later since CUDA 12.1.
constexpr std::uint32_t kMaxParamBytes = 32764;
// Text sections keep ptxas's granularity.
constexpr std::uint64_t kTextGranule = 128;

sass90::Instr load_instr(const Bytes& text, std::uint64_t at) {
  sass90::Instr i;
  std::memcpy(&i.lo, text.data() + at, 8);
  std::memcpy(&i.hi, text.data() + at + 8, 8);
  return i;
}
void store_instr(Bytes& text, std::uint64_t at, const sass90::Instr& i) {
  std::memcpy(text.data() + at, &i.lo, 8);
  std::memcpy(text.data() + at + 8, &i.hi, 8);
}

// Rewrites one kernel in `cubin`; returns the patch description (status
// kPatched, or why not, with the cubin then left unchanged for it). All
// checks come before the first change.
Result<KernelPatch> patch_kernel(Cubin& cubin, const CubinKernel& k) {
  KernelPatch p;
  p.name = k.name;
  if (!k.nvinfo) {
    p.status = PatchStatus::kNoParamInfo;
    return p;
  }
  auto info = read_nvinfo(cubin, *k.nvinfo);
  if (!info) return info.status();
  auto kparams = info->kparams();
  if (!kparams) return kparams.status();
  auto cbank = info->param_cbank();
  if (!cbank) return cbank.status();
  if (!cbank->has_value()) {
    p.status = PatchStatus::kNoParamInfo;
    return p;
  }
  const ParamCbank window = **cbank;
  p.param_count = static_cast<std::uint32_t>(kparams->size());
  p.param_bytes = info->cbank_param_size().value_or(window.size);
  if (const auto dims = info->cluster_dims()) {
    p.cluster[0] = (*dims)[0];
    p.cluster[1] = (*dims)[1];
    p.cluster[2] = (*dims)[2];
  }
  // Grid-synchronising code (on sm_90 it reads the grid-barrier workspace,
  // docs/cubin-format.md) is never split, whatever the launch says.
  auto sync = kernel_uses_grid_sync(cubin, k);
  p.cooperative = sync && *sync;
  p.bounds_offset = static_cast<std::uint32_t>(detail::align_up(p.param_bytes, 8));
  const std::uint32_t new_bytes = p.bounds_offset + 8;
  if (new_bytes > kMaxParamBytes || window.offset + new_bytes > 0xffffu) {
    p.status = PatchStatus::kParamSpaceFull;
    return p;
  }
  // The parameters must be the exact ordinals 0..n-1 for the new one to be n.
  for (const KParamInfo& kp : *kparams) {
    if (kp.ordinal >= p.param_count) {
      p.status = PatchStatus::kNoParamInfo;
      return p;
    }
  }

  ElfSection& text = cubin.sections[k.text];
  if (text.is_nobits() || text.data.size() < sass90::kInstrBytes || text.data.size() % sass90::kInstrBytes != 0 ||
      cubin.symbols[k.symbol].value != 0) {
    p.status = PatchStatus::kEmptyText;
    return p;
  }
  const sass90::Instr first = load_instr(text.data, 0);
  if (!sass90::displaceable(first)) {
    p.status = PatchStatus::kEntryNotMovable;
    return p;
  }
  // A relocation on the first instruction, or a relocation section for this
  // text that cannot be read, keeps the kernel as it is.
  const auto relocs = cubin.relocations_in(k.text, 0, sass90::kInstrBytes);
  if (!relocs || !relocs->empty()) {
    p.status = PatchStatus::kRelocationAtEntry;
    return p;
  }

  // Code: prelude at the end, a branch to it at the entry.
  const std::uint64_t at = detail::align_up(text.data.size(), kTextGranule);
  const std::vector<sass90::Instr> pre =
      sass90::prelude(static_cast<std::uint32_t>(window.offset) + p.bounds_offset, first, at);
  const std::uint64_t end = detail::align_up(at + pre.size() * sass90::kInstrBytes, kTextGranule);
  const std::uint64_t old_size = text.data.size();
  text.data.resize(end);
  for (std::uint64_t off = old_size; off < end; off += sass90::kInstrBytes) store_instr(text.data, off, sass90::nop());
  for (std::size_t i = 0; i < pre.size(); ++i) store_instr(text.data, at + i * sass90::kInstrBytes, pre[i]);
  store_instr(text.data, 0, sass90::bra(0, at));
  ElfSymbol& sym = cubin.symbols[k.symbol];
  if (sym.size < end) sym.size = end;

  // Attributes: the prelude's EXIT, the new parameter, the buffer size.
  std::vector<std::uint32_t> exits = info->exit_instr_offsets();
  exits.push_back(static_cast<std::uint32_t>(at + sass90::kAtomCheckExitIndex * sass90::kInstrBytes));
  if (Status s = info->set_exit_instr_offsets(exits); !s.is_ok()) return s;
  KParamInfo bounds;
  bounds.ordinal = static_cast<std::uint16_t>(p.param_count);
  bounds.offset = static_cast<std::uint16_t>(p.bounds_offset);
  bounds.size = 8;
  if (!kparams->empty()) {
    bounds.cbank = kparams->front().cbank;
    bounds.space = kparams->front().space;
  }
  if (Status s = info->add_kparam(bounds); !s.is_ok()) return s;
  ParamCbank grown = window;
  grown.size = static_cast<std::uint16_t>(new_bytes);
  if (Status s = info->set_param_cbank(grown); !s.is_ok()) return s;
  if (Status s = info->set_cbank_param_size(static_cast<std::uint16_t>(new_bytes)); !s.is_ok()) return s;
  if (Status s = write_nvinfo(cubin, *k.nvinfo, *info); !s.is_ok()) return s;
  if (k.constant0) {
    const std::uint64_t need = std::uint64_t{window.offset} + new_bytes;
    if (cubin.sections[*k.constant0].size() < need) {
      if (Status s = cubin.resize_section(*k.constant0, need); !s.is_ok()) return s;
    }
  }
  // Registers: the check uses R0..R3.
  const std::uint32_t regs = kernel_regcount(cubin, k).value_or(0);
  if (regs < sass90::kAtomCheckRegs) {
    if (Status s = set_kernel_regcount(cubin, k, sass90::kAtomCheckRegs); !s.is_ok()) return s;
  }
  p.status = PatchStatus::kPatched;
  return p;
}

}  // namespace

const char* patch_status_name(PatchStatus s) {
  switch (s) {
    case PatchStatus::kPatched: return "patched";
    case PatchStatus::kNotSm90: return "not-sm90";
    case PatchStatus::kNoParamInfo: return "no-param-info";
    case PatchStatus::kEntryNotMovable: return "entry-not-movable";
    case PatchStatus::kRelocationAtEntry: return "relocation-at-entry";
    case PatchStatus::kParamSpaceFull: return "param-space-full";
    case PatchStatus::kEmptyText: return "empty-text";
    case PatchStatus::kCooperative: return "cooperative";
    case PatchStatus::kNotRewritten: return "image-not-rewritten";
  }
  return "?";
}

std::size_t AtomizedCubin::patched_count() const {
  std::size_t n = 0;
  for (const auto& k : kernels) n += k.patched() ? 1u : 0u;
  return n;
}

Result<AtomizedCubin> atomize_cubin(ByteView image) {
  return detail::guarded([&]() -> Result<AtomizedCubin> {
    auto parsed = Cubin::parse(image);
    if (!parsed) return parsed.status();
    Cubin& cubin = *parsed;
    AtomizedCubin out;
    const std::vector<CubinKernel> kernels = cubin.kernels();
    if (cubin.sm_arch() != 90) {
      for (const auto& k : kernels) {
        KernelPatch p;
        p.name = k.name;
        p.status = PatchStatus::kNotSm90;
        out.kernels.push_back(std::move(p));
      }
      return Status::failed_precondition("not sm_90 code (sm_" + std::to_string(cubin.sm_arch()) + ")");
    }
    for (const auto& k : kernels) {
      // Every check comes before the first change, so a kernel refused
      // leaves the cubin as it was; an error after a change (a malformed
      // attribute) fails the whole image, and the original is loaded.
      auto p = patch_kernel(cubin, k);
      if (!p) return p.status().with_context("kernel " + k.name);
      out.kernels.push_back(std::move(*p));
    }
    if (out.patched_count() == 0) return Status::not_found("no kernel could be rewritten");
    auto bytes = cubin.write();
    if (!bytes) return bytes.status();
    out.image = std::move(*bytes);
    return out;
  });
}

}  // namespace lithos::cubin

namespace lithos::cubin {

Result<AtomizedImage> atomize_image(const void* image, int sm, std::string* ptx_out) {
  return detail::guarded([&]() -> Result<AtomizedImage> {
    if (image == nullptr) return Status::invalid_argument("no image");
    if (sm <= 0) return Status::failed_precondition("the device's compute capability is unknown");
    auto info = probe_image_in_memory(image);
    if (!info) return info.status();
    const void* base = image;
    if (info->kind == ImageKind::kFatbinWrapper) {
      base = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(info->wrapped));
      info = probe_image_in_memory(base);
      if (!info) return info.status().with_context("fatbin wrapper");
      if (info->kind != ImageKind::kFatbin) return Status::invalid_argument("the wrapper does not point to a fatbin");
    }
    const ByteView bytes(static_cast<const std::uint8_t*>(base), static_cast<std::size_t>(info->size));
    AtomizedImage out;
    switch (info->kind) {
      case ImageKind::kElf: {
        out.source = ImageSource::kCubin;
        auto c = atomize_cubin(bytes);
        if (!c) return c.status();
        out.cubin = std::move(*c);
        return out;
      }
      case ImageKind::kFatbin: {
        out.source = ImageSource::kFatbin;
        auto fb = parse_fatbin(bytes);
        if (!fb) return fb.status();
        const auto pick = select_entry(*fb, static_cast<unsigned>(sm));
        if (!pick) return Status::not_found("no entry for sm_" + std::to_string(sm));
        const FatbinEntry& e = fb->entries[*pick];
        auto plain = e.decompress();
        if (!plain) return plain.status().with_context("fatbin entry");
        if (e.is_ptx()) {
          if (ptx_out != nullptr) {
            std::size_t n = plain->size();
            while (n > 0 && (*plain)[n - 1] == 0) --n;
            ptx_out->assign(reinterpret_cast<const char*>(plain->data()), n);
          }
          return Status::failed_precondition("the driver would JIT PTX from this fatbin");
        }
        out.from_compressed = e.is_compressed();
        auto c = atomize_cubin(*plain);
        if (!c) return c.status();
        out.cubin = std::move(*c);
        return out;
      }
      case ImageKind::kPtx:
        if (ptx_out != nullptr && info->size > 0)
          ptx_out->assign(static_cast<const char*>(base), static_cast<std::size_t>(info->size - 1));
        return Status::failed_precondition("PTX: the driver would JIT it");
      default: return Status::invalid_argument("not a cubin, fatbin or PTX image");
    }
  });
}

}  // namespace lithos::cubin
