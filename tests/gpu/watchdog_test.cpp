#include "gpu/watchdog.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

namespace lithos::gpu {
namespace {

TEST(Watchdog, ReturnsTheChildsPayload) {
  auto r = run_in_child([]() -> Result<std::string> { return std::string("hello\nworld"); }, 10, "test");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, "hello\nworld");
}

TEST(Watchdog, ReturnsTheChildsError) {
  auto r =
      run_in_child([]() -> Result<std::string> { return Status::not_found("no such thing\nsecond line"); }, 10, "test");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no such thing\nsecond line");
}

TEST(Watchdog, KillsAChildThatNeverFinishes) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_in_child(
      []() -> Result<std::string> {
        while (true) ::pause();  // a launch that never finishes
      },
      1.0, "hanging work");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("watchdog"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("hanging work"), std::string::npos);
  // Killed after its 1 s, not waited for: later than that on a loaded
  // machine, but far below a launch that never ends.
  EXPECT_GE(secs, 1.0);
  EXPECT_LT(secs, 60.0);
}

TEST(Watchdog, ReportsAChildThatDies) {
  auto r = run_in_child(
      []() -> Result<std::string> {
        ::kill(::getpid(), SIGKILL);
        return std::string("unreachable");
      },
      10, "dying work");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("signal 9"), std::string::npos) << r.status().message();
}

TEST(Watchdog, AChildThatThrowsIsAnError) {
  auto r = run_in_child([]() -> Result<std::string> { throw 42; }, 10, "throwing work");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace lithos::gpu
