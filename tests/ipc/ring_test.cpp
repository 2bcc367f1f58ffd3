// SpscRing (protocol.hpp): order, capacity, wrap-around and the consumer's
// defence against a producer that writes nonsense into the indices.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>

#include "ipc/protocol.hpp"

namespace lithos::ipc {
namespace {

using Ring = SpscRing<SubmitMsg, kRingSlots>;

SubmitMsg msg(std::uint64_t seq) {
  SubmitMsg m;
  m.seq = seq;
  m.kernel = ~seq;
  return m;
}

TEST(IpcRing, PushPopKeepsOrder) {
  auto r = std::make_unique<Ring>();
  for (std::uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(r->push(msg(i)));
  EXPECT_EQ(r->size(), 10U);
  SubmitMsg out;
  for (std::uint64_t i = 1; i <= 10; ++i) {
    ASSERT_TRUE(r->pop(&out));
    EXPECT_EQ(out.seq, i);
    EXPECT_EQ(out.kernel, ~i);
  }
  EXPECT_FALSE(r->pop(&out));
  EXPECT_EQ(r->size(), 0U);
}

TEST(IpcRing, FullAtCapacity) {
  auto r = std::make_unique<Ring>();
  for (std::uint64_t i = 0; i < kRingSlots; ++i) ASSERT_TRUE(r->push(msg(i))) << i;
  EXPECT_FALSE(r->push(msg(kRingSlots)));
  EXPECT_EQ(r->size(), kRingSlots);
  SubmitMsg out;
  ASSERT_TRUE(r->pop(&out));
  EXPECT_EQ(out.seq, 0U);
  EXPECT_TRUE(r->push(msg(kRingSlots)));  // one slot freed, one taken
  EXPECT_FALSE(r->push(msg(kRingSlots + 1)));
}

// Several million messages through one ring, in bursts of varying length so
// that the indices wrap around the slots thousands of times at every offset.
TEST(IpcRing, WrapAroundMillions) {
  auto r = std::make_unique<Ring>();
  std::uint64_t pushed = 0, popped = 0;
  SubmitMsg out;
  constexpr std::uint64_t kTotal = 5'000'000;
  while (popped < kTotal) {
    const std::uint64_t burst = 1 + (pushed * 7919) % kRingSlots;
    for (std::uint64_t i = 0; i < burst && pushed < kTotal && r->push(msg(pushed)); ++i) ++pushed;
    const std::uint64_t take = 1 + (popped * 104729) % kRingSlots;
    for (std::uint64_t i = 0; i < take && r->pop(&out); ++i) {
      ASSERT_EQ(out.seq, popped);
      ++popped;
    }
  }
  EXPECT_EQ(r->head.load(), kTotal);
  EXPECT_EQ(r->tail.load(), kTotal);
}

// A producer that keeps the consumer's index it last read (the client's
// submit ring) reads it again only when the ring looks full: it never
// overwrites an unread message, and it sees the room the consumer made.
TEST(IpcRing, ProducerWithItsOwnCopyOfTheTail) {
  auto r = std::make_unique<Ring>();
  std::uint64_t seen = 0;
  for (std::uint64_t i = 0; i < kRingSlots; ++i) ASSERT_TRUE(r->push(msg(i), &seen)) << i;
  EXPECT_EQ(seen, 0U);  // never looked: there was room
  EXPECT_FALSE(r->push(msg(kRingSlots), &seen));
  SubmitMsg out;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r->pop(&out));
  EXPECT_TRUE(r->push(msg(kRingSlots), &seen));  // looked again: three free
  EXPECT_EQ(seen, 3U);
  EXPECT_TRUE(r->push(msg(kRingSlots + 1), &seen));
  EXPECT_TRUE(r->push(msg(kRingSlots + 2), &seen));
  EXPECT_FALSE(r->push(msg(kRingSlots + 3), &seen));
  for (std::uint64_t want = 3; want < kRingSlots + 3; ++want) {
    ASSERT_TRUE(r->pop(&out));
    ASSERT_EQ(out.seq, want);
  }
  EXPECT_FALSE(r->pop(&out));
}

// One producer thread, one consumer thread: the release/acquire pairs make
// every popped slot the one pushed (`own_tail`: the producer keeps its own
// copy of the consumer's index, as the client does).
void two_threads(bool own_tail) {
  auto r = std::make_unique<Ring>();
  constexpr std::uint64_t kTotal = 1'000'000;
  std::thread producer([&] {
    std::uint64_t seen = 0;
    for (std::uint64_t i = 0; i < kTotal;) {
      if (own_tail ? r->push(msg(i), &seen) : r->push(msg(i))) {
        ++i;
      } else {
        std::this_thread::yield();
      }
    }
  });
  SubmitMsg out;
  for (std::uint64_t want = 0; want < kTotal;) {
    if (!r->pop(&out)) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_EQ(out.seq, want);
    ASSERT_EQ(out.kernel, ~want);
    ++want;
  }
  producer.join();
}

TEST(IpcRing, TwoThreads) { two_threads(false); }
TEST(IpcRing, TwoThreadsProducerWithItsOwnCopyOfTheTail) { two_threads(true); }

TEST(IpcRing, CorruptHeadBehindTail) {
  auto r = std::make_unique<Ring>();
  r->tail.store(100);
  r->head.store(50);
  SubmitMsg out;
  out.seq = 777;
  bool corrupt = false;
  EXPECT_FALSE(r->pop(&out, &corrupt));
  EXPECT_TRUE(corrupt);
  EXPECT_EQ(out.seq, 777U);         // nothing written
  EXPECT_EQ(r->tail.load(), 100U);  // nothing consumed
  EXPECT_EQ(r->size(), 0U);
}

TEST(IpcRing, CorruptHeadTooFarAhead) {
  auto r = std::make_unique<Ring>();
  r->head.store(kRingSlots + 1);
  SubmitMsg out;
  out.seq = 777;
  bool corrupt = false;
  EXPECT_FALSE(r->pop(&out, &corrupt));
  EXPECT_TRUE(corrupt);
  EXPECT_EQ(out.seq, 777U);
  EXPECT_EQ(r->tail.load(), 0U);
  // Exactly N ahead is a full ring, not corruption.
  r->head.store(kRingSlots);
  corrupt = false;
  EXPECT_TRUE(r->pop(&out, &corrupt));
  EXPECT_FALSE(corrupt);
  // Near the top of the 64-bit range, the same rules hold.
  r->tail.store(~std::uint64_t{0} - 5);
  r->head.store(3);  // "wrapped": head < tail
  corrupt = false;
  EXPECT_FALSE(r->pop(&out, &corrupt));
  EXPECT_TRUE(corrupt);
}

TEST(IpcRing, CorruptFlagOptional) {
  auto r = std::make_unique<Ring>();
  r->head.store(~std::uint64_t{0});
  SubmitMsg out;
  EXPECT_FALSE(r->pop(&out));  // no flag to set: still nothing popped
  EXPECT_EQ(r->tail.load(), 0U);
}

}  // namespace
}  // namespace lithos::ipc
