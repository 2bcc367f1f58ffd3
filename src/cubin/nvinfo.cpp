#include "cubin/nvinfo.hpp"

#include <algorithm>
#include <utility>

#include "cubin/container_util.hpp"

namespace lithos::cubin {
namespace {

Status bad(const std::string& what) { return Status::invalid_argument(".nv.info: " + what); }

constexpr std::uint64_t kKparamSize = 12;

struct NamedAttr {
  std::uint8_t id;
  const char* name;
};

constexpr NamedAttr kNames[] = {
    {0x00, "EIATTR_ERROR"},
    {0x01, "EIATTR_PAD"},
    {0x02, "EIATTR_IMAGE_SLOT"},
    {0x03, "EIATTR_JUMPTABLE_RELOCS"},
    {0x04, "EIATTR_CTAIDZ_USED"},
    {0x05, "EIATTR_MAX_THREADS"},
    {0x06, "EIATTR_IMAGE_OFFSET"},
    {0x07, "EIATTR_IMAGE_SIZE"},
    {0x08, "EIATTR_TEXTURE_NORMALIZED"},
    {0x09, "EIATTR_SAMPLER_INIT"},
    {0x0a, "EIATTR_PARAM_CBANK"},
    {0x0b, "EIATTR_SMEM_PARAM_OFFSETS"},
    {0x0c, "EIATTR_CBANK_PARAM_OFFSETS"},
    {0x0d, "EIATTR_SYNC_STACK"},
    {0x0e, "EIATTR_TEXID_SAMPID_MAP"},
    {0x0f, "EIATTR_EXTERNS"},
    {0x10, "EIATTR_REQNTID"},
    {0x11, "EIATTR_FRAME_SIZE"},
    {0x12, "EIATTR_MIN_STACK_SIZE"},
    {0x13, "EIATTR_SAMPLER_FORCE_UNNORMALIZED"},
    {0x14, "EIATTR_BINDLESS_IMAGE_OFFSETS"},
    {0x15, "EIATTR_BINDLESS_TEXTURE_BANK"},
    {0x16, "EIATTR_BINDLESS_SURFACE_BANK"},
    {0x17, "EIATTR_KPARAM_INFO"},
    {0x18, "EIATTR_SMEM_PARAM_SIZE"},
    {0x19, "EIATTR_CBANK_PARAM_SIZE"},
    {0x1a, "EIATTR_QUERY_NUMATTRIB"},
    {0x1b, "EIATTR_MAXREG_COUNT"},
    {0x1c, "EIATTR_EXIT_INSTR_OFFSETS"},
    {0x1d, "EIATTR_S2RCTAID_INSTR_OFFSETS"},
    {0x1e, "EIATTR_CRS_STACK_SIZE"},
    {0x1f, "EIATTR_NEED_CNP_WRAPPER"},
    {0x20, "EIATTR_NEED_CNP_PATCH"},
    {0x21, "EIATTR_EXPLICIT_CACHING"},
    {0x22, "EIATTR_ISTYPEP_USED"},
    {0x23, "EIATTR_MAX_STACK_SIZE"},
    {0x24, "EIATTR_SUQ_USED"},
    {0x25, "EIATTR_LD_CACHEMOD_INSTR_OFFSETS"},
    {0x26, "EIATTR_LOAD_CACHE_REQUEST"},
    {0x27, "EIATTR_ATOM_SYS_INSTR_OFFSETS"},
    {0x28, "EIATTR_COOP_GROUP_INSTR_OFFSETS"},
    {0x29, "EIATTR_COOP_GROUP_MASK_REGIDS"},
    {0x2a, "EIATTR_SW1850030_WAR"},
    {0x2b, "EIATTR_WMMA_USED"},
    {0x2c, "EIATTR_HAS_PRE_V10_OBJECT"},
    {0x2d, "EIATTR_ATOMF16_EMUL_INSTR_OFFSETS"},
    {0x2e, "EIATTR_ATOM16_EMUL_INSTR_REG_MAP"},
    {0x2f, "EIATTR_REGCOUNT"},
    {0x30, "EIATTR_SW2393858_WAR"},
    {0x31, "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS"},
    {0x32, "EIATTR_SHARED_SCRATCH"},
    {0x33, "EIATTR_STATISTICS"},
    {0x34, "EIATTR_INDIRECT_BRANCH_TARGETS"},
    {0x35, "EIATTR_SW2861232_WAR"},
    {0x36, "EIATTR_SW_WAR"},
    {0x37, "EIATTR_CUDA_API_VERSION"},
    {0x38, "EIATTR_NUM_MBARRIERS"},
    {0x39, "EIATTR_MBARRIER_INSTR_OFFSETS"},
    {0x3a, "EIATTR_COROUTINE_RESUME_OFFSETS"},
    {0x3b, "EIATTR_SAM_REGION_STACK_SIZE"},
    {0x3c, "EIATTR_PER_REG_TARGET_PERF_STATS"},
    {0x3d, "EIATTR_CTA_PER_CLUSTER"},
    {0x3e, "EIATTR_EXPLICIT_CLUSTER"},
    {0x3f, "EIATTR_MAX_CLUSTER_RANK"},
    {0x40, "EIATTR_INSTR_REG_MAP"},
    {0x41, "EIATTR_RESERVED_SMEM_USED"},
    {0x42, "EIATTR_RESERVED_SMEM_0_SIZE"},
    {0x43, "EIATTR_UCODE_SECTION_DATA"},
    {0x44, "EIATTR_UNUSED_LOAD_BYTE_OFFSET"},
    {0x45, "EIATTR_KPARAM_INFO_V2"},
    {0x46, "EIATTR_SYSCALL_OFFSETS"},
    {0x47, "EIATTR_SW_WAR_MEMBAR_SYS_INSTR_OFFSETS"},
    {0x48, "EIATTR_GRAPHICS_GLOBAL_CBANK"},
    {0x49, "EIATTR_SHADER_TYPE"},
    {0x4a, "EIATTR_VRC_CTA_INIT_COUNT"},
    {0x4b, "EIATTR_TOOLS_PATCH_FUNC"},
    {0x4c, "EIATTR_NUM_BARRIERS"},
    {0x4d, "EIATTR_TEXMODE_INDEPENDENT"},
    {0x4e, "EIATTR_PERF_STATISTICS"},
    {0x4f, "EIATTR_AT_ENTRY_FRAGMENTS"},
    {0x50, "EIATTR_SPARSE_MMA_MASK"},
    {0x51, "EIATTR_TCGEN05_1CTA_USED"},
    {0x52, "EIATTR_TCGEN05_2CTA_USED"},
    {0x53, "EIATTR_GEN_ERRBAR_AT_EXIT"},
    {0x54, "EIATTR_REG_RECONFIG"},
    {0x55, "EIATTR_ANNOTATIONS"},
    {0x56, "EIATTR_UNKNOWN"},
    {0x57, "EIATTR_STACK_CANARY_TRAP_OFFSETS"},
    {0x58, "EIATTR_STUB_FUNCTION_KIND"},
    {0x59, "EIATTR_LOCAL_CTA_ASYNC_STORE_OFFSETS"},
    {0x5a, "EIATTR_MERCURY_FINALIZER_OPTIONS"},
    {0x5b, "EIATTR_BLOCKS_ARE_CLUSTERS"},
    {0x5c, "EIATTR_SANITIZE"},
    {0x5d, "EIATTR_SYSCALLS_FALLBACK"},
    {0x5e, "EIATTR_CUDA_REQ"},
    {0x5f, "EIATTR_MERCURY_ISA_VERSION"},
};

// Offset lists a rewrite of a kernel's text must keep pointing at the same
// instructions.
constexpr std::uint8_t kOffsetLists[] = {
    eiattr::kExitInstrOffsets,           eiattr::kS2rctaidInstrOffsets,   eiattr::kLdCachemodInstrOffsets,
    eiattr::kAtomSysInstrOffsets,        eiattr::kCoopGroupInstrOffsets,  eiattr::kAtomf16EmulInstrOffsets,
    eiattr::kIntWarpWideInstrOffsets,    eiattr::kIndirectBranchTargets,  eiattr::kMbarrierInstrOffsets,
    eiattr::kCoroutineResumeOffsets,     eiattr::kUnusedLoadByteOffset,   eiattr::kSyscallOffsets,
    eiattr::kSwWarMembarSysInstrOffsets, eiattr::kStackCanaryTrapOffsets, eiattr::kLocalCtaAsyncStoreOffsets,
};

Bytes words_to_bytes(const std::vector<std::uint32_t>& words) {
  Bytes b;
  b.reserve(words.size() * 4);
  for (std::uint32_t w : words) append<std::uint32_t>(b, w);
  return b;
}

std::optional<std::array<std::uint32_t, 3>> three_words(const NvInfo& info, std::uint8_t attr) {
  const auto i = info.find(attr);
  if (!i) return std::nullopt;
  const NvInfoRecord& r = info.records[*i];
  if (r.format != EiFormat::kSval) return std::nullopt;
  const std::vector<std::uint32_t> w = r.words();
  if (w.size() < 3) return std::nullopt;
  return std::array<std::uint32_t, 3>{w[0], w[1], w[2]};
}

}  // namespace

const char* eiattr_name(std::uint8_t attr) {
  for (const NamedAttr& a : kNames) {
    if (a.id == attr) return a.name;
  }
  return nullptr;
}

std::vector<std::uint32_t> NvInfoRecord::words() const {
  try {
    std::vector<std::uint32_t> w;
    if (format != EiFormat::kSval) return w;
    ByteReader r(payload);
    w.reserve(payload.size() / 4);
    for (std::uint64_t o = 0; o + 4 <= payload.size(); o += 4) w.push_back(r.u32(o));
    return w;
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

NvInfoRecord NvInfoRecord::nval(std::uint8_t attr) {
  NvInfoRecord r;
  r.format = EiFormat::kNval;
  r.attr = attr;
  return r;
}
NvInfoRecord NvInfoRecord::bval(std::uint8_t attr, std::uint8_t v) {
  NvInfoRecord r;
  r.format = EiFormat::kBval;
  r.attr = attr;
  r.value = v;
  return r;
}
NvInfoRecord NvInfoRecord::hval(std::uint8_t attr, std::uint16_t v) {
  NvInfoRecord r;
  r.format = EiFormat::kHval;
  r.attr = attr;
  r.value = v;
  return r;
}
NvInfoRecord NvInfoRecord::sval(std::uint8_t attr, Bytes payload) {
  NvInfoRecord r;
  r.format = EiFormat::kSval;
  r.attr = attr;
  r.payload = std::move(payload);
  return r;
}
NvInfoRecord NvInfoRecord::sval_words(std::uint8_t attr, const std::vector<std::uint32_t>& words) {
  return sval(attr, words_to_bytes(words));
}

std::uint32_t KParamInfo::flags_word() const {
  return static_cast<std::uint32_t>(log_align) | (static_cast<std::uint32_t>(space & 0xf) << 8) |
         (static_cast<std::uint32_t>(cbank & 0x1f) << 12) | (smem_space ? (1u << 17) : 0u) |
         (static_cast<std::uint32_t>(size & 0x3fff) << 18);
}

KParamInfo KParamInfo::decode(std::uint32_t index, std::uint32_t ordinal_offset, std::uint32_t flags) {
  KParamInfo p;
  p.index = index;
  p.ordinal = static_cast<std::uint16_t>(ordinal_offset & 0xffff);
  p.offset = static_cast<std::uint16_t>(ordinal_offset >> 16);
  p.log_align = static_cast<std::uint8_t>(flags & 0xff);
  p.space = static_cast<std::uint8_t>((flags >> 8) & 0xf);
  p.cbank = static_cast<std::uint8_t>((flags >> 12) & 0x1f);
  p.smem_space = ((flags >> 17) & 1) != 0;
  p.size = static_cast<std::uint16_t>(flags >> 18);
  return p;
}

Bytes KParamInfo::encode() const {
  return words_to_bytes(
      {index, static_cast<std::uint32_t>(ordinal) | (static_cast<std::uint32_t>(offset) << 16), flags_word()});
}

std::vector<std::size_t> NvInfo::find_all(std::uint8_t attr) const {
  try {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (records[i].attr == attr) out.push_back(i);
    }
    return out;
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

std::optional<std::size_t> NvInfo::find(std::uint8_t attr) const {
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (records[i].attr == attr) return i;
  }
  return std::nullopt;
}

std::optional<std::size_t> NvInfo::find_indexed(std::uint8_t attr, std::uint32_t symbol) const {
  for (std::size_t i = 0; i < records.size(); ++i) {
    const NvInfoRecord& r = records[i];
    if (r.attr != attr || r.format != EiFormat::kSval || r.payload.size() < 8) continue;
    ByteReader br(r.payload);
    if (br.u32(0) == symbol) return i;
  }
  return std::nullopt;
}

std::optional<std::uint32_t> NvInfo::indexed_value(std::uint8_t attr, std::uint32_t symbol) const {
  const auto i = find_indexed(attr, symbol);
  if (!i) return std::nullopt;
  ByteReader br(records[*i].payload);
  return br.u32(4);
}

Status NvInfo::set_indexed_value(std::uint8_t attr, std::uint32_t symbol, std::uint32_t value) {
  return detail::guarded([&]() -> Status {
    if (const auto i = find_indexed(attr, symbol)) {
      put<std::uint32_t>(records[*i].payload, 4, value);
      return Status::ok();
    }
    NvInfoRecord rec = NvInfoRecord::sval_words(attr, {symbol, value});
    const std::vector<std::size_t> all = find_all(attr);
    const auto at = all.empty() ? records.end() : records.begin() + static_cast<std::ptrdiff_t>(all.back() + 1);
    records.insert(at, std::move(rec));
    return Status::ok();
  });
}

Status NvInfo::insert_before(std::uint8_t before, NvInfoRecord record) {
  return detail::guarded([&]() -> Status {
    const auto i = find(before);
    const auto at = i ? records.begin() + static_cast<std::ptrdiff_t>(*i) : records.end();
    records.insert(at, std::move(record));
    return Status::ok();
  });
}

void NvInfo::remove_all(std::uint8_t attr) {
  records.erase(std::remove_if(records.begin(), records.end(), [&](const NvInfoRecord& r) { return r.attr == attr; }),
                records.end());
}

Result<std::vector<KParamInfo>> NvInfo::kparams() const {
  return detail::guarded([&]() -> Result<std::vector<KParamInfo>> {
    std::vector<KParamInfo> out;
    for (const NvInfoRecord& r : records) {
      if (r.attr != eiattr::kKparamInfo) continue;
      if (r.format != EiFormat::kSval || r.payload.size() != kKparamSize) {
        return bad("KPARAM_INFO record of " + std::to_string(r.payload.size()) + " bytes");
      }
      ByteReader br(r.payload);
      out.push_back(KParamInfo::decode(br.u32(0), br.u32(4), br.u32(8)));
    }
    return out;
  });
}

Status NvInfo::add_kparam(const KParamInfo& p) {
  return detail::guarded([&]() -> Status {
    if (p.size > 0x3fff) return bad("parameter size " + std::to_string(p.size) + " does not fit 14 bits");
    NvInfoRecord rec = NvInfoRecord::sval(eiattr::kKparamInfo, p.encode());
    const std::vector<std::size_t> all = find_all(eiattr::kKparamInfo);
    if (all.empty()) {
      // Where ptxas puts them: right after CUDA_API_VERSION.
      const auto api = find(eiattr::kCudaApiVersion);
      const auto at = api ? records.begin() + static_cast<std::ptrdiff_t>(*api + 1) : records.begin();
      records.insert(at, std::move(rec));
      return Status::ok();
    }
    for (std::size_t i : all) {
      ByteReader br(records[i].payload);
      const auto ordinal = static_cast<std::uint16_t>(br.u32(4) & 0xffff);
      if (records[i].payload.size() == kKparamSize && ordinal < p.ordinal) {
        records.insert(records.begin() + static_cast<std::ptrdiff_t>(i), std::move(rec));
        return Status::ok();
      }
    }
    records.insert(records.begin() + static_cast<std::ptrdiff_t>(all.back() + 1), std::move(rec));
    return Status::ok();
  });
}

Result<std::optional<ParamCbank>> NvInfo::param_cbank() const {
  return detail::guarded([&]() -> Result<std::optional<ParamCbank>> {
    const auto i = find(eiattr::kParamCbank);
    if (!i) return std::optional<ParamCbank>{};
    const NvInfoRecord& r = records[*i];
    if (r.format != EiFormat::kSval || r.payload.size() != 8) return bad("PARAM_CBANK record is not 8 bytes");
    ByteReader br(r.payload);
    ParamCbank c;
    c.symbol = br.u32(0);
    const std::uint32_t w = br.u32(4);
    c.offset = static_cast<std::uint16_t>(w & 0xffff);
    c.size = static_cast<std::uint16_t>(w >> 16);
    return std::optional<ParamCbank>{c};
  });
}

Status NvInfo::set_param_cbank(const ParamCbank& c) {
  return detail::guarded([&]() -> Status {
    std::vector<std::uint32_t> w = {c.symbol,
                                    static_cast<std::uint32_t>(c.offset) | (static_cast<std::uint32_t>(c.size) << 16)};
    if (const auto i = find(eiattr::kParamCbank)) {
      records[*i] = NvInfoRecord::sval_words(eiattr::kParamCbank, w);
    } else {
      return insert_before(eiattr::kSwWar, NvInfoRecord::sval_words(eiattr::kParamCbank, w));
    }
    return Status::ok();
  });
}

std::optional<std::uint16_t> NvInfo::cbank_param_size() const {
  const auto i = find(eiattr::kCbankParamSize);
  if (!i || records[*i].format != EiFormat::kHval) return std::nullopt;
  return records[*i].value;
}

Status NvInfo::set_cbank_param_size(std::uint16_t size) {
  return detail::guarded([&]() -> Status {
    if (const auto i = find(eiattr::kCbankParamSize)) {
      records[*i] = NvInfoRecord::hval(eiattr::kCbankParamSize, size);
    } else if (has(eiattr::kParamCbank)) {
      return insert_before(eiattr::kParamCbank, NvInfoRecord::hval(eiattr::kCbankParamSize, size));
    } else {
      return insert_before(eiattr::kSwWar, NvInfoRecord::hval(eiattr::kCbankParamSize, size));
    }
    return Status::ok();
  });
}

std::vector<std::uint32_t> NvInfo::exit_instr_offsets() const {
  try {
    std::vector<std::uint32_t> out;
    for (const NvInfoRecord& r : records) {
      if (r.attr != eiattr::kExitInstrOffsets) continue;
      const std::vector<std::uint32_t> w = r.words();
      out.insert(out.end(), w.begin(), w.end());
    }
    return out;
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

Status NvInfo::set_exit_instr_offsets(const std::vector<std::uint32_t>& offsets) {
  return detail::guarded([&]() -> Status {
    if (offsets.size() * 4 > 0xffff) return bad("too many EXIT offsets");
    NvInfoRecord rec = NvInfoRecord::sval_words(eiattr::kExitInstrOffsets, offsets);
    const std::vector<std::size_t> all = find_all(eiattr::kExitInstrOffsets);
    if (all.empty()) {
      const auto at = find(eiattr::kCbankParamSize);
      records.insert(at ? records.begin() + static_cast<std::ptrdiff_t>(*at) : records.end(), std::move(rec));
      return Status::ok();
    }
    records[all.front()] = std::move(rec);
    for (auto it = all.rbegin(); it != all.rend() && *it != all.front(); ++it) {
      records.erase(records.begin() + static_cast<std::ptrdiff_t>(*it));
    }
    return Status::ok();
  });
}

std::vector<std::pair<std::uint8_t, std::vector<std::uint32_t>>> NvInfo::instr_offset_lists() const {
  try {
    std::vector<std::pair<std::uint8_t, std::vector<std::uint32_t>>> out;
    for (const NvInfoRecord& r : records) {
      if (r.format != EiFormat::kSval) continue;
      if (std::find(std::begin(kOffsetLists), std::end(kOffsetLists), r.attr) == std::end(kOffsetLists)) continue;
      out.emplace_back(r.attr, r.words());
    }
    return out;
  } catch (...) {
    return {};  // allocation failure: empty (nothing escapes)
  }
}

std::optional<std::uint16_t> NvInfo::maxreg_count() const {
  const auto i = find(eiattr::kMaxregCount);
  if (!i || records[*i].format != EiFormat::kHval) return std::nullopt;
  return records[*i].value;
}

bool NvInfo::uses_cooperative_groups() const {
  return has(eiattr::kCoopGroupInstrOffsets) || has(eiattr::kCoopGroupMaskRegids);
}

std::optional<std::array<std::uint32_t, 3>> NvInfo::cluster_dims() const {
  return three_words(*this, eiattr::kCtaPerCluster);
}

std::optional<std::uint32_t> NvInfo::max_cluster_rank() const {
  const auto i = find(eiattr::kMaxClusterRank);
  if (!i) return std::nullopt;
  const std::vector<std::uint32_t> w = records[*i].words();
  if (w.empty()) return std::nullopt;
  return w[0];
}

bool NvInfo::uses_clusters() const {
  return has(eiattr::kExplicitCluster) || has(eiattr::kCtaPerCluster) || has(eiattr::kMaxClusterRank) ||
         has(eiattr::kBlocksAreClusters);
}

std::optional<std::array<std::uint32_t, 3>> NvInfo::max_threads() const {
  return three_words(*this, eiattr::kMaxThreads);
}

std::optional<std::array<std::uint32_t, 3>> NvInfo::reqntid() const { return three_words(*this, eiattr::kReqntid); }

Result<NvInfo> parse_nvinfo(ByteView section) {
  return detail::guarded([&]() -> Result<NvInfo> {
    NvInfo info;
    ByteReader r(section);
    std::uint64_t o = 0;
    while (o < section.size()) {
      if (!r.has(o, 4)) return bad("truncated record at " + detail::hex(o));
      NvInfoRecord rec;
      const std::uint8_t fmt = r.u8(o);
      rec.attr = r.u8(o + 1);
      rec.value = r.u16(o + 2);
      if (fmt < 1 || fmt > 4) return bad("unknown format " + std::to_string(fmt) + " at " + detail::hex(o));
      rec.format = static_cast<EiFormat>(fmt);
      o += 4;
      if (rec.format == EiFormat::kSval) {
        const std::uint64_t size = rec.value;
        if (!r.has(o, size)) return bad("record at " + detail::hex(o - 4) + " runs past the section");
        const ByteView p = r.slice(o, size);
        rec.payload.assign(p.begin(), p.end());
        rec.value = 0;
        o += size;
      }
      info.records.push_back(std::move(rec));
    }
    return info;
  });
}

Result<Bytes> write_nvinfo(const NvInfo& info) {
  return detail::guarded([&]() -> Result<Bytes> {
    Bytes out;
    for (const NvInfoRecord& rec : info.records) {
      const auto fmt = static_cast<std::uint8_t>(rec.format);
      if (fmt < 1 || fmt > 4) return bad("unknown format " + std::to_string(fmt));
      append<std::uint8_t>(out, fmt);
      append<std::uint8_t>(out, rec.attr);
      if (rec.format == EiFormat::kSval) {
        if (rec.payload.size() > 0xffff) return bad("SVAL payload larger than 65535 bytes");
        append<std::uint16_t>(out, static_cast<std::uint16_t>(rec.payload.size()));
        out.insert(out.end(), rec.payload.begin(), rec.payload.end());
      } else {
        append<std::uint16_t>(out, rec.value);
      }
    }
    return out;
  });
}

std::optional<std::uint32_t> global_nvinfo_section(const Cubin& cubin) {
  for (std::size_t i = 0; i < cubin.sections.size(); ++i) {
    const ElfSection& s = cubin.sections[i];
    if (s.type == kShtCudaInfo && s.name == ".nv.info") return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

Result<NvInfo> read_nvinfo(const Cubin& cubin, std::uint32_t section) {
  return detail::guarded([&]() -> Result<NvInfo> {
    if (section >= cubin.sections.size()) return bad("section index out of range");
    const ElfSection& s = cubin.sections[section];
    if (s.type != kShtCudaInfo && s.type != kShtCudaCompat) return bad(s.name + " is not an attribute section");
    auto r = parse_nvinfo(s.data);
    if (!r.is_ok()) return r.status().with_context(s.name);
    return r;
  });
}

Status write_nvinfo(Cubin& cubin, std::uint32_t section, const NvInfo& info) {
  return detail::guarded([&]() -> Status {
    if (section >= cubin.sections.size()) return bad("section index out of range");
    auto bytes = write_nvinfo(info);
    if (!bytes.is_ok()) return bytes.status();
    cubin.sections[section].data = std::move(*bytes);
    return Status::ok();
  });
}

std::optional<std::uint32_t> kernel_regcount(const Cubin& cubin, const CubinKernel& kernel) {
  if (const auto g = global_nvinfo_section(cubin)) {
    auto info = read_nvinfo(cubin, *g);
    if (info.is_ok()) {
      if (const auto n = info->regcount(kernel.symbol)) return n;
    }
  }
  if (kernel.text < cubin.sections.size()) {
    const std::uint32_t n = Cubin::sh_info_regcount(cubin.sections[kernel.text].info);
    if (n != 0) return n;
  }
  return std::nullopt;
}

Status set_kernel_regcount(Cubin& cubin, const CubinKernel& kernel, std::uint32_t regs) {
  return detail::guarded([&]() -> Status {
    if (kernel.text >= cubin.sections.size()) return bad("kernel text section out of range");
    bool recorded = false;
    if (const auto g = global_nvinfo_section(cubin)) {
      auto info = read_nvinfo(cubin, *g);
      if (!info.is_ok()) return info.status();
      if (info->regcount(kernel.symbol)) {
        LITHOS_RETURN_IF_ERROR(info->set_regcount(kernel.symbol, regs));
        LITHOS_RETURN_IF_ERROR(write_nvinfo(cubin, *g, *info));
        recorded = true;
      }
    }
    if (Cubin::sh_info_regcount(cubin.sections[kernel.text].info) != 0 || !recorded) {
      LITHOS_RETURN_IF_ERROR(cubin.set_sh_info_regcount(kernel.text, regs));
    }
    return Status::ok();
  });
}

Result<bool> kernel_uses_grid_sync(const Cubin& cubin, const CubinKernel& kernel) {
  return detail::guarded([&]() -> Result<bool> {
    if (kernel.text >= cubin.sections.size()) return bad("kernel text section out of range");
    if (cubin.sm_arch() == 90) {
      // sm_90 instructions: 16 bytes, low word first; opcode in bits 0..11
      // (0xb82 LDC, 0xab9 ULDC), constant bank in bits 54..58, byte offset / 4
      // in bits 40..53.
      const Bytes& text = cubin.sections[kernel.text].data;
      ByteReader r(text);
      for (std::uint64_t o = 0; o + 16 <= text.size(); o += 16) {
        const std::uint64_t lo = r.u64(o);
        const std::uint64_t op = lo & 0xfff;
        if (op != 0xb82 && op != 0xab9) continue;
        const std::uint64_t bank = (lo >> 54) & 0x1f, offset = ((lo >> 40) & 0x3fff) * 4;
        if (bank == 0 && offset >= 0x44 && offset < 0x4c) return true;
      }
      return false;
    }
    if (!kernel.nvinfo) return bad("kernel " + kernel.name + " has no .nv.info section");
    auto info = read_nvinfo(cubin, *kernel.nvinfo);
    if (!info.is_ok()) return info.status();
    return info->uses_cooperative_groups();
  });
}

}  // namespace lithos::cubin
