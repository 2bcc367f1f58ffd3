#include "gpu/qmd.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

namespace lithos::gpu {
namespace {

using Qmd = std::array<std::uint8_t, kQmdMaxBytes>;

// A 384-byte descriptor filled with a recognisable pattern, with the version
// byte of `v` in place.
Qmd synthetic(QmdVersion v, std::uint8_t fill = 0x25) {
  Qmd q;
  q.fill(fill);
  q[58] = 0x00;
  switch (v) {
    case QmdVersion::kV01_06: q[72] = 0x16; break;
    case QmdVersion::kV02_01: q[72] = 0x21; break;
    case QmdVersion::kV02_02: q[72] = 0x22; break;
    case QmdVersion::kV02_03: q[72] = 0x23; break;
    case QmdVersion::kV02_04: q[72] = 0x24; break;
    case QmdVersion::kV03_00: q[72] = 0x30; break;
    case QmdVersion::kV04_00: q[72] = 0x40; break;
    case QmdVersion::kV05_00:
      q[72] = 0x00;
      q[58] = 0x50;
      break;
    case QmdVersion::kUnknown: q[72] = 0x99; break;
  }
  return q;
}

std::uint32_t u32_at(const Qmd& q, std::size_t off) {
  std::uint32_t v = 0;
  std::memcpy(&v, q.data() + off, 4);
  return v;
}

// Byte offsets that differ between two descriptors.
std::vector<std::size_t> diff(const Qmd& a, const Qmd& b) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) out.push_back(i);
  }
  return out;
}

const SlotMask kMask{{0x01234567U, 0x89ABCDEFU, 0x00000000U, 0xF0F0F0F0U}};

constexpr QmdVersion kAllKnown[] = {QmdVersion::kV01_06, QmdVersion::kV02_01, QmdVersion::kV02_02, QmdVersion::kV02_03,
                                    QmdVersion::kV02_04, QmdVersion::kV03_00, QmdVersion::kV04_00, QmdVersion::kV05_00};
constexpr QmdVersion kPreHopper[] = {QmdVersion::kV01_06, QmdVersion::kV02_01, QmdVersion::kV02_02,
                                     QmdVersion::kV02_03, QmdVersion::kV02_04, QmdVersion::kV03_00};

TEST(QmdDetect, ReadsTheVersionByteOfEveryLayout) {
  for (QmdVersion v : kAllKnown) {
    const Qmd q = synthetic(v);
    EXPECT_EQ(qmd_detect(q.data()), v) << qmd_version_name(v);
  }
}

TEST(QmdDetect, H100VersionByteIsV04) {
  Qmd q{};
  q[72] = 0x40;
  EXPECT_EQ(qmd_detect(q.data()), QmdVersion::kV04_00);
}

TEST(QmdDetect, UnknownNullAndAmbiguousAreUnknown) {
  Qmd q{};
  EXPECT_EQ(qmd_detect(q.data()), QmdVersion::kUnknown);  // all zero
  q[72] = 0x41;                                           // V04_01: not known
  EXPECT_EQ(qmd_detect(q.data()), QmdVersion::kUnknown);
  q[72] = 0x17;  // V01_07: not in the list
  EXPECT_EQ(qmd_detect(q.data()), QmdVersion::kUnknown);
  q[72] = 0x00;
  q[58] = 0x51;  // V05_01: not known
  EXPECT_EQ(qmd_detect(q.data()), QmdVersion::kUnknown);
  q[58] = 0x50;
  q[72] = 0x40;  // both places plausible: refuse to guess
  EXPECT_EQ(qmd_detect(q.data()), QmdVersion::kUnknown);
  EXPECT_EQ(qmd_detect(nullptr), QmdVersion::kUnknown);
}

