// Launch-descriptor layouts. Bit positions come from NVIDIA's public class
// headers, given as MW(hi:lo) bit ranges over the descriptor viewed as
// little-endian 32-bit words; byte offset = lo / 8:
//
//  - V04_00 (Hopper, open-gpu-doc classes/compute/clcbc0qmd.h):
//      TPC_DISABLE_MASK_VALID  MW(31:31)             -> DW0 bit 31
//      QMD_MINOR_VERSION       MW(579:576), QMD_MAJOR_VERSION MW(583:580) -> byte 72
//      GRID_WIDTH              MW(1055:1024)         -> u32 at byte 128
//      TPC_DISABLE_MASK(i)     MW((2463+i*32):(2432+i*32)) -> u32 at 304 + 4i, i = 0..3
//    All four confirmed on the H100 (h100-facts.md §1).
//  - V05_00 (Blackwell, open-gpu-doc classes/compute/clcdc0qmd.h):
//      TPC_DISABLE_MASK_VALID  MW(159:159)           -> DW4 (byte 16) bit 31
//      QMD_MINOR_VERSION       MW(467:464), QMD_MAJOR_VERSION MW(471:468) -> byte 58
//      GRID_WIDTH              MW(1279:1248)         -> u32 at byte 156
//      TPC_DISABLE_MASK(i)     MW((2271+i*32):(2240+i*32)) -> u32 at 280 + 4i
//    Untested on hardware.
//  - V02_04 and V03_00 (Ampere/Ada, open-gpu-doc classes/compute/clc9c0qmd.h;
//    clcbc0qmd.h repeats V03_00 identically):
//      QMD_VERSION             MW(579:576), QMD_MAJOR_VERSION MW(583:580) -> byte 72
//      CTA_RASTER_WIDTH        MW(415:384)           -> u32 at byte 48
//      SM_DISABLE_MASK_LOWER   MW(703:672)           -> u32 at byte 84
//      SM_DISABLE_MASK_UPPER   MW(735:704)           -> u32 at byte 88
//    No valid bit. V03_00 also has SM_DISABLE_MASK_EXT_LOWER/UPPER (bits
//    377:372 and 380:379, 8 more slots); they are left untouched.
//  - V01_06, V02_01, V02_02, V02_03: the same version byte, raster width and
//    84/88 mask words (h100-facts.md §1 records 84/88 for V01_06..V03_00; the
//    version and raster-width positions are the ones the V02_04/V03_00
//    headers share with their predecessors). Untested on hardware.
#include "gpu/qmd.hpp"

#include <cstring>
#include <string>

