// .nv.info, .nv.info.<kernel> and .nv.compat: the attribute records of a
// cubin (docs/cubin-format.md, ".nv.info").
//
// A section is a sequence of records, each starting on a 4-byte boundary:
//   u8 format, u8 attribute, then
//   EIFMT_NVAL (1): u16 (zero)            no value
//   EIFMT_BVAL (2): u8 value, u8 (zero)   a byte
//   EIFMT_HVAL (3): u16 value             a half word
//   EIFMT_SVAL (4): u16 size, then `size` bytes (a multiple of 4 in every
//                   section ptxas writes; the size includes the padding)
// The global .nv.info holds per-function records whose first u32 is a
// symbol index (REGCOUNT, FRAME_SIZE, MIN_STACK_SIZE, MAX_STACK_SIZE); each
// .nv.info.<kernel> (sh_info: the kernel's text section) holds that kernel's
// parameter layout, instruction offset lists and launch attributes.
// parse_nvinfo + write_nvinfo reproduce a section byte for byte.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "cubin/bytes.hpp"
#include "cubin/elf.hpp"

namespace lithos::cubin {

enum class EiFormat : std::uint8_t { kNval = 1, kBval = 2, kHval = 3, kSval = 4 };

// Attribute ids (EIATTR_*). Values from public descriptions of the format,
// those marked [seen] observed in this toolkit's sm_90 output
// (docs/cubin-format.md says with which fixture).
namespace eiattr {
inline constexpr std::uint8_t kCtaidzUsed = 0x04;
inline constexpr std::uint8_t kMaxThreads = 0x05;  // [seen] SVAL u32 x,y,z (__launch_bounds__ / .maxntid)
inline constexpr std::uint8_t kParamCbank = 0x0a;  // [seen] SVAL u32 sym, u32 (size << 16 | offset)
inline constexpr std::uint8_t kSmemParamOffsets = 0x0b;
inline constexpr std::uint8_t kCbankParamOffsets = 0x0c;
inline constexpr std::uint8_t kSyncStack = 0x0d;
inline constexpr std::uint8_t kTexidSampidMap = 0x0e;
inline constexpr std::uint8_t kExterns = 0x0f;       // [seen] SVAL u32 symbol indices (printf: vprintf)
inline constexpr std::uint8_t kReqntid = 0x10;       // SVAL u32 x,y,z (.reqntid)
inline constexpr std::uint8_t kFrameSize = 0x11;     // [seen] SVAL u32 sym, u32 bytes (global .nv.info)
inline constexpr std::uint8_t kMinStackSize = 0x12;  // [seen] SVAL u32 sym, u32 bytes (global .nv.info)
inline constexpr std::uint8_t kKparamInfo = 0x17;    // [seen] SVAL 12 bytes, see KParamInfo
inline constexpr std::uint8_t kSmemParamSize = 0x18;
inline constexpr std::uint8_t kCbankParamSize = 0x19;  // [seen] HVAL parameter bytes
inline constexpr std::uint8_t kQueryNumattrib = 0x1a;
inline constexpr std::uint8_t kMaxregCount = 0x1b;       // [seen] HVAL (0xff: no limit)
inline constexpr std::uint8_t kExitInstrOffsets = 0x1c;  // [seen] SVAL u32 offsets in .text
inline constexpr std::uint8_t kS2rctaidInstrOffsets = 0x1d;
inline constexpr std::uint8_t kCrsStackSize = 0x1e;  // [seen] SVAL u32
inline constexpr std::uint8_t kNeedCnpWrapper = 0x1f;
inline constexpr std::uint8_t kNeedCnpPatch = 0x20;
inline constexpr std::uint8_t kExplicitCaching = 0x21;
inline constexpr std::uint8_t kIstypepUsed = 0x22;
inline constexpr std::uint8_t kMaxStackSize = 0x23;
inline constexpr std::uint8_t kSuqUsed = 0x24;
inline constexpr std::uint8_t kLdCachemodInstrOffsets = 0x25;
inline constexpr std::uint8_t kLoadCacheRequest = 0x26;
inline constexpr std::uint8_t kAtomSysInstrOffsets = 0x27;
inline constexpr std::uint8_t kCoopGroupInstrOffsets = 0x28;  // [seen] SVAL u32 offsets
inline constexpr std::uint8_t kCoopGroupMaskRegids = 0x29;    // [seen] SVAL u32 per offset
inline constexpr std::uint8_t kSw1850030War = 0x2a;
inline constexpr std::uint8_t kWmmaUsed = 0x2b;
inline constexpr std::uint8_t kHasPreV10Object = 0x2c;
inline constexpr std::uint8_t kAtomf16EmulInstrOffsets = 0x2d;
inline constexpr std::uint8_t kAtom16EmulInstrRegMap = 0x2e;
inline constexpr std::uint8_t kRegcount = 0x2f;  // [seen] SVAL u32 sym, u32 registers (global .nv.info)
inline constexpr std::uint8_t kSw2393858War = 0x30;
inline constexpr std::uint8_t kIntWarpWideInstrOffsets = 0x31;  // [seen] SVAL u32 offsets
inline constexpr std::uint8_t kSharedScratch = 0x32;
inline constexpr std::uint8_t kStatistics = 0x33;
inline constexpr std::uint8_t kIndirectBranchTargets = 0x34;
inline constexpr std::uint8_t kSw2861232War = 0x35;
inline constexpr std::uint8_t kSwWar = 0x36;           // [seen] SVAL u32
inline constexpr std::uint8_t kCudaApiVersion = 0x37;  // [seen] SVAL u32 (0x82 = 130: CUDA 13.0)
inline constexpr std::uint8_t kNumMbarriers = 0x38;
inline constexpr std::uint8_t kMbarrierInstrOffsets = 0x39;
inline constexpr std::uint8_t kCoroutineResumeOffsets = 0x3a;
inline constexpr std::uint8_t kSamRegionStackSize = 0x3b;
inline constexpr std::uint8_t kPerRegTargetPerfStats = 0x3c;
inline constexpr std::uint8_t kCtaPerCluster = 0x3d;    // [seen] SVAL u32 x,y,z (__cluster_dims__)
inline constexpr std::uint8_t kExplicitCluster = 0x3e;  // [seen] NVAL (__cluster_dims__)
inline constexpr std::uint8_t kMaxClusterRank = 0x3f;   // [seen] SVAL u32 (__launch_bounds__ 3rd argument)
inline constexpr std::uint8_t kInstrRegMap = 0x40;
inline constexpr std::uint8_t kReservedSmemUsed = 0x41;
inline constexpr std::uint8_t kReservedSmem0Size = 0x42;
inline constexpr std::uint8_t kUcodeSectionData = 0x43;
inline constexpr std::uint8_t kUnusedLoadByteOffset = 0x44;
inline constexpr std::uint8_t kKparamInfoV2 = 0x45;
inline constexpr std::uint8_t kSyscallOffsets = 0x46;  // [seen] SVAL u32 offsets (printf)
inline constexpr std::uint8_t kSwWarMembarSysInstrOffsets = 0x47;
inline constexpr std::uint8_t kGraphicsGlobalCbank = 0x48;
inline constexpr std::uint8_t kShaderType = 0x49;
inline constexpr std::uint8_t kVrcCtaInitCount = 0x4a;
inline constexpr std::uint8_t kToolsPatchFunc = 0x4b;
inline constexpr std::uint8_t kNumBarriers = 0x4c;  // [seen] BVAL named barriers used
inline constexpr std::uint8_t kTexmodeIndependent = 0x4d;
inline constexpr std::uint8_t kPerfStatistics = 0x4e;
inline constexpr std::uint8_t kAtEntryFragments = 0x4f;
inline constexpr std::uint8_t kSparseMmaMask = 0x50;  // [seen] HVAL
inline constexpr std::uint8_t kTcgen05OneCtaUsed = 0x51;
inline constexpr std::uint8_t kTcgen05TwoCtaUsed = 0x52;
inline constexpr std::uint8_t kGenErrbarAtExit = 0x53;
inline constexpr std::uint8_t kRegReconfig = 0x54;
inline constexpr std::uint8_t kAnnotations = 0x55;
inline constexpr std::uint8_t kUnknown = 0x56;
inline constexpr std::uint8_t kStackCanaryTrapOffsets = 0x57;
inline constexpr std::uint8_t kStubFunctionKind = 0x58;
inline constexpr std::uint8_t kLocalCtaAsyncStoreOffsets = 0x59;
inline constexpr std::uint8_t kMercuryFinalizerOptions = 0x5a;
inline constexpr std::uint8_t kBlocksAreClusters = 0x5b;
inline constexpr std::uint8_t kSanitize = 0x5c;
inline constexpr std::uint8_t kSyscallsFallback = 0x5d;
inline constexpr std::uint8_t kCudaReq = 0x5e;
inline constexpr std::uint8_t kMercuryIsaVersion = 0x5f;  // [seen] HVAL (0x101 on sm_90)
}  // namespace eiattr

// "EIATTR_REGCOUNT" etc.; nullptr for an id without a known name.
const char* eiattr_name(std::uint8_t attr);

struct NvInfoRecord {
  EiFormat format = EiFormat::kNval;
  std::uint8_t attr = 0;
  // NVAL/BVAL/HVAL: the u16 after the attribute byte as stored (BVAL's
  // value is its low byte). SVAL: unused (the size is payload.size()).
  std::uint16_t value = 0;
  Bytes payload;  // SVAL only

