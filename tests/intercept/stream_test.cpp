// intercept::Stream: what a (handle, _ptsz) pair means to the driver and to
// lithos's maps, in the one place that says it.
#include "intercept/stream.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

namespace lithos::intercept {
namespace {

CUstream_st* handle(std::uintptr_t v) { return reinterpret_cast<CUstream_st*>(v); }

TEST(Stream, ANullStreamIsTheLegacyOrThePerThreadDefaultStream) {
  const Stream legacy(nullptr, false);
  const Stream per_thread(nullptr, true);
  EXPECT_EQ(legacy.handle(), handle(0x1));      // CU_STREAM_LEGACY
  EXPECT_EQ(per_thread.handle(), handle(0x2));  // CU_STREAM_PER_THREAD
  EXPECT_FALSE(legacy.null_per_thread());
  EXPECT_TRUE(per_thread.null_per_thread());
  // Entry points without _ptsz: a null legacy stream stays null.
  EXPECT_EQ(legacy.plain_handle(), nullptr);
  EXPECT_EQ(per_thread.plain_handle(), handle(0x2));
}

TEST(Stream, AnExplicitHandleIsItselfWhateverTheEntryPoint) {
  CUstream_st* s = handle(0x7f0000001000);
  for (const bool ptsz : {false, true}) {
    const Stream st(s, ptsz);
    EXPECT_EQ(st.raw(), s);
    EXPECT_EQ(st.handle(), s);
    EXPECT_EQ(st.plain_handle(), s);
    EXPECT_FALSE(st.null_per_thread());
    EXPECT_EQ(st.key(), reinterpret_cast<std::uintptr_t>(s));
    EXPECT_EQ(st.handle_key(), reinterpret_cast<std::uintptr_t>(s));
  }
}

TEST(Stream, ThePerThreadDefaultStreamIsAnotherStreamInEachThread) {
  const Stream per_thread(nullptr, true);
  const std::uintptr_t here = per_thread.key();
  EXPECT_EQ(per_thread.key(), here);  // one key within a thread
  std::uintptr_t there = here;
  std::uintptr_t there_handle = 0;
  std::thread([&] {
    there = Stream(nullptr, true).key();
    there_handle = Stream(nullptr, true).handle_key();
  }).join();
  EXPECT_NE(there, here);
  // The handle key is the handle: one for every thread.
  EXPECT_EQ(there_handle, per_thread.handle_key());
  EXPECT_EQ(per_thread.handle_key(), std::uintptr_t{0x2});
  // The legacy stream is one stream: key 0 for a null handle.
  EXPECT_EQ(Stream(nullptr, false).key(), std::uintptr_t{0});
  EXPECT_NE(here, std::uintptr_t{0});
}

}  // namespace
}  // namespace lithos::intercept
