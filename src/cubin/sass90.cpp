#include "cubin/sass90.hpp"

#include <array>

namespace lithos::cubin::sass90 {
namespace {

constexpr std::uint64_t kReuseMask = 0xfull << 58;
// Control bits of the branches the atomizer writes: stall 5, yield, no
// barriers (what ptxas gives its unconditional BRA).
constexpr std::uint64_t kBraHi = 0x000fea0003800000ull;
constexpr std::uint64_t kBraLo = 0x0000000000007947ull;

// ptxas (CUDA 13.0) for the check in sass90.hpp with the bounds at 0x228.
constexpr std::array<Instr, 11> kCheck = {{
    {0x00000000000479c3ull, 0x000fe20000002600ull},  // S2UR UR4, SR_CTAID.Y
    {0x0000030000077ab9ull, 0x000fe20000000800ull},  // ULDC UR7, c[0x0][0xc]
    {0x0000040000087ab9ull, 0x000fcc0000000800ull},  // ULDC UR8, c[0x0][0x10]
    {0x00000000000679c3ull, 0x000e300000002700ull},  // S2UR UR6, SR_CTAID.Z
    {0x00000000000579c3ull, 0x000e700000002500ull},  // S2UR UR5, SR_CTAID.X
    {0x00008a00ff027b82ull, 0x000ea20000000a00ull},  // LDC.64 R2, c[0x0][0x228]
    {0x00000008060472a4ull, 0x001fc8000f8e0204ull},  // UIMAD UR4, UR6, UR8, UR4
    {0x00000007040472a4ull, 0x002fcc000f8e0205ull},  // UIMAD UR4, UR4, UR7, UR5
    {0x0000000403007c0cull, 0x004fc8000bf03070ull},  // ISETP.LE.U32.AND P0, PT, R3, UR4, PT
    {0x0000000402007c0cull, 0x000fda0008704470ull},  // ISETP.GT.U32.OR P0, PT, R2, UR4, P0
    {0x000000000000094dull, 0x000fea0003800000ull},  // @P0 EXIT
}};
constexpr std::size_t kBoundsLdc = 5;
constexpr std::uint64_t kCbankFieldShift = 40;
constexpr std::uint64_t kCbankFieldMask = 0x3fffull << kCbankFieldShift;  // bank 0: bits 54.. stay 0

}  // namespace

Instr bra(std::uint64_t from, std::uint64_t to) {
  const auto q = (static_cast<std::int64_t>(to) - static_cast<std::int64_t>(from + kInstrBytes)) / 4;
  const auto uq = static_cast<std::uint64_t>(q);
  const auto high = static_cast<std::uint64_t>(q >> 8);  // arithmetic: sign-extended
  Instr i{kBraLo, kBraHi};
  i.lo |= (uq & 0xff) << 16;
  i.lo |= high << 34;                 // bits 34..63 take the low 30 bits
  i.hi |= (high >> 30) & 0x3ffffull;  // bits 64..81 the next 18
  return i;
}

std::optional<std::uint64_t> bra_target(const Instr& i, std::uint64_t at) {
  if (opcode(i) != op::kBra) return std::nullopt;
  std::uint64_t high = (i.lo >> 34) | ((i.hi & 0x3ffffull) << 30);  // 48 bits
  if ((high >> 47) & 1) high |= ~((1ull << 48) - 1);                // sign-extend
  const auto q = static_cast<std::int64_t>((high << 8) | ((i.lo >> 16) & 0xff));
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(at + kInstrBytes) + q * 4);
}

Instr nop() { return {0x0000000000007918ull, 0x000fc00000000000ull}; }

bool displaceable(const Instr& i) {
  switch (opcode(i)) {
    case 0xb82:  // LDC
    case 0xab9:  // ULDC
    case 0x202:  // MOV reg
    case 0x802:  // MOV imm
    case 0xa02:  // MOV c[]
    case 0xc02:  // MOV ureg
    case 0x919:  // S2R
    case 0x9c3:  // S2UR
    case 0x805:  // CS2R
    case 0x224:  // IMAD (.MOV) reg
    case 0x424:  // IMAD imm
    case 0x824:  // IMAD imm
    case 0xa24:  // IMAD c[]
    case 0xc24:  // IMAD ureg
    case 0x882:  // UMOV imm
    case 0xc82:  // UMOV ureg
      return true;
    default: return false;
  }
}

std::vector<Instr> atom_check(std::uint32_t bounds_offset) {
  std::vector<Instr> out(kCheck.begin(), kCheck.end());
  Instr& ldc = out[kBoundsLdc];
  ldc.lo = (ldc.lo & ~kCbankFieldMask) | (static_cast<std::uint64_t>(bounds_offset / 4) << kCbankFieldShift);
  return out;
}

std::vector<Instr> prelude(std::uint32_t bounds_offset, const Instr& displaced, std::uint64_t at) {
  std::vector<Instr> out = atom_check(bounds_offset);
  Instr moved = displaced;
  moved.hi &= ~kReuseMask;
  out.push_back(moved);
  out.push_back(bra(at + out.size() * kInstrBytes, kInstrBytes));
  return out;
}

}  // namespace lithos::cubin::sass90
