// The right-size table of a channel (ipc/size_table.hpp): one writer (the
// daemon), lock-free readers (the client), no torn entries, a full table
// refusing new keys.
#include "ipc/size_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "ipc/channel.hpp"

namespace lithos::ipc {
namespace {

TEST(SizeTable, PublishedSizesAreFoundByKernelAndGrid) {
  auto ch = Channel::create(1, 0, 1);
  ASSERT_TRUE(ch.is_ok()) << ch.status().message();
  SizeTable& t = ch->layout().sizes;
  SizeTableWriter w(&t);
  const std::uint32_t g1[3] = {16, 1, 1};
  const std::uint32_t g2[3] = {16, 2, 1};
  EXPECT_EQ(size_lookup(t, 7, g1), 0U);  // empty
  EXPECT_EQ(w.publish(7, g1, 3), SizeTableWriter::Result::kAdded);
  EXPECT_EQ(size_lookup(t, 7, g1), 3U);
  EXPECT_EQ(size_lookup(t, 7, g2), 0U);  // another grid
  EXPECT_EQ(size_lookup(t, 8, g1), 0U);  // another kernel
  EXPECT_EQ(w.publish(7, g2, 5), SizeTableWriter::Result::kAdded);
  EXPECT_EQ(w.publish(7, g1, 4), SizeTableWriter::Result::kUpdated);
  EXPECT_EQ(size_lookup(t, 7, g1), 4U);
  EXPECT_EQ(size_lookup(t, 7, g2), 5U);
  EXPECT_EQ(w.size(), 2U);
  EXPECT_EQ(w.publish(9, g1, 0), SizeTableWriter::Result::kInvalid);
  w.clear();
  EXPECT_EQ(size_lookup(t, 7, g1), 0U);
  EXPECT_EQ(size_lookup(t, 7, g2), 0U);
  EXPECT_EQ(w.size(), 0U);
  EXPECT_EQ(w.publish(7, g2, 6), SizeTableWriter::Result::kAdded);
  EXPECT_EQ(size_lookup(t, 7, g2), 6U);
}

TEST(SizeTable, AFullTableRefusesNewKeysAndKeepsTheOthers) {
  auto table = std::make_unique<SizeTable>();
  SizeTableWriter w(table.get());
  for (std::uint32_t i = 0; i < kSizeTableSlots; ++i) {
    const std::uint32_t g[3] = {i + 1, 1, 1};
    ASSERT_EQ(w.publish(1000 + i, g, 1 + i % 100), SizeTableWriter::Result::kAdded) << i;
  }
  const std::uint32_t extra[3] = {1, 1, 1};
  EXPECT_EQ(w.publish(99, extra, 2), SizeTableWriter::Result::kFull);
  EXPECT_EQ(w.refused(), 1U);
  EXPECT_EQ(size_lookup(*table, 99, extra), 0U);
  // Every key still found (the probe of an absent key ends too).
  for (std::uint32_t i = 0; i < kSizeTableSlots; ++i) {
    const std::uint32_t g[3] = {i + 1, 1, 1};
    EXPECT_EQ(size_lookup(*table, 1000 + i, g), 1 + i % 100) << i;
  }
  // An existing key may still change.
  const std::uint32_t g0[3] = {1, 1, 1};
  EXPECT_EQ(w.publish(1000, g0, 7), SizeTableWriter::Result::kUpdated);
  EXPECT_EQ(size_lookup(*table, 1000, g0), 7U);
}

// An entry whose sequence is odd is being rewritten: a reader never takes
// its fields (half of them may be the old entry's), and answers "none",
// which leaves the launch on its allocation. Once the write ends (the
// sequence even again), the new entry is read.
TEST(SizeTable, AnEntryBeingWrittenIsNeverRead) {
  auto table = std::make_unique<SizeTable>();
  SizeTableWriter w(table.get());
  const std::uint32_t g[3] = {16, 1, 1};
  ASSERT_EQ(w.publish(42, g, 3), SizeTableWriter::Result::kAdded);
  SizeEntry& e = table->entries[size_slot(42, g)];
  ASSERT_EQ(e.kernel.load(), 42U);
  // A writer stopped half-way: the sequence odd, the size new, the key old.
  const std::uint32_t seq = e.seq.load();
  e.seq.store(seq + 1);
  e.tpcs.store(9);
  EXPECT_EQ(size_lookup(*table, 42, g), 0U);
  e.seq.store(seq + 2);
  EXPECT_EQ(size_lookup(*table, 42, g), 9U);
}

// A reader racing a writer that keeps replacing the entries (clear, then
// other keys in the same slots) sees, for a key, nothing or that key's own
// size: never a size published for another key.
TEST(SizeTable, AReaderNeverSeesATornEntry) {
  auto table = std::make_unique<SizeTable>();
  constexpr std::uint32_t kKeys = 8;
  auto size_of = [](std::uint64_t k) { return static_cast<std::uint32_t>(k * 7 % 97 + 1); };
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    SizeTableWriter w(table.get());
    std::uint64_t round = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      w.clear();
      for (std::uint32_t i = 0; i < kKeys; ++i) {
        const std::uint64_t k = (round + i) % (2 * kKeys) + 1;
        const std::uint32_t g[3] = {static_cast<std::uint32_t>(k), 1, 1};
        w.publish(k, g, size_of(k));
      }
      ++round;
    }
  });
  std::uint64_t hits = 0, wrong = 0;
  for (int n = 0; n < 200'000 || hits == 0; ++n) {
    const std::uint64_t k = static_cast<std::uint64_t>(n) % (2 * kKeys) + 1;
    const std::uint32_t g[3] = {static_cast<std::uint32_t>(k), 1, 1};
    const std::uint32_t got = size_lookup(*table, k, g);
    if (got != 0) ++hits;
    if (got != 0 && got != size_of(k)) ++wrong;
    if (n > 50'000'000) break;  // the writer never got to run: reported below
  }
  stop = true;
  writer.join();
  EXPECT_GT(hits, 0U);
  EXPECT_EQ(wrong, 0U);
}

}  // namespace
}  // namespace lithos::ipc