TEST(QmdNames, EveryVersionHasAName) {
  EXPECT_STREQ(qmd_version_name(QmdVersion::kV04_00), "V04_00");
  EXPECT_STREQ(qmd_version_name(QmdVersion::kV01_06), "V01_06");
  EXPECT_STREQ(qmd_version_name(QmdVersion::kV05_00), "V05_00");
  EXPECT_STREQ(qmd_version_name(QmdVersion::kUnknown), "unknown");
  EXPECT_STREQ(qmd_version_name(static_cast<QmdVersion>(200)), "unknown");
}

TEST(QmdTested, OnlyHopperIsTestedOnHardware) {
  for (QmdVersion v : kAllKnown) EXPECT_EQ(qmd_mask_tested_on_hardware(v), v == QmdVersion::kV04_00);
  EXPECT_FALSE(qmd_mask_tested_on_hardware(QmdVersion::kUnknown));
}

TEST(QmdMaskSlots, WidthPerLayout) {
  for (QmdVersion v : kPreHopper) EXPECT_EQ(qmd_mask_slots(v), 64);
  EXPECT_EQ(qmd_mask_slots(QmdVersion::kV04_00), 128);
  EXPECT_EQ(qmd_mask_slots(QmdVersion::kV05_00), 128);
  EXPECT_EQ(qmd_mask_slots(QmdVersion::kUnknown), 0);
}

TEST(QmdWriteMask, V04WritesFourWordsAt304AndTheValidBit) {
  Qmd q = synthetic(QmdVersion::kV04_00);
  const Qmd before = q;
  ASSERT_TRUE(qmd_write_mask(q.data(), QmdVersion::kV04_00, kMask).is_ok());
  EXPECT_EQ(u32_at(q, 304), 0x01234567U);
  EXPECT_EQ(u32_at(q, 308), 0x89ABCDEFU);
  EXPECT_EQ(u32_at(q, 312), 0x00000000U);  // a zero word is written, not skipped
  EXPECT_EQ(u32_at(q, 316), 0xF0F0F0F0U);
  EXPECT_EQ(u32_at(q, 0), u32_at(before, 0) | 0x80000000U);
  // Nothing else moved: only bytes 304..319 and DW0's top byte.
  for (std::size_t off : diff(before, q)) {
    EXPECT_TRUE((off >= 304 && off < 320) || off == 3) << "byte " << off << " changed";
  }
  EXPECT_TRUE(qmd_mask_valid_bit(q.data(), QmdVersion::kV04_00));
}

TEST(QmdWriteMask, V04AlwaysWritesAllFourWords) {
  // The habit of older public code (words 2-3 set to ones) disabled 24 SMs on
  // the H100: a mask that enables everything must clear all four words.
  Qmd q = synthetic(QmdVersion::kV04_00, 0xFF);
  q[72] = 0x40;
  q[58] = 0x00;
  ASSERT_TRUE(qmd_write_mask(q.data(), QmdVersion::kV04_00, SlotMask::none()).is_ok());
  for (std::size_t off = 304; off < 320; off += 4) EXPECT_EQ(u32_at(q, off), 0U) << off;
  EXPECT_TRUE(qmd_mask_valid_bit(q.data(), QmdVersion::kV04_00));
}

TEST(QmdWriteMask, V05WritesAt280AndValidBitInDword4) {
  Qmd q = synthetic(QmdVersion::kV05_00);
  const Qmd before = q;
  ASSERT_TRUE(qmd_write_mask(q.data(), QmdVersion::kV05_00, kMask).is_ok());
  EXPECT_EQ(u32_at(q, 280), 0x01234567U);
  EXPECT_EQ(u32_at(q, 284), 0x89ABCDEFU);
  EXPECT_EQ(u32_at(q, 288), 0x00000000U);
  EXPECT_EQ(u32_at(q, 292), 0xF0F0F0F0U);
  EXPECT_EQ(u32_at(q, 16), u32_at(before, 16) | 0x80000000U);
  EXPECT_EQ(u32_at(q, 0), u32_at(before, 0));
  for (std::size_t off : diff(before, q)) {
    EXPECT_TRUE((off >= 280 && off < 296) || off == 19) << "byte " << off << " changed";
  }
  EXPECT_TRUE(qmd_mask_valid_bit(q.data(), QmdVersion::kV05_00));
}

