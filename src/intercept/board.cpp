#include "intercept/board.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

namespace lithos::intercept {

namespace {
constexpr std::uint64_t kMagic = 0x3144524f4253544cull;  // "LTSBORD1" read as a little-endian word
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kPageBytes = 4096;
}  // namespace

struct Board::Page {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint64_t> version;
  std::atomic<std::uint64_t> hp_last_launch_ns;
  std::atomic<std::uint64_t> hp_launches;
};
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && std::atomic<std::uint64_t>::is_always_lock_free,
              "the board needs lock-free 64-bit atomics (shared between processes)");
static_assert(sizeof(Board::Page) <= kPageBytes);

Board::~Board() {
  if (page_ != nullptr) ::munmap(page_, kPageBytes);
}

Status Board::open(const std::string& path) {
  if (page_ != nullptr) return Status::failed_precondition("the board is already open");
  if (path.empty()) return Status::invalid_argument("empty board path");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::unavailable("cannot open the board " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::unavailable("cannot stat the board " + path + ": " + std::strerror(e));
  }
  // A new (empty) file is grown to one page of zeros; a shorter non-empty
  // file is not ours.
  if (st.st_size == 0 && ::ftruncate(fd, static_cast<off_t>(kPageBytes)) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::unavailable("cannot size the board " + path + ": " + std::strerror(e));
  }
  if (st.st_size != 0 && st.st_size < static_cast<off_t>(kPageBytes)) {
    ::close(fd);
    return Status::invalid_argument(path + " is not a lithos board (" + std::to_string(st.st_size) + " bytes)");
  }
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Status::unavailable("cannot map the board " + path + ": " + std::strerror(e));
  // The page is zero-filled or already a board; the atomics are trivially
  // constructible, so the mapping is used in place.
  auto* page = static_cast<Page*>(p);
  std::uint64_t magic = page->magic.load(std::memory_order_acquire);
  if (magic == 0) {
    page->version.store(kVersion, std::memory_order_relaxed);
    std::uint64_t expected = 0;
    magic = page->magic.compare_exchange_strong(expected, kMagic, std::memory_order_acq_rel) ? kMagic : expected;
  }
  if (magic != kMagic || page->version.load(std::memory_order_relaxed) != kVersion) {
    ::munmap(p, kPageBytes);
    return Status::invalid_argument(path + " is not a lithos board of version " + std::to_string(kVersion));
  }
  page_ = page;
  return Status::ok();
}

void Board::hp_launched(std::uint64_t now_ns) noexcept {
  if (page_ == nullptr) return;
  // Keep the latest stamp (launches of several processes race).
  std::uint64_t prev = page_->hp_last_launch_ns.load(std::memory_order_relaxed);
  while (prev < now_ns && !page_->hp_last_launch_ns.compare_exchange_weak(prev, now_ns, std::memory_order_release,
                                                                          std::memory_order_relaxed)) {
  }
  page_->hp_launches.fetch_add(1, std::memory_order_relaxed);
}

bool Board::hp_active(std::uint64_t now_ns, std::uint64_t hold_ns) const noexcept {
  if (page_ == nullptr) return true;  // nothing known: assume high-priority work (keep the confinement)
  const std::uint64_t last = page_->hp_last_launch_ns.load(std::memory_order_acquire);
  if (last == 0) return false;
  return last >= now_ns || now_ns - last < hold_ns;
}

std::uint64_t Board::hp_last_launch_ns() const noexcept {
  return page_ != nullptr ? page_->hp_last_launch_ns.load(std::memory_order_acquire) : 0;
}

std::uint64_t Board::hp_launches() const noexcept {
  return page_ != nullptr ? page_->hp_launches.load(std::memory_order_relaxed) : 0;
}

std::uint64_t Board::now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace lithos::intercept
