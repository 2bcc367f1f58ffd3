// Launch descriptors (QMDs): detecting their layout version and writing the
// per-launch TPC disable mask and grid width into them.
//
// A QMD ("queue meta data") is the descriptor the driver builds for every
// kernel launch and uploads to the GPU. The launch-descriptor callback
// (descriptor_hook.hpp) hands us a pointer to it just before the upload. The
// functions here edit that buffer in place; they never allocate, never throw
// and never write outside the fields they name.
//
// Which layouts are tested on hardware: only V04_00 (Hopper, measured on the
// H100; ../shared/docs/h100-facts.md section 1). The others are implemented
// from public NVIDIA class headers (offsets cited in qmd.cpp) and are marked
// untested: qmd_mask_tested_on_hardware() says which is which.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "common/status.hpp"

namespace lithos::gpu {

// Bytes the functions below may touch: the largest QMD layout known (V04_00
// and V05_00 are 384 bytes; pre-Hopper layouts are 256 bytes). A caller
// holding a smaller buffer must not pass it here.
inline constexpr std::size_t kQmdMaxBytes = 384;

// Number of physical TPC slots a mask can address (the Hopper mask width).
inline constexpr int kMaxSlots = 128;

// A 128-bit DISABLE mask indexed by physical TPC slot: bit (i % 32) of word
// (i / 32) set means slot i may not run blocks of this launch.
struct SlotMask {
  std::array<std::uint32_t, 4> disable{};

  constexpr bool disabled(int slot) const {
    return slot >= 0 && slot < kMaxSlots &&
           ((disable[static_cast<unsigned>(slot) / 32U] >> (static_cast<unsigned>(slot) % 32U)) & 1U) != 0;
  }
  constexpr void set_disabled(int slot, bool off) {
    if (slot < 0 || slot >= kMaxSlots) return;
    const std::uint32_t bit = std::uint32_t{1} << (static_cast<unsigned>(slot) % 32U);
    auto& w = disable[static_cast<unsigned>(slot) / 32U];
    w = off ? (w | bit) : (w & ~bit);
  }
  // Every slot enabled / every slot disabled.
  static constexpr SlotMask none() { return {}; }
  static constexpr SlotMask all() { return {{0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU}}; }

  friend constexpr bool operator==(const SlotMask&, const SlotMask&) = default;
};

enum class QmdVersion : std::uint8_t {
  kUnknown,
  kV01_06,  // Kepler/Maxwell compute classes (a0c0..b1c0)
  kV02_01,  // Pascal (c0c0, c1c0)
  kV02_02,  // Volta / Turing (c3c0, c5c0)
  kV02_03,  // Ampere GA100 (c6c0, alternate layout)
  kV02_04,  // Ampere GA10x / Ada (c7c0, c9c0, alternate layout)
  kV03_00,  // Ampere GA100 / GA10x / Ada (c6c0, c7c0, c9c0)
  kV04_00,  // Hopper (cbc0): tested on the H100
  kV05_00,  // Blackwell (cdc0, cec0)
};

// "V04_00", ..., "unknown". Never null.
const char* qmd_version_name(QmdVersion v);

// Reads the version fields of a QMD of at least kQmdMaxBytes bytes.
// Pre-Hopper and Hopper keep major/minor version nibbles in byte 72 (H100:
// 0x40 = V04_00); Blackwell V05_00 keeps them in byte 58. Returns kUnknown for
// anything else (and for a null pointer).
QmdVersion qmd_detect(const std::uint8_t* qmd);

// True only for the layouts whose mask has been seen confining launches on
// real hardware (V04_00).
bool qmd_mask_tested_on_hardware(QmdVersion v);

// Number of slot bits the layout's mask holds (128 for V04_00/V05_00, 64 for
// pre-Hopper, 0 for kUnknown).
int qmd_mask_slots(QmdVersion v);

// Writes `m` as the launch's TPC disable mask.
//  - V04_00: all four u32 words at byte offsets 304, 308, 312, 316, and sets
//    the "mask valid" bit (DW0 bit 31). All four words are always written.
//  - V05_00: four u32 words at 280.. (public header; untested on hardware).
//  - V01_06..V03_00: the low 64 bits into the u32 words at 84 and 88; there
//    is no valid bit. Slots >= 64 cannot be expressed and are dropped.
//  - Refused (kOutOfRange, nothing written), for every layout: a mask that
//    disables every slot the layout can express (for the 64-slot layouts, a
//    mask whose only enabled slots are >= 64), because such a launch would
//    run nowhere and never finish.
//  - kUnknown (or null qmd): kInvalidArgument, nothing written.
Status qmd_write_mask(std::uint8_t* qmd, QmdVersion v, const SlotMask& m);

// Reads back the mask a QMD carries (for tests and diagnostics): the words
// written by qmd_write_mask; for V04_00 the words are returned whether or not
// the valid bit is set.
Result<SlotMask> qmd_read_mask(const std::uint8_t* qmd, QmdVersion v);

// Whether the V04_00 "mask valid" bit (DW0 bit 31) is set; false for layouts
// without one.
bool qmd_mask_valid_bit(const std::uint8_t* qmd, QmdVersion v);

// GRID_WIDTH (number of blocks along x). V04_00: u32 at byte 128 (measured:
// rewriting it in the callback cuts the grid's upper end; the kernel still
// sees the original gridDim). Other layouts from public headers, untested.
Result<std::uint32_t> qmd_grid_width(const std::uint8_t* qmd, QmdVersion v);
// Refuses a width of 0 (a launch with no blocks) and kUnknown.
Status qmd_set_grid_width(std::uint8_t* qmd, QmdVersion v, std::uint32_t width);

// The thread-block cluster shape a descriptor carries (CTAs along x, y, z;
// {1,1,1} for a launch without clusters). V04_00 only: the bytes at 268,
// 269 and 270 (public header). False (and *out untouched) for other
// layouts. Never allocates: the descriptor callback calls it.
struct QmdCluster {
  std::uint32_t x = 1, y = 1, z = 1;
  std::uint32_t count() const { return x * y * z; }
};
bool qmd_cluster_dims(const std::uint8_t* qmd, QmdVersion v, QmdCluster* out);
// Whether qmd_cluster_dims was checked against cluster launches on real
// hardware for this layout (the interposer reads it only then).
bool qmd_cluster_tested_on_hardware(QmdVersion v);

}  // namespace lithos::gpu