TEST(QmdWriteMask, PreHopperWritesLow64BitsAt84And88WithoutValidBit) {
  for (QmdVersion v : kPreHopper) {
    Qmd q = synthetic(v);
    const Qmd before = q;
    ASSERT_TRUE(qmd_write_mask(q.data(), v, kMask).is_ok()) << qmd_version_name(v);
    EXPECT_EQ(u32_at(q, 84), 0x01234567U);
    EXPECT_EQ(u32_at(q, 88), 0x89ABCDEFU);
    for (std::size_t off : diff(before, q)) {
      EXPECT_TRUE(off >= 84 && off < 92) << qmd_version_name(v) << " byte " << off << " changed";
    }
    EXPECT_FALSE(qmd_mask_valid_bit(q.data(), v));
  }
}

TEST(QmdWriteMask, PreHopperRefusesMasksWhoseOnlyEnabledSlotsAreAbove63) {
  SlotMask m = SlotMask::all();
  m.set_disabled(70, false);  // only slot 70 enabled: not expressible in 64 bits
  for (QmdVersion v : kPreHopper) {
    Qmd q = synthetic(v);
    const Qmd before = q;
    const Status s = qmd_write_mask(q.data(), v, m);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << qmd_version_name(v);
    EXPECT_EQ(q, before) << "a refused mask must leave the descriptor untouched";
  }
  // Slot 3 plus slot 70: slot 70 is dropped, slot 3 runs.
  m.set_disabled(3, false);
  Qmd q = synthetic(QmdVersion::kV03_00);
  ASSERT_TRUE(qmd_write_mask(q.data(), QmdVersion::kV03_00, m).is_ok());
  EXPECT_EQ(u32_at(q, 84), ~(1U << 3));
  EXPECT_EQ(u32_at(q, 88), 0xFFFFFFFFU);
}

TEST(QmdWriteMask, EveryLayoutRefusesAMaskThatDisablesEverySlot) {
  for (QmdVersion v : kAllKnown) {
    Qmd q = synthetic(v);
    const Qmd before = q;
    EXPECT_EQ(qmd_write_mask(q.data(), v, SlotMask::all()).code(), StatusCode::kOutOfRange) << qmd_version_name(v);
    EXPECT_EQ(q, before);
  }
}

TEST(QmdWriteMask, UnknownLayoutIsRefusedAndLeftUntouched) {
  Qmd q = synthetic(QmdVersion::kUnknown);
  const Qmd before = q;
  const Status s = qmd_write_mask(q.data(), QmdVersion::kUnknown, kMask);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown"), std::string::npos) << s.message();
  EXPECT_EQ(q, before);
  EXPECT_FALSE(qmd_write_mask(nullptr, QmdVersion::kV04_00, kMask).is_ok());
  EXPECT_FALSE(qmd_write_mask(q.data(), static_cast<QmdVersion>(77), kMask).is_ok());
  EXPECT_EQ(q, before);
}

TEST(QmdReadMask, RoundTripsWhatWasWritten) {
  for (QmdVersion v : kAllKnown) {
    Qmd q = synthetic(v);
    ASSERT_TRUE(qmd_write_mask(q.data(), v, kMask).is_ok());
    auto back = qmd_read_mask(q.data(), v);
    ASSERT_TRUE(back.is_ok());
    SlotMask expect = kMask;
    if (qmd_mask_slots(v) == 64) expect.disable[2] = expect.disable[3] = 0;
    EXPECT_EQ(*back, expect) << qmd_version_name(v);
  }
  EXPECT_FALSE(qmd_read_mask(synthetic(QmdVersion::kUnknown).data(), QmdVersion::kUnknown).is_ok());
}

