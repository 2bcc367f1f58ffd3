// The activity board: one page of shared memory (a file, LITHOS_BOARD) on
// which the lithos processes of one machine tell each other when
// high-priority work was last launched. It is the smallest piece of
// cross-process scheduling (until the daemon): a high-priority tenant
// (LITHOS_ROLE=hp) stamps the time of each kernel launch on it; a
// best-effort tenant (LITHOS_ROLE=be) confined to a TPC set runs on the whole
// GPU while no high-priority launch is more recent than the hold time
// (LITHOS_HP_HOLD_US), and on its set otherwise. With the kernel atomizer
// each atom decides anew, so stolen TPCs come back within one atom
// (docs/atomizer.md, "Stealing").
//
// Times are CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock on
// Linux), the same in every process of the machine. The page holds only
// lock-free 64-bit atomics, so processes never block each other and a
// process that dies leaves nothing locked.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/status.hpp"

namespace lithos::intercept {

class Board {
 public:
  Board() = default;
  ~Board();
  Board(const Board&) = delete;
  Board& operator=(const Board&) = delete;

  // Opens (creating it when missing, mode 0600) and maps the board file.
  Status open(const std::string& path);
  bool is_open() const noexcept { return page_ != nullptr; }

  // A high-priority launch at `now_ns`.
  void hp_launched(std::uint64_t now_ns) noexcept;
  // Whether a high-priority launch happened in (now_ns - hold_ns, now_ns].
  bool hp_active(std::uint64_t now_ns, std::uint64_t hold_ns) const noexcept;
  std::uint64_t hp_last_launch_ns() const noexcept;
  std::uint64_t hp_launches() const noexcept;

  static std::uint64_t now_ns() noexcept;

  struct Page;  // the shared layout (board.cpp)

 private:
  Page* page_ = nullptr;
};

}  // namespace lithos::intercept
