// The kernel atomizer's load-time rewrite (docs/atomizer.md).
//
// Every kernel of an sm_90 cubin gets a range check at its entry: one more
// kernel parameter, 8 bytes at `bounds_offset` of the parameter buffer,
// holds two u32 (lo, hi), and thread blocks whose linear index
//   ctaid.x + nctaid.x * (ctaid.y + nctaid.y * ctaid.z)
// lies outside [lo, hi) exit at once. The host then runs a kernel as atoms:
// the same launch (same grid, so blockIdx and gridDim are the original ones)
// repeated with consecutive ranges. (lo, hi) = (0, 0xffffffff) runs it whole.
//
// The check is spliced without moving any existing instruction: the first
// instruction is replaced by a branch to a prelude appended to the kernel's
// text (sass90::prelude: check, the displaced instruction, branch back), so
// branch targets, relocations and every offset attribute stay valid. The
// rewrite repairs what changes: the text section's size and the kernel
// symbol's size, EXIT_INSTR_OFFSETS (the prelude's EXIT), the parameter
// attributes (KPARAM_INFO, PARAM_CBANK, CBANK_PARAM_SIZE), the size of
// .nv.constant0.<kernel>, the register count when the kernel used fewer than
// the check needs, and the ELF layout (section offsets, program headers).
//
// A kernel that cannot be rewritten safely keeps its original code and is
// reported with the reason; the host runs it whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "cubin/bytes.hpp"

namespace lithos::cubin {

enum class PatchStatus : std::uint8_t {
  kPatched,
  kNotSm90,            // the cubin is not sm_90 code: nothing is rewritten
  kNoParamInfo,        // no .nv.info.<kernel>, or no parameter attributes
  kEntryNotMovable,    // the first instruction is control flow or relative
  kRelocationAtEntry,  // a relocation patches the first instruction
  kParamSpaceFull,     // no room for 8 more bytes of parameters
  kEmptyText,          // the kernel's text is shorter than one instruction
  kCooperative,        // uses grid-wide synchronisation: never split
  kNotRewritten,       // from an image lithos did not rewrite (reports only)
};
const char* patch_status_name(PatchStatus s);

struct KernelPatch {
  std::string name;  // the kernel's (mangled) symbol name
  PatchStatus status = PatchStatus::kNoParamInfo;
  std::uint32_t param_count = 0;         // parameters before the rewrite
  std::uint32_t param_bytes = 0;         // parameter buffer size before the rewrite
  std::uint32_t bounds_offset = 0;       // where (lo, hi) go in the new buffer (8-aligned)
  std::uint32_t cluster[3] = {0, 0, 0};  // cluster dims fixed at compile time (0: none)
  bool cooperative = false;              // grid sync / cooperative groups seen in attributes
  bool patched() const { return status == PatchStatus::kPatched; }
};

struct AtomizedCubin {
  Bytes image;                       // the rewritten cubin (ELF)
  std::vector<KernelPatch> kernels;  // every kernel entry, patched or not
  std::size_t patched_count() const;
};

// Rewrites an sm_90 cubin. Errors: the input is not a valid cubin (parse
// errors) or nothing in it could be patched.
Result<AtomizedCubin> atomize_cubin(ByteView cubin);

// What a memory image handed to the driver holds.
enum class ImageSource : std::uint8_t { kCubin, kFatbin, kPtx, kUnknown };

struct AtomizedImage {
  AtomizedCubin cubin;
  ImageSource source = ImageSource::kUnknown;
  bool from_compressed = false;  // the chosen fatbin entry was compressed
};

// From a fatbin (or its runtime wrapper) or a cubin, for a device of compute
// capability `sm` (e.g. 90): picks the entry the driver would load, and
// when that is sm_90 SASS, decompresses and rewrites it. The result is a
// plain cubin, loaded in place of the original image. Fails (and the caller
// loads the original) when the driver would pick PTX (`ptx_out` then gets
// that PTX so the caller can JIT it itself), the image is malformed, or
// nothing was patched.
Result<AtomizedImage> atomize_image(const void* image, int sm, std::string* ptx_out);

}  // namespace lithos::cubin