  // SVAL payload as u32 words (a trailing partial word is dropped).
  std::vector<std::uint32_t> words() const;
  static NvInfoRecord nval(std::uint8_t attr);
  static NvInfoRecord bval(std::uint8_t attr, std::uint8_t v);
  static NvInfoRecord hval(std::uint8_t attr, std::uint16_t v);
  static NvInfoRecord sval(std::uint8_t attr, Bytes payload);
  static NvInfoRecord sval_words(std::uint8_t attr, const std::vector<std::uint32_t>& words);
};

// EIATTR_KPARAM_INFO: one kernel parameter. 12 bytes:
//   u32 index      (0 in everything ptxas writes)
//   u16 ordinal    parameter number, 0-based
//   u16 offset     byte offset in the parameter buffer (from PARAM_CBANK's offset)
//   u32 flags:     bits 0..7   log2 of the pointee's alignment (0 here)
//                  bits 8..11  space
//                  bits 12..16 cbank (0x1f in all ptxas output)
//                  bit  17     parameter space: 0 = constant bank (cuobjdump
//                              prints "Parameter Space : CBANK")
//                  bits 18..31 size in bytes
// ptxas writes one record per parameter in descending ordinal order.
struct KParamInfo {
  std::uint32_t index = 0;
  std::uint16_t ordinal = 0;
  std::uint16_t offset = 0;
  std::uint8_t log_align = 0;
  std::uint8_t space = 0;
  std::uint8_t cbank = 0x1f;
  bool smem_space = false;  // bit 17
  std::uint16_t size = 0;   // 14 bits