namespace lithos::gpu {

namespace {

struct Layout {
  std::size_t version_byte;
  std::size_t grid_width;
  std::size_t mask;        // first mask word
  int mask_words;          // 2 (64 slots) or 4 (128 slots)
  std::size_t valid_word;  // byte offset of the u32 holding the valid bit
  bool has_valid_bit;      // bit 31 of valid_word
};

constexpr Layout kPreHopper{72, 48, 84, 2, 0, false};
constexpr Layout kHopper{72, 128, 304, 4, 0, true};
constexpr Layout kBlackwell{58, 156, 280, 4, 16, true};

const Layout* layout_of(QmdVersion v) {
  switch (v) {
    case QmdVersion::kV01_06:
    case QmdVersion::kV02_01:
    case QmdVersion::kV02_02:
    case QmdVersion::kV02_03:
    case QmdVersion::kV02_04:
    case QmdVersion::kV03_00: return &kPreHopper;
    case QmdVersion::kV04_00: return &kHopper;
    case QmdVersion::kV05_00: return &kBlackwell;
    case QmdVersion::kUnknown: break;
  }
  return nullptr;
}

// The descriptor is a byte buffer of unknown alignment: copy, never cast.
std::uint32_t load_u32(const std::uint8_t* q, std::size_t off) {
  std::uint32_t v = 0;
  std::memcpy(&v, q + off, sizeof v);
  return v;
}
void store_u32(std::uint8_t* q, std::size_t off, std::uint32_t v) { std::memcpy(q + off, &v, sizeof v); }

constexpr std::uint32_t kValidBit = 0x80000000U;

// The version byte (major << 4 | minor) of a layout using byte 72.
QmdVersion from_byte72(std::uint8_t b) {
  switch (b) {
    case 0x16: return QmdVersion::kV01_06;
    case 0x21: return QmdVersion::kV02_01;
    case 0x22: return QmdVersion::kV02_02;
    case 0x23: return QmdVersion::kV02_03;
    case 0x24: return QmdVersion::kV02_04;
    case 0x30: return QmdVersion::kV03_00;
    case 0x40: return QmdVersion::kV04_00;
    default: return QmdVersion::kUnknown;
  }
}

Status unknown_layout(const char* what) {
  return Status::invalid_argument(std::string(what) + ": unknown launch-descriptor (QMD) layout; refusing to touch it");
}

}  // namespace

const char* qmd_version_name(QmdVersion v) {
  switch (v) {
    case QmdVersion::kV01_06: return "V01_06";
    case QmdVersion::kV02_01: return "V02_01";
    case QmdVersion::kV02_02: return "V02_02";
    case QmdVersion::kV02_03: return "V02_03";
    case QmdVersion::kV02_04: return "V02_04";
    case QmdVersion::kV03_00: return "V03_00";
    case QmdVersion::kV04_00: return "V04_00";
    case QmdVersion::kV05_00: return "V05_00";
    case QmdVersion::kUnknown: break;
  }
  return "unknown";
}

QmdVersion qmd_detect(const std::uint8_t* qmd) {
  if (qmd == nullptr) return QmdVersion::kUnknown;
  const QmdVersion at72 = from_byte72(qmd[72]);
  const bool blackwell = qmd[58] == 0x50;
  // Byte 58 of older layouts and byte 72 of V05_00 belong to other fields
  // (a dependent-QMD pointer, a semaphore payload). When both places carry a
  // plausible version the descriptor is ambiguous: refuse rather than guess.
  if (at72 != QmdVersion::kUnknown && blackwell) return QmdVersion::kUnknown;
  if (blackwell) return QmdVersion::kV05_00;
  return at72;
}

bool qmd_mask_tested_on_hardware(QmdVersion v) { return v == QmdVersion::kV04_00; }

int qmd_mask_slots(QmdVersion v) {
  const Layout* l = layout_of(v);
  return l == nullptr ? 0 : l->mask_words * 32;
}

Status qmd_write_mask(std::uint8_t* qmd, QmdVersion v, const SlotMask& m) {
  const Layout* l = layout_of(v);
  if (l == nullptr || qmd == nullptr) return unknown_layout("qmd_write_mask");
  // A mask that disables every slot the layout can express runs the launch
  // nowhere: it would hang forever. For the 64-slot layouts this also catches
  // masks whose only enabled slots are >= 64, which the field cannot hold.
  bool all_disabled = true;
  for (int i = 0; i < l->mask_words; ++i)
    all_disabled = all_disabled && m.disable[static_cast<std::size_t>(i)] == 0xFFFFFFFFU;
  if (all_disabled) {
    return Status::out_of_range(std::string("qmd_write_mask: the mask enables no slot the ") + qmd_version_name(v) +
                                " layout can express (" + std::to_string(l->mask_words * 32) +
                                " slots); such a launch would never finish");
  }
  for (int i = 0; i < l->mask_words; ++i) {
    store_u32(qmd, l->mask + 4 * static_cast<std::size_t>(i), m.disable[static_cast<std::size_t>(i)]);
  }
  if (l->has_valid_bit) store_u32(qmd, l->valid_word, load_u32(qmd, l->valid_word) | kValidBit);
  return Status::ok();
}

Result<SlotMask> qmd_read_mask(const std::uint8_t* qmd, QmdVersion v) {
  const Layout* l = layout_of(v);
  if (l == nullptr || qmd == nullptr) return unknown_layout("qmd_read_mask");
  SlotMask m;
  for (int i = 0; i < l->mask_words; ++i) {
    m.disable[static_cast<std::size_t>(i)] = load_u32(qmd, l->mask + 4 * static_cast<std::size_t>(i));
  }
  return m;
}

bool qmd_mask_valid_bit(const std::uint8_t* qmd, QmdVersion v) {
  const Layout* l = layout_of(v);
  if (l == nullptr || qmd == nullptr || !l->has_valid_bit) return false;
  return (load_u32(qmd, l->valid_word) & kValidBit) != 0;
}

Result<std::uint32_t> qmd_grid_width(const std::uint8_t* qmd, QmdVersion v) {
  const Layout* l = layout_of(v);
  if (l == nullptr || qmd == nullptr) return unknown_layout("qmd_grid_width");
  return load_u32(qmd, l->grid_width);
}

Status qmd_set_grid_width(std::uint8_t* qmd, QmdVersion v, std::uint32_t width) {
  const Layout* l = layout_of(v);
  if (l == nullptr || qmd == nullptr) return unknown_layout("qmd_set_grid_width");
  if (width == 0) return Status::invalid_argument("qmd_set_grid_width: a grid width of 0 launches nothing");
  store_u32(qmd, l->grid_width, width);
  return Status::ok();
}

bool qmd_cluster_dims(const std::uint8_t* qmd, QmdVersion v, QmdCluster* out) {
  if (qmd == nullptr || out == nullptr || v != QmdVersion::kV04_00) return false;
  // A byte of 0 means "no cluster" (the driver leaves the fields clear for
  // plain launches); each field is the CTA count along its axis.
  QmdCluster c;
  c.x = qmd[268] == 0 ? 1U : qmd[268];
  c.y = qmd[269] == 0 ? 1U : qmd[269];
  c.z = qmd[270] == 0 ? 1U : qmd[270];
  *out = c;
  return true;
}

bool qmd_cluster_tested_on_hardware(QmdVersion v) {
  // V04_00: bytes 268-270 were 2/1/1, 4/1/1, 8/1/1, 16/1/1, 2/2/1 and 1/2/1
  // for launches with those cluster shapes (attribute and __cluster_dims__),
  // 0/0/0 without (H100, 2026-11-24, scripts/safe/topo_probe qmd).
  return v == QmdVersion::kV04_00;
}

}  // namespace lithos::gpu
