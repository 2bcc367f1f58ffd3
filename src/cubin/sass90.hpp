// sm_90 (Hopper) machine-code facts the atomizer needs, and the prelude it
// splices into each kernel. Everything here was established by compiling
// PTX with this toolkit's ptxas and reading the result (docs/atomizer.md,
// "Encoding facts"); tests/cubin/sass90_test.cpp recompiles the same PTX at
// build time and checks the generated prelude against ptxas bit for bit.
//
// An instruction is 128 bits, stored as two little-endian u64 words (lo at
// the lower address). Facts used:
//   opcode          lo bits 0..11 (e.g. 0x947 BRA, 0x94d EXIT, 0xb82 LDC)
//   guard predicate lo bits 12..15 (7 = PT, always; bit 15 negates)
//   control         hi bits 41..63: stall 41..44, yield 45, write barrier
//                   46..48, read barrier 49..51, wait mask 52..57, operand
//                   reuse 58..61
//   c[0x0][off]     LDC/ULDC: byte offset / 4 in lo bits 40..53 (bank in 54..)
//   BRA target      relative to the next instruction, in 4-byte units Q:
//                   Q & 0xff in lo bits 16..23, Q >> 8 (arithmetic) in bits
//                   34..81 (lo 34..63, hi 0..17)
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace lithos::cubin::sass90 {

struct Instr {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  friend bool operator==(const Instr&, const Instr&) = default;
};
inline constexpr std::uint64_t kInstrBytes = 16;

inline std::uint32_t opcode(const Instr& i) { return static_cast<std::uint32_t>(i.lo & 0xfff); }

namespace op {
inline constexpr std::uint32_t kBra = 0x947;
inline constexpr std::uint32_t kExit = 0x94d;
inline constexpr std::uint32_t kNop = 0x918;
inline constexpr std::uint32_t kLdc = 0xb82;
}  // namespace op

// Unconditional relative branch from the instruction at byte offset `from`
// to byte offset `to` (both within one text section, multiples of 16).
Instr bra(std::uint64_t from, std::uint64_t to);
// Target of a BRA at byte offset `at`, or nullopt if `i` is not a BRA.
std::optional<std::uint64_t> bra_target(const Instr& i, std::uint64_t at);

Instr nop();

// Whether an instruction may be moved from a kernel's entry into the
// prelude: it must not be relative to its address or transfer control.
// Conservative: a short list of data instructions that ptxas puts first
// (LDC/ULDC/MOV/S2R/S2UR/CS2R/IMAD.MOV...); anything else is refused.
bool displaceable(const Instr& i);

// The atom check, executed first by every thread block of a rewritten
// kernel: with lin = ctaid.x + nctaid.x * (ctaid.y + nctaid.y * ctaid.z) and
// (lo, hi) the two u32 at constant-bank-0 byte offset `bounds_offset` (an
// 8-byte aligned kernel parameter appended by the atomizer), blocks with lin
// outside [lo, hi) exit. Uses R2, R3, UR4..UR8 and P0, all dead at entry.
// The ptxas schedule of:
//   S2UR UR4, SR_CTAID.Y; ULDC UR7, c[0x0][0xc]; ULDC UR8, c[0x0][0x10];
//   S2UR UR6, SR_CTAID.Z; S2UR UR5, SR_CTAID.X; LDC.64 R2, c[0x0][bounds];
//   UIMAD UR4, UR6, UR8, UR4; UIMAD UR4, UR4, UR7, UR5;
//   ISETP.LE.U32.AND P0, PT, R3, UR4, PT; ISETP.GT.U32.OR P0, PT, R2, UR4, P0;
//   @P0 EXIT
// (as nvdisasm prints it on the GPU machine: docs/atomizer.md).
std::vector<Instr> atom_check(std::uint32_t bounds_offset);
// Index of the EXIT within atom_check().
inline constexpr std::size_t kAtomCheckExitIndex = 10;
// Registers the check needs the kernel to have (R0..R3).
inline constexpr std::uint32_t kAtomCheckRegs = 4;

// The whole prelude placed at byte offset `at` of a kernel's text: the
// check, then `displaced` (the kernel's first instruction, its operand-reuse
// hints cleared), then a branch back to byte offset 16. The kernel's first
// instruction becomes bra(0, at).
std::vector<Instr> prelude(std::uint32_t bounds_offset, const Instr& displaced, std::uint64_t at);

}  // namespace lithos::cubin::sass90