  std::uint32_t flags_word() const;
  static KParamInfo decode(std::uint32_t index, std::uint32_t ordinal_offset, std::uint32_t flags);
  Bytes encode() const;
  friend bool operator==(const KParamInfo&, const KParamInfo&) = default;
};

// EIATTR_PARAM_CBANK: the parameter window in constant bank 0. `symbol` is
// the section symbol of .nv.constant0.<kernel>; on sm_90 (CUDA 13) offset
// is 0x210, on sm_80 0x160.
struct ParamCbank {
  std::uint32_t symbol = 0;
  std::uint16_t offset = 0;
  std::uint16_t size = 0;
  friend bool operator==(const ParamCbank&, const ParamCbank&) = default;
};

class NvInfo {
 public:
  std::vector<NvInfoRecord> records;

  // ---- Generic ----
  std::vector<std::size_t> find_all(std::uint8_t attr) const;
  std::optional<std::size_t> find(std::uint8_t attr) const;
  bool has(std::uint8_t attr) const { return find(attr).has_value(); }
  // SVAL records of `attr` whose first word is `symbol` (global .nv.info).
  std::optional<std::size_t> find_indexed(std::uint8_t attr, std::uint32_t symbol) const;
  // Second word of the indexed record (REGCOUNT, FRAME_SIZE, ...).
  std::optional<std::uint32_t> indexed_value(std::uint8_t attr, std::uint32_t symbol) const;
  // Replaces the value, or appends a record (after the last of that attr).
  Status set_indexed_value(std::uint8_t attr, std::uint32_t symbol, std::uint32_t value);
  // Inserts a record before the first record of `before` (at the end when
  // there is none).
  Status insert_before(std::uint8_t before, NvInfoRecord record);
  void remove_all(std::uint8_t attr);  // allocates nothing

