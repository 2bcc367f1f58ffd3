// The activity board (src/intercept/board.hpp): a shared page through which
// processes tell each other when high-priority work was last launched.
#include "intercept/board.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace lithos::intercept {
namespace {

std::string temp_board(const char* name) {
  const std::string path = ::testing::TempDir() + "lithos-board-" + name + "-" + std::to_string(::getpid());
  std::remove(path.c_str());
  return path;
}

TEST(Board, AFreshBoardShowsNoHighPriorityWork) {
  const std::string path = temp_board("fresh");
  Board b;
  ASSERT_TRUE(b.open(path).is_ok());
  EXPECT_TRUE(b.is_open());
  EXPECT_EQ(b.hp_last_launch_ns(), 0u);
  EXPECT_FALSE(b.hp_active(Board::now_ns(), 1'000'000));
  std::remove(path.c_str());
}

TEST(Board, ALaunchIsActiveForTheHoldTime) {
  const std::string path = temp_board("hold");
  Board b;
  ASSERT_TRUE(b.open(path).is_ok());
  b.hp_launched(5'000'000);
  EXPECT_TRUE(b.hp_active(5'000'000, 1'000));
  EXPECT_TRUE(b.hp_active(5'000'999, 1'000));
  EXPECT_FALSE(b.hp_active(5'001'000, 1'000));
  EXPECT_TRUE(b.hp_active(4'000'000, 1'000)) << "a stamp from the future (another clock read) counts as active";
  // Stamps never go back: an older launch published late changes nothing.
  b.hp_launched(4'000'000);
  EXPECT_EQ(b.hp_last_launch_ns(), 5'000'000u);
  EXPECT_EQ(b.hp_launches(), 2u);
  std::remove(path.c_str());
}

TEST(Board, ProcessesShareIt) {
  const std::string path = temp_board("shared");
  Board parent;
  ASSERT_TRUE(parent.open(path).is_ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Board child;
    if (!child.open(path).is_ok()) ::_exit(2);
    child.hp_launched(Board::now_ns());
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(parent.hp_launches(), 1u);
  EXPECT_TRUE(parent.hp_active(Board::now_ns(), 10'000'000'000ull));
  // A second open of the same file (another process starting later) sees it too.
  Board late;
  ASSERT_TRUE(late.open(path).is_ok());
  EXPECT_EQ(late.hp_last_launch_ns(), parent.hp_last_launch_ns());
  std::remove(path.c_str());
}

TEST(Board, FilesThatAreNotBoardsAreRefused) {
  const std::string path = temp_board("foreign");
  {
    std::ofstream f(path);
    f << "not a board";
  }
  Board b;
  const Status short_file = b.open(path);
  EXPECT_FALSE(short_file.is_ok());
  EXPECT_NE(short_file.message().find("is not a lithos board"), std::string::npos) << short_file.message();
  EXPECT_FALSE(b.is_open());
  {
    std::ofstream f(path);
    f << std::string(4096, 'x');
  }
  EXPECT_FALSE(b.open(path).is_ok()) << "a page of something else";
  EXPECT_FALSE(b.open("/nonexistent-dir/board").is_ok());
  EXPECT_FALSE(b.open("").is_ok());
  // Closed boards answer conservatively: high-priority work is assumed.
  EXPECT_TRUE(b.hp_active(Board::now_ns(), 1));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace lithos::intercept