TEST(QmdGridWidth, V04IsAU32At128) {
  Qmd q = synthetic(QmdVersion::kV04_00);
  const Qmd before = q;
  ASSERT_TRUE(qmd_set_grid_width(q.data(), QmdVersion::kV04_00, 600).is_ok());
  EXPECT_EQ(u32_at(q, 128), 600U);
  EXPECT_EQ(*qmd_grid_width(q.data(), QmdVersion::kV04_00), 600U);
  for (std::size_t off : diff(before, q)) EXPECT_TRUE(off >= 128 && off < 132) << off;
}

TEST(QmdGridWidth, OtherLayoutsFromPublicHeaders) {
  Qmd q = synthetic(QmdVersion::kV05_00);
  ASSERT_TRUE(qmd_set_grid_width(q.data(), QmdVersion::kV05_00, 1000).is_ok());
  EXPECT_EQ(u32_at(q, 156), 1000U);
  for (QmdVersion v : kPreHopper) {
    Qmd p = synthetic(v);
    ASSERT_TRUE(qmd_set_grid_width(p.data(), v, 77).is_ok());
    EXPECT_EQ(u32_at(p, 48), 77U) << qmd_version_name(v);
    EXPECT_EQ(*qmd_grid_width(p.data(), v), 77U);
  }
}

TEST(QmdGridWidth, ZeroAndUnknownAreRefused) {
  Qmd q = synthetic(QmdVersion::kV04_00);
  const Qmd before = q;
  EXPECT_EQ(qmd_set_grid_width(q.data(), QmdVersion::kV04_00, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(qmd_set_grid_width(q.data(), QmdVersion::kUnknown, 5).is_ok());
  EXPECT_FALSE(qmd_grid_width(q.data(), QmdVersion::kUnknown).is_ok());
  EXPECT_FALSE(qmd_grid_width(nullptr, QmdVersion::kV04_00).is_ok());
  EXPECT_EQ(q, before);
}

TEST(SlotMaskBits, IndexesSlotsAcrossWords) {
  SlotMask m;
  m.set_disabled(0, true);
  m.set_disabled(33, true);
  m.set_disabled(127, true);
  m.set_disabled(128, true);  // out of range: ignored
  m.set_disabled(-1, true);
  EXPECT_EQ(m.disable[0], 1U);
  EXPECT_EQ(m.disable[1], 2U);
  EXPECT_EQ(m.disable[2], 0U);
  EXPECT_EQ(m.disable[3], 0x80000000U);
  EXPECT_TRUE(m.disabled(33));
  EXPECT_FALSE(m.disabled(34));
  EXPECT_FALSE(m.disabled(500));
  m.set_disabled(33, false);
  EXPECT_EQ(m.disable[1], 0U);
  EXPECT_EQ(SlotMask::all().disable[3], 0xFFFFFFFFU);
  EXPECT_EQ(SlotMask::none(), SlotMask{});
}

}  // namespace
}  // namespace lithos::gpu

namespace lithos::gpu {
namespace {

TEST(QmdCluster, V04ReadsBytes268To270) {
  std::array<std::uint8_t, kQmdMaxBytes> q{};
  q[72] = 0x40;
  QmdCluster c;
  ASSERT_TRUE(qmd_cluster_dims(q.data(), QmdVersion::kV04_00, &c));
  EXPECT_EQ(c.count(), 1U);  // a plain launch leaves them 0
  q[268] = 2;
  q[269] = 2;
  q[270] = 1;
  ASSERT_TRUE(qmd_cluster_dims(q.data(), QmdVersion::kV04_00, &c));
  EXPECT_EQ(c.x, 2U);
  EXPECT_EQ(c.y, 2U);
  EXPECT_EQ(c.z, 1U);
  EXPECT_EQ(c.count(), 4U);
  EXPECT_TRUE(qmd_cluster_tested_on_hardware(QmdVersion::kV04_00));
  EXPECT_FALSE(qmd_cluster_dims(q.data(), QmdVersion::kV05_00, &c));
  EXPECT_FALSE(qmd_cluster_dims(nullptr, QmdVersion::kV04_00, &c));
}

}  // namespace
}  // namespace lithos::gpu