  // ---- Parameters ----
  Result<std::vector<KParamInfo>> kparams() const;  // in record order
  // Adds a parameter, keeping the records in descending ordinal order
  // (before PARAM_CBANK's neighbours when the kernel had none).
  Status add_kparam(const KParamInfo& p);
  Result<std::optional<ParamCbank>> param_cbank() const;
  Status set_param_cbank(const ParamCbank& c);
  std::optional<std::uint16_t> cbank_param_size() const;
  Status set_cbank_param_size(std::uint16_t size);

  // ---- Instruction offsets (kernel sections) ----
  std::vector<std::uint32_t> exit_instr_offsets() const;
  Status set_exit_instr_offsets(const std::vector<std::uint32_t>& offsets);
  // Every SVAL offset list a text rewrite must keep valid (EXIT, S2RCTAID,
  // COOP_GROUP, INT_WARP_WIDE, SYSCALL, INDIRECT_BRANCH_TARGETS, ...) as
  // (attr, offsets).
  std::vector<std::pair<std::uint8_t, std::vector<std::uint32_t>>> instr_offset_lists() const;

  // ---- Registers (global .nv.info) ----
  std::optional<std::uint32_t> regcount(std::uint32_t symbol) const { return indexed_value(eiattr::kRegcount, symbol); }
  Status set_regcount(std::uint32_t symbol, std::uint32_t regs) {
    return set_indexed_value(eiattr::kRegcount, symbol, regs);
  }
  std::optional<std::uint16_t> maxreg_count() const;

  // ---- Launch properties (kernel sections) ----
  // Cooperative-groups synchronisation (COOP_GROUP_INSTR_OFFSETS or
  // COOP_GROUP_MASK_REGIDS): present for grid.sync(), and also for warp-
  // and block-level cooperative groups (tile.sync(), shfl_*_sync,
  // __syncwarp, this_thread_block().sync()). No attribute singles out
  // grid-wide synchronisation in CUDA 13 (docs/cubin-format.md).
  bool uses_cooperative_groups() const;
  // Compile-time cluster dims (CTA_PER_CLUSTER), when set.
  std::optional<std::array<std::uint32_t, 3>> cluster_dims() const;
  bool explicit_cluster() const { return has(eiattr::kExplicitCluster); }
  std::optional<std::uint32_t> max_cluster_rank() const;
  // Any cluster attribute (EXPLICIT_CLUSTER, CTA_PER_CLUSTER,
  // MAX_CLUSTER_RANK, BLOCKS_ARE_CLUSTERS).
  bool uses_clusters() const;
  std::optional<std::array<std::uint32_t, 3>> max_threads() const;
  std::optional<std::array<std::uint32_t, 3>> reqntid() const;
};

// Parses a record stream; errors on a truncated record or an unknown format.
Result<NvInfo> parse_nvinfo(ByteView section);
// Serialises (byte-identical to the parsed input when unmodified).
Result<Bytes> write_nvinfo(const NvInfo& info);

// ---- Glue with the ELF model ----
// The global .nv.info section (type SHT_CUDA_INFO, named ".nv.info").
std::optional<std::uint32_t> global_nvinfo_section(const Cubin& cubin);
Result<NvInfo> read_nvinfo(const Cubin& cubin, std::uint32_t section);
Status write_nvinfo(Cubin& cubin, std::uint32_t section, const NvInfo& info);
// A kernel's register count: .nv.info EIATTR_REGCOUNT, else the sh_info
// bits of its text section (older layouts); nullopt when neither has one.
std::optional<std::uint32_t> kernel_regcount(const Cubin& cubin, const CubinKernel& kernel);
// Whether a kernel may synchronise its whole grid (cooperative_groups
// grid_group::sync(), which needs cuLaunchCooperativeKernel and must never be
// split). No attribute says so. On sm_90 (CUDA 13) grid.sync() reads the
// driver's grid-barrier workspace (PTX %envreg1/%envreg2) from c[0x0][0x44]
// and c[0x0][0x48] with LDC/ULDC, and no other code in the fixtures reads
// those words: true when the text has such a load. Other architectures:
// true when COOP_GROUP_* attributes are present (conservative: warp- and
// block-level cooperative groups have them too). Errors: no .nv.info.
Result<bool> kernel_uses_grid_sync(const Cubin& cubin, const CubinKernel& kernel);
// Sets it everywhere it is recorded (.nv.info REGCOUNT and, when nonzero
// there, the text section's sh_info bits 24..31).
Status set_kernel_regcount(Cubin& cubin, const CubinKernel& kernel, std::uint32_t regs);

}  // namespace lithos::cubin
